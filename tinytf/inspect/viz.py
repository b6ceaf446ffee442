"""Pictures of attention: matplotlib heatmaps with tokens on both axes, and a compact
heatmap for the terminal.

Reading a map: row i is query token i, column j is key token j, and the cell's darkness
is how much of query i's attention goes to key j (each row sums to 1). Patterns worth
looking for (a textbook chapter on attention tabulates them): a diagonal (each token attends to
itself), the diagonal just below it (the previous token), a bright first column (the
first token / <bos> as a resting place), and off-diagonal links such as a verb looking
back at its subject. A colour bar beside the maps gives the scale, and a small map
(heatmaps.SMALL_GRID) prints each weight in its cell.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

import numpy as np

from tinytf.inspect.heatmaps import colour_bar, print_cells

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

    from tinytf.inspect.attend import AttentionMap, AttentionReport
    from tinytf.inspect.heads import HeadReport, HeadScore

SHADES = " ░▒▓█"  # weight 0 .. 1, in five steps
ASCII_SHADES = " .:#@"  # the same steps, for an output that cannot show SHADES (e.g. cp1252)
# A head's map is drawn at most this many inches square: past a few hundred tokens the labels
# cannot be read anyway, and an image growing with the length squared would outgrow memory.
MAX_MAP_INCHES = 16
ATTENTION_SCALE = "attention weight\n(each row sums to 1)"  # the colour bar's label


def terminal_shades(stream: TextIO | None = None) -> str:
    """SHADES if `stream` (default: sys.stdout as it is now) can encode them, else ASCII_SHADES."""
    encoding = getattr(sys.stdout if stream is None else stream, "encoding", None) or "utf-8"
    try:
        SHADES.encode(encoding)
    except (UnicodeEncodeError, LookupError):  # (LookupError: an encoding Python does not know)
        return ASCII_SHADES
    return SHADES


def _draw_heatmap(
    ax, weights: np.ndarray, tokens: tuple[list[str], list[str]], title: str, first_in_row: bool, cells: bool
) -> AxesImage:
    """One head's map of `tokens` (queries, keys), with each weight printed in its cell if
    `cells` and the map is small (SMALL_GRID). The query tokens and their ticks are drawn
    once per row of maps: they are the same for every head, and each tick is a few ms of
    matplotlib's drawing time."""
    query_tokens, key_tokens = tokens
    image = ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    if cells:
        cell_points = 72 * ax.get_position().width * ax.figure.get_figwidth() / max(len(key_tokens), 1)
        print_cells(ax, weights, dark=0.6, fontsize=min(7.0, cell_points / 2.6))
    ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=7)
    ax.set_title(title, fontsize=8)
    ax.set_xlabel("key", fontsize=7)
    if first_in_row:
        ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=7)
        ax.set_ylabel("query", fontsize=7)
    else:
        ax.set_yticks([])
    return image


def layer_figure(attention: AttentionMap) -> Figure:
    """One layer's attention (self or cross): its heads side by side, as TensorBoard shows
    it at every logging step: without cell values, whose text would be drawn anew at each
    step and slow training down (`tinytf attend --format png` prints them)."""
    from matplotlib.figure import Figure  # imported here: matplotlib is slow to import

    n_heads = attention.n_heads
    size = min(0.9 + 0.15 * max(len(attention.key_tokens), len(attention.query_tokens)), MAX_MAP_INCHES)
    figure = Figure(figsize=(size * n_heads + 1.2, size + 0.6), layout="constrained")
    axes = figure.subplots(1, n_heads, squeeze=False)[0]
    for head, (ax, title) in enumerate(zip(axes, _head_titles(attention), strict=True)):
        tokens = (attention.query_tokens, attention.key_tokens)
        image = _draw_heatmap(ax, attention.weights[head], tokens, title, first_in_row=head == 0, cells=False)
    colour_bar(figure, image, list(axes), ATTENTION_SCALE)
    return figure


