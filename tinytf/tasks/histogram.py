"""histogram and double-histogram: counting tasks from "Thinking Like Transformers"
(Weiss et al., 2021). Outputs are counts, written as the tokens "1", "2", ...

The input symbols are letters ("a", "b", ...), not digits, so that a count can never be
mistaken for a symbol: a decoder reads its own answers back, and a head looking for
"the other copies of symbol 2" must not find the count 2.
"""

from __future__ import annotations

import itertools
import string
from functools import cached_property

from tinytf.lazy import torch
from tinytf.tasks.base import SymbolTask
from tinytf.tasks.vocab import PAD, PAD_ID


def token_counts(symbols: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(N, S) -> (N, S): how often each position's symbol occurs in its (valid part of the) row."""
    same = symbols.unsqueeze(2) == symbols.unsqueeze(1)  # (N, S, S): symbol i == symbol j
    return (same & valid.unsqueeze(1)).sum(2)  # count the valid j


def letter_names(n: int) -> list[str]:
    """a, b, ..., z, then aa, ab, ...: n distinct lowercase names."""
    names: list[str] = []
    for length in itertools.count(1):
        names += ["".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=length)]
        if len(names) >= n:
            return names[:n]
    raise AssertionError("unreachable")


class Histogram(SymbolTask):
    name = "histogram"
    description = "per position, how often its symbol occurs in the input: c a c b -> 2 1 2 1"
    alignment_patterns = ("histogram",)

    def symbols(self) -> list[str]:
        return letter_names(self.config.vocab_size)

    def alignments(self, source: list[int], target: list[int]) -> dict[str, list[tuple[int, int]]]:
        """The count at position j counts the positions holding source[j]: it reads all of
        them, j itself included."""
        pairs = []
        for j in range(min(len(target), len(source))):
            if source[j] >= self.first_symbol_id:  # a symbol, not a special token
                pairs += [(j, i) for i, symbol in enumerate(source) if symbol == source[j]]
        return {"histogram": pairs}

    @cached_property
    def count_id(self) -> torch.Tensor:
        return self.token_ids([PAD, *self.output_tokens()])  # count c -> id of the token "c"

    def output_tokens(self) -> list[str]:
        return [str(count) for count in range(1, self.config.max_len + 1)]

    def targets(self, symbols: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor):
        counts = token_counts(symbols, valid)  # (N, S)
        return torch.where(valid, self.count_id[counts], PAD_ID), lengths


class DoubleHistogram(Histogram):
    name = "double-histogram"
    description = "per position, how many distinct symbols occur as often as its symbol does: 3 1 3 2 -> 1 2 1 2"
    alignment_patterns = ()  # not histogram's: a count of counts needs every symbol's count

    def alignments(self, source: list[int], target: list[int]) -> dict[str, list[tuple[int, int]]]:
        """None: each answer needs the count of every symbol, so it reads every position."""
        return {}

    def targets(self, symbols: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor):
        counts = token_counts(symbols, valid)  # (N, S)
        # Positions whose symbol has count c: c per distinct symbol with that count. So the
        # number of distinct symbols with count c = (#positions with count c) / c.
        same_count = (counts.unsqueeze(2) == counts.unsqueeze(1)) & valid.unsqueeze(1)  # (N, S, S)
        distinct = same_count.sum(2) // counts.clamp(min=1)  # (N, S)
        return torch.where(valid, self.count_id[distinct], PAD_ID), lengths
