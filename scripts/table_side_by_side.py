"""The shipped configs' time to target: this tree against another commit, side by side.

    python scripts/table_side_by_side.py --against 451c1da --json side_by_side.json
    python scripts/table_side_by_side.py --against HEAD~3 sort-decoder.yaml copy-encoder.yaml

`scripts/train_configs.py` measures one tree, and this machine's speed swings between runs
(the same rows took 0.80x-1.30x as long from one run to the next): a total measured one
day cannot be held against one measured another. This script trains both trees' task
configs (those with `train.stop_at_accuracy`) in one run, taking turns: for each config
name, the other commit's config on that commit's code and this tree's on this code, the
order alternating from one name to the next, so that both see the same machine. Each
training runs in a fresh process (PYTHONPATH at its tree, `--threads` threads) that
first trains the config for 2 steps, untimed, as train_configs.py warms up.

It prints each row's time to target in both trees (for a config without a target, named
on the command line, its whole training's time) and the totals over the configs that
each tree takes to its target (as train_configs.py adds them up), and their ratio. A
config that one tree lacks is trained in the other alone and is in that tree's total
only. The other commit is exported with `git archive` into a temporary folder; its code
must offer the same `load_config` and `train` (451c1da's, for one, does).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What each training process runs: `python -c TRAIN_ONE CONFIG THREADS` in the tree to time.
TRAIN_ONE = """
import json, sys, tempfile, time
import torch
import tinytf
from tinytf.experiment import load_config
from tinytf.training import train

class TargetClock:  # train_configs.py's, restated: the other tree's code may not have it
    def __init__(self, target):
        self.target, self.started, self.seconds = target, time.perf_counter(), None
    def metrics(self, step, split, values):
        if split == "val" and self.target is not None and self.seconds is None and values["seq_acc"] >= self.target:
            self.seconds = time.perf_counter() - self.started
    def start(self, run_dir, start_step): pass
    def step(self, step): pass
    def attention(self, step, sample, report): pass
    def heads(self, step, report): pass
    def text(self, step, tag, markdown): pass
    def finish(self, step, final): pass

path, threads = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(threads)
with tempfile.TemporaryDirectory() as runs:
    train(load_config(path, ["train.steps=2", "train.eval_every=1", "log.attention_every=1"]), runs_dir=runs,
          name="warm-up")
    config = load_config(path)
    clock = TargetClock(config.train.stop_at_accuracy)
    result = train(config, runs_dir=runs, name="timed", loggers=[clock])
    seconds = time.perf_counter() - clock.started
print(json.dumps({"steps": result.step, "target": config.train.stop_at_accuracy, "seconds_to_target": clock.seconds,
                  "seconds": round(seconds, 1),
                  "seq_acc": result.best["seq_acc"], "code": tinytf.__file__}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", help="config file names in configs/ (default: every task config)")
    parser.add_argument("--against", required=True, help="the other commit (anything `git archive` takes)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows and totals as JSON")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        other = Path(scratch) / "other"
        problem = export(args.against, other)
        if problem:
            parser.error(f"cannot export {args.against!r}: {problem}")
        trees = {"other": other, "this": ROOT}
        names = args.configs or sorted(set(task_configs(other)) | set(task_configs(ROOT)))
        missing = [name for name in names if not any((tree / "configs" / name).exists() for tree in trees.values())]
        if missing:
            parser.error(f"no such config in either tree: {', '.join(missing)}")
        rows = []
        print(f"| config | {args.against} steps | {args.against} to target | this tree steps | this tree to target |")
        print("|---|---:|---:|---:|---:|")
        for turn, name in enumerate(names):
            order = ["other", "this"] if turn % 2 == 0 else ["this", "other"]
            row = {"config": name}
            for tree in order:
                if (trees[tree] / "configs" / name).exists():
                    row[tree] = train_one(trees[tree], name, args.threads)
            rows.append(row)
            print(f"| `{name}` | {cells(row.get('other'))} | {cells(row.get('this'))} |", flush=True)

    totals = {tree: sum(row[tree]["seconds_to_target"] or 0.0 for row in rows if tree in row) for tree in trees}
    reached = {tree: sum(1 for row in rows if (row.get(tree) or {}).get("seconds_to_target")) for tree in trees}
    ratio = totals["this"] / totals["other"] if totals["other"] else float("nan")
    print(
        f"\ntotal time to target: {args.against} {totals['other']:.0f} s ({reached['other']} configs), "
        f"this tree {totals['this']:.0f} s ({reached['this']} configs): {ratio:.3f}x"
    )
    if args.json:
        result = {"against": args.against, "rows": rows, "totals": totals, "ratio": ratio}
        args.json.write_text(json.dumps(result, indent=1))


def export(commit: str, folder: Path) -> str | None:
    """Write the files of `commit` (this repository's) into `folder`; None, or what went wrong."""
    folder.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=False)
    if archive.returncode:
        return archive.stderr.decode().strip() or f"git archive exited with {archive.returncode}"
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return None


def task_configs(tree: Path) -> list[str]:
    """The names of the configs in tree/configs that stop at a target accuracy."""
    return [path.name for path in sorted((tree / "configs").glob("*.yaml")) if "stop_at_accuracy" in path.read_text()]


def train_one(tree: Path, name: str, threads: int) -> dict:
    """Train configs/`name` on `tree`'s code, in a process of its own; its result row."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(
        [sys.executable, "-c", TRAIN_ONE, f"configs/{name}", str(threads)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        sys.exit(f"error: {name} failed in {tree}:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(result.pop("code")).resolve().is_relative_to(tree.resolve()):  # e.g. an installed tinytf won
        sys.exit(f"error: {name} ran another tinytf than {tree}'s")
    return result


def cells(result: dict | None) -> str:
    if result is None:
        return "- | -"
    if result["target"] is None:  # a language model: its wall time
        return f"{result['steps']} | - ({result['seconds']:.1f} s in all)"
    to_target = "not reached" if result["seconds_to_target"] is None else f"{result['seconds_to_target']:.1f} s"
    return f"{result['steps']} | {to_target}"


if __name__ == "__main__":
    main()
