"""Train the shipped configs and report how fast each reaches its accuracy target.

This script makes the results table of docs/results.md:

    python scripts/train_configs.py                         # every file in configs/
    python scripts/train_configs.py configs/sort-*.yaml     # some of them
    python scripts/train_configs.py --json results.json
    python scripts/train_configs.py --against HEAD~3        # this tree and a commit, side by side

A config is a YAML file or the name of a file in configs/. `--set KEY=VALUE` overrides a
value in every config, as `tinytf train --set` does (e.g. train.steps=100 for a quick look).

One tree. Before the first timed run, a two-step run of the first config (untimed, not
reported) pays the process's one-time costs -- importing matplotlib and TensorBoard, the
first attention image, torch's first kernels -- which would otherwise fall on the first
row. Runs go to a temporary folder (use --runs-dir to keep them). Both times count from
the start of the `train` call, with everything a user waits for in it: batches, steps,
periodic evaluation on the held-out set, attention images, checkpoints.
    time to target  until the evaluation that first reached the config's
                    train.stop_at_accuracy (held-out exact match) had finished
    wall time       the whole call, including the last attention images and checkpoint
After the table: the total time to target (CONTROLS excepted), and every config that
missed its target: train.stop_at_accuracy within TIME_LIMIT_S, or the limits of
TIME_LIMITS_S (tighter for the speed benchmarks, ten minutes for grokking). CONTROLS are
meant not to reach it. With --check, the exit status is 1 if any config missed.

Side by side (--against REF). A shared machine's speed swings from one run to the next,
so a total measured in one run cannot be held against one measured in another. With
--against, REF (any commit of this repository) is exported with `git archive` into a
temporary folder, and both trees' configs train in one run, taking turns: for each config
name, REF's file on REF's code and this tree's file on this tree's code, the order
alternating from one name to the next, so that both see the same machine. Each training
is this script, on that one config (warm-up included), in a fresh process whose
PYTHONPATH is its tree (a process that imported another tree's tinytf is an error). The
table gives both trees' steps and time to target (for a config without a target, its
whole training's time); then each tree's total time to target, how many configs reached
it, and the ratio of the totals (this tree / REF). A config that only one tree has trains
in that tree alone. REF's code must offer `tinytf.load_config`, `tinytf.train` and
`tinytf.loggers.NullLogger`.

An unknown config or REF is one line on stderr, and the exit status is 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import tinytf
from tinytf.loggers import NullLogger

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 60.0  # every task config reaches its target within a minute on a 2-core CPU...
TIME_LIMITS_S = {
    "sort-decoder-len20.yaml": 15.0,  # ...these sooner
    "reverse-decoder-len20.yaml": 5.0,
    "grokking.yaml": 600.0,  # ...and grokking, which generalises long after it memorises, later
}
CONTROLS = {"induction-decoder-1layer.yaml"}  # one layer cannot form an induction head: it must not reach it
WARM_UP = ["train.steps=2", "train.eval_every=1", "log.attention_every=1"]
TREES = ("against", "this")  # the JSON's names for REF's tree and this one


class TargetClock(NullLogger):
    """Notes the seconds since it was made at the first evaluation reaching `target`."""

    def __init__(self, target: float | None) -> None:
        self.target, self.started, self.seconds = target, time.perf_counter(), None

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        if split == "val" and self.target is not None and self.seconds is None and values["seq_acc"] >= self.target:
            self.seconds = time.perf_counter() - self.started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", help="config files or names in configs/ (default: all of configs/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--against", metavar="REF", help="also train REF's configs on REF's code, side by side")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    parser.add_argument("--check", action="store_true", help="exit with status 1 if a config missed its target")
    args = parser.parse_args()
    if args.against is None:
        one_tree(args)
    elif args.check:
        fail("--check judges one tree: drop it or --against")
    else:
        side_by_side(args)


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


# --------------------------------------------------------------------------- one tree


def one_tree(args: argparse.Namespace) -> None:
    """Train each config on this process's tinytf; print the table, the total and the misses."""
    paths = config_paths(args.configs)
    try:
        configs = [tinytf.load_config(path, args.overrides) for path in paths]
    except tinytf.UserError as err:
        fail(str(err))
    import torch  # not before: the checks above, and a side-by-side run, need no torch

    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as temp:
        runs_dir = args.runs_dir or Path(temp)
        if paths:
            tinytf.train(tinytf.load_config(paths[0], [*args.overrides, *WARM_UP]), runs_dir=temp, name="warm-up")
        print("| config | task | arch | steps | time to target | wall time | val seq_acc | val token_acc | val loss |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|")
        for path, config in zip(paths, configs, strict=True):
            row = train_one(path, config, runs_dir)
            rows.append(row)
            print(
                f"| `{row['config']}` | {row['task']} | {row['arch']} | {row['steps']} | {to_target(row)} | "
                f"{row['seconds']:.0f} s | {row['seq_acc']:.3f} | {row['token_acc']:.3f} | {row['loss']:.3f} |",
                flush=True,
            )
    total = total_to_target(rows)
    missed = [problem for row in rows if (problem := missed_target(row))]
    print(f"\ntotal time to target: {total:.0f} s")
    if missed:
        print("MISSED:\n" + "\n".join(f"- {line}" for line in missed))
    if args.json:
        result = {
            "tinytf": str(Path(tinytf.__file__).parent),
            "threads": args.threads,
            "rows": rows,
            "total_seconds_to_target": total,
            "missed": missed,
        }
        args.json.write_text(json.dumps(result, indent=1))
    if missed and args.check:
        sys.exit(1)


