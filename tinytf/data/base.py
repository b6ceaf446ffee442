"""The base class of the framings (tinytf/data/framing.py): what every architecture's
framing gives -- examples into a batch, the lengths it gives the model, typed text into a
batch, answers, where a task's alignment patterns lie -- and the parts they share.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, ClassVar

from tinytf.data.batch import (
    Alignment,
    Batch,
    Progress,
    check_length,
    encode_typed,
    prepend,
    single_pair,
)
from tinytf.lazy import torch
from tinytf.tasks.base import Pairs, Task
from tinytf.tasks.vocab import PAD_ID, Vocabulary

if TYPE_CHECKING:
    from torch import nn


# Typed inputs answered together. On 100,000 sort-decoder inputs, shortest first, on one
# thread: 125 to 2,000 at a time all took 10-11.5 s; 8,000 took 13.4 s, 100,000 16.5 s.
ANSWER_BATCH = 500


class Framing:
    """The rules of one architecture. Subclasses set `name` and implement the methods
    that raise NotImplementedError; `get_framing` picks the class."""

    name: ClassVar[str]
    # Keys of the config's task section that only some framings read (task.bos: those with a source).
    task_keys: ClassVar[tuple[str, ...]] = ()
    # Keys of the model section that only this architecture uses (per-stack depths).
    model_keys: ClassVar[tuple[str, ...]] = ()
    # False where the model answers no question (a language model continues text; `answers` refuses).
    answers_questions: ClassVar[bool] = True
    # The attention that reads the answer and the source: (stack, "self" or "cross").
    alignment_attention: ClassVar[tuple[str, str]] = ("decoder", "self")

    def __init__(self, task: Task) -> None:
        self.task = task

    @property
    def vocab(self) -> Vocabulary:
        return self.task.vocab

    @property
    def bos(self) -> int:
        """1 when a <bos> position goes before the source (task.bos), else 0."""
        return int("bos" in self.task_keys and self.task.config.bos)

    def with_bos(self, pairs: Pairs) -> Pairs:
        """The examples with <bos> put before each source when task.bos is set: source
        (B, S) -> (B, 1 + S). Framings that take it call this on every example they
        read, so examples and typed inputs never carry it themselves."""
        if not self.bos:
            return pairs
        source = prepend(pairs.source, self.vocab.bos_id)  # (B, 1 + S)
        return dataclasses.replace(pairs, source=source, source_len=pairs.source_len + 1)

    def model_lengths(self) -> tuple[int, int]:
        """The longest (tokens, source) lengths the task's examples give the model."""
        raise NotImplementedError(f"{type(self).__name__} does not define model_lengths; every framing must")

    def frame(self, pairs: Pairs) -> Batch:
        """Examples -> one padded model batch (see the module docstring)."""
        raise NotImplementedError(f"{type(self).__name__} does not define frame; every framing must")

    def added_tokens(self) -> int:
        """Tokens framing adds to a typed input before the model reads it."""
        return 0

    def alignment_origin(self, source: list[int]) -> tuple[int, int]:
        """(query, key): the position that predicts answer token 0 and the one that holds
        source token 0; answer token j and source token i lie j and i positions further."""
        raise NotImplementedError(f"{type(self).__name__} does not define alignment_origin; every framing must")

    def alignments(self, source: list[int], target: list[int], query_len: int, key_len: int) -> dict[str, Alignment]:
        """The task's alignment patterns for one example, as framed by `frame(single_pair(source, target))`
        (or typed_batch: the same layout), mapped to (query, key) positions of the attention
        maps that read the answer and the source (see the module docstring). query_len and
        key_len are those maps' sizes (T_q, T_k); pairs outside them (an answer cut at
        max_len) are dropped, and so are the queries whose pairs take every key of the map:
        any head would score 1 there (modular-add in an encoder, which reads only a and b)."""
        stack, kind = self.alignment_attention
        query_0, key_0 = self.alignment_origin(source)
        placed: dict[str, Alignment] = {}
        for pattern, pairs in self.task.alignments(source, target).items():
            positions = ((query_0 + j, key_0 + i) for j, i in pairs)
            inside = [(q, k) for q, k in positions if 0 <= q < query_len and 0 <= k < key_len]
            keys_of = Counter(q for q, _ in set(inside))
            placed[pattern] = Alignment(stack, kind, tuple((q, k) for q, k in inside if keys_of[q] < key_len))
        return placed

    def next_token_prompt(self, source: list[int]) -> list[int] | None:
        """What the model has read when it writes the token that follows typed input `source`
        (from `typed_input`): the prompt whose next token patching and attribution score.
        None where the model writes no such token: an encoder labels every position at
        once, an encoder-decoder's decoder reads the source from another stack."""
        return None

    @property
    def predicts_next_token(self) -> bool:
        """Whether the model reads a prompt and predicts the token after it (see `next_token_prompt`)."""
        return self.next_token_prompt([]) is not None

    def answers(self, model: nn.Module, pairs: Pairs) -> list[list[int]]:
        """The model's answers (ids, without <eos>) to the examples' sources (see answers_questions)."""
        raise NotImplementedError(f"{type(self).__name__} does not define answers; every framing that answers must")

    # ---- typed text (attend, predict)

    def typed_input(self, text: str, max_len: int) -> list[int]:
        """Typed text -> the ids of its source; empty text, unknown tokens and inputs
        too long for the model are `UserError`s."""
        ids = encode_typed(self.vocab, text)
        check_length(len(ids) + self.added_tokens(), max_len)
        return ids

    def length_note(self, source: list[int]) -> str | None:
        """A note when typed input `source` (from `typed_input`) is shorter or longer than
        every input the model was trained on, whose answer is then a guess; else None."""
        shortest, longest = self.task.trained_lengths
        if shortest <= len(source) <= longest:
            return None
        trained = f"{shortest} to {longest}" if shortest > 1 else f"up to {longest}"
        return (
            f"the input has {len(source)} tokens; the model was trained on inputs of {trained} tokens only, "
            "so its output may be wrong"
        )

    def typed_batch(self, model: nn.Module, text: str, target: str | None = None) -> tuple[Batch, list[int] | None]:
        """The batch of one that the model reads for typed `text`, framed as in training,
        with `target` as the answer or else the model's own. Returns it and the answer."""
        max_len = model.config.max_len
        source = self.typed_input(text, max_len)
        if target is not None:
            answer = encode_typed(self.vocab, target, what="target", argument="target")
            batch = self.frame(single_pair(source, answer))
            check_length(batch.tokens.size(1), max_len, what="the input with its --target")
            return batch, answer
        answer = self.answers(model, single_pair(source))[0]
        batch = self.frame(single_pair(source, answer))
        if batch.tokens.size(1) > max_len:
            # No <eos>: the answer's last token was written, never read back (it would not fit).
            batch = dataclasses.replace(batch, tokens=batch.tokens[:, :max_len], labels=batch.labels[:, :max_len])
        return batch, answer

    def answer_typed(
        self,
        model: nn.Module,
        sources: list[list[int]],
        batch_size: int = ANSWER_BATCH,
        progress: Progress | None = None,
    ) -> list[list[int]]:
        """Answers to typed inputs (from `typed_input`), in their order. They are answered
        shortest first, `batch_size` at a time, so that a batch holds inputs of one or two
        lengths: little padding, and few separate generation loops (a decoder runs one per
        prompt length). `progress(n)` is called as each batch of n inputs is answered."""
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        answers: list[list[int]] = [[] for _ in sources]
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            for row, answer in zip(rows, self.answer_ids(model, [sources[i] for i in rows]), strict=True):
                answers[row] = answer
            if progress is not None:
                progress(len(rows))
        return answers

    def answer_ids(self, model: nn.Module, sources: list[list[int]]) -> list[list[int]]:
        """Answers to one batch of typed inputs, given as id lists."""
        width = max(len(s) for s in sources)
        source = torch.tensor([s + [PAD_ID] * (width - len(s)) for s in sources])  # (B, S)
        no_target = torch.zeros(len(sources), 0, dtype=torch.long)  # (B, 0)
        lengths = torch.tensor([len(s) for s in sources])
        return self.answers(model, Pairs(source, lengths, no_target, torch.zeros_like(lengths)))

    def typed_example(self, pairs: Pairs, i: int) -> tuple[str, str | None]:
        """Example i as a user would type it for `typed_batch`: (text, target or None)."""
        source, target = pairs.example(i)
        return self.task.render(source), self.task.render(target)
