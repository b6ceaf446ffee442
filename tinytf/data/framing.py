"""Framing: how a task's examples become model input and model output becomes answers,
one class per architecture. Every rule that depends on `model.arch` lives here.

Shape legend: B batch, T model input length, S source length.

How (source, target) becomes model input:

    encoder          tokens  = [<bos>] s1 s2 s3            one prediction per position:
                     labels  =  [-]    t1 t2 t3            the target has the source's length
                                                           (a shorter one is filled with <eos>)
    decoder          tokens  = [<bos>] s1 s2 <sep> t1 t2   one causal sequence; only the
                     labels  =  [-]    -  -  t1   t2 <eos> answer is scored
    encoder-decoder  source  = [<bos>] s1 s2 s3            the encoder reads the source,
                     tokens  = <bos> t1 t2                 the decoder writes the answer
                     labels  = t1    t2 <eos>
    language-model   tokens  = w1 w2 w3, labels = w2 w3 w4 (next-token prediction; decoder only)

[<bos>]: with task.bos, a <bos> position before the source, read and never scored: a
place for heads with nothing to find to rest, and one whose share of a head's attention
tells how many positions matched (how counting heads count). The encoder-decoder's
decoder always starts from <bos>: that one is its start token, not task.bos.

Labels are IGNORE (-100) where nothing is scored: padding and, for the decoder, the
question. Sequences pad with <pad> to the batch's longest. Encoders (and the source of
an encoder-decoder) mask padded keys; a causal decoder with padding only at the end
needs no mask: no real position ever looks at a later one.

And how the model answers: an encoder predicts every position at once (argmax, cut at
the first <eos>); a decoder and an encoder-decoder generate greedily, feeding each
token back in, with a key/value cache; a language model continues the text.

Where a task's alignment patterns lie (`Task.alignments`: "to write answer token j, read
source token i") in the attention maps: answer token j's prediction is the query, source
token i the key (j and i count from 0; n: the source's length; bos: 1 with task.bos):

    encoder          encoder self-attention    (j + bos, i + bos)
    decoder          decoder self-attention    (bos + n + j, bos + i)   <sep> predicts t1
    encoder-decoder  decoder cross-attention   (j, bos + i)             <bos> predicts t1
    language-model   decoder self-attention    (j - 1, i)      both index the sequence

    framing = get_framing(task, config.model.arch)
    batch = framing.frame(pairs)                  # training and evaluation
    answers = framing.answers(model, pairs)       # what the model says, as ids (not a language model's)
    batch, answer = framing.typed_batch(model, "3 1 2")   # typed text -> the batch `attend` feeds the model
    framing.length_note(framing.typed_input("3 1 2", max_len))  # None, or: outside the trained lengths
    framing.alignments(source, target, T_q, T_k)  # the task's alignment patterns, as attention positions

Adding an architecture is one class and one line in FRAMINGS.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, ClassVar

from tinytf.data.batch import (
    IGNORE,
    Alignment,
    Batch,
    Progress,
    append_eos,
    check_length,
    encode_typed,
    pad_or_cut,
    prepend,
    single_pair,
)
from tinytf.device import model_device
from tinytf.errors import NotApplicableError, UserError
from tinytf.lazy import torch
from tinytf.model.generation import cut_at_eos, eval_mode, generate_each, greedy_generate
from tinytf.tasks.base import Pairs, Task, left_compact, positions_below
from tinytf.tasks.vocab import PAD_ID, Vocabulary

if TYPE_CHECKING:
    from torch import nn

LM_CONTINUATION = 20  # tokens a language model writes after a prompt, at most
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
            answer = encode_typed(self.vocab, target, what="target")
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


class EncoderFraming(Framing):
    """One bidirectional pass; a prediction per source position (plus an optional <bos>)."""

    name = "encoder"
    task_keys = ("bos",)
    alignment_attention = ("encoder", "self")

    def model_lengths(self) -> tuple[int, int]:
        return self.task.max_source_len + self.bos, 0

    def added_tokens(self) -> int:
        return self.bos  # the leading <bos> position

    def alignment_origin(self, source: list[int]) -> tuple[int, int]:
        return self.bos, self.bos  # position bos + j reads source token j and predicts answer token j

    def frame(self, pairs: Pairs) -> Batch:
        if bool((pairs.target_len > pairs.source_len).any()):
            raise ValueError(f"task {self.task.name!r}: a target longer than its source cannot be framed per position")
        width = int(pairs.source_len.max())
        in_source = positions_below(pairs.source_len, width)  # (B, S)
        tokens = pairs.source[:, :width]
        # Per-position labels: the target, then <eos> for positions past a shorter target.
        labels = pad_or_cut(pairs.target, width)
        labels = torch.where(positions_below(pairs.target_len, width), labels, self.vocab.eos_id)
        labels = labels.masked_fill(~in_source, IGNORE)
        if self.bos:  # <bos> s1 s2 ..., its label IGNORE (as with_bos, with the labels kept in step)
            tokens = prepend(tokens, self.vocab.bos_id)
            labels = prepend(labels, IGNORE)
            in_source = prepend(in_source, True)
        return Batch(tokens, labels, pad_mask=~in_source)

    def answers(self, model: nn.Module, pairs: Pairs) -> list[list[int]]:
        if len(pairs) == 0:
            return []
        with eval_mode(model):
            batch = self.frame(pairs).to(model_device(model))
            predicted = model(**batch.model_inputs()).argmax(-1).tolist()  # (B, T)
        offset = self.added_tokens()
        return [
            cut_at_eos(row[offset : offset + length], self.vocab.eos_id)
            for row, length in zip(predicted, pairs.source_len.tolist(), strict=True)
        ]

    def typed_batch(self, model: nn.Module, text: str, target: str | None = None) -> tuple[Batch, list[int] | None]:
        if target is not None:
            raise UserError("--target: an encoder answers every position at once from the input alone; drop --target")
        source = self.typed_input(text, model.config.max_len)
        return self.frame(single_pair(source)), None

    def typed_example(self, pairs: Pairs, i: int) -> tuple[str, str | None]:
        return self.task.render(pairs.example(i)[0]), None


class DecoderFraming(Framing):
    """Question and answer in one causal sequence: `[<bos>] source <sep> target <eos>`."""

    name = "decoder"
    task_keys = ("bos",)

    def model_lengths(self) -> tuple[int, int]:
        # [<bos>] source <sep> target (<eos> is a label)
        return self.bos + self.task.max_source_len + 1 + self.task.max_target_len, 0

    def added_tokens(self) -> int:
        return self.bos + 1  # [<bos>] before the question, <sep> after it

    def alignment_origin(self, source: list[int]) -> tuple[int, int]:
        # [<bos>] s1..sn <sep> t1..: <sep> (position bos + n) predicts answer token 0
        return self.bos + len(source), self.bos

    def typed_input(self, text: str, max_len: int) -> list[int]:
        """As `Framing.typed_input`, and the answer must fit too: the model reads
        `[<bos>] source <sep>`, then each token of its answer as it writes it (never <eos>)."""
        ids = super().typed_input(text, max_len)
        answer, added = self.task.max_target_len, self.added_tokens()
        if len(ids) + added + answer > max_len:
            framing_tokens = "<bos>, <sep>" if self.bos else "<sep>"
            raise UserError(
                f"the input has {len(ids)} tokens; with {framing_tokens} and its answer (up to {answer} tokens) "
                f"this model's max_len={max_len} leaves room for inputs of up to {max_len - added - answer}"
            )
        return ids

    def frame(self, pairs: Pairs) -> Batch:
        pairs = self.with_bos(pairs)  # [<bos>] s1 .. sn: the question the model reads
        with_eos, target_len = append_eos(pairs, self.vocab.eos_id)  # (B, T+1): t1 .. tn <eos>
        # source <sep> target <eos>, squeezed together, as one sequence
        sep = torch.full((len(pairs), 1), self.vocab.sep_id)
        joined = torch.cat([pairs.source, sep, with_eos], dim=1)
        in_source = positions_below(pairs.source_len, pairs.source.size(1))
        keep = torch.cat([in_source, sep > 0, positions_below(target_len, with_eos.size(1))], dim=1)
        sequence, length = left_compact(joined, keep)
        width = int(length.max())
        # Position j reads token j and predicts token j + 1; the final <eos> is never read.
        in_input = positions_below(length - 1, width - 1)  # (B, T)
        tokens = sequence[:, : width - 1].masked_fill(~in_input, PAD_ID)
        # Score position j only if the token it predicts is part of the answer.
        answer = (torch.arange(width - 1).unsqueeze(0) >= pairs.source_len.unsqueeze(1)) & in_input
        return Batch(tokens, sequence[:, 1:width].masked_fill(~answer, IGNORE))

    def answers(self, model: nn.Module, pairs: Pairs) -> list[list[int]]:
        return self.answer_ids(model, [pairs.example(i)[0] for i in range(len(pairs))])

    def answer_ids(self, model: nn.Module, sources: list[list[int]]) -> list[list[int]]:
        prompts = [self.question_prompt(source) for source in sources]
        return generate_each(model, prompts, self.task.max_target_len + 1, self.vocab.eos_id)  # answer + <eos>

    def question_prompt(self, source: list[int]) -> list[int]:
        """`[<bos>] source <sep>`: what the model has read when it writes the answer's first token."""
        return [*[self.vocab.bos_id] * self.bos, *source, self.vocab.sep_id]


