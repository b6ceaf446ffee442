"""sort: the source symbols in ascending order, duplicates kept."""

from __future__ import annotations

from tinytf.lazy import torch
from tinytf.tasks.base import SymbolTask
from tinytf.tasks.vocab import PAD_ID


class Sort(SymbolTask):
    name = "sort"
    description = "sort the input symbols ascending, duplicates kept: 3 1 2 1 -> 1 1 2 3"

    def targets(self, symbols: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor):
        beyond_every_symbol = self.config.vocab_size  # padding sorts last
        ordered = torch.where(valid, symbols, beyond_every_symbol).sort(dim=1).values  # (N, S)
        return torch.where(valid, ordered + self.first_symbol_id, PAD_ID), lengths
