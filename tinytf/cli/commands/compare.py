"""`tinytf compare`: where each head looks beside what it causes, for a construction's pairs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinytf.cli.commands import first_held_out, run_heading
from tinytf.cli.commands.heads import HEAD_SCORE_INPUTS
from tinytf.cli.commands.patch import PairDraw
from tinytf.cli.output import exact, write_csv
from tinytf.inspect.compare import SCORED_ON, Comparison, compare
from tinytf.inspect.patching import AT
from tinytf.run.load import LoadedRun

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLACES = {"all": "every position", "last": "the last position", "deciding": "the deciding word"}


@dataclass
class Compared:
    loaded: LoadedRun
    comparison: Comparison
    checkpoint: str
    note: str | None = None

    def to_text(self) -> str:
        """What was compared, a row per head, the correlations, and the heads that stand apart."""
        c = self.comparison
        lines = [
            f"{run_heading(self.loaded, self.checkpoint)}: {c.pairs} {c.construction} pairs; "
            f"the {c.pattern} score on {c.inputs} held-out inputs and on the pairs' prompts",
            f"{'':<18} {'score':^17}   {'restored, patched at':^33}",
            f"{'head':<18} {'held-out':>8} {'pairs':>8}   {'every':>8} {'last':>8} {'deciding':>13}",
        ]
        for h in c.heads:
            scores = " ".join(f"{_cell(h.score[on]):>8}" for on in SCORED_ON)
            restored = f"{h.restored['all']:>8.2f} {h.restored['last']:>8.2f} {h.restored['deciding']:>13.2f}"
            lines.append(f"{h.head:<18} {scores}   {restored}")
        lines.append("\nSpearman's rho across heads, score against restored (95% bootstrap interval):")
        lines.append(f"{'':<18}" + "".join(f"{PLACES[at]:>24}" for at in AT))
        for on, label in (("held_out", "held-out score"), ("prompts", "score on the pairs")):
            lines.append(f"{label:<18}" + "".join(f"{c.spearman[on][at].text():>24}" for at in AT))
        lines.append(f"\nlooks without causing: {', '.join(c.looks_without_causing()) or 'none'}")
        lines.append(f"causes without looking: {', '.join(c.causes_without_looking()) or 'none'}")
        return "\n".join(line.rstrip() for line in lines)

    def to_json(self) -> str:
        return json.dumps(self.comparison.to_dict())

    def to_csv(self) -> str:
        """A row per head: its scores and shares restored."""
        header = ["head", *(f"score_{on}" for on in SCORED_ON), *(f"restored_{at}" for at in AT)]
        rows = [
            [h.head, *(exact(h.score[on]) for on in SCORED_ON), *(exact(h.restored[at]) for at in AT)]
            for h in self.comparison.heads
        ]
        return write_csv(header, rows)

    def figure(self) -> Figure:
        from tinytf.inspect.curves import looking_causing_figure

        return looking_causing_figure(self.comparison, PLACES)


def compared(loaded: LoadedRun, checkpoint: str, construction: str, pairs: int, n: int | None) -> Compared:
    """`compare` on `pairs` drawn pairs of `construction` and the first `n` held-out inputs
    (by default as many as `heads` scores)."""
    drawn = PairDraw(n=pairs, construction=construction).pairs(loaded)
    held_out = first_held_out(loaded, n)[: n or HEAD_SCORE_INPUTS]
    comparison = compare(loaded.model, loaded.framing, drawn, held_out, construction)
    comparison.meta = {"run": str(loaded.run_dir), "checkpoint": checkpoint, "step": loaded.step}
    return Compared(loaded, comparison, checkpoint)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
