"""`--over-training`: `heads` and `circuits` on every snapshot a run kept
(train.snapshot_every), each beside the snapshot's step, its training loss and the
held-out metrics that `tinytf eval --checkpoint step-K` gives, with the first step at
which each score reached its level: when a pattern or a circuit formed, against when the
model began to get the task right. (Olsson et al., 2022, "In-context Learning and
Induction Heads": induction heads form in a phase change, as the loss drops.)

Each snapshot's rows are exactly what the command gives for that one snapshot, with
`--checkpoint step-K`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tinytf.cli.commands import first_held_out
from tinytf.cli.commands.circuits import Circuits, circuits
from tinytf.cli.commands.heads import csv_header, csv_rows, scores_of
from tinytf.cli.output import exact, write_csv
from tinytf.errors import UserError
from tinytf.inspect.circuits import CircuitReport
from tinytf.inspect.evaluate import evaluate
from tinytf.inspect.heads import HeadReport
from tinytf.run.folder import RunFolder, snapshot_name
from tinytf.run.load import LoadedRun

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from tinytf.cli.output import ProgressBar

LEVEL = 0.5  # a pattern formed once its best head scores this; the task, at this held-out exact match
COMPOSED = 2.0  # a composition stands out from this multiple of its random baseline's mean
SHOWN = 6  # compositions followed over training: the strongest at the last snapshot
HELD_OUT = ("loss", "token_acc", "seq_acc")
TRAINING_COLUMNS = ["step", "train_loss", *(f"held_out_{key}" for key in HELD_OUT)]


@dataclass(frozen=True)
class Snapshot:
    step: int
    train_loss: float | None  # the mean over the steps since the snapshot before; None at step 0
    held_out: dict[str, float]  # loss, token_acc and seq_acc on the run's whole held-out set

    def cells(self) -> list[str]:
        return [str(self.step), exact(self.train_loss), *(exact(self.held_out[key]) for key in HELD_OUT)]

    def to_dict(self) -> dict:
        return {"step": self.step, "train_loss": self.train_loss, "held_out": self.held_out}


def over_snapshots(loaded: LoadedRun, progress_bar: ProgressBar) -> Iterator[tuple[Snapshot, LoadedRun]]:
    """Each snapshot of `loaded`'s run, the earliest first: its step, training loss and
    held-out metrics, and the run with its weights."""
    steps = [step for step, _ in RunFolder(loaded.run_dir).snapshots()]
    if not steps:
        raise UserError(
            f"{loaded.run_dir} keeps no snapshots to follow over training; train with "
            "train.snapshot_every: N (e.g. --set train.snapshot_every=100)"
        )
    held_out = first_held_out(loaded, None)
    with progress_bar(len(steps), "snapshot", at_least=2) as progress:
        for step in steps:
            at = loaded.at(snapshot_name(step))
            yield Snapshot(step, at.train_loss, evaluate(at.model, at.framing, held_out)), at
            if progress is not None:
                progress(1)


def first_step(snapshots: list[Snapshot], reached: list[bool]) -> int | None:
    """The step of the first snapshot where `reached` holds; None if none."""
    return next((snapshot.step for snapshot, done in zip(snapshots, reached, strict=True) if done), None)


def learned(snapshots: list[Snapshot]) -> int | None:
    """The first step at which the held-out exact match reached LEVEL."""
    return first_step(snapshots, [snapshot.held_out["seq_acc"] >= LEVEL for snapshot in snapshots])


@dataclass
class HeadsOverTraining:
    run_dir: Path
    scored: str  # what was scored: "200 held-out inputs", or a typed input
    snapshots: list[Snapshot]
    reports: list[HeadReport]
    note: str | None = None

    @property
    def patterns(self) -> list[str]:
        return self.reports[0].patterns

    def best(self, pattern: str) -> list[float | None]:
        """The best head's score on `pattern` at each snapshot (None where it applies to none)."""
        heads = [report.best(pattern) for report in self.reports]
        return [None if head is None else head.scores[pattern] for head in heads]

    def formed(self) -> dict[str, tuple[int, str] | None]:
        """Each pattern's first snapshot step at which a head scores LEVEL, and that head."""
        found: dict[str, tuple[int, str] | None] = {}
        for pattern in self.patterns:
            heads = [report.best(pattern) for report in self.reports]
            reached = [head is not None and (head.scores[pattern] or 0.0) >= LEVEL for head in heads]
            step = first_step(self.snapshots, reached)
            found[pattern] = None if step is None else (step, heads[reached.index(True)].name)
        return found

    def to_text(self) -> str:
        """A row per snapshot (the best head's score on each pattern), then when each formed."""
        header = ["step", "train loss", "held-out loss", "exact", *self.patterns]
        rows = [
            [str(s.step), _short(s.train_loss), _short(s.held_out["loss"]), _short(s.held_out["seq_acc"])]
            + [_short(score) for score in scores]
            for s, scores in zip(self.snapshots, zip(*map(self.best, self.patterns), strict=True), strict=True)
        ]
        lines = [f"run {self.run_dir}, {len(self.snapshots)} snapshots, the best head's score on {self.scored}"]
        lines += _table(header, rows)
        lines.append(f"\nfirst step at which (of the snapshots; level {LEVEL}):")
        lines.append(f"  {'held-out exact match':<22} {_step_words(learned(self.snapshots))}")
        for pattern, found in self.formed().items():
            where = "never" if found is None else f"{_step_words(found[0])} ({found[1]})"
            lines.append(f"  {'a head: ' + pattern:<22} {where}")
        return "\n".join(lines)

    def to_json(self) -> str:
        formed = {pattern: None if f is None else {"step": f[0], "head": f[1]} for pattern, f in self.formed().items()}
        snapshots = [
            {**snapshot.to_dict(), "heads": report.to_dict()["heads"]}
            for snapshot, report in zip(self.snapshots, self.reports, strict=True)
        ]
        first = {"held_out_seq_acc": learned(self.snapshots), "patterns": formed}
        return json.dumps(
            {
                "run": str(self.run_dir),
                "scored": self.scored,
                "level": LEVEL,
                "first_step": first,
                "patterns": self.patterns,
                "snapshots": snapshots,
            },
            ensure_ascii=False,
        )

    def to_csv(self) -> str:
        """A row per snapshot and head: the snapshot's columns, then `heads --format csv`'s."""
        rows = [
            snapshot.cells() + row
            for snapshot, report in zip(self.snapshots, self.reports, strict=True)
            for row in csv_rows(report)
        ]
        return write_csv(TRAINING_COLUMNS + csv_header(self.reports[0]), rows)

    def figure(self) -> Figure:
        from tinytf.inspect.curves import over_training_figure

        lines = {pattern: self.best(pattern) for pattern in self.patterns}
        marks = {f"exact match {LEVEL}": learned(self.snapshots)}
        if (induction := self.formed().get("induction")) is not None:
            marks[f"induction {LEVEL}"] = induction[0]
        return over_training_figure(
            [s.step for s in self.snapshots], lines, "best head's score", training_curves(self.snapshots), marks, LEVEL
        )