def report_figure(report: AttentionReport) -> Figure:
    """Every map of a report in one grid: a row per stack/layer/kind, a column per head."""
    from matplotlib.figure import Figure

    rows, cols = len(report.maps), max(m.n_heads for m in report.maps)
    longest = max(max(len(m.key_tokens), len(m.query_tokens)) for m in report.maps)
    size = min(0.9 + 0.22 * longest, MAX_MAP_INCHES)
    figure = Figure(figsize=(size * cols + 1.2, size * rows + 0.6), layout="constrained")
    axes = figure.subplots(rows, cols, squeeze=False)
    for row, attention in enumerate(report.maps):
        for head in range(cols):
            ax = axes[row][head]
            if head < attention.n_heads:
                title = f"{attention.name} head {attention.first_head + head}"
                weights, tokens = attention.weights[head], (attention.query_tokens, attention.key_tokens)
                image = _draw_heatmap(ax, weights, tokens, title, first_in_row=head == 0, cells=True)
            else:
                ax.axis("off")
    colour_bar(figure, image, list(axes.ravel()), ATTENTION_SCALE)
    return figure


def head_column_name(head: HeadScore) -> str:
    """A head's short name for a column: "d0.self.h1" is decoder layer 0's self-attention, head 1."""
    return f"{head.stack[0]}{head.layer}.{head.kind}.h{head.head}"


def head_scores_figure(report: HeadReport) -> Figure:
    """A `HeadReport`'s score grid (see heads.py): a row per pattern, a column per head,
    each cell's score printed in it, its colour on the colour bar's scale (0..1); grey and
    blank where the pattern does not apply (across two sequences only `first` and the
    task's alignments do). Each head's label --
    its best pattern, once that scores LABEL_THRESHOLD -- is its framed cell, in bold;
    "mixed" heads have no frame. Lines separate the attentions (stack, layer, kind).
    Columns narrow from 24 heads on: 8 layers x 8 heads make a figure 23 in wide."""
    return _ScoreGrid(report).figure


class _ScoreGrid:
    """The figure of `head_scores_figure`, holding the artists that show the scores:
    `update` puts another report of the same heads and patterns into them."""

    def __init__(self, report: HeadReport) -> None:
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle

        patterns, heads = report.patterns, report.heads
        many = len(heads) > 24
        cell, self.fontsize = (0.32, 6) if many else (0.42, 7)  # column width in inches, text size in points
        self.figure = Figure(figsize=(2.2 + cell * len(heads), 1.5 + 0.26 * len(patterns)), layout="constrained")
        ax = self.figure.subplots()
        colormap = _blues_with_grey()
        self.image = ax.imshow(_score_grid(report), cmap=colormap, vmin=0.0, vmax=1.0, aspect="auto")
        colour_bar(self.figure, self.image, [ax], "score: share of attention\non the pattern's keys")
        applies = ~_score_grid(report).mask  # (P, N): where a score can be printed
        self.texts = {
            (row, col): ax.text(col, row, "", ha="center", va="center", fontsize=self.fontsize)
            for row in range(len(patterns))
            for col in range(len(heads))
            if applies[row, col]
        }
        self.frames = [  # one per head, moved to the row of its label
            ax.add_patch(Rectangle((col - 0.5, -0.5), 1, 1, fill=False, edgecolor="orangered", linewidth=1.5))
            for col in range(len(heads))
        ]
        ax.set_xticks(range(len(heads)), [head_column_name(h) for h in heads], rotation=90, fontsize=self.fontsize)
        ax.set_yticks(range(len(patterns)), patterns, fontsize=7)
        ax.tick_params(length=0)
        self.lines = [  # where a new attention (stack, layer, kind) begins
            ax.axvline(col - 0.5, color="0.2", linewidth=0.8)
            for col in range(1, len(heads))
            if _attention_of(heads[col]) != _attention_of(heads[col - 1])
        ]
        ax.set_title(f"head scores on {report.inputs} held-out inputs (framed: each head's label)", fontsize=8)
        self.update(report)

    def update(self, report: HeadReport) -> None:
        scores = _score_grid(report)
        self.image.set_data(scores)
        labels = [h.label for h in report.heads]
        for (row, col), text in self.texts.items():
            value = float(scores[row, col])
            text.set_text(f"{value:.2f}")
            text.set_color("white" if value > 0.6 else "black")
            text.set_fontweight("bold" if report.patterns[row] == labels[col] else "normal")
        for frame, label in zip(self.frames, labels, strict=True):
            frame.set_visible(label in report.patterns)
            if label in report.patterns:
                frame.set_y(report.patterns.index(label) - 0.5)

    def artists(self) -> list:
        """What `update` changes, and what lies on it, in a full drawing's order."""
        return [self.image, *self.frames, *self.lines, *self.texts.values()]  # by zorder: 0, 1, 2, 3


