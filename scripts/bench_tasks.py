"""How much of a training step goes into making its batch, for every task.

Both are timed side by side in one process, interleaved, and the median of several
rounds is reported, so a noisy machine shifts both alike. Run:

    python scripts/bench_tasks.py [--batch-size 32] [--rounds 15] [--arch decoder]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

import tinytf
from tinytf.config import config_from_dict
from tinytf.data import TaskData, frame
from tinytf.evaluate import scored_loss
from tinytf.tasks import TASKS, get_task

SHAPE = {"d_model": 128, "n_heads": 4, "n_layers": 4, "d_ff": 512}  # the "default" benchmark shape


def seconds(fn, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def bench_task(name: str, arch: str, batch_size: int, rounds: int, text_path: str) -> tuple[float, float]:
    config = config_from_dict({"task": {"name": name, "path": text_path}, "model": {"arch": arch, **SHAPE}})
    task = get_task(config.task)
    data = TaskData(task, seed=0, eval_size=config.task.eval_size)
    model = tinytf.build_model(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

    def make_batch():
        return frame(data.train_pairs(batch_size), task, arch)

    batch = make_batch()

    def step():
        loss = scored_loss(model(**batch.model_inputs()), batch.labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step(), step()  # warm-up
    batch_times, step_times = [], []
    for _ in range(rounds):
        batch_times.append(seconds(make_batch, 10))
        step_times.append(seconds(step, 3))
    return statistics.median(batch_times), statistics.median(step_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--arch", default="decoder", choices=["encoder", "decoder", "encoder-decoder"])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory() as folder:
        text_path = Path(folder) / "corpus.txt"
        text_path.write_text("the quick brown fox jumps over the lazy dog. " * 2000)
        setup = f"arch={args.arch}, batch {args.batch_size}, model {SHAPE}, {args.threads} threads"
        print(f"{setup}, medians of {args.rounds} rounds")
        print("| task | batch (ms) | training step (ms) | batch / step |")
        print("|---|---:|---:|---:|")
        for name, cls in TASKS.items():
            arch = args.arch if args.arch in cls.archs else cls.archs[0]
            batch_s, step_s = bench_task(name, arch, args.batch_size, args.rounds, str(text_path))
            note = "" if arch == args.arch else f" ({arch})"
            print(f"| {name}{note} | {1e3 * batch_s:.2f} | {1e3 * step_s:.1f} | {batch_s / step_s:.1%} |")


if __name__ == "__main__":
    main()
