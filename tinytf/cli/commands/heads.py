"""`tinytf heads`: a score per head and pattern, on held-out inputs or one typed input."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinytf.cli.commands import first_held_out, run_heading
from tinytf.cli.output import exact, write_csv
from tinytf.inspect.heads import HeadReport, head_scores, render_text
from tinytf.run.load import LoadedRun

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HEAD_SCORE_INPUTS = 200  # `heads`' default number of held-out inputs


@dataclass
class ScoredHeads:
    loaded: LoadedRun
    report: HeadReport
    checkpoint: str

    @property
    def note(self) -> str | None:
        return self.report.note

    def to_text(self) -> str:
        """A line saying what was scored, then the table."""
        text = self.report.meta.get("text")
        scored = f"the input {text!r}" if text is not None else f"{self.report.inputs} held-out inputs"
        return f"{run_heading(self.loaded, self.checkpoint)}, {scored}\n{render_text(self.report)}"

    def to_json(self) -> str:
        return self.report.to_json()

    def to_csv(self) -> str:
        return write_csv(csv_header(self.report), csv_rows(self.report))

    def figure(self) -> Figure:
        from tinytf.inspect.viz import head_scores_figure

        return head_scores_figure(self.report)


def score_heads(loaded: LoadedRun, checkpoint: str, n: int | None, text: str | None, ablate: str | None) -> ScoredHeads:
    """The scores on the first `n` held-out inputs, or on the typed `text`, with where they
    come from in the report's `meta`."""
    report = scores_of(loaded, n, text, ablate)
    report.meta = {"run": str(loaded.run_dir), "checkpoint": checkpoint, "step": loaded.step, "text": text}
    return ScoredHeads(loaded, report, checkpoint)


def scores_of(loaded: LoadedRun, n: int | None, text: str | None, ablate: str | None = None) -> HeadReport:
    """The head scores of `loaded`'s model on its first `n` held-out inputs (by default
    HEAD_SCORE_INPUTS, or all if fewer), or on the typed `text`."""
    pairs = None
    if text is None:
        pairs = first_held_out(loaded, n)[: n or HEAD_SCORE_INPUTS]
    return head_scores(loaded.model, loaded.framing, pairs, text=text, ablate=ablate)


def csv_header(report: HeadReport) -> list[str]:
    return ["head", "label", *report.patterns, "entropy"]


def csv_rows(report: HeadReport) -> list[list[str]]:
    """A row per head: its name, label, each pattern's score (blank where it does not apply)
    and entropy, each number as Python writes it (read back, it is the same float)."""
    return [
        [head.name, head.label, *(exact(head.scores.get(p)) for p in report.patterns), exact(head.entropy)]
        for head in report.heads
    ]
