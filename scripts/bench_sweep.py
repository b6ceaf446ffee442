"""How much `--workers` speeds a sweep up, and what a trial costs beyond its own training.

    python scripts/bench_sweep.py                 # 8 short trials, 1 worker then 2, 3 rounds
    python scripts/bench_sweep.py --rounds 5 --steps 300

Each round sweeps the same 8 settings (a grid of learning rates on configs/sort-encoder.yaml,
`--steps` steps each, one seed) once with `--workers 1` and once with `--workers 2`, each
in a fresh folder, so both train the same runs; the cores are divided among the workers
(1 worker: every core; 2 workers: half each). Reported, as medians over the rounds:
- the sweep's wall time (the whole `tinytf sweep` command) with 1 and 2 workers, and their ratio;
- a trial's overhead: its time in the study (Optuna's start to complete) minus its run's
  time inside `train()` -- asking, loading the config, telling;
- the sweep's fixed cost: its wall time minus, per worker, the trials it ran end to end
  (starting the processes, importing torch, opening the study).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

ROOT = Path(__file__).resolve().parents[1]
LRS = [1.0e-3, 1.5e-3, 2.0e-3, 2.5e-3, 3.0e-3, 4.0e-3, 5.0e-3, 6.0e-3]


def sweep_once(folder: Path, workers: int, steps: int, sizes: dict[str, int]) -> dict[str, float]:
    """Run the 8-trial sweep in `folder` with `workers`; its wall time and overheads."""
    base = yaml.safe_load((ROOT / "configs" / "sort-encoder.yaml").read_text())
    base["train"] |= {"steps": steps, "decay_steps": None, "stop_at_accuracy": None}
    base["model"] |= {key: value for key, value in sizes.items() if key != "batch_size"}
    base["train"] |= {key: value for key, value in sizes.items() if key == "batch_size"}
    base["log"] = {"attention_every": None}
    (folder / "base.yaml").write_text(yaml.safe_dump(base))
    sweep = {"base": "base.yaml", "params": {"train.lr": {"choice": LRS}}, "seeds": [0]}
    sweep |= {"objective": {"metric": "val_loss"}, "sampler": "grid"}
    (folder / "bench.yaml").write_text(yaml.safe_dump(sweep))
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    command = [sys.executable, "-m", "tinytf", "sweep", "bench.yaml", "--workers", str(workers)]
    started = time.perf_counter()
    subprocess.run(command, cwd=folder, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / "sweeps" / "bench" / "study.journal"))
    )
    trials = optuna.load_study(study_name="bench", storage=storage).get_trials()
    overheads, spans = [], {}
    for trial in [t for t in trials if "seconds" in t.user_attrs]:  # trained: not surplus, not failed
        span = (trial.datetime_complete - trial.datetime_start).total_seconds()
        overheads.append(span - trial.user_attrs["seconds"])
        pid = trial.user_attrs["worker"]["pid"]
        spans[pid] = spans.get(pid, 0.0) + span
    return {"wall": wall, "overhead": statistics.median(overheads), "fixed": wall - max(spans.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200, help="training steps of each trial")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--d-ff", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    sizes = {"d_model": args.d_model, "d_ff": args.d_ff, "batch_size": args.batch_size}
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for round_ in range(args.rounds):
        for workers in (1, 2):
            with tempfile.TemporaryDirectory() as folder:
                results[workers].append(sweep_once(Path(folder), workers, args.steps, sizes))
            print(f"round {round_ + 1}, {workers} worker(s): {results[workers][-1]}", flush=True)
    print(f"\n8 trials of {args.steps} steps, {sizes}, medians of {args.rounds} rounds ({os.cpu_count()} cores):")
    print("| workers | sweep wall time | trial overhead | fixed cost |")
    print("|---:|---:|---:|---:|")
    for workers, rounds in results.items():
        wall, over, fixed = (statistics.median(r[key] for r in rounds) for key in ("wall", "overhead", "fixed"))
        print(f"| {workers} | {wall:.1f} s | {over:.2f} s | {fixed:.1f} s |")
    ratio = statistics.median(two["wall"] / one["wall"] for one, two in zip(results[1], results[2], strict=True))
    print(f"\n2 workers / 1 worker, wall time: {ratio:.2f}x (median of the rounds' ratios)")


if __name__ == "__main__":
    main()
