"""add: integer addition written out digit by digit.

Source: "a + b", each number written most-significant digit first, no leading zeros
(e.g. "1 7 + 2 5" as tokens; type it as "17+25"). Target: the digits of a + b, most-
significant first with `task.answer_order: msd` (as people write it) or least-
significant first with `lsd` -- easier to learn left to right, since each digit then
depends only on digits already written and the carry. Each number has a digit count
drawn uniformly from 1..`task.digits`, then a value uniform among numbers of that size,
so short numbers are as common as long ones.
"""

from __future__ import annotations

from tinytf.lazy import torch
from tinytf.tasks.base import Pairs, Task
from tinytf.tasks.vocab import PAD_ID, Vocabulary
from tinytf.tensors import left_compact, positions_below

DIGITS = [str(d) for d in range(10)]
PLUS = "+"


def digit_count(x: torch.Tensor, max_digits: int) -> torch.Tensor:
    """(N,) ints below 10**max_digits -> (N,) number of decimal digits (0 has one)."""
    powers = 10 ** torch.arange(1, max_digits)  # (max_digits - 1,): 10, 100, ...
    return 1 + (x.unsqueeze(1) >= powers).sum(1)  # one more digit per power reached


def digits_msd_first(x: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) ints -> (N, width) digits, most significant first and left-aligned, and counts (N,)."""
    count = digit_count(x, width)
    powers = 10 ** torch.arange(width)  # (width,): 1, 10, 100, ...
    lsd_first = (x.unsqueeze(1) // powers) % 10  # (N, width): digit k is the 10^k digit
    position = torch.arange(width).unsqueeze(0)  # (1, width)
    return lsd_first.gather(1, (count.unsqueeze(1) - 1 - position).clamp(min=0)), count


class Add(Task):
    name = "add"
    description = "add two integers, digit by digit: 17+25 -> 42"
    archs = ("decoder", "encoder-decoder")
    config_keys = ("digits", "answer_order")

    def build_vocab(self) -> Vocabulary:
        return Vocabulary([*DIGITS, PLUS], split="char")

    @property
    def max_source_len(self) -> int:
        return 2 * self.config.digits + 1

    @property
    def max_target_len(self) -> int:
        return self.config.digits + 1

    def space_size(self) -> int:
        return (10**self.config.digits) ** 2

    def random_numbers(self, n: int, generator: torch.Generator) -> torch.Tensor:
        size = torch.randint(1, self.config.digits + 1, (n,), generator=generator)  # digit counts
        low = torch.where(size == 1, 0, 10 ** (size - 1))
        high = 10**size  # exclusive
        return low + (torch.rand(n, generator=generator, dtype=torch.float64) * (high - low)).long()

    def draw(self, n: int, generator: torch.Generator) -> Pairs:
        digits = self.config.digits
        a, b = self.random_numbers(n, generator), self.random_numbers(n, generator)
        a_digits, a_len = digits_msd_first(a, digits)
        b_digits, b_len = digits_msd_first(b, digits)
        digit_id = self.vocab.ids["0"]  # digits have consecutive ids
        plus = torch.full((n, 1), self.vocab.ids[PLUS])
        # "a + b" = a's digits, +, b's digits, squeezed together
        written = torch.cat([a_digits + digit_id, plus, b_digits + digit_id], dim=1)  # (N, 2*digits + 1)
        keep = torch.cat([positions_below(a_len, digits), plus > 0, positions_below(b_len, digits)], dim=1)
        source, source_len = left_compact(written, keep, PAD_ID)

        total_digits, total_len = digits_msd_first(a + b, digits + 1)  # (N, digits + 1)
        if self.config.answer_order == "lsd":
            position = torch.arange(digits + 1).unsqueeze(0)
            total_digits = total_digits.gather(1, (total_len.unsqueeze(1) - 1 - position).clamp(min=0))
        valid = positions_below(total_len, digits + 1)
        target = torch.where(valid, total_digits + digit_id, 0)
        return Pairs(source, source_len, target, total_len)