def scores_over_training(
    loaded: LoadedRun, n: int | None, text: str | None, progress_bar: ProgressBar
) -> HeadsOverTraining:
    """`heads` on every snapshot: the first `n` held-out inputs (or the typed `text`)."""
    snapshots, reports = [], []
    for snapshot, at in over_snapshots(loaded, progress_bar):
        snapshots.append(snapshot)
        reports.append(scores_of(at, n, text))
    scored = f"the input {text!r}" if text is not None else f"{reports[0].inputs} held-out inputs"
    return HeadsOverTraining(loaded.run_dir, scored, snapshots, reports, reports[-1].note)


@dataclass
class CircuitsOverTraining:
    run_dir: Path
    snapshots: list[Snapshot]
    circuits: list[Circuits]
    note: str | None = None

    @property
    def reports(self) -> list[CircuitReport]:
        return [found.report for found in self.circuits]

    def final(self) -> list[tuple[str, str, str]]:
        """The (mode, early, late) of the compositions at COMPOSED x their baseline or more at
        the last snapshot, the strongest first (at most SHOWN): the circuit the run ended with."""
        return [(c.mode, c.early, c.late) for c in self.reports[-1].compositions if c.ratio >= COMPOSED][:SHOWN]

    def formed(self) -> dict[str, int]:
        """Each of the `final` compositions, by name, and the first snapshot step at which it reached COMPOSED."""
        found = {}
        for key in self.final():
            ratios = [_ratio(report, key) for report in self.reports]
            found[_name(*key)] = first_step(self.snapshots, [(ratio or 0.0) >= COMPOSED for ratio in ratios])
        return found

    def to_text(self) -> str:
        """A row per snapshot with its strongest composition, then when the final ones formed."""
        header = ["step", "train loss", "held-out loss", "exact", "strongest composition", "x baseline"]
        rows = []
        for snapshot, report in zip(self.snapshots, self.reports, strict=True):
            strongest = report.compositions[0] if report.compositions else None
            rows.append(
                [str(snapshot.step), _short(snapshot.train_loss), _short(snapshot.held_out["loss"])]
                + [_short(snapshot.held_out["seq_acc"])]
                + (
                    ["none", ""]
                    if strongest is None
                    else [_name(strongest.mode, strongest.early, strongest.late), f"{strongest.ratio:.1f}x"]
                )
            )
        formed = [f"  {name:<42} {_step_words(step)}" for name, step in self.formed().items()]
        return "\n".join(
            [
                f"run {self.run_dir}, {len(self.snapshots)} snapshots",
                *_table(header, rows),
                f"\nfirst step at which (of the snapshots; compositions: {COMPOSED:g}x the baseline):",
                f"  {f'held-out exact match {LEVEL}':<42} {_step_words(learned(self.snapshots))}",
                *(formed or [f"  no composition reaches {COMPOSED:g}x the baseline at the last snapshot"]),
            ]
        )

    def to_json(self) -> str:
        first = {"held_out_seq_acc": learned(self.snapshots), "compositions": self.formed()}
        pairs = zip(self.snapshots, self.reports, strict=True)
        snapshots = [{**snapshot.to_dict(), **report.to_dict()} for snapshot, report in pairs]
        top = {"run": str(self.run_dir), "level": LEVEL, "composed": COMPOSED, "first_step": first}
        return json.dumps({**top, "snapshots": snapshots})

    def to_csv(self) -> str:
        """A row per snapshot and composition: the snapshot's columns, then `circuits --format csv`'s."""
        header: list[str] = []
        rows = []
        for snapshot, found in zip(self.snapshots, self.circuits, strict=True):
            header, *body = list(csv.reader(io.StringIO(found.to_csv())))
            rows += [snapshot.cells() + row for row in body]
        return write_csv(TRAINING_COLUMNS + header, rows)

    def figure(self) -> Figure:
        """The compositions strongest at the last snapshot (at most SHOWN), as multiples of the baseline."""
        from tinytf.inspect.curves import over_training_figure

        keys = [(c.mode, c.early, c.late) for c in self.reports[-1].compositions[:SHOWN]]
        lines = {_name(*key): [_ratio(report, key) for report in self.reports] for key in keys}
        marks = {f"exact match {LEVEL}": learned(self.snapshots)}
        steps = [s.step for s in self.snapshots]
        return over_training_figure(steps, lines, "x random baseline", training_curves(self.snapshots), marks, COMPOSED)


def circuits_over_training(loaded: LoadedRun, progress_bar: ProgressBar) -> CircuitsOverTraining:
    """`circuits` on every snapshot."""
    snapshots, found = [], []
    for snapshot, at in over_snapshots(loaded, progress_bar):
        snapshots.append(snapshot)
        found.append(circuits(at, snapshot_name(snapshot.step)))
    return CircuitsOverTraining(loaded.run_dir, snapshots, found)


def training_curves(snapshots: list[Snapshot]) -> dict[str, list[float | None]]:
    return {
        "held-out exact match": [s.held_out["seq_acc"] for s in snapshots],
        "training loss": [s.train_loss for s in snapshots],
        "held-out loss": [s.held_out["loss"] for s in snapshots],
    }


def _ratio(report: CircuitReport, key: tuple[str, str, str]) -> float | None:
    return next((c.ratio for c in report.compositions if (c.mode, c.early, c.late) == key), None)


def _name(mode: str, early: str, late: str) -> str:
    return f"{early} → {late} {mode}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in [header, *rows]]


def _step_words(step: int | None) -> str:
    return "never" if step is None else f"step {step}"


def _short(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"
