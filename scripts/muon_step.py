"""What a training step costs with each optimizer, side by side: AdamW, tinytf's Muon
(`train.optimizer: muon`), and torch.optim.Muon in its place (what tinytf used before
its own: one matrix at a time, in bfloat16).

    python scripts/muon_step.py configs/most-freq-encoder.yaml configs/double-histogram-decoder.yaml
    python scripts/muon_step.py --precision fp32 configs/most-freq-encoder.yaml

Per config, the three trainers take turns (bench.py's `round_robin`) as in
`scripts/step_times.py`, whose trainers and step these are; the report is each one's
median step time and its ratio to AdamW's. Taking turns exposes all three to the same
load, so on a shared machine the ratios hold where the times do not. All three train at
the config's `train.precision` (auto: bf16 on a CPU with bf16 instructions, where
tinytf's Muon orthogonalises in bf16 too), or at `--precision`'s; the README's table is
float32's (`--precision fp32`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from step_times import add_timing_arguments, time_steps, trainer_for

import tinytf.optim
from tinytf.errors import UserError
from tinytf.training import Trainer


def torch_muon_trainer(path: Path, overrides: list[str]) -> Trainer:
    """The Muon trainer of the config at `path` with torch.optim.Muon for tinytf's Muon:
    the same algorithm (the same momentum, iteration and update size, adjust_lr_fn
    "match_rms_adamw"), computed one matrix at a time in bfloat16."""
    ours = tinytf.optim.Muon
    tinytf.optim.Muon = lambda params, lr, weight_decay, dtype: torch.optim.Muon(
        params, lr=lr, weight_decay=weight_decay, adjust_lr_fn="match_rms_adamw"
    )
    try:
        return trainer_for(path, [*overrides, "train.optimizer=muon"])
    finally:
        tinytf.optim.Muon = ours


def muon_class(trainer: Trainer) -> str:
    """The Muon that `trainer` steps its hidden matrices with (the first part of its optimizer)."""
    muon = type(trainer.optimizer.parts[0])
    return f"{muon.__module__}.{muon.__qualname__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", type=Path, nargs="+")
    parser.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default=None,
        help="train.precision for all three (default: the config's)",
    )
    add_timing_arguments(parser, "optimizer", rounds=9)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = [] if args.precision is None else [f"train.precision={args.precision}"]

    rows = []
    print(f"{args.threads} threads, median of {args.rounds} rounds of {args.repeat} steps; ms (x AdamW's)")
    print(f"{'config':42s} {'AdamW':>8s} {'tinytf Muon':>16s} {'torch.optim.Muon':>18s}")
    for path in args.configs:
        try:
            trainers = {
                "adamw": trainer_for(path, [*overrides, "train.optimizer=adamw"]),
                "tinytf muon": trainer_for(path, [*overrides, "train.optimizer=muon"]),
                "torch muon": torch_muon_trainer(path, overrides),
            }
        except UserError as err:  # a missing config, a bad value: one line
            parser.error(str(err))
        seconds = time_steps(trainers, args)
        row = {
            "config": path.name,
            "precision": trainers["adamw"].precision,
            **{f"{name} ms": 1e3 * s for name, s in seconds.items()},
            "tinytf muon ratio": seconds["tinytf muon"] / seconds["adamw"],
            "torch muon ratio": seconds["torch muon"] / seconds["adamw"],
            **{f"{name} class": muon_class(trainers[name]) for name in ("tinytf muon", "torch muon")},
        }
        rows.append(row)
        print(
            f"{path.name:42s} {row['adamw ms']:8.2f} {row['tinytf muon ms']:8.2f} ({row['tinytf muon ratio']:.2f}x)"
            f" {row['torch muon ms']:9.2f} ({row['torch muon ratio']:.2f}x)",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
