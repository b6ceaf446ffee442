"""What one training step of a shipped config costs, for variants of it side by side.

    python scripts/step_times.py configs/histogram-decoder.yaml --variant model.d_ff=256 --variant model.d_ff=128
    python scripts/step_times.py configs/sort-decoder.yaml --variant "model.n_heads=2 model.d_ff=128"
    python scripts/step_times.py configs/copy-encoder.yaml --json steps.json
    python scripts/step_times.py configs/rasp/sort.yaml --threads 1 --fused-kernel
    python scripts/step_times.py configs/most-freq-encoder.yaml --evaluation

Each variant is the config with its `KEY=VALUE` overrides (space-separated; no variant: the
config as it is). Every variant builds its own trainer, as `tinytf train` would, and trains
`--warmup` steps untimed; then the variants take turns (bench.py's `round_robin`),
`--repeat` steps each per round, and the report is each variant's median step time over
`--rounds` rounds and its ratio to the first variant's. Taking turns exposes every
variant to the same load on a shared machine, so the ratios hold where the times do not
(see the README on noisy machines). `--fused-kernel` adds each variant again with every
attention forced onto PyTorch's fused kernel (named "VARIANT [fused kernel]"): how much
attention.py's shape rule gains or loses on that config (in float32: bf16 attention on a
CPU takes the explicit path whatever the rule, so add train.precision=fp32 to the variants
on a CPU with bf16 instructions).

A step is what the training loop does per step: draw and frame a batch, forward, loss,
backward, clip, the optimizer's step; no evaluation, logging or checkpoints. This is how the README
compares feed-forward widths of the shipped configs (a step's cost, not how many steps a
config needs: `scripts/train_configs.py` measures that). `--evaluation` also times what
the loop does at each `train.eval_every` (median of five: scoring the held-out set, the
logs, checkpoints/best.pt), in ms and in steps. A run that reaches its target after
about N steps, evaluating every k, spends N/k evaluations and, on average, k/2 steps
between reaching the target and the evaluation that sees it; with an evaluation worth E
steps that is least at k = sqrt(2 N E) (README, Shipped configs).

Scope: the CPU (train.device=cpu, whatever the config says) and the eager model
(train.compile is not applied), like scripts/bench.py, at the config's train.precision
(auto: bf16 matmuls on a CPU with bf16 instructions; `--variant train.precision=fp32`
compares). The trainer comes from `tinytf.training`'s own assembly (`_assemble`,
`_train_step`): this script times exactly the step that `tinytf train` runs, so it
reaches inside on purpose.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from bench import round_robin
from contenders import on_one_path

from tinytf.config import Config
from tinytf.distributed import OneProcess
from tinytf.errors import UserError
from tinytf.experiment import load_config
from tinytf.training import Trainer, _assemble, _prepare_run_dir

FUSED_KERNEL = "[fused kernel]"  # the name suffix of --fused-kernel's variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path)
    parser.add_argument("--variant", action="append", default=None, help="overrides, e.g. 'model.d_ff=128 seed=1'")
    parser.add_argument("--fused-kernel", action="store_true", help="also each variant on the fused kernel alone")
    parser.add_argument("--evaluation", action="store_true", help="also time an evaluation of the held-out set")
    add_timing_arguments(parser, "variant", rounds=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = args.variant or [""]
    if len(set(variants)) < len(variants):
        parser.error("each --variant once: the results are named by their overrides")

    try:
        trainers = {variant: trainer_for(args.config, variant.split()) for variant in variants}
        if args.fused_kernel:  # each variant again, every attention on the kernel
            for variant in variants:
                trainer = on_the_fused_kernel(trainer_for(args.config, variant.split()))
                trainers[f"{variant} {FUSED_KERNEL}".strip()] = trainer
    except UserError as err:  # a missing config, an unknown key, a bad value: one line
        parser.error(str(err))
    variants = list(trainers)
    seconds = time_steps(trainers, args)
    first = seconds[variants[0]]
    rows = [
        {
            "config": args.config.name,
            "variant": variant,
            "parameters": parameters(trainers[variant]),
            "step_ms": 1e3 * seconds[variant],
            "ratio": seconds[variant] / first,
        }
        for variant in variants
    ]
    if args.evaluation:
        for row in rows:
            config = config_for(args.config, row["variant"].removesuffix(FUSED_KERNEL).split())
            row["evaluation_ms"] = 1e3 * evaluation_seconds(trainers[row["variant"]], config)
            row["evaluation_steps"] = row["evaluation_ms"] / row["step_ms"]
    print(f"{args.config.name}, {args.threads} threads, median of {args.rounds} rounds of {args.repeat} steps:")
    for row in rows:
        evaluation = ""
        if args.evaluation:
            evaluation = f"  evaluation {row['evaluation_ms']:6.1f} ms = {row['evaluation_steps']:.1f} steps"
        print(
            f"  {row['variant'] or '(as it is)':40s} {row['parameters']:>9,} parameters "
            f"{row['step_ms']:7.2f} ms  {row['ratio']:.2f}x{evaluation}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def add_timing_arguments(parser: argparse.ArgumentParser, what: str, rounds: int) -> None:
    """The options of a side-by-side step timing (also scripts/muon_step.py's); `what`
    names the things timed, e.g. "variant"."""
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=20, help=f"untimed steps per {what} first")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--repeat", type=int, default=10, help=f"steps per {what} per round")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")


def time_steps(trainers: dict[str, Trainer], args: argparse.Namespace) -> dict[str, float]:
    """Each trainer's median seconds per step: `args.warmup` untimed steps each, then
    `args.rounds` rounds in which they take turns, `args.repeat` steps each."""
    for trainer in trainers.values():
        train_steps(trainer, args.warmup)
    steps = {name: lambda t=trainer: train_steps(t, 1) for name, trainer in trainers.items()}
    return round_robin(steps, args.rounds, args.repeat)


def evaluation_seconds(trainer: Trainer, config: Config, repeats: int = 5) -> float:
    """The median seconds of `repeats` of what the training loop does every
    train.eval_every steps (`Trainer._validate`), in a temporary run folder as `tinytf
    train` writes it: score the held-out set, answer a few held-out inputs for the logs,
    write the metrics file and TensorBoard, and save checkpoints/best.pt (each time, as
    while the score still improves)."""
    seconds = []
    with tempfile.TemporaryDirectory() as runs, contextlib.ExitStack() as lock:
        trainer.run_dir = _prepare_run_dir(trainer, config, None, runs, "evaluation", lock)
        for logger in trainer.loggers:
            logger.start(trainer.run_dir, trainer.step)
        for _ in range(repeats):
            trainer.best_score = None  # so that this evaluation improves on it, and saves
            start = time.perf_counter()
            trainer._validate(tokens_per_s=0.0)
            seconds.append(time.perf_counter() - start)
        for logger in trainer.loggers:
            logger.finish(trainer.step, {})
    return statistics.median(seconds)


def config_for(path: Path, overrides: list[str]) -> Config:
    """The config at `path` with `overrides`, on the CPU and eager (see Scope above)."""
    return load_config(path, [*overrides, "train.device=cpu", "train.compile=false"])


def trainer_for(path: Path, overrides: list[str]) -> Trainer:
    """The trainer `tinytf train` would build for the config at `path` with `overrides`,
    without a run folder (nothing is written)."""
    return _assemble(config_for(path, overrides), None, (), OneProcess())


def on_the_fused_kernel(trainer: Trainer) -> Trainer:
    """`trainer` with every attention of its model on the fused kernel (the shape rule's
    other side, where it picks the explicit path)."""
    on_one_path(trainer.model, explicit=False)
    return trainer


def parameters(trainer: Trainer) -> int:
    return sum(parameter.numel() for parameter in trainer.model.parameters())


def train_steps(trainer: Trainer, steps: int) -> None:
    """`steps` steps of the training loop's own step (batch, forward, backward, optimizer)."""
    for _ in range(steps):
        trainer._train_step(trainer.model, trainer.window)


if __name__ == "__main__":
    main()
