"""How a language model is framed: sequences with no source, each position predicting the
next token (`language-model` in tinytf/data/framing.py's docstring); a decoder only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinytf.data.batch import (
    IGNORE,
    Batch,
    check_length,
    encode_typed,
)
from tinytf.errors import NotApplicableError, UserError
from tinytf.lazy import torch
from tinytf.model.generation import generate_each
from tinytf.tasks.base import Pairs
from tinytf.tensors import positions_below

if TYPE_CHECKING:
    from torch import nn

from tinytf.data.base import Framing

LM_CONTINUATION = 20  # tokens a language model writes after a prompt, at most


class LanguageModelFraming(Framing):
    """Next-token prediction over one sequence (a decoder's job); typed text is a prompt
    that the model continues."""

    name = "language-model"
    answers_questions = False

    def alignment_origin(self, source: list[int]) -> tuple[int, int]:
        return -1, 0  # position j - 1 predicts token j; token i is read at position i

    def model_lengths(self) -> tuple[int, int]:
        return self.task.max_target_len - 1, 0

    def frame(self, pairs: Pairs) -> Batch:
        width = int(pairs.target_len.max())
        sequence = pairs.target[:, :width]  # (B, L)
        labels = sequence[:, 1:].masked_fill(~positions_below(pairs.target_len - 1, width - 1), IGNORE)
        given = self.task.given_lengths(pairs)  # (N,) or None
        if given is not None:  # position j predicts token j + 1: nothing to score while j + 1 < given
            labels = labels.masked_fill(positions_below(given - 1, width - 1), IGNORE)
        return Batch(sequence[:, :-1], labels)  # position j reads token j, predicts token j + 1

    def typed_input(self, text: str, max_len: int) -> list[int]:
        ids = encode_typed(self.vocab, text)
        prompt = [self.vocab.bos_id, *ids] if self.task.starts_with_bos else ids
        check_length(len(prompt), max_len)
        return prompt

    def next_token_prompt(self, source: list[int]) -> list[int]:
        return source  # the text as typed, <bos> included: its next word is what follows

    def length_note(self, source: list[int]) -> str | None:
        return super().length_note(source[1:] if self.task.starts_with_bos else source)  # words, not <bos>

    def answers(self, model: nn.Module, pairs: Pairs) -> list[list[int]]:
        raise NotApplicableError(
            "a language model answers no question, it continues text: continue prompts with "
            "tinytf.evaluate.predict(model, framing, texts), as `tinytf predict` does, or, as ids, with "
            "framing.answer_typed(model, [framing.typed_input(text, model.config.max_len)])"
        )

    def typed_batch(self, model: nn.Module, text: str, target: str | None = None) -> tuple[Batch, list[int] | None]:
        if target is not None:
            raise UserError("--target: a language model has no answer to impose; it reads TEXT as it is")
        ids = self.typed_input(text, model.config.max_len)
        return Batch(torch.tensor([ids]), torch.full((1, len(ids)), IGNORE)), None

    def answer_ids(self, model: nn.Module, sources: list[list[int]]) -> list[list[int]]:
        """Each prompt's continuation: until <eos>, at most LM_CONTINUATION tokens, and
        only as far as the model can read (model.max_len tokens, the prompt included)."""
        return generate_each(model, sources, LM_CONTINUATION, self.vocab.eos_id)

    def typed_example(self, pairs: Pairs, i: int) -> tuple[str, str | None]:
        return self.task.render(pairs.example(i)[1]), None
