"""What logging head scores (log.head_scores) costs a training run, at the shipped configs' settings.

    python scripts/bench_logging.py                         # the configs below, 3 repeats
    python scripts/bench_logging.py configs/sort-*.yaml --repeats 5 --steps 1000
    python scripts/bench_logging.py --quick                 # a smoke test: 6 steps, one repeat
    python scripts/bench_logging.py --json logging.json

Each config trains its own settings (model, batch, lr, eval_every, log.attention_every
as shipped) through `tinytf.train`, run folder and TensorBoard events included, with
log.head_scores on and off. Only the length changes: by default the least multiple of
the config's log.attention_every from 400 steps on, so a run holds as many scoring points
per step as the full run does (quickstart: 2 in 400 steps; the 500-step cadences: 1 in
500), and train.stop_at_accuracy is dropped so every run trains that many steps.

Method: runs alternate (off, on, then on, off, ...) `--repeats` times per config, so a busy
machine slows both alike; we report the median wall time of each and the ratio on/off.
The ratio of two whole runs is noisy on a shared machine, so the runs with scores on also
clock the scoring itself: a logger notes the time between the last attention map's report
and the head report that follows it -- `head_scores` on N_HEAD_SCORE_INPUTS held-out
inputs plus TensorBoard drawing and writing the grid -- and `share` is that time over the
rest of the run. The first grid of a run costs more (its axes and names are drawn once,
then reused): with one scoring point in a bench run, `share` charges all of it to 500
steps, where a full run spreads it over its six.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from tinytf.config import config_from_dict, read_yaml
from tinytf.loggers import NullLogger
from tinytf.training import N_HEAD_SCORE_INPUTS, train

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [
    ROOT / "tinytf" / "quickstart.yaml",
    ROOT / "configs" / "reverse-decoder.yaml",
    ROOT / "configs" / "sort-decoder.yaml",
    ROOT / "configs" / "sort-encoder-decoder.yaml",
    ROOT / "configs" / "induction-decoder.yaml",
]
QUICK_CONFIGS = [ROOT / "tinytf" / "quickstart.yaml", ROOT / "configs" / "sort-encoder-decoder.yaml"]  # --quick
MIN_STEPS = 400
QUICK = {"train": {"steps": 6, "eval_every": 3}, "log": {"attention_every": 3}, "task": {"eval_size": 64}}


class ScoringClock(NullLogger):
    """The seconds from the last attention map's report to each head report: scoring the
    heads and every logger before this one handling the report (TensorBoard's grid)."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.seconds: list[float] = []

    def attention(self, step, sample, report) -> None:
        self.since = time.perf_counter()

    def heads(self, step, report) -> None:
        self.seconds.append(time.perf_counter() - self.since)


def with_keys(data: dict, sections: dict) -> dict:
    """A config file's data with the keys of `sections` ({section: {key: value}}) set."""
    return {**data, **{section: {**data.get(section, {}), **keys} for section, keys in sections.items()}}


def bench_config(path: Path, quick: bool, steps: int | None, device: str | None) -> dict:
    """The config file's data, with its length fixed and early stopping off."""
    data = with_keys(read_yaml(path), QUICK) if quick else read_yaml(path)
    every = config_from_dict(data).log.attention_every
    if quick:
        steps = steps or QUICK["train"]["steps"]
    length = steps or -(-MIN_STEPS // every) * every  # the least multiple of `every` from MIN_STEPS on
    train_keys = {"steps": length, "stop_at_accuracy": None} | ({"device": device} if device else {})
    return with_keys(data, {"train": train_keys})


def timed_run(data: dict, head_scores: bool, runs_dir: Path, name: str) -> tuple[float, list[float]]:
    config = config_from_dict(with_keys(data, {"log": {"head_scores": head_scores}}))
    clock = ScoringClock()
    start = time.perf_counter()
    train(config, runs_dir=runs_dir, name=name, loggers=[clock])
    return time.perf_counter() - start, clock.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", type=Path, help="config files (default: the list in this script)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: see above)")
    parser.add_argument("--repeats", type=int, default=3, help="runs with scores on, and as many off")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default=None, help="train.device for every run (default: the config's)")
    quick = "6 steps, one repeat (by default of quickstart and sort-encoder-decoder): a smoke test"
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    paths = args.configs or (QUICK_CONFIGS if args.quick else CONFIGS)
    repeats = 1 if args.quick else args.repeats

    configs = {path: bench_config(path, args.quick, args.steps, args.device) for path in paths}

    times = {path: {True: [], False: []} for path in paths}
    scoring = {path: [] for path in paths}  # per run with scores on: each scoring point's seconds
    with tempfile.TemporaryDirectory() as scratch:
        runs_dir = Path(scratch)
        timed_run(with_keys(configs[paths[0]], {"train": {"steps": 2}}), True, runs_dir, "warmup")  # imports, fonts
        for repeat in range(repeats):
            for path in paths:
                for head_scores in (False, True) if repeat % 2 == 0 else (True, False):
                    seconds, scored = timed_run(configs[path], head_scores, runs_dir, path.stem)
                    times[path][head_scores].append(seconds)
                    if head_scores:
                        scoring[path].append(scored)

    print(
        f"head scores on {N_HEAD_SCORE_INPUTS} held-out inputs, {torch.get_num_threads()} thread(s), "
        f"{repeats} run(s) each way, medians"
    )
    print("| config | steps | attention_every | scoring points | off | on | on/off | scoring, first | later | share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    results = []
    for path in paths:
        config, off, on = config_from_dict(configs[path]), times[path][False], times[path][True]
        points = scoring[path]
        total = [sum(run) for run in points]
        share = statistics.median(t / (wall - t) for t, wall in zip(total, on, strict=True))
        later = [seconds for run in points for seconds in run[1:]]
        row = {
            "config": path.name,
            "steps": config.train.steps,
            "attention_every": config.log.attention_every,
            "scoring_points": len(points[0]),
            "off_s": statistics.median(off),
            "on_s": statistics.median(on),
            "ratio": statistics.median(on) / statistics.median(off),
            "first_ms": 1000 * statistics.median(run[0] for run in points),
            "later_ms": 1000 * statistics.median(later) if later else None,
            "share": share,
            "off_runs_s": off,
            "on_runs_s": on,
        }
        results.append(row)
        later_ms = "-" if row["later_ms"] is None else f"{row['later_ms']:.0f} ms"
        print(
            f"| `{row['config']}` | {row['steps']} | {row['attention_every']} | {row['scoring_points']} | "
            f"{row['off_s']:.2f} s | {row['on_s']:.2f} s | {row['ratio']:.3f} | {row['first_ms']:.0f} ms | "
            f"{later_ms} | {100 * share:.1f}% |",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
