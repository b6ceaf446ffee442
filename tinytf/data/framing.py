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

from typing import TYPE_CHECKING

from tinytf.data.base import Framing
from tinytf.data.batch import (
    IGNORE,
    Batch,
    append_eos,
    pad_or_cut,
    prepend,
    single_pair,
)
from tinytf.data.language_model import LanguageModelFraming
from tinytf.device import eval_mode, model_device
from tinytf.errors import UserError
from tinytf.lazy import torch
from tinytf.model.generation import cut_at_eos, generate_each, greedy_generate
from tinytf.tasks.base import Pairs, Task
from tinytf.tasks.vocab import PAD_ID
from tinytf.tensors import left_compact, positions_below

if TYPE_CHECKING:
    from torch import nn


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
        sequence, length = left_compact(joined, keep, PAD_ID)
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
        prompts = [self.next_token_prompt(source) for source in sources]
        return generate_each(model, prompts, self.task.max_target_len + 1, self.vocab.eos_id)  # answer + <eos>

    def next_token_prompt(self, source: list[int]) -> list[int]:
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


FRAMINGS: dict[str, type[Framing]] = {
    framing.name: framing for framing in (EncoderFraming, DecoderFraming, EncoderDecoderFraming, LanguageModelFraming)
}


def get_framing(task: Task, arch: str) -> Framing:
    """How `task` is framed for `arch`: by the architecture, or as a language model."""
    return FRAMINGS["language-model" if task.language_model else arch](task)
