"""The induction phase change, from snapshots: configs/induction-decoder.yaml trained on
several seeds with train.snapshot_every, then `heads --over-training` on each run. For
each seed, the first snapshot at which a head's induction score reaches 0.5 and the first
at which the held-out exact match does: Olsson et al. (2022) find the two together.

    python scripts/phase_change.py                          # seeds 0 1 2: a table, docs/phase-change.png
    python scripts/phase_change.py --seeds 0 --steps 300 --out phase.png

Prints a Markdown table (the one in docs/looking-inside.md) and draws each seed's best
induction score and held-out exact match over training. `--keep DIR` keeps the runs.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import tinytf
from tinytf.cli.commands.over_training import LEVEL, HeadsOverTraining, learned, scores_over_training
from tinytf.run.folder import RunFolder
from tinytf.run.load import load_run

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/induction-decoder.yaml"


def no_bar(total: int, unit: str, at_least: int = 0) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext(None)


def train_seed(seed: int, every: int, steps: int | None, runs_dir: Path) -> Path:
    overrides = [f"seed={seed}", f"train.snapshot_every={every}", "train.device=cpu"]
    if steps is not None:
        overrides.append(f"train.steps={steps}")
    config = tinytf.load_config(CONFIG, overrides=overrides)
    return tinytf.train(config, runs_dir=runs_dir, name=f"seed-{seed}").run_dir


def row(seed: int, run_dir: Path, report: HeadsOverTraining) -> str:
    induction, accurate = report.formed().get("induction"), learned(report.snapshots)
    sizes = sum(path.stat().st_size for _, path in RunFolder(run_dir).snapshots())
    gap = "" if induction is None or accurate is None else str(accurate - induction[0])
    head = "never" if induction is None else f"{induction[0]} (`{induction[1]}`)"
    return (
        f"| {seed} | {report.snapshots[-1].step} | {head} | {accurate if accurate is not None else 'never'} "
        f"| {gap} | {len(report.snapshots)}, {sizes / 1e6:.1f} MB |"
    )


def draw(reports: dict[int, HeadsOverTraining], every: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4), layout="constrained")
    for number, (seed, report) in enumerate(reports.items()):
        steps = [snapshot.step for snapshot in report.snapshots]
        colour = f"C{number}"
        axis.plot(steps, report.best("induction"), "-", color=colour, label=f"seed {seed}: best induction score")
        exact = [snapshot.held_out["seq_acc"] for snapshot in report.snapshots]
        axis.plot(steps, exact, "--", color=colour, label=f"seed {seed}: held-out exact match")
    axis.axhline(LEVEL, color="grey", linestyle=":", linewidth=1)
    axis.set_xlabel(f"training step (a snapshot every {every})")
    axis.set_ylim(-0.02, 1.02)
    axis.set_title("The induction phase change: the head forms as the repeats become right")
    axis.legend(fontsize="small", loc="center right")
    figure.savefig(out, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--every", type=int, default=100, help="train.snapshot_every")
    parser.add_argument("--steps", type=int, default=None, help="cap train.steps (a quick look)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/phase-change.png")
    parser.add_argument("--keep", type=Path, default=None, help="train the runs in this folder, and keep them")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as temp:
        runs_dir = args.keep or Path(temp)
        print(
            f"| seed | last step | induction >= {LEVEL} at step (head) | held-out exact match >= {LEVEL} at step "
            "| steps between | snapshots |\n|---|---|---|---|---|---|"
        )
        reports = {}
        for seed in args.seeds:
            run_dir = train_seed(seed, args.every, args.steps, runs_dir)
            reports[seed] = scores_over_training(load_run(run_dir, "last"), None, None, no_bar)
            print(row(seed, run_dir, reports[seed]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    draw(reports, args.every, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
