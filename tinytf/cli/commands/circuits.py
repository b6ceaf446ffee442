"""`tinytf circuits`: how the heads compose, which copy and which look by position, read
from the weights."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinytf.cli.commands import run_heading
from tinytf.cli.output import write_csv
from tinytf.inspect.circuits import CircuitReport, circuit_report, render_text
from tinytf.run.load import LoadedRun

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Circuits:
    loaded: LoadedRun
    report: CircuitReport
    checkpoint: str
    note: str | None = None

    def to_text(self) -> str:
        return f"{run_heading(self.loaded, self.checkpoint)}\n{render_text(self.report)}"

    def to_json(self) -> str:
        return json.dumps(self.report.to_dict())

    def to_csv(self) -> str:
        """One row per composition: mode, from, to, score, ratio, and each head's copying score
        and QK positional share (empty where None)."""
        heads = ["from_copying", "to_copying", "from_positional", "to_positional"]
        copying, positional = self.report.copying, self.report.positional
        rows = []
        for c in self.report.compositions:
            scores = [f"{c.score:.6f}", f"{c.ratio:.4f}", f"{copying[c.early]:.6f}", f"{copying[c.late]:.6f}"]
            shares = ["" if positional[head] is None else f"{positional[head]:.6f}" for head in (c.early, c.late)]
            rows.append([c.mode, c.early, c.late, *scores, *shares])
        return write_csv(["mode", "from", "to", "score", "x_baseline", *heads], rows)

    def figure(self) -> Figure:
        """A heatmap per composition, each cell the score as a multiple of the baseline mean."""
        from tinytf.inspect.heatmaps import circuits_figure

        return circuits_figure(self.report)


def circuits(loaded: LoadedRun, checkpoint: str) -> Circuits:
    report = circuit_report(loaded.model, loaded.framing.model_lengths())  # the positions it trained on
    report.meta = {"run": str(loaded.run_dir), "checkpoint": checkpoint, "step": loaded.step}
    return Circuits(loaded, report, checkpoint)
