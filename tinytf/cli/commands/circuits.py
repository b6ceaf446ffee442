"""`tinytf circuits`: how the heads compose, and which copy, read from the weights."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

from tinytf.cli.commands import run_heading
from tinytf.cli.output import fresh_path, write_png
from tinytf.inspect.circuits import CircuitReport, circuit_report, render_text
from tinytf.inspect.heatmaps import circuits_figure
from tinytf.run.load import LoadedRun


@dataclass
class Circuits:
    loaded: LoadedRun
    report: CircuitReport
    checkpoint: str
    as_csv: bool = False  # the text is the CSV
    note: str | None = None

    def to_text(self) -> str:
        if self.as_csv:
            return self.to_csv()
        return f"{run_heading(self.loaded, self.checkpoint)}\n{render_text(self.report)}"

    def to_json(self) -> str:
        return json.dumps(self.report.to_dict())

    def to_csv(self) -> str:
        """One row per composition: mode, from, to, score, ratio, and each head's copying score."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["mode", "from", "to", "score", "x_baseline", "from_copying", "to_copying"])
        copying = self.report.copying
        for c in self.report.compositions:
            scores = (f"{c.score:.6f}", f"{c.ratio:.4f}", f"{copying[c.early]:.6f}", f"{copying[c.late]:.6f}")
            writer.writerow([c.mode, c.early, c.late, *scores])
        return out.getvalue().rstrip("\n")

    def write_png(self, out: Path | None) -> Path:
        """The heatmaps to `out`, or to a new circuits.png; the path written."""
        path = out or fresh_path(Path("circuits.png"))
        write_png(path, circuits_figure(self.report))
        return path


def circuits(loaded: LoadedRun, checkpoint: str, as_csv: bool = False) -> Circuits:
    report = circuit_report(loaded.model)
    report.meta = {"run": str(loaded.run_dir), "checkpoint": checkpoint, "step": loaded.step}
    return Circuits(loaded, report, checkpoint, as_csv)
