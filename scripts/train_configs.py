"""Train shipped configs and report the accuracy and wall time each one reaches.

This is how the table in the README is made; anyone can rerun it:

    python scripts/train_configs.py                      # every file in configs/
    python scripts/train_configs.py configs/sort-*.yaml  # some of them
    python scripts/train_configs.py --json results.json

Runs go to a temporary folder (use --runs-dir to keep them). Wall time covers the
whole `train` call: batches, steps, periodic evaluation on the held-out set, attention
images and checkpoints -- what a user waits for.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from tinytf.config import load_config
from tinytf.training import train

ROOT = Path(__file__).resolve().parents[1]


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
        print("| config | task | arch | steps | wall time | val seq_acc | val token_acc | val loss |")
        print("|---|---|---|---:|---:|---:|---:|---:|")
        for path in paths:
            config = load_config(path)
            start = time.perf_counter()
            result = train(config, runs_dir=runs_dir, name=path.stem)
            seconds = time.perf_counter() - start
            best = result.best
            row = {
                "config": path.name, "task": config.task.name, "arch": config.model.arch, "steps": result.step,
                "seconds": round(seconds, 1), "best_step": best["step"], "seq_acc": best["seq_acc"],
                "token_acc": best["token_acc"], "loss": best["loss"],
            }  # fmt: skip
            results.append(row)
            print(f"| `{path.name}` | {row['task']} | {row['arch']} | {row['steps']} | {seconds:.0f} s | "
                  f"{row['seq_acc']:.3f} | {row['token_acc']:.3f} | {row['loss']:.3f} |", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
