"""Train shipped configs and report how fast each reaches its accuracy.

This is how the table in the README is made; anyone can rerun it:

    python scripts/train_configs.py                      # every file in configs/
    python scripts/train_configs.py configs/sort-*.yaml  # some of them
    python scripts/train_configs.py --json results.json

Before the first timed run, a two-step run of the first config (untimed, not reported)
pays the process's one-time costs -- importing matplotlib and TensorBoard, the first
attention image, torch's first kernels -- which would otherwise fall on the first row.
Runs go to a temporary folder (use --runs-dir to keep them). Both times count from the
start of the `train` call, with everything a user waits for in it: batches, steps,
periodic evaluation on the held-out set, attention images, checkpoints.
    time to target  until the evaluation that first reached the config's
                    train.stop_at_accuracy (held-out exact match) had finished
    wall time       the whole call, including the last attention images and checkpoint

After the table: the total time to target, and every config that missed its target (issue
14): 99% exact match (train.stop_at_accuracy) within TIME_LIMIT_S, or the tighter limits of
the two speed benchmarks. CONTROLS are meant not to reach it. With --check, the exit
status is 1 if any missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from tinytf.experiment import load_config
from tinytf.loggers import Logger
from tinytf.training import train

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 60.0  # every task config reaches its target within a minute on 2 cores...
TIME_LIMITS_S = {"sort-decoder-len20.yaml": 15.0, "reverse-decoder-len20.yaml": 5.0}  # ...these sooner
CONTROLS = {"induction-decoder-1layer.yaml"}  # one layer cannot form an induction head: it must not reach it


class TargetClock(Logger):
    """Notes the seconds since it was made at the first evaluation reaching `target`."""

    def __init__(self, target: float | None) -> None:
        self.target, self.started, self.seconds = target, time.perf_counter(), None

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        if split == "val" and self.target is not None and self.seconds is None and values["seq_acc"] >= self.target:
            self.seconds = time.perf_counter() - self.started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", type=Path, help="config files (default: all of configs/)")
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    parser.add_argument("--check", action="store_true", help="exit with status 1 if a config missed its target")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    paths = args.configs or sorted((ROOT / "configs").glob("*.yaml"))

    results = []
    with tempfile.TemporaryDirectory() as scratch:
        runs_dir = args.runs_dir or Path(scratch)
        if paths:
            warm_up = load_config(paths[0], ["train.steps=2", "train.eval_every=1", "log.attention_every=1"])
            train(warm_up, runs_dir=scratch, name="warm-up")
        print("| config | task | arch | steps | time to target | wall time | val seq_acc | val token_acc | val loss |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|")
        for path in paths:
            config = load_config(path)
            clock = TargetClock(config.train.stop_at_accuracy)
            result = train(config, runs_dir=runs_dir, name=path.stem, loggers=[clock])
            seconds = time.perf_counter() - clock.started
            best = result.best
            row = {
                "config": path.name,
                "task": config.task.name,
                "arch": config.model.arch,
                "steps": result.step,
                "target": config.train.stop_at_accuracy,
                "seconds_to_target": clock.seconds,
                "seconds": round(seconds, 1),
                "best_step": best["step"],
                "seq_acc": best["seq_acc"],
                "token_acc": best["token_acc"],
                "loss": best["loss"],
            }
            results.append(row)
            if config.train.stop_at_accuracy is None:
                to_target = "-"
            else:
                to_target = "not reached" if clock.seconds is None else f"{clock.seconds:.1f} s"
            print(
                f"| `{path.name}` | {row['task']} | {row['arch']} | {row['steps']} | {to_target} | {seconds:.0f} s | "
                f"{row['seq_acc']:.3f} | {row['token_acc']:.3f} | {row['loss']:.3f} |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    missed = [problem for row in results if (problem := missed_target(row))]
    total = sum(row["seconds_to_target"] or 0.0 for row in results if row["config"] not in CONTROLS)
    print(f"\ntotal time to target: {total:.0f} s")
    if missed:
        print("MISSED:\n" + "\n".join(f"- {line}" for line in missed))
        if args.check:
            sys.exit(1)


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


if __name__ == "__main__":
    main()
