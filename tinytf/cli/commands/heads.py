"""`tinytf heads`: a score per head and pattern, on held-out inputs or one typed input."""

from __future__ import annotations

from dataclasses import dataclass

from tinytf.cli.commands import first_held_out, run_heading
from tinytf.inspect.heads import HeadReport, head_scores, render_text
from tinytf.run.load import LoadedRun

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


def score_heads(loaded: LoadedRun, checkpoint: str, n: int | None, text: str | None, ablate: str | None) -> ScoredHeads:
    """The scores on the first `n` held-out inputs, or on the typed `text`, with where they
    come from in the report's `meta`."""
    pairs = None
    if text is None:  # by default the first HEAD_SCORE_INPUTS, or all if there are fewer
        pairs = first_held_out(loaded, n)[: n or HEAD_SCORE_INPUTS]
    report = head_scores(loaded.model, loaded.framing, pairs, text=text, ablate=ablate)
    report.meta = {"run": str(loaded.run_dir), "checkpoint": checkpoint, "step": loaded.step, "text": text}
    return ScoredHeads(loaded, report, checkpoint)
