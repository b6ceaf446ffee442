"""Training throughput (tokens/s) of one process next to a torchrun job of several, on this machine.

    python scripts/bench_distributed.py                   # bench.py's default shape, 3 rounds
    python scripts/bench_distributed.py --rounds 5 --steps 300
    python scripts/bench_distributed.py --json distributed.json

Contenders, each training the same config with `tinytf train` (run folder, metrics and
TensorBoard included), the machine's cores shared out the way a user would:
    1 x 2 threads          one process, as without torchrun (OMP_NUM_THREADS=2)
    torchrun 1 x 2 threads  a torchrun job of one process: DistributedDataParallel's own cost
    torchrun 2 x 1 thread   a torchrun job of two processes of one thread each (gloo)
(--processes and --threads change the last; --cores the threads of the first two.)

The config is bench.py's default shape as a tinytf run: a causal decoder of d_model 128, 4
heads, 4 layers, d_ff 512, trained on `induction` sequences of 64 tokens over a vocabulary
of 64 (60 symbols and 4 specials), 32 sequences a step (train.batch_size, the global batch:
2,048 tokens a step for every contender). Held-out scoring, attention images and head
scores are left to the run's end, outside the timed windows.

Method: each run logs tokens/s (train rows of metrics.jsonl, which count every process's
tokens) every `--log-every` steps; a run's figure is the median of its windows after the
first (warm-up: process start-up, DDP's set-up). Contenders take turns, round-robin,
`--rounds` times, so a busy machine slows them alike; we report each one's median over the
rounds, and its ratio to one process. A process of two threads runs many times slower when
anything else keeps a core busy (its threads wait for each other), so before each run the
script waits (up to `--quiet-wait` seconds) until the machine's cores are idle, and reports
how busy they were.

On a 2-core machine two processes of one thread do the work of one process of two threads,
plus the gradients' all-reduce and everything a process does once per step (drawing the
batch, framing it, the optimizer) done twice: this shows the overhead of data parallelism,
not a speed-up. That comes with more cores or machines than one process can use, and on GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHAPE = {"d_model": 128, "n_heads": 4, "n_layers": 4, "d_ff": 512}  # bench.py's "default"
SEQUENCE = 32  # induction symbols; <bos> and two copies: 64 model inputs a sequence
BATCH = 32
NEVER = 10_000_000  # an interval no run reaches: evaluation and images only at the end


@dataclass(frozen=True)
class Contender:
    name: str
    processes: int
    threads: int
    torchrun: bool

    def command(self, config: Path, runs_dir: Path) -> list[str]:
        launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={self.processes}"]
        return [
            sys.executable,
            *(launcher if self.torchrun else []),
            "-m",
            "tinytf",
            "train",
            str(config),
            "--runs-dir",
            str(runs_dir),
        ]


def bench_config(steps: int, log_every: int, shape: dict[str, int], sequence: int, batch: int) -> dict:
    return {
        "seed": 0,
        "task": {"name": "induction", "vocab_size": 60, "min_len": sequence, "max_len": sequence, "eval_size": 64},
        "model": {"arch": "decoder", **shape, "max_len": 2 * sequence + 1},
        "train": {"steps": steps, "batch_size": batch, "eval_every": NEVER, "checkpoint_every": NEVER, "device": "cpu"},
        "log": {"every": log_every, "attention_every": NEVER, "head_scores": False},
    }


def busy_cores(seconds: float = 1.0) -> float:
    """Cores kept busy by anything on the machine over the next `seconds` (Linux: /proc/stat)."""

    def sample() -> tuple[int, int]:
        ticks = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait

    (total_0, idle_0), _, (total_1, idle_1) = sample(), time.sleep(seconds), sample()
    return (os.cpu_count() or 1) * (1 - (idle_1 - idle_0) / max(total_1 - total_0, 1))


def wait_until_quiet(limit: float) -> float:
    """Wait until other work leaves the cores idle (at most `limit` s); the busy cores last seen."""
    deadline = time.monotonic() + limit
    while (busy := busy_cores()) > 0.2 and time.monotonic() < deadline:
        pass
    return busy


def run(contender: Contender, config: Path, folder: Path) -> float:
    """Train once; the median tokens/s of the run's windows after the first."""
    runs_dir = folder / f"runs-{contender.name.replace(' ', '-')}"
    environment = {**os.environ, "OMP_NUM_THREADS": str(contender.threads), "MKL_NUM_THREADS": str(contender.threads)}
    subprocess.run(contender.command(config, runs_dir), env=environment, check=True, capture_output=True)
    (run_dir,) = runs_dir.iterdir()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    windows = [row["tokens_per_s"] for row in rows if row["split"] == "train"][1:]
    shutil.rmtree(runs_dir, ignore_errors=True)
    return statistics.median(windows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200, help="per run; tokens/s is logged every --log-every")
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--processes", type=int, default=2, help="of the torchrun job")
    parser.add_argument("--threads", type=int, default=1, help="of each of its processes")
    parser.add_argument("--cores", type=int, default=2, help="threads of the one-process contenders")
    parser.add_argument("--only", choices=["one", "torchrun-one", "torchrun"], nargs="+", default=None)
    parser.add_argument("--shape", type=json.loads, default=SHAPE, help="e.g. '{\"d_model\": 16, ...}'")
    parser.add_argument("--sequence", type=int, default=SEQUENCE)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--quiet-wait", type=float, default=600, help="seconds to wait for idle cores before a run")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    contenders = {
        "one": Contender(f"1 x {args.cores} threads", 1, args.cores, torchrun=False),
        "torchrun-one": Contender(f"torchrun 1 x {args.cores} threads", 1, args.cores, torchrun=True),
        "torchrun": Contender(
            f"torchrun {args.processes} x {args.threads} thread{'s' * (args.threads > 1)}",
            args.processes,
            args.threads,
            torchrun=True,
        ),
    }
    chosen = [contenders[key] for key in (args.only or contenders)]
    measured: dict[str, list[float]] = {contender.name: [] for contender in chosen}
    busy: dict[str, list[float]] = {contender.name: [] for contender in chosen}
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "bench.yaml"
        config.write_text(
            yaml.safe_dump(bench_config(args.steps, args.log_every, args.shape, args.sequence, args.batch))
        )
        for round_number in range(args.rounds):
            for contender in chosen:
                busy[contender.name].append(wait_until_quiet(args.quiet_wait) if args.quiet_wait > 0 else 0.0)
                measured[contender.name].append(run(contender, config, Path(folder)))
                print(
                    f"round {round_number + 1}: {contender.name}: {measured[contender.name][-1]:,.0f} tokens/s "
                    f"(other work before it: {busy[contender.name][-1]:.2f} cores)",
                    file=sys.stderr,
                )

    tokens_per_step = args.batch * 2 * args.sequence
    baseline = statistics.median(measured[chosen[0].name])
    rows = []
    for contender in chosen:
        tokens_per_s = statistics.median(measured[contender.name])
        rows.append(
            {
                "contender": contender.name,
                "processes": contender.processes,
                "threads": contender.threads,
                "tokens_per_s": tokens_per_s,
                "step_ms": 1000 * tokens_per_step / tokens_per_s,
                "vs_first": tokens_per_s / baseline,
                "runs": measured[contender.name],
                "busy_cores_before": busy[contender.name],
            }
        )
    print(
        f"tokens/s, medians of {args.rounds} runs of {args.steps} steps ({tokens_per_step:,} tokens a step); "
        f"other work before a run: at most {max(max(values) for values in busy.values()):.2f} cores"
    )
    print(f"| contender | tokens/s | step (ms) | vs {chosen[0].name} |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['contender']} | {row['tokens_per_s']:,.0f} | {row['step_ms']:.1f} | {row['vs_first']:.2f}x |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
