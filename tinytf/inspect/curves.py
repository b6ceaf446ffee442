"""Figures of lines and points: what the heads or circuits of each snapshot score, above
the training loss and held-out accuracy at the same steps (`--over-training --format
png`), and each head's attention score against what it causes (`compare --format png`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

if TYPE_CHECKING:
    from tinytf.inspect.compare import Comparison

Curve = Sequence[float | None]  # a value per step; None where there is none (no training loss at step 0)


def over_training_figure(
    steps: Sequence[int],
    lines: Mapping[str, Curve],
    ylabel: str,
    training: Mapping[str, Curve],
    marks: Mapping[str, int | None],
    level: float | None = None,
) -> Figure:
    """Two panels sharing the step axis. Above, `lines` (label -> curve), read on `ylabel`,
    with a dotted line at `level`; below, the held-out exact match (0..1, left) and the
    losses (right) of `training` ("held-out exact match", "training loss", "held-out
    loss"). `marks` (label -> step) are dashed vertical lines through both panels."""
    figure = Figure(figsize=(8, 6.5), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    for label, values in lines.items():
        top.plot(steps, _gaps(values), marker=".", label=label)
    if level is not None:
        top.axhline(level, color="grey", linestyle=":", linewidth=1)
    top.set_ylabel(ylabel)
    bottom.plot(steps, _gaps(training["held-out exact match"]), color="black", label="held-out exact match")
    bottom.set_ylim(-0.02, 1.02)
    bottom.set_ylabel("held-out exact match")
    bottom.set_xlabel("step")
    losses = bottom.twinx()
    for label, colour in (("training loss", "tab:red"), ("held-out loss", "tab:orange")):
        losses.plot(steps, _gaps(training[label]), color=colour, linewidth=1, label=label)
    losses.set_ylabel("loss")
    handles = [*bottom.get_legend_handles_labels()[0], *losses.get_legend_handles_labels()[0]]
    bottom.legend(handles=handles, fontsize="small", loc="center right")
    for number, (label, step) in enumerate(marks.items()):
        if step is not None:
            colour = f"C{number + len(lines)}"
            for ax in (top, bottom):
                ax.axvline(step, color=colour, linestyle="--", linewidth=1, label=label if ax is top else None)
    if lines or any(step is not None for step in marks.values()):
        top.legend(fontsize="small", loc="best")
    return figure


def _gaps(values: Curve) -> list[float]:
    return [math.nan if value is None else value for value in values]


def looking_causing_figure(comparison: Comparison, places: Mapping[str, str]) -> Figure:
    """A panel per place patched (`places`: at -> words): each head a point, its held-out
    attention score across, the share it restores up, labelled with its name; the title
    gives Spearman's rho and its bootstrap interval."""
    figure = Figure(figsize=(4.2 * len(places), 4.4), layout="constrained")
    axes = figure.subplots(1, len(places), sharey=True)
    for ax, (at, words) in zip(axes, places.items(), strict=True):
        for head in comparison.heads:
            score = head.score["held_out"]
            if score is None:
                continue
            ax.scatter(score, head.restored[at], color="C0")
            ax.annotate(
                head.head.removeprefix("decoder."),
                (score, head.restored[at]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
        ax.set_title(f"patched at {words}\nSpearman {comparison.spearman['held_out'][at].text()}", fontsize=10)
        ax.set_xlabel(f"{comparison.pattern} score (held-out)")
        ax.axhline(0, color="grey", linewidth=0.5)
    axes[0].set_ylabel("share of the answer restored")
    figure.suptitle(f"Looking vs causing: {comparison.pairs} {comparison.construction} pairs")
    return figure