class EncoderDecoderFraming(Framing):
    """The encoder reads the source; the decoder writes `<bos> target` and predicts `target <eos>`."""

    name = "encoder-decoder"
    task_keys = ("bos",)
    model_keys = ("n_encoder_layers", "n_decoder_layers")
    alignment_attention = ("decoder", "cross")

    def added_tokens(self) -> int:
        return self.bos  # [<bos>] before the source

    def alignment_origin(self, source: list[int]) -> tuple[int, int]:
        # decoder position j (<bos> t1..) predicts answer token j; encoder position bos + i is source token i
        return 0, self.bos

    def model_lengths(self) -> tuple[int, int]:
        return self.task.max_target_len + 1, self.bos + self.task.max_source_len  # <bos> target | [<bos>] source

    def frame(self, pairs: Pairs) -> Batch:
        pairs = self.with_bos(pairs)  # the source the encoder reads: [<bos>] s1 .. sn
        with_eos, target_len = append_eos(pairs, self.vocab.eos_id)  # (B, T+1): t1 .. tn <eos>
        source_width = int(pairs.source_len.max())
        width = int(target_len.max())
        in_target = positions_below(target_len, width)  # (B, T)
        tokens = prepend(with_eos[:, : width - 1], self.vocab.bos_id).masked_fill(~in_target, PAD_ID)  # <bos> t1..tn
        labels = with_eos[:, :width].masked_fill(~in_target, IGNORE)
        source_pad_mask = ~positions_below(pairs.source_len, source_width)  # (B, S)
        return Batch(tokens, labels, source=pairs.source[:, :source_width], source_pad_mask=source_pad_mask)

    def answers(self, model: nn.Module, pairs: Pairs) -> list[list[int]]:
        if len(pairs) == 0:
            return []
        # Encode once; the decoder starts from <bos> and attends to the (padded) source.
        pairs = self.with_bos(pairs)
        device = model_device(model)
        width = int(pairs.source_len.max())
        source = pairs.source[:, :width].to(device)  # (B, S)
        source_pad_mask = (~positions_below(pairs.source_len, width)).to(device)  # (B, S)
        with eval_mode(model):
            context, _ = model.encode(source, source_pad_mask)  # (B, S, D)
        start = torch.full((len(pairs), 1), self.vocab.bos_id)
        max_new = self.task.max_target_len + 1
        return greedy_generate(model, start, max_new, self.vocab.eos_id, context, source_pad_mask)


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

    def length_note(self, source: list[int]) -> str | None:
        return super().length_note(source[1:] if self.task.starts_with_bos else source)  # words, not <bos>

    def answers(self, model: nn.Module, pairs: Pairs) -> list[list[int]]:
        raise NotApplicableError(
            "a language model answers no question, it continues text: continue prompts with "
            "tinytf.inspect.evaluate.predict(model, framing, texts), as `tinytf predict` does, or, as ids, with "
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


FRAMINGS: dict[str, type[Framing]] = {
    framing.name: framing for framing in (EncoderFraming, DecoderFraming, EncoderDecoderFraming, LanguageModelFraming)
}


def get_framing(task: Task, arch: str) -> Framing:
    """How `task` is framed for `arch`: by the architecture, or as a language model."""
    return FRAMINGS["language-model" if task.language_model else arch](task)
