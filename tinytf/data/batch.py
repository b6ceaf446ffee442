"""What a framing gives the model: a `Batch` of ids and labels, the `Alignment` of a task's
pattern in the attention maps, and the helpers that build them from examples and typed text.

Shape legend: B batch, T model input length, S source length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tinytf import arguments
from tinytf.errors import UserError
from tinytf.lazy import torch
from tinytf.tasks.base import Pairs
from tinytf.tasks.vocab import PAD_ID, Vocabulary

IGNORE = -100  # the label of positions the loss skips (torch's cross_entropy default)

Progress = Callable[[int], None]  # told how many more inputs are done


@dataclass(frozen=True)
class Batch:
    tokens: torch.Tensor  # (B, T) model input ids
    labels: torch.Tensor  # (B, T) the id each position should predict, or IGNORE
    pad_mask: torch.Tensor | None = None  # (B, T) True at PAD keys, when they must be masked
    source: torch.Tensor | None = None  # (B, S) encoder input, encoder-decoder only
    source_pad_mask: torch.Tensor | None = None  # (B, S) True at PAD source positions

    def to(self, device: torch.device | str) -> Batch:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return Batch(
            move(self.tokens), move(self.labels), move(self.pad_mask), move(self.source), move(self.source_pad_mask)
        )

    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        """Keyword arguments for `model(**batch.model_inputs())`."""
        return {
            "tokens": self.tokens,
            "source": self.source,
            "pad_mask": self.pad_mask,
            "source_pad_mask": self.source_pad_mask,
        }

    @property
    def n_tokens(self) -> int:
        """Non-padding positions the model processes (for tokens/s)."""
        count = int((self.tokens != PAD_ID).sum())
        return count + (int((self.source != PAD_ID).sum()) if self.source is not None else 0)


@dataclass(frozen=True)
class Alignment:
    """Where a task's alignment pattern lies in one framed example's attention maps."""

    stack: str  # "encoder" or "decoder": the stack whose attention it applies to
    kind: str  # "self" or "cross"
    pairs: tuple[tuple[int, int], ...]  # (query position, key position) in that attention map


def prepend(t: torch.Tensor, value: int | bool) -> torch.Tensor:
    """(B, L) -> (B, 1 + L) with `value` in front of every row."""
    return torch.cat([torch.full((t.size(0), 1), value, dtype=t.dtype, device=t.device), t], dim=1)


def encode_typed(vocab: Vocabulary, text: str, what: str = "input", argument: str = "text") -> list[int]:
    """Typed text -> ids; empty input and unknown tokens are `UserError`s saying `what` it
    is, and text that is not a string a TypeError naming the caller's `argument`."""
    arguments.instance(text, argument, str, "typed text (a string)")
    ids = vocab.encode(text)
    if not ids:
        raise UserError(f"the {what} is empty")
    return ids


def check_length(length: int, max_len: int, what: str = "the input") -> None:
    """A `UserError` if the model would have to read more than `max_len` tokens."""
    if length > max_len:
        raise UserError(f"{what} makes {length} tokens; this model reads at most model.max_len={max_len}")


def single_pair(source: list[int], target: list[int] | None = None) -> Pairs:
    """One example as `Pairs` (an empty target when none is known yet)."""
    target = target or []
    target_ids = torch.tensor([target]) if target else torch.zeros(1, 0, dtype=torch.long)
    return Pairs(torch.tensor([source]), torch.tensor([len(source)]), target_ids, torch.tensor([len(target)]))


def append_eos(pairs: Pairs, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """target (B, T) -> target with <eos> written after each row's last token (B, T+1), lengths + 1."""
    extended = torch.nn.functional.pad(pairs.target, (0, 1), value=PAD_ID)
    extended.scatter_(1, pairs.target_len.unsqueeze(1), eos_id)
    return extended, pairs.target_len + 1


def pad_or_cut(t: torch.Tensor, width: int) -> torch.Tensor:
    if t.size(1) >= width:
        return t[:, :width]
    return torch.nn.functional.pad(t, (0, width - t.size(1)), value=PAD_ID)