def _score_grid(report: HeadReport) -> np.ma.MaskedArray:
    """(patterns, heads) scores, masked where a pattern does not apply to a head."""
    grid = np.array(
        [[np.nan if h.scores.get(p) is None else h.scores[p] for h in report.heads] for p in report.patterns],
        dtype=float,
    )
    return np.ma.masked_invalid(grid)


def _attention_of(head: HeadScore) -> tuple[str, int, str]:
    return head.stack, head.layer, head.kind


def _blues_with_grey():
    """The attention maps' colormap, with light grey for a score that does not apply."""
    from matplotlib import colormaps

    return colormaps["Blues"].with_extremes(bad="0.88")


class HeadScoreImages:
    """Renders `head_scores_figure` to RGB arrays, fast when it repeats (as `LayerImages`
    does): training scores the same heads and patterns every few hundred steps, so the
    axes, names and title are drawn once and kept as pixels; later renderings draw just
    the colours, the numbers and the frames on them."""

    def __init__(self) -> None:
        self._grid: _ScoreGrid | None = None
        self._layout: tuple | None = None

    def render(self, report: HeadReport) -> np.ndarray:
        """The figure of `report` as a (height, width, 3) uint8 array."""
        layout = _grid_layout(report)
        if self._grid is None or layout != self._layout:
            self._grid, self._layout = _ScoreGrid(report), layout
            self._blit = _Blit(self._grid.figure, self._grid.artists())
        self._grid.update(report)
        return self._blit.render()


def _grid_layout(report: HeadReport) -> tuple:
    """What the kept pixels of a score grid show: patterns, heads, inputs, where scores apply."""
    names = tuple(head_column_name(h) for h in report.heads)
    return tuple(report.patterns), names, report.inputs, _score_grid(report).mask.tobytes()


