"""Heatmaps that say what they show: a colour bar with the scale beside every map (and a
line at 0 where the scale spans it), each cell's value printed in it on a small grid; and
activation patching's maps (patching.py). viz.py draws attention with the same helpers.

A patch map's colours diverge from 0 (white): red where patching moved the answer away
from the clean one, blue where it brought it back, 1 when fully, on a scale symmetric
about 0 so that the two read alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.colorbar import Colorbar
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage
    from matplotlib.text import Text

    from tinytf.inspect.circuits import CircuitReport
    from tinytf.inspect.patching import PatchReport

SMALL_GRID = 12  # a heatmap at most this many cells on each side prints each cell's value in it


def print_cells(ax, grid: np.ndarray, dark: float, fontsize: float) -> list[Text]:
    """Each cell's value written in it, if the grid is at most SMALL_GRID cells on each side
    (white where |value| > `dark`, on the darker colours); the texts, row by row."""
    if max(grid.shape) > SMALL_GRID:
        return []
    rows, columns = grid.shape
    cells = [(r, c) for r in range(rows) for c in range(columns)]
    texts = [ax.text(c, r, "", ha="center", va="center", fontsize=fontsize) for r, c in cells]
    set_cells(texts, grid, dark)
    return texts


def set_cells(texts: list[Text], grid: np.ndarray, dark: float) -> None:
    """Put `grid`'s values into the cell texts of `print_cells`."""
    for text, value in zip(texts, np.asarray(grid, dtype=float).ravel(), strict=True):
        text.set_text(f"{value:.2f}".replace("-0.00", "0.00"))
        text.set_color("white" if abs(value) > dark else "black")


def colour_bar(figure: Figure, image: AxesImage, axes: list, label: str) -> Colorbar:
    """A colour bar of `image`'s scale beside `axes`, with a line at 0 where the scale spans it."""
    bar = figure.colorbar(image, ax=axes, shrink=0.9, aspect=30, pad=0.02)
    bar.set_label(label, fontsize=7)
    bar.ax.tick_params(labelsize=7)
    if bar.vmin < 0 < bar.vmax:
        bar.ax.axhline(0.0, color="black", linewidth=1.0)
    return bar


PATCHED = {  # what each component of a PatchReport is, for a figure's titles
    "z": "each head's output (z)",
    "resid_pre": "the residual stream entering the layer (resid_pre)",
    "attn_out": "the attention's output (attn_out)",
    "mlp_out": "the MLP's output (mlp_out)",
}


def patch_figure(report: PatchReport, tokens: list[str] | None) -> Figure:
    """Heatmaps of a `PatchReport`'s `restored`, one per component: layer x head for --by
    head; (layer, head) or layer x position otherwise, the position axis labelled with one
    pair's `tokens`, or without them (pairs of different words) counted from the prompt's
    end (-1: its last token, which predicts the answer). The colours diverge from 0 (white;
    red below, blue above) on a scale symmetric about it, -1..1 or wider, shown by a
    colour bar; a small grid (SMALL_GRID) prints each cell's value in it."""
    from matplotlib.figure import Figure

    grids = report.grids()
    limit = report.colour_limit
    heights = [max(1.8, 0.9 + 0.28 * len(grid.rows)) for grid in grids]
    figure = Figure(figsize=(9, sum(heights) + 0.4), layout="constrained")
    axes = figure.subplots(len(grids), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, grid in zip(axes, grids, strict=True):
        image = ax.imshow(grid.values, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
        print_cells(ax, grid.values, dark=0.6 * limit, fontsize=7)
        _patch_axes(ax, grid.rows, grid.columns, tokens, grid.by_position)
        where = "one position at a time" if grid.by_position else "every position at once"
        pairs = f"{report.pairs} pair{'s' * (report.pairs > 1)}"
        ax.set_title(f"{PATCHED.get(grid.component, grid.component)} patched at {where}, over {pairs}", fontsize=9)
    colour_bar(figure, image, list(axes), "restored: 0 no change,\n1 the clean answer back")
    return figure


def _patch_axes(ax, rows: list, columns: list, tokens: list[str] | None, by_position: bool) -> None:
    """A patch map's ticks and axis names (see `patch_figure`)."""
    if not by_position:
        labels, name = [str(head) for head in columns], "head"
    elif tokens is not None:
        labels = [tokens[position] for position in columns]
        name = "the prompt's token (clean/corrupted where they differ)"
    else:  # positions counted from the prompt's end: the same place in every pair
        labels = [str(position - len(columns)) for position in columns]
        name = "position from the prompt's end (-1: the last token, which predicts the answer)"
    ax.set_xticks(range(len(columns)), labels, rotation=90 if tokens is not None and by_position else 0, fontsize=7)
    ax.set_yticks(range(len(rows)), [str(layer) if head is None else f"{layer}.{head}" for layer, head in rows])
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel(name, fontsize=8)
    ax.set_ylabel("layer.head" if rows[0][1] is not None else "layer", fontsize=8)


def circuits_figure(report: CircuitReport) -> Figure:
    """One heatmap per composition (Q, K, V): a row per writing head, a column per head that
    reads its output (a later layer's, or an encoder-decoder's cross head), each cell its
    score as a multiple of the baseline mean (1: what random weights give), on one shared
    scale from 0; blank where the pair does not compose in that mode (the reader runs first,
    or reads another stream: a cross head's keys and values read only the encoder's heads,
    its queries only the decoder's)."""
    from matplotlib.figure import Figure

    writers, readers = {c.early for c in report.compositions}, {c.late for c in report.compositions}
    early = [name for name in report.copying if name in writers]  # in the model's order
    late = [name for name in report.copying if name in readers]
    figure = Figure(figsize=(4 + 0.45 * len(late) * 3, 1.5 + 0.3 * len(early)), layout="constrained")
    axes = figure.subplots(1, 3, squeeze=False)[0]
    limit = max([2.0, *(c.ratio for c in report.compositions)])
    for ax, mode in zip(axes, ("Q", "K", "V"), strict=True):
        grid = np.full((len(early), len(late)), np.nan)
        for c in report.compositions:
            if c.mode == mode:
                grid[early.index(c.early), late.index(c.late)] = c.ratio
        image = ax.imshow(grid, cmap="Blues", vmin=0, vmax=limit, aspect="auto")  # dark: strong
        texts = print_cells(ax, np.nan_to_num(grid), dark=0.6 * limit, fontsize=6)
        for text, value in zip(texts, grid.ravel(), strict=True):
            text.set_text("" if np.isnan(value) else text.get_text())
        ax.set_xticks(range(len(late)), late, rotation=90, fontsize=6)
        ax.set_yticks(range(len(early)), early if mode == "Q" else [""] * len(early), fontsize=6)
        ax.set_title(f"{mode}-composition", fontsize=9)
        ax.set_xlabel("reading head", fontsize=7)
    axes[0].set_ylabel("writing head", fontsize=7)
    colour_bar(figure, image, list(axes), "score / random baseline mean")
    return figure
