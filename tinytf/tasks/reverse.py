"""reverse: the source read backwards. Look for an anti-diagonal in the attention maps."""

from __future__ import annotations

from tinytf.lazy import torch
from tinytf.tasks.base import SymbolTask
from tinytf.tasks.vocab import PAD_ID


class Reverse(SymbolTask):
    name = "reverse"
    description = "reverse the input symbols: 3 1 2 -> 2 1 3"
    alignment_patterns = ("reverse",)

    def alignments(self, source: list[int], target: list[int]) -> dict[str, list[tuple[int, int]]]:
        """Answer token j is source token n - 1 - j, for a source of n tokens."""
        n = len(source)
        return {"reverse": [(j, n - 1 - j) for j in range(min(len(target), n))]}

    def targets(self, symbols: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor):
        position = torch.arange(symbols.size(1)).unsqueeze(0)  # (1, S)
        mirrored = (lengths.unsqueeze(1) - 1 - position).clamp(min=0)  # (N, S): length-1-i
        reversed_symbols = symbols.gather(1, mirrored)  # (N, S)
        return torch.where(valid, reversed_symbols + self.first_symbol_id, PAD_ID), lengths
