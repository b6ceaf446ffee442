"""sort: the source symbols in ascending order, duplicates kept."""

from __future__ import annotations

from tinytf.lazy import torch
from tinytf.tasks.base import SymbolTask
from tinytf.tasks.vocab import PAD_ID


class Sort(SymbolTask):
    name = "sort"
    description = "sort the input symbols ascending, duplicates kept: 3 1 2 1 -> 1 1 2 3"
    alignment_patterns = ("sort",)

    def alignments(self, source: list[int], target: list[int]) -> dict[str, list[tuple[int, int]]]:
        """Answer token j is the j-th smallest source symbol: it reads every source position
        holding that value (all copies of it, when it occurs more than once)."""
        ascending = sorted(s for s in source if s >= self.first_symbol_id)  # the symbols, specials left out
        pairs = []
        for j, value in enumerate(ascending[: len(target)]):
            pairs += [(j, i) for i, symbol in enumerate(source) if symbol == value]
        return {"sort": pairs}

    def targets(self, symbols: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor):
        beyond_every_symbol = self.config.vocab_size  # padding sorts last
        ordered = torch.where(valid, symbols, beyond_every_symbol).sort(dim=1).values  # (N, S)
        return torch.where(valid, ordered + self.first_symbol_id, PAD_ID), lengths
