"""What one training step of a shipped config costs, for variants of it side by side.

    python scripts/step_times.py configs/histogram-decoder.yaml --variant model.d_ff=256 --variant model.d_ff=128
    python scripts/step_times.py configs/sort-decoder.yaml --variant "model.n_heads=2 model.d_ff=128"
    python scripts/step_times.py configs/copy-encoder.yaml --json steps.json

Each variant is the config with its `KEY=VALUE` overrides (space-separated; no variant: the
config as it is). Every variant builds its own trainer, as `tinytf train` would, and trains
`--warmup` steps untimed; then the variants take turns, `--repeat` steps each per round
(each round starting one variant later, so none always runs first), and the report is
each variant's median step time over `--rounds` rounds and its ratio to the first
variant's. Taking turns exposes every variant to the same load on a shared machine, so the
ratios hold where the times do not (see the README on noisy machines).

A step is what the training loop does per step: draw and frame a batch, forward, loss,
backward, clip, AdamW; no evaluation, logging or checkpoints. This is how the README
compares feed-forward widths of the shipped configs (a step's cost, not how many steps a
config needs: `scripts/train_configs.py` measures that).

Scope: the CPU (train.device=cpu, whatever the config says) and the eager model
(train.compile is not applied), like scripts/bench.py. The trainer comes from
`tinytf.training`'s own assembly (`_assemble`, `_train_step`): this script times exactly
the step that `tinytf train` runs, so it reaches inside on purpose.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from tinytf.distributed import OneProcess
from tinytf.experiment import load_config
from tinytf.training import Trainer, _assemble


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path)
    parser.add_argument("--variant", action="append", default=None, help="overrides, e.g. 'model.d_ff=128 seed=1'")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps per variant first")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=10, help="steps per variant per round")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = args.variant or [""]

    trainers = [trainer_for(args.config, variant.split()) for variant in variants]
    for trainer in trainers:
        train_steps(trainer, args.warmup)
    seconds: list[list[float]] = [[] for _ in variants]  # per variant: one step's time, per round
    for round_number in range(args.rounds):
        for index in rotated(range(len(variants)), round_number):
            start = time.perf_counter()
            train_steps(trainers[index], args.repeat)
            seconds[index].append((time.perf_counter() - start) / args.repeat)

    medians = [statistics.median(times) for times in seconds]
    rows = [{"config": args.config.name, "variant": variant, "parameters": parameters(trainer),
             "step_ms": 1e3 * median, "ratio": median / medians[0]}
            for variant, trainer, median in zip(variants, trainers, medians, strict=True)]  # fmt: skip
    print(f"{args.config.name}, {args.threads} threads, median of {args.rounds} rounds of {args.repeat} steps:")
    for row in rows:
        print(
            f"  {row['variant'] or '(as it is)':40s} {row['parameters']:>9,} parameters "
            f"{row['step_ms']:7.2f} ms  {row['ratio']:.2f}x"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def trainer_for(path: Path, overrides: list[str]) -> Trainer:
    """The trainer `tinytf train` would build for the config at `path` with `overrides`,
    without a run folder (nothing is written)."""
    config = load_config(path, [*overrides, "train.device=cpu", "train.compile=false"])
    return _assemble(config, None, (), OneProcess())


def rotated(items: range, by: int) -> list[int]:
    """`items` starting at position `by` (modulo its length), wrapping around."""
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]


def parameters(trainer: Trainer) -> int:
    return sum(parameter.numel() for parameter in trainer.model.parameters())


def train_steps(trainer: Trainer, steps: int) -> None:
    """`steps` steps of the training loop's own step (batch, forward, backward, AdamW)."""
    for _ in range(steps):
        trainer._train_step(trainer.model, trainer.window)


if __name__ == "__main__":
    main()
