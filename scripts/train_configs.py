"""Train shipped configs and report how fast each reaches its accuracy.

This is how the table in the README is made; anyone can rerun it:

    python scripts/train_configs.py                      # every file in configs/
    python scripts/train_configs.py configs/sort-*.yaml  # some of them
    python scripts/train_configs.py --json results.json

Runs go to a temporary folder (use --runs-dir to keep them). Both times count from the
start of the `train` call, with everything a user waits for in it: batches, steps,
periodic evaluation on the held-out set, attention images, checkpoints.
    time to target  until the evaluation that first reached the config's
                    train.stop_at_accuracy (held-out exact match) had finished
    wall time       the whole call, including the last attention images and checkpoint
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from tinytf.experiment import load_config
from tinytf.loggers import Logger
from tinytf.training import train

ROOT = Path(__file__).resolve().parents[1]


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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    paths = args.configs or sorted((ROOT / "configs").glob("*.yaml"))

    results = []
    with tempfile.TemporaryDirectory() as scratch:
        runs_dir = args.runs_dir or Path(scratch)
        print("| config | task | arch | steps | time to target | wall time | val seq_acc | val token_acc | val loss |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|")
        for path in paths:
            config = load_config(path)
            clock = TargetClock(config.train.stop_at_accuracy)
            result = train(config, runs_dir=runs_dir, name=path.stem, loggers=[clock])
            seconds = time.perf_counter() - clock.started
            best = result.best
            row = {
                "config": path.name, "task": config.task.name, "arch": config.model.arch, "steps": result.step,
                "target": config.train.stop_at_accuracy, "seconds_to_target": clock.seconds,
                "seconds": round(seconds, 1), "best_step": best["step"], "seq_acc": best["seq_acc"],
                "token_acc": best["token_acc"], "loss": best["loss"],
            }  # fmt: skip
            results.append(row)
            if config.train.stop_at_accuracy is None:
                to_target = "-"
            else:
                to_target = "not reached" if clock.seconds is None else f"{clock.seconds:.1f} s"
            print(f"| `{path.name}` | {row['task']} | {row['arch']} | {row['steps']} | {to_target} | {seconds:.0f} s | "
                  f"{row['seq_acc']:.3f} | {row['token_acc']:.3f} | {row['loss']:.3f} |", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
