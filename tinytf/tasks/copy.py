"""copy: repeat the source. The attention pattern to look for: each output position
attends to the same position of the source (a diagonal)."""

from __future__ import annotations

from tinytf.lazy import torch
from tinytf.tasks.base import SymbolTask


class Copy(SymbolTask):
    name = "copy"
    description = "repeat the input symbols: 3 1 2 -> 3 1 2"
    alignment_patterns = ("copy",)

    def alignments(self, source: list[int], target: list[int]) -> dict[str, list[tuple[int, int]]]:
        """Answer token j is source token j."""
        return {"copy": [(j, j) for j in range(min(len(target), len(source)))]}

    def targets(self, symbols: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor):
        source = torch.where(valid, symbols + self.first_symbol_id, 0)  # (N, S)
        return source, lengths
