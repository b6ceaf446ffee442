"""tinytf's Muon (tinytf/training/muon.py) beside torch.optim.Muon, in one process.

    OMP_NUM_THREADS=1 python scripts/bench_muon.py                 # every shipped config with Muon
    OMP_NUM_THREADS=1 python scripts/bench_muon.py configs/sort-encoder-decoder.yaml
    OMP_NUM_THREADS=1 python scripts/bench_muon.py --train 200 configs/histogram-decoder.yaml

For each config: the hidden matrices make_optimizer gives Muon, two copies of them, and
the same random gradients. Both optimizers take 3 steps from the same weights; "differs
by" is the largest, over the matrices, of |torch's move - tinytf's| / |tinytf's move|
(tests/test_optim.py allows 3%: torch orthogonalises in bfloat16). Then they step
by turns, `--steps` steps each, so that a busy machine slows both alike; the step times
are medians.

--train STEPS: the whole training step instead. Each round trains each config for STEPS
steps with tinytf's Muon, then with torch.optim.Muon in its place, and reads the tokens/s
of the last logged window (log.every steps of training alone); medians over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import tinytf
from tinytf.training import optim
from tinytf.training.loggers import RecordingLogger
from tinytf.training.muon import Muon

ROOT = Path(__file__).resolve().parents[1]


def hidden_matrices(path: Path) -> tuple[list[torch.Tensor], float, float]:
    """The weights make_optimizer gives Muon for the config at `path`, its lr and weight decay."""
    config = tinytf.load_config(path)
    optimizer = optim.make_optimizer(tinytf.build_model(config), config.train, torch.device("cpu"))
    muon = next(part for part in optimizer.parts if isinstance(part, Muon))
    return [p.detach() for p in muon.param_groups[0]["params"]], config.train.lr, config.train.weight_decay


def both(weights: list[torch.Tensor], lr: float, weight_decay: float) -> list[tuple[list, torch.optim.Optimizer]]:
    """tinytf's Muon and torch's, each on its own copy of `weights`."""
    ours = [torch.nn.Parameter(w.clone()) for w in weights]
    theirs = [torch.nn.Parameter(w.clone()) for w in weights]
    return [
        (ours, Muon(ours, lr=lr, weight_decay=weight_decay)),
        (theirs, torch.optim.Muon(theirs, lr=lr, weight_decay=weight_decay, adjust_lr_fn="match_rms_adamw")),
    ]


@torch.no_grad()
def differs_by(weights: list[torch.Tensor], lr: float, weight_decay: float) -> float:
    (ours, our_muon), (theirs, their_muon) = both(weights, lr, weight_decay)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        grads = [torch.randn(w.shape, generator=generator) for w in weights]
        for params, optimizer in ((ours, our_muon), (theirs, their_muon)):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
    return max(float((t - o).norm() / (o - w).norm()) for o, t, w in zip(ours, theirs, weights, strict=True))


def step_times(weights: list[torch.Tensor], lr: float, weight_decay: float, steps: int) -> list[float]:
    """Median seconds of one step: tinytf's Muon, torch's."""
    pairs = both(weights, lr, weight_decay)
    generator = torch.Generator().manual_seed(1)
    for params, optimizer in pairs:
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator)
        optimizer.step()  # warm-up: creates the momentum buffers
    times: list[list[float]] = [[], []]
    for _ in range(steps):
        for (_, optimizer), kept in zip(pairs, times, strict=True):
            start = time.perf_counter()
            optimizer.step()
            kept.append(time.perf_counter() - start)
    return [statistics.median(kept) for kept in times]


def torch_muon(params, lr: float, weight_decay: float, dtype: torch.dtype) -> torch.optim.Optimizer:
    """torch.optim.Muon as make_optimizer would build tinytf's (it has no dtype: bfloat16 always)."""
    return torch.optim.Muon(params, lr=lr, weight_decay=weight_decay, adjust_lr_fn="match_rms_adamw")


def training_tokens_per_s(path: Path, steps: int, rounds: int) -> list[float]:
    """Median tokens/s of training the config at `path`: with tinytf's Muon, with torch's."""
    overrides = [f"train.steps={steps}", f"train.eval_every={steps}", "train.stop_at_accuracy=null"]
    config = tinytf.load_config(path, overrides=[*overrides, "log.attention_every=null"])
    speeds: list[list[float]] = [[], []]
    for _ in range(rounds):
        for muon, kept in zip((Muon, torch_muon), speeds, strict=True):
            optim.Muon = muon  # what make_optimizer builds
            try:
                with tempfile.TemporaryDirectory() as runs:
                    tinytf.train(config, runs_dir=runs, loggers=[reports := RecordingLogger()])
                kept.append([v for _, split, v in reports.of("metrics") if split == "train"][-1]["tokens_per_s"])
            finally:
                optim.Muon = Muon
    return [statistics.median(kept) for kept in speeds]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", type=Path)
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps of each")
    parser.add_argument("--rounds", type=int, default=3, help="trainings of each (--train)")
    parser.add_argument("--train", type=int, default=None, metavar="STEPS", help="time whole training steps")
    args = parser.parse_args()
    try:
        optimizers = {path: tinytf.load_config(path).train.optimizer for path in args.configs}
    except tinytf.UserError as err:  # ConfigError too
        print(f"error: {err}", file=sys.stderr)
        return 2
    if adamw := [str(path) for path, optimizer in optimizers.items() if optimizer != "muon"]:
        print(f"error: {', '.join(adamw)}: trains with AdamW (train.optimizer), not Muon", file=sys.stderr)
        return 2
    paths = args.configs or [
        p for p in sorted((ROOT / "configs").glob("*.yaml")) if tinytf.load_config(p).train.optimizer == "muon"
    ]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    ratios = []
    if args.train is not None:
        print(f"{'config':34} {'tinytf (tokens/s)':>17} {'torch (tokens/s)':>16} {'torch is':>9}")
        for path in paths:
            ours, theirs = training_tokens_per_s(path, args.train, args.rounds)
            print(f"{path.stem:34} {ours:17,.0f} {theirs:16,.0f} {ours / theirs:8.2f}x slower")
            ratios.append(ours / theirs)
        print(f"torch is {statistics.median(ratios):.2f}x slower (median), {min(ratios):.2f}x-{max(ratios):.2f}x")
        return 0
    print(
        f"{'config':34} {'matrices':>8} {'tinytf (ms)':>11} {'torch (ms)':>10} {'torch/tinytf':>12} {'differs by':>10}"
    )
    for path in paths:
        weights, lr, weight_decay = hidden_matrices(path)
        ours, theirs = step_times(weights, lr, weight_decay, args.steps)
        ratios.append(theirs / ours)
        difference = differs_by(weights, lr, weight_decay)
        print(
            f"{path.stem:34} {len(weights):8} {ours * 1e3:11.3f} {theirs * 1e3:10.3f} "
            f"{theirs / ours:11.2f}x {difference:10.2%}"
        )
    print(f"torch/tinytf: median {statistics.median(ratios):.2f}x, {min(ratios):.2f}x-{max(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
