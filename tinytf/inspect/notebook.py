"""How reports show themselves in a notebook (Jupyter, VS Code): each report's
`_repr_html_` returns one of these, self-contained, fetching nothing.

    notebook_frame(page)     a whole page (the attention viewer) in an <iframe srcdoc>
    notebook_text(text)      a text table as the command prints it
    notebook_heatmap(...)    a grid of numbers as a table whose cells are coloured by value
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np

FRAME_HEIGHT = 640  # pixels: the viewer's head view and its controls, for a sentence


def notebook_frame(page: str) -> str:
    """`page` in an <iframe srcdoc>, so that its script and Content-Security-Policy stay its own."""
    style = f"width: 100%; height: {FRAME_HEIGHT}px; border: 0"
    return f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" style="{style}"></iframe>'


def notebook_text(text: str) -> str:
    """A text table as it is, in a fixed-width font."""
    return f'<pre style="font-family: monospace; white-space: pre">{html.escape(text)}</pre>'


def notebook_heatmap(
    title: str, rows: Sequence[str], columns: Sequence[str], grid: np.ndarray, limit: float, axes: tuple[str, str]
) -> str:
    """`grid` (rows x columns) as a table: each cell's value in it, its colour diverging from
    white at 0 to blue at `limit` and red at -`limit`, as the patching PNGs draw them.
    `axes`: what the rows and the columns are."""
    header = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = "".join(
        f"<tr><th>{html.escape(row)}</th>"
        + "".join(f'<td style="background: {_colour(value, limit)}">{value:.2f}</td>' for value in values)
        + "</tr>"
        for row, values in zip(rows, grid.tolist(), strict=True)
    )
    corner = html.escape(f"{axes[0]} \\ {axes[1]}")
    return (
        f'<table style="border-collapse: collapse; text-align: right; font-size: small">'
        f"<caption>{html.escape(title)}</caption><tr><th>{corner}</th>{header}</tr>{body}</table>"
    )


def _colour(value: float, limit: float) -> str:
    """White at 0, blue at +limit, red at -limit (RdBu's ends), linear between."""
    share = min(abs(value) / limit, 1.0) if limit > 0 else 0.0
    end = (33, 102, 172) if value > 0 else (178, 24, 43)
    red, green, blue = (round(255 + (channel - 255) * share) for channel in end)
    return f"rgb({red}, {green}, {blue})"