def config_paths(names: list[str]) -> list[Path]:
    """The config files named on the command line (a file, or a name in configs/); all of
    configs/ if none are."""
    if not names:
        return sorted((ROOT / "configs").glob("*.yaml"))
    paths = []
    for name in names:
        path = Path(name) if Path(name).is_file() else ROOT / "configs" / name
        if not path.is_file():
            fail(f"no such config: {name} (neither a file nor a name in {ROOT / 'configs'})")
        paths.append(path)
    return paths


def train_one(path: Path, config: tinytf.Config, runs_dir: Path) -> dict:
    """Train `config` (read from `path`), timed; its row of the table."""
    clock = TargetClock(config.train.stop_at_accuracy)
    result = tinytf.train(config, runs_dir=runs_dir, name=path.stem, loggers=[clock])
    seconds = time.perf_counter() - clock.started
    best = result.best
    return {
        "config": path.name,
        "task": config.task.name,
        "arch": config.model.arch,
        "steps": result.step,
        "target": config.train.stop_at_accuracy,
        "seconds_to_target": clock.seconds,  # None: not reached (or no target)
        "seconds": seconds,  # unrounded: a rounded wall time could read below the time to target
        "best_step": best["step"],
        "seq_acc": best["seq_acc"],
        "token_acc": best["token_acc"],
        "loss": best["loss"],
    }


def to_target(row: dict) -> str:
    """The table's "time to target" cell."""
    if row["target"] is None:
        return "-"
    return "not reached" if row["seconds_to_target"] is None else f"{row['seconds_to_target']:.1f} s"


def total_to_target(rows: list[dict]) -> float:
    """Seconds to target summed over the rows that reached it, CONTROLS excepted."""
    return sum(row["seconds_to_target"] or 0.0 for row in rows if row["config"] not in CONTROLS)


def missed_target(row: dict) -> str | None:
    """Why `row` (a config's results) misses its target, or None."""
    name, seconds = row["config"], row["seconds_to_target"]
    if row["target"] is None:  # a language model: no accuracy target
        return None
    if name in CONTROLS:
        return f"{name}: a control, meant not to reach {row['target']:.0%}, reached it" if seconds else None
    if seconds is None:
        return f"{name}: never reached {row['target']:.0%} (best {row['seq_acc']:.1%})"
    limit = TIME_LIMITS_S.get(name, TIME_LIMIT_S)
    return f"{name}: {seconds:.1f} s to target, over its {limit:.0f} s limit" if seconds > limit else None


# --------------------------------------------------------------------------- side by side


