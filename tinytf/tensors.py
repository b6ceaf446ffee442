"""Tensor helpers the tasks and the framings share: masks of the positions below a length,
and rows compacted to the front."""

from __future__ import annotations

from tinytf.lazy import torch


def positions_below(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """(N,) lengths -> (N, width) bool, True at positions < length."""
    return torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)


def left_compact(values: torch.Tensor, keep: torch.Tensor, fill: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Move each row's kept entries to the front, in order, and `fill` the rest.

    values, keep: (N, L) -> compacted (N, L), counts (N,).
    """
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)  # kept first, order preserved
    compacted = values.gather(1, order)
    counts = keep.sum(1)
    return compacted.masked_fill(~positions_below(counts, values.size(1)), fill), counts
