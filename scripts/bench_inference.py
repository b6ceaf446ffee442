"""Inference at scale: inputs per second of `tinytf predict --file` and `tinytf eval`.

    python scripts/bench_inference.py                    # trains configs/sort-decoder.yaml first
    python scripts/bench_inference.py --run runs/NAME    # a trained run of any task
    python scripts/bench_inference.py --inputs 2000 --rounds 1 --steps 50   # a smoke test
    python scripts/bench_inference.py --json inference.json

Inputs are the run's task's own random examples (N of them, `--inputs`), written as text,
one per line, as a user's file would be. Measured in one process, side by side, median of
`--rounds` (wall time of the library call, the model already loaded):

    predict, one at a time      answers one input per model call (the first 1,000 inputs
                                only: it is slow)
    predict, in file order      batches of 500 in the file's order (main before this script)
    predict, shortest first     `Framing.answer_typed`: batches of 500 after sorting by
                                length, what `tinytf predict --file` does
    eval, in order / sorted     teacher-forced scoring of N examples, batches of 500, in the
                                drawn order or shortest first (what `evaluate` does)
    predict --file (CLI)        the whole command in a subprocess, from start to exit:
                                Python and torch start-up, loading, tokenising, writing

Then how close to the CPU's limit the shortest-first answering runs: its matrix-multiply
work (2 x parameters x token positions processed, attention scores apart) over the time,
against a large fp32 matmul's rate on the same threads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tinytf.config import config_from_dict, read_yaml
from tinytf.evaluate import evaluate, predict
from tinytf.framing import ANSWER_BATCH
from tinytf.loggers import NullLogger
from tinytf.runs import load_run
from tinytf.training import train

ROOT = Path(__file__).resolve().parents[1]
ONE_AT_A_TIME = 1_000  # inputs answered singly: at ~300 inputs/s, a few seconds


def median_seconds(work, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def in_file_order(model, framing, sources: list[list[int]]) -> list[list[int]]:
    """Batches of ANSWER_BATCH in the order given (the loop before shortest-first)."""
    answers = []
    for start in range(0, len(sources), ANSWER_BATCH):
        answers += framing.answer_ids(model, sources[start : start + ANSWER_BATCH])
    return answers


def evaluate_in_order(model, framing, pairs, batch_size: int = 500) -> None:
    """`evaluate`'s work in batches taken in the order drawn: each call gets one batch, so
    its shortest-first sort has nothing to reorder (only the time is of interest here)."""
    for start in range(0, len(pairs), batch_size):
        evaluate(model, framing, pairs[start : start + batch_size], batch_size=batch_size)


def matmul_rate(threads: int) -> float:
    """FLOP/s of a 1024 x 1024 fp32 matmul on this machine: the ceiling for dense work."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    seconds = median_seconds(lambda: a @ b, 15)
    return 2 * 1024**3 / seconds


def positions_processed(sources: list[list[int]], answers: list[list[int]], framing) -> int:
    """Token positions the model runs on to answer (prompt once, then one per new token)."""
    added = framing.added_tokens()
    return sum(len(s) + added + len(a) + 1 for s, a in zip(sources, answers, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=None, help="a trained run (default: train sort-decoder)")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "sort-decoder.yaml")
    parser.add_argument("--steps", type=int, default=None, help="train this many steps (default: the config's)")
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        run_dir = args.run
        if run_dir is None:
            data = read_yaml(args.config)
            if args.steps is not None:
                data.setdefault("train", {}).update(steps=args.steps)
            print(f"training {args.config.name} ...", flush=True)
            run_dir = train(config_from_dict(data), runs_dir=scratch / "runs", loggers=[NullLogger()]).run_dir
        loaded = load_run(run_dir, "best")
        model, framing, task = loaded.model, loaded.framing, loaded.task
        pairs = task.sample(args.inputs, torch.Generator().manual_seed(12345))
        texts = [task.render(pairs.example(i)[0 if framing.answers_questions else 1]) for i in range(len(pairs))]
        sources = [framing.typed_input(text, model.config.max_len) for text in texts]
        n, single = len(texts), min(ONE_AT_A_TIME, len(texts))
        print(f"{loaded.run_dir.name}: {n:,} inputs, {args.threads} threads, median of {args.rounds}", flush=True)

        seconds = {
            "predict, one at a time": median_seconds(
                lambda: framing.answer_typed(model, sources[:single], batch_size=1), args.rounds
            )
            * n
            / single,
            "predict, in file order": median_seconds(lambda: in_file_order(model, framing, sources), args.rounds),
            "predict, shortest first": median_seconds(lambda: predict(model, framing, texts), args.rounds),
            "eval, in order": median_seconds(lambda: evaluate_in_order(model, framing, pairs), args.rounds),
            "eval, shortest first": median_seconds(lambda: evaluate(model, framing, pairs), args.rounds),
        }
        unsorted, answers = in_file_order(model, framing, sources), framing.answer_typed(model, sources)
        differ = sum(a != b for a, b in zip(unsorted, answers, strict=True))  # 0 expected, but batches round

        lines = scratch / "inputs.txt"
        lines.write_text("".join(f"{text}\n" for text in texts))
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        command = [sys.executable, "-m", "tinytf", "predict", "--file", str(lines), "--run", str(run_dir)]

        def cli() -> None:
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        seconds["predict --file (CLI)"] = median_seconds(cli, args.rounds)

    weights = sum(p.numel() for name, p in model.named_parameters() if "embed" not in name)
    work = 2 * weights * positions_processed(sources, answers, framing)
    achieved, ceiling = work / seconds["predict, shortest first"], matmul_rate(args.threads)

    print("| measure | seconds | inputs/s |")
    print("|---|---:|---:|")
    for name, value in seconds.items():
        print(f"| {name} | {value:.2f} | {n / value:,.0f} |")
    pairs_compared = [
        ("predict, one at a time", "predict, shortest first"),
        ("predict, in file order", "predict, shortest first"),
        ("predict, one at a time", "predict --file (CLI)"),
        ("eval, in order", "eval, shortest first"),
    ]
    ratios = {f"{faster} vs {slower}": seconds[slower] / seconds[faster] for slower, faster in pairs_compared}
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f}x")
    print(
        f"shortest-first answering: {achieved / 1e9:.1f} GFLOP/s of matmul work, "
        f"{achieved / ceiling:.0%} of a 1024^2 fp32 matmul's {ceiling / 1e9:.1f} GFLOP/s"
    )
    print(f"answers that differ between file order and shortest first: {differ} of {n:,}")
    if args.json:
        result = {
            "run": loaded.run_dir.name,
            "inputs": n,
            "threads": args.threads,
            "seconds": seconds,
            "ratios": ratios,
            "gflops": achieved / 1e9,
            "matmul_gflops": ceiling / 1e9,
            "answers_differ": differ,
        }
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