def side_by_side(args: argparse.Namespace) -> None:
    """Train REF's configs on REF's code and this tree's on this code, taking turns."""
    commit = resolve(args.against)
    with tempfile.TemporaryDirectory() as temp:
        trees = {"against": export(commit, Path(temp) / "against"), "this": ROOT}
        names = shared_names(args.configs, trees)
        rows = []
        print(f"| config | {args.against} steps | {args.against} to target | this tree steps | this tree to target |")
        print("|---|---:|---:|---:|---:|")
        for turn, name in enumerate(names):
            row = {"config": name, "against": None, "this": None}
            for tree in TREES if turn % 2 == 0 else TREES[::-1]:
                if (trees[tree] / "configs" / name).is_file():
                    row[tree] = train_in_its_tree(trees[tree], name, tree, args, Path(temp))
            rows.append(row)
            print(f"| `{name}` | {cells(row['against'])} | {cells(row['this'])} |", flush=True)

    tree_rows = {tree: [row[tree] for row in rows if row[tree] is not None] for tree in TREES}
    totals = {tree: total_to_target(tree_rows[tree]) for tree in TREES}
    reached = {
        tree: sum(row["seconds_to_target"] is not None and row["config"] not in CONTROLS for row in tree_rows[tree])
        for tree in TREES
    }
    ratio = totals["this"] / totals["against"] if totals["against"] else None
    print(
        f"\ntotal time to target: {args.against} {totals['against']:.1f} s ({reached['against']} configs reached it), "
        f"this tree {totals['this']:.1f} s ({reached['this']} reached it); "
        f"this tree / {args.against}: {'-' if ratio is None else f'{ratio:.3f}x'}"
    )
    if args.json:
        result = {
            "against": args.against,
            "commit": commit,
            "rows": rows,
            "totals": totals,
            "reached": reached,
            "ratio": ratio,
        }
        args.json.write_text(json.dumps(result, indent=1))


def resolve(ref: str) -> str:
    """The full hash of the commit `ref` names in this repository."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        fail("--against needs git, and git is not on the PATH")
    if done.returncode:
        fail(f"--against {ref}: no such commit in {ROOT}")
    return done.stdout.strip()


def export(commit: str, folder: Path) -> Path:
    """Write the files of `commit` into `folder`; returns `folder`."""
    folder.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def shared_names(names: list[str], trees: dict[str, Path]) -> list[str]:
    """The config names to train: those named (a file's name is looked up in each tree's
    configs/), or every name in either tree's configs/."""
    if not names:
        return sorted({path.name for tree in trees.values() for path in (tree / "configs").glob("*.yaml")})
    names = [Path(name).name for name in names]
    for name in names:
        if not any((tree / "configs" / name).is_file() for tree in trees.values()):
            fail(f"no such config in either tree's configs/: {name}")
    return names


def train_in_its_tree(tree: Path, name: str, label: str, args: argparse.Namespace, temp: Path) -> dict:
    """Train configs/`name` on `tree`'s code: this script on that one config, in a process of
    its own; its row of the table."""
    out = temp / f"{label}-{name}.json"
    command = [sys.executable, str(Path(__file__).resolve()), f"configs/{name}", "--threads", str(args.threads)]
    command += ["--json", str(out), *(f"--set={override}" for override in args.overrides)]
    if args.runs_dir:
        command += ["--runs-dir", str(args.runs_dir.resolve() / label)]
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"error: {name} failed on {label}'s code ({tree}):\n{done.stderr[-2000:]}")
    result = json.loads(out.read_text())
    if not Path(result["tinytf"]).resolve().is_relative_to(tree.resolve()):  # e.g. an installed tinytf won
        sys.exit(f"error: {name} ran the tinytf in {result['tinytf']}, not {tree}'s")
    (row,) = result["rows"]
    return row


def cells(row: dict | None) -> str:
    """A tree's "steps | to target" cells of the side-by-side table."""
    if row is None:
        return "- | -"
    if row["target"] is None:  # a language model: its wall time
        return f"{row['steps']} | - ({row['seconds']:.1f} s in all)"
    return f"{row['steps']} | {to_target(row)}"


if __name__ == "__main__":
    main()
