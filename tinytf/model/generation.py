"""How a decoder answers: greedy decoding with a key/value cache, in eval mode."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinytf.device import eval_mode, model_device
from tinytf.lazy import torch

if TYPE_CHECKING:
    from torch import nn


def greedy_generate(
    model: nn.Module,
    prompt: torch.Tensor,
    max_new: int,
    eos_id: int,
    context: torch.Tensor | None = None,
    source_pad_mask: torch.Tensor | None = None,
    use_cache: bool = True,
) -> list[list[int]]:
    """Greedy decoding: append the most likely token to prompt (B, P) until every row has
    produced <eos>, or max_new tokens, or the sequence fills the model's max_len. Returns
    each row's new tokens before <eos>. `context` (B, S, D) and `source_pad_mask` (B, S):
    the encoded source that cross-attention reads (encoder-decoder).

    With `use_cache`, the prompt runs once and each later step feeds only the newest token,
    attending to the cached keys and values of the others: the same answers as
    recomputing the whole sequence (`use_cache=False`), in time linear, not quadratic.
    """
    cache = model.new_cache() if use_cache else None
    sequence = prompt.to(model_device(model))
    finished = torch.zeros(prompt.size(0), dtype=torch.bool, device=sequence.device)
    fed = sequence
    with eval_mode(model):
        while True:
            logits, _ = model.decode(fed, context=context, source_pad_mask=source_pad_mask, cache=cache)
            next_token = logits[:, -1].argmax(-1)  # (B,)
            sequence = torch.cat([sequence, next_token.unsqueeze(1)], dim=1)  # (B, P + generated)
            finished |= next_token == eos_id
            generated = sequence.size(1) - prompt.size(1)
            if bool(finished.all()) or generated == max_new or sequence.size(1) > model.config.max_len:
                break
            fed = next_token.unsqueeze(1) if use_cache else sequence
    return [cut_at_eos(row, eos_id) for row in sequence[:, prompt.size(1) :].tolist()]


def cut_at_eos(ids: list[int], eos_id: int) -> list[int]:
    """An answer up to (not including) its first <eos>; all of it if there is none."""
    return ids[: ids.index(eos_id)] if eos_id in ids else ids


def generate_each(model: nn.Module, prompts: list[list[int]], max_new: int, eos_id: int) -> list[list[int]]:
    """`greedy_generate` for prompts of any lengths: prompts of equal length run together,
    so none is padded (a padded prompt would need a mask the cache does not keep)."""
    answers: list[list[int]] = [[] for _ in prompts]
    for length in sorted({len(p) for p in prompts}):
        rows = [i for i, p in enumerate(prompts) if len(p) == length]
        batch = torch.tensor([prompts[i] for i in rows])  # (rows, length)
        for row, answer in zip(rows, greedy_generate(model, batch, max_new, eos_id), strict=True):
            answers[row] = answer
    return answers
