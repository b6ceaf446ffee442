"""The RASP table: train the configs of configs/rasp/ and report what each reaches.

Weiss, Goldberg & Yahav (2021), "Thinking Like Transformers", wrote RASP programs for
these tasks, compiled each to a number of layers and heads, and trained encoders of
exactly that size. The configs in configs/rasp/ have those budgets; this script trains
them one after another and prints one markdown table (the RASP table of docs/results.md):

    python scripts/rasp_table.py                  # every config in configs/rasp/
    python scripts/rasp_table.py --only sort      # one of them (repeat --only for more)
    python scripts/rasp_table.py --json rasp.json
    python scripts/rasp_table.py --set train.steps=500   # override a value in every config

Runs go to a temporary folder (use --runs-dir to keep them). Metrics are the best
checkpoint's, on the held-out set: token_acc is the per-token accuracy the paper reports
(every input position is scored, <bos> excepted), seq_acc exact match. Time is the
whole `train` call, evaluations, attention images and checkpoints included. Training
runs on one thread by default (--threads), so a run never takes more than one core.

A config whose token accuracy misses its target (TARGETS), which takes longer than
TIME_LIMIT_S, or whose layers, heads or <bos> differ from the paper's budget is listed
after the table, and the exit status is 1. An unknown --only name or a bad --set is one
line on stderr, and the exit status is 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import tinytf

ROOT = Path(__file__).resolve().parents[1]
RASP_DIR = ROOT / "configs" / "rasp"


@dataclass(frozen=True)
class Budget:
    """What the paper's RASP program compiles to: layers, heads per layer, and whether
    the input starts with a <bos> token."""

    layers: int
    heads: int
    bos: bool

    def __str__(self) -> str:
        return f"{self.layers} x {self.heads} {'with' if self.bos else 'without'} <bos>"


# config name -> its RASP program's budget, in the order of the paper's table
BUDGETS = {
    "reverse": Budget(2, 1, bos=False),
    "histogram-bos": Budget(1, 1, bos=True),
    "histogram": Budget(1, 2, bos=False),
    "double-histogram": Budget(2, 2, bos=True),
    "sort": Budget(2, 1, bos=True),
    "most-freq": Budget(3, 2, bos=True),
    "dyck-1": Budget(2, 1, bos=False),
    "dyck-2": Budget(3, 1, bos=False),
}
TOKEN_ACC_TARGET = 0.995  # held-out per-token accuracy every config must reach...
TARGETS = {"most-freq": 0.95}  # ...but these: most-freq, the hardest, must reach 95%
TIME_LIMIT_S = 300.0  # each config trains within 5 minutes on a 2-core CPU


def rasp_configs(only: list[str] | None = None) -> list[Path]:
    """The config files of configs/rasp/ in the paper's order (`only`: these names)."""
    rank = {name: i for i, name in enumerate(BUDGETS)}
    paths = sorted(RASP_DIR.glob("*.yaml"), key=lambda path: (rank.get(path.stem, len(rank)), path.stem))
    if only:
        unknown = sorted(set(only) - {path.stem for path in paths})
        if unknown:
            names = ", ".join(path.stem for path in paths)
            fail(f"--only {', '.join(unknown)}: no such config (choose from {names})")
        paths = [path for path in paths if path.stem in only]
    return paths


def target(name: str) -> float:
    """The held-out per-token accuracy config `name` must reach."""
    return TARGETS.get(name, TOKEN_ACC_TARGET)


def budget_problem(name: str, config: tinytf.Config) -> str | None:
    """Why the config does not have its RASP program's budget, or None if it does."""
    budget = BUDGETS.get(name)
    if budget is None:
        return f"{name}: no RASP budget is known for it (add it to BUDGETS)"
    got = Budget(config.model.n_layers, config.model.n_heads, config.task.bos)
    if config.model.arch != "encoder" or got != budget:
        return f"{name}: {config.model.arch}, {got}; its RASP program compiles to an encoder, {budget}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", metavar="NAME", help="train only this config (e.g. sort)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one core)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    args = parser.parse_args()
    paths = rasp_configs(args.only)
    try:
        configs = [tinytf.load_config(path, args.overrides) for path in paths]
    except tinytf.UserError as err:
        fail(str(err))
    import torch  # not before: the checks above need no torch

    torch.set_num_threads(args.threads)
    results, missed = [], []
    with tempfile.TemporaryDirectory() as temp:
        runs_dir = args.runs_dir or Path(temp)
        print("| config | task | layers x heads | `<bos>` | token_acc | seq_acc | steps | time |")
        print("|---|---|:---:|:---:|---:|---:|---:|---:|")
        for path, config in zip(paths, configs, strict=True):
            name = path.stem
            started = time.perf_counter()
            result = tinytf.train(config, runs_dir=runs_dir, name=name)
            seconds = time.perf_counter() - started
            best = result.best
            row = {
                "config": path.name,
                "task": config.task.name,
                "layers": config.model.n_layers,
                "heads": config.model.n_heads,
                "bos": config.task.bos,
                "budget_problem": budget_problem(name, config),  # None: the paper's budget
                "steps": result.step,
                "best_step": best["step"],
                "token_acc": best["token_acc"],
                "seq_acc": best["seq_acc"],
                "loss": best["loss"],
                "seconds": round(seconds, 1),
                "target": target(name),
            }
            results.append(row)
            print(
                f"| `rasp/{path.name}` | {row['task']} | {row['layers']} x {row['heads']} | "
                f"{'yes' if row['bos'] else 'no'} | {100 * row['token_acc']:.2f}% | {100 * row['seq_acc']:.2f}% | "
                f"{row['steps']} | {seconds:.0f} s |",
                flush=True,
            )
            if row["budget_problem"]:
                missed.append(row["budget_problem"])
            if row["token_acc"] < row["target"]:
                missed.append(f"{name}: token_acc {100 * row['token_acc']:.2f}% < target {100 * row['target']:.1f}%")
            if seconds > TIME_LIMIT_S:
                missed.append(f"{name}: trained for {seconds:.0f} s, over the {TIME_LIMIT_S:.0f} s limit")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if missed:
        print("\nMISSED:\n" + "\n".join(f"- {line}" for line in missed))
        sys.exit(1)
    print(
        f"\nevery config reached its target (token_acc >= {100 * TOKEN_ACC_TARGET:.1f}%, most-freq >= "
        f"{100 * TARGETS['most-freq']:.0f}%) within {TIME_LIMIT_S:.0f} s"
    )


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
