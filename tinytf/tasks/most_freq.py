"""most-freq: the distinct symbols of the source, most frequent first."""

from __future__ import annotations

from tinytf.lazy import torch
from tinytf.tasks.base import SymbolTask
from tinytf.tasks.vocab import PAD_ID
from tinytf.tensors import left_compact


class MostFrequent(SymbolTask):
    name = "most-freq"
    description = "the distinct input symbols by descending count, ties by first occurrence: 3 1 2 1 2 -> 1 2 3"

    def targets(self, symbols: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor):
        n, width = symbols.shape
        vocab_size = self.config.vocab_size
        # Per symbol value v: its count and its first position (width if absent).
        counts = torch.zeros(n, vocab_size, dtype=torch.long).scatter_add_(1, symbols, valid.long())  # (N, V)
        position = torch.arange(width).expand(n, width)
        first = torch.full((n, vocab_size), width).scatter_reduce_(
            1, symbols, torch.where(valid, position, width), reduce="amin"
        )  # (N, V)
        # Sort by count descending, then first occurrence ascending; absent symbols last.
        rank_key = -counts * (width + 1) + first  # (N, V)
        order = rank_key.argsort(dim=1)  # (N, V): symbol values, best first
        present = counts.gather(1, order) > 0  # (N, V)
        ranked, n_distinct = left_compact(order + self.first_symbol_id, present, PAD_ID)
        return ranked[:, : min(width, vocab_size)], n_distinct

    @property
    def max_target_len(self) -> int:
        return min(self.config.max_len, self.config.vocab_size)