def spectrum_figure(spectra: Mapping[int, Sequence[float]]) -> Figure:
    """An embedding's Fourier spectrum over training (fourier.py): frequency up, logged step
    across. Each column is divided by its largest norm, so its bright cells are the
    frequencies that dominate at that step."""
    from matplotlib.figure import Figure

    steps = sorted(spectra)
    grid = np.array([spectra[step] for step in steps], dtype=float).T  # (frequencies, steps)
    grid = grid / np.maximum(grid.max(axis=0, keepdims=True), 1e-12)
    figure = Figure(figsize=(8, 3.5), layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(grid, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", origin="lower", interpolation="nearest")
    colour_bar(figure, image, [ax], "norm / the step's largest")
    ticks = np.unique(np.linspace(0, len(steps) - 1, min(len(steps), 8)).round().astype(int))
    ax.set_xticks(ticks, [str(steps[i]) for i in ticks], fontsize=7)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel("frequency k", fontsize=8)
    ax.set_title("embedding norm per Fourier frequency (each step's strongest = 1)", fontsize=9)
    return figure


def figure_pixels(figure: Figure) -> np.ndarray:
    """`figure` drawn as a (height, width, 3) uint8 array."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[:, :, :3].copy()


class LayerImages:
    """Renders layer figures (see `layer_figure`) to RGB arrays, fast when they repeat.

    Training logs the attention of the same inputs every few hundred steps, and the
    layers of a stack see the same tokens: the tick labels and axes of one input's maps
    are the same from layer to layer and from step to step; only the weights and the
    titles change. So the first rendering of a set of labels draws the whole figure but
    its heatmaps and titles and keeps those pixels; later ones paste them back and draw
    just the heatmaps and titles (matplotlib's "blitting") -- about a tenth of the time it
    takes to draw the tick labels again. The MAX_KEPT label sets last used are kept.
    """

    MAX_KEPT = 32  # figures kept; a training run needs one per sample and pair of query/key tokens

    def __init__(self) -> None:
        self._frames: OrderedDict[tuple, _LayerFrame] = OrderedDict()  # labels -> its kept figure

    def render(self, attention: AttentionMap) -> np.ndarray:
        """The figure of `attention` as a (height, width, 3) uint8 array."""
        labels = _labels(attention)
        frame = self._frames.get(labels)
        if frame is None:
            frame = self._frames[labels] = _LayerFrame(layer_figure(attention))
            while len(self._frames) > self.MAX_KEPT:
                self._frames.popitem(last=False)  # the least recently used
        self._frames.move_to_end(labels)
        return frame.render(attention)


class _LayerFrame:
    """A layer figure kept as pixels without its heatmaps and titles (see LayerImages)."""

    def __init__(self, figure: Figure) -> None:
        maps = [ax for ax in figure.axes if ax.images]  # one per head; not the colour bar
        self.heatmaps = [ax.images[0] for ax in maps]
        self.titles = [ax.title for ax in maps]
        self.blit = _Blit(figure, [*self.heatmaps, *self.titles])

    def render(self, attention: AttentionMap) -> np.ndarray:
        for heatmap, head_weights in zip(self.heatmaps, attention.weights, strict=True):
            heatmap.set_data(head_weights)
        for title, text in zip(self.titles, _head_titles(attention), strict=True):
            title.set_text(text)
        return self.blit.render()


def _labels(attention: AttentionMap) -> tuple:
    """What the kept pixels of a layer figure show: its heads' numbers and tokens."""
    return attention.first_head, attention.n_heads, tuple(attention.query_tokens), tuple(attention.key_tokens)


def _head_titles(attention: AttentionMap) -> list[str]:
    return [f"{attention.name} head {attention.first_head + head}" for head in range(attention.n_heads)]


class _Blit:
    """A figure drawn once without its `changing` artists and kept as pixels; `render()`
    pastes those back and draws just the changing artists on them (matplotlib's "blitting")."""

    def __init__(self, figure: Figure, changing: list) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        self.canvas = FigureCanvasAgg(figure)
        self.changing = changing
        for artist in changing:
            artist.set_animated(True)  # drawn by render(), not by canvas.draw()
        self.canvas.draw()
        self.background = self.canvas.copy_from_bbox(figure.bbox)

    def render(self) -> np.ndarray:
        self.canvas.restore_region(self.background)
        for artist in self.changing:
            artist.axes.draw_artist(artist)
        for ax in dict.fromkeys(artist.axes for artist in self.changing):  # frames on top, as in a full draw
            for spine in ax.spines.values():
                ax.draw_artist(spine)
        return np.asarray(self.canvas.buffer_rgba())[:, :, :3].copy()  # (height, width, RGB)


def terminal_heatmap(attention: AttentionMap, head: int, cell_width: int = 2, shades: str | None = None) -> str:
    """One head as text: query tokens down the side, key tokens (numbered) across the top,
    one shaded cell per weight, and each query's strongest key at the end of its row.
    `shades`: the characters for weight 0 .. 1; default: `terminal_shades()`, Unicode
    blocks where sys.stdout can show them, ASCII where it cannot."""
    shades = shades or terminal_shades()
    weights = attention.weights[head]
    queries, keys = attention.query_tokens, attention.key_tokens
    label_width = min(max(len(t) for t in queries), 12)
    header = " " * (label_width + 1) + "".join(f"{j:<{cell_width}d}"[:cell_width] for j in range(len(keys)))
    lines = [f"{attention.name} head {attention.first_head + head}", header]
    for i, query in enumerate(queries):
        cells = "".join(shades[min(int(w * len(shades)), len(shades) - 1)] * cell_width for w in weights[i])
        strongest = int(np.argmax(weights[i]))
        label = f"{query[:label_width]:>{label_width}}"
        lines.append(f"{label} {cells}  -> {keys[strongest]} ({weights[i, strongest]:.2f})")
    key_legend = "  ".join(f"{j}={token}" for j, token in enumerate(keys))
    lines.append(f"{'keys:':>{label_width}} {key_legend}")
    return "\n".join(lines)


def terminal_report(report: AttentionReport, heading: str, answer: str | None = None) -> str:
    """`tinytf attend`'s table: `heading`, the source (encoder-decoder), the tokens and the
    `answer` as text, then `terminal_heatmap` for every attention and head."""
    lines = [heading]
    if report.source_tokens is not None:
        lines.append(f"source: {' '.join(report.source_tokens)}")
    lines.append(f"tokens: {' '.join(report.tokens)}")
    if answer is not None:
        lines.append(f"answer: {answer}")
    for attention_map in report.maps:
        for head in range(attention_map.n_heads):
            lines += ["", terminal_heatmap(attention_map, head)]
    return "\n".join(lines)
