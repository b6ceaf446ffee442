"""modular-add: addition modulo p, the task grokking was found on (Power et al., 2022).

Source "a b", two numbers below p = `task.modulus` (type it as "5 7"); target c, with
c = (a + b) mod p. The p² examples form one table: a run trains on a fixed, seeded
`task.train_fraction` of them and holds out the rest (see `TableTask`). In the decoder,
<sep> plays "=": the model reads "a b =" and writes c, as in Nanda et al. (2023); an
encoder answers c at a's position (and <eos> at b's), reading both numbers at once.
"""

from __future__ import annotations

import random
from collections import defaultdict

from tinytf.errors import UserError
from tinytf.lazy import torch
from tinytf.tasks.base import MinimalPair, Pairs, TableTask
from tinytf.tasks.vocab import Vocabulary


class ModularAdd(TableTask):
    name = "modular-add"
    description = "a b -> (a + b) mod task.modulus, trained on a fixed task.train_fraction of all pairs: 5 7 -> 12"
    config_keys = ("modulus", "train_fraction")
    max_source_len = 2
    max_target_len = 1
    alignment_patterns = ("operands",)
    constructions = ("a", "b")  # which number a minimal pair's corrupted prompt changes

    def build_vocab(self) -> Vocabulary:
        return Vocabulary([str(n) for n in range(self.config.modulus)], split="word")

    @property
    def trained_lengths(self) -> tuple[int, int]:
        return 2, 2

    def table_size(self) -> int:
        return self.config.modulus**2

    def residue_ids(self) -> torch.Tensor:
        """(p,) the token ids of 0, 1, ..., p - 1: the numbers as elements of Z_p, in order."""
        return self.vocab.ids["0"] + torch.arange(self.config.modulus)  # numbers have consecutive ids

    def alignments(self, source: list[int], target: list[int]) -> dict[str, list[tuple[int, int]]]:
        """c is computed from both numbers: the query that writes it should read a and b."""
        return {"operands": [(0, i) for i in range(len(source))] if target else []}

    def table(self) -> Pairs:
        p = self.config.modulus
        a, b = torch.arange(p).repeat_interleave(p), torch.arange(p).repeat(p)  # (p²,) every pair, a-major
        first = self.vocab.ids["0"]
        source = torch.stack([a, b], dim=1) + first  # (p², 2)
        target = ((a + b) % p + first).unsqueeze(1)  # (p², 1)
        return Pairs(source, torch.full((p * p,), 2), target, torch.ones(p * p, dtype=torch.long))

    def draw_pairs(self, construction: str, n: int, seed: int, held_out: Pairs | None) -> list[MinimalPair]:
        """`n` minimal pairs from `held_out`, the run's held-out examples, in their order: "a b"
        and the same with another `construction` number, drawn with `seed` from those held
        out too; the answers are their sums."""
        if held_out is None:
            raise ValueError("modular-add draws its pairs from held_out, the run's held-out examples")
        p, changed = self.config.modulus, self.constructions.index(construction)
        examples = (held_out.source[:, :2] - self.vocab.ids["0"]).tolist()  # [[a, b], ...]
        sharing: dict[int, list[list[int]]] = defaultdict(list)  # the number kept -> the examples with it
        for numbers in examples:
            sharing[numbers[1 - changed]].append(numbers)
        rng, pairs = random.Random(seed), []
        for clean in examples:
            if partners := [other for other in sharing[clean[1 - changed]] if other[changed] != clean[changed]]:
                corrupt = rng.choice(partners)
                text = [" ".join(map(str, numbers)) for numbers in (clean, corrupt)]
                pairs.append(MinimalPair(*text, str(sum(clean) % p), str(sum(corrupt) % p)))
            if len(pairs) == n:
                return pairs
        raise UserError(
            f"only {len(pairs)} pairs that change {construction} among the run's {len(examples)} held-out examples: "
            "lower --pairs, or hold out more (task.train_fraction, task.eval_size)"
        )
