"""From task examples to model batches: framing per architecture, padding, and a
seeded training stream that never repeats a held-out example.

Shape legend: B batch, T model input length, S source length.

How (source, target) becomes model input, by `model.arch`:

    encoder          tokens  = [<bos>] s1 s2 s3            one prediction per position:
                     labels  =  [-]    t1 t2 t3            the target has the source's length
                                                           (a shorter one is filled with <eos>)
    decoder          tokens  = s1 s2 <sep> t1 t2           one causal sequence; only the
                     labels  =  -  -  t1   t2 <eos>        answer is scored
    encoder-decoder  source  = s1 s2 s3                    the encoder reads the source,
                     tokens  = <bos> t1 t2                 the decoder writes the answer
                     labels  = t1    t2 <eos>
    language model   tokens  = w1 w2 w3, labels = w2 w3 w4 (next-token prediction; decoder only)

Labels are IGNORE (-100) where nothing is scored: padding and, for the decoder, the
question. Sequences pad with <pad> to the batch's longest. Encoders (and the source of
an encoder-decoder) mask padded keys; a causal decoder with padding only at the end
needs no mask: no real position ever looks at a later one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tinytf.errors import UserError
from tinytf.tasks.base import Pairs, Task, left_compact, positions_below
from tinytf.tasks.vocab import PAD_ID

IGNORE = -100  # the label of positions the loss skips (torch's cross_entropy default)


@dataclass(frozen=True)
class Batch:
    tokens: torch.Tensor  # (B, T) model input ids
    labels: torch.Tensor  # (B, T) the id each position should predict, or IGNORE
    pad_mask: torch.Tensor | None = None  # (B, T) True at PAD keys, when they must be masked
    source: torch.Tensor | None = None  # (B, S) encoder input, encoder-decoder only
    source_pad_mask: torch.Tensor | None = None  # (B, S)

    def to(self, device: torch.device | str) -> Batch:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return Batch(move(self.tokens), move(self.labels), move(self.pad_mask), move(self.source),
                     move(self.source_pad_mask))  # fmt: skip

    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        """Keyword arguments for `model(**batch.model_inputs())`."""
        return {"tokens": self.tokens, "source": self.source, "pad_mask": self.pad_mask,
                "source_pad_mask": self.source_pad_mask}  # fmt: skip

    @property
    def n_tokens(self) -> int:
        """Non-padding positions the model processes (for tokens/s)."""
        count = int((self.tokens != PAD_ID).sum())
        return count + (int((self.source != PAD_ID).sum()) if self.source is not None else 0)


def model_lengths(task: Task, arch: str) -> tuple[int, int]:
    """The longest (tokens, source) lengths that `task` framed for `arch` gives the model."""
    if task.language_model:
        return task.max_target_len - 1, 0
    if arch == "encoder":
        return task.max_source_len + int(task.config.bos), 0
    if arch == "decoder":
        return task.max_source_len + task.max_target_len + 1, 0  # source <sep> target (<eos> is a label)
    return task.max_target_len + 1, task.max_source_len  # <bos> target | source


def frame(pairs: Pairs, task: Task, arch: str) -> Batch:
    """Turn examples into one padded model batch for `arch` (see the module docstring)."""
    vocab = task.vocab
    if task.language_model:
        width = int(pairs.target_len.max())
        sequence = pairs.target[:, :width]
        labels = sequence[:, 1:].masked_fill(~positions_below(pairs.target_len - 1, width - 1), IGNORE)
        return Batch(sequence[:, :-1], labels)

    if arch == "encoder":
        if bool((pairs.target_len > pairs.source_len).any()):
            raise ValueError(f"task {task.name!r}: a target longer than its source cannot be framed per position")
        width = int(pairs.source_len.max())
        in_source = positions_below(pairs.source_len, width)  # (B, S)
        tokens = pairs.source[:, :width]
        # Per-position labels: the target, then <eos> for positions past a shorter target.
        labels = _pad_or_cut(pairs.target, width)
        labels = torch.where(positions_below(pairs.target_len, width), labels, vocab.eos_id)
        labels = labels.masked_fill(~in_source, IGNORE)
        if task.config.bos:
            tokens = _prepend(tokens, vocab.bos_id)
            labels = _prepend(labels, IGNORE)
            in_source = _prepend(in_source, True)
        return Batch(tokens, labels, pad_mask=~in_source)

    with_eos, target_len = _append_eos(pairs, vocab.eos_id)  # (B, T+1): t1 .. tn <eos>
    if arch == "decoder":
        # source <sep> target <eos>, squeezed together, as one sequence
        sep = torch.full((len(pairs), 1), vocab.sep_id)
        joined = torch.cat([pairs.source, sep, with_eos], dim=1)
        keep = torch.cat([positions_below(pairs.source_len, pairs.source.size(1)), sep > 0,
                          positions_below(target_len, with_eos.size(1))], dim=1)  # fmt: skip
        sequence, length = left_compact(joined, keep)
        width = int(length.max())
        # Position j reads token j and predicts token j + 1; the final <eos> is never read.
        in_input = positions_below(length - 1, width - 1)  # (B, T)
        tokens = sequence[:, : width - 1].masked_fill(~in_input, PAD_ID)
        # Score position j only if the token it predicts is part of the answer.
        answer = (torch.arange(width - 1).unsqueeze(0) >= pairs.source_len.unsqueeze(1)) & in_input
        return Batch(tokens, sequence[:, 1:width].masked_fill(~answer, IGNORE))

    # encoder-decoder
    source_width = int(pairs.source_len.max())
    width = int(target_len.max())
    tokens = _prepend(with_eos[:, : width - 1], vocab.bos_id).masked_fill(
        ~positions_below(target_len, width), PAD_ID
    )  # <bos> t1 .. tn, padded
    labels = with_eos[:, :width].masked_fill(~positions_below(target_len, width), IGNORE)
    source_pad = ~positions_below(pairs.source_len, source_width)
    return Batch(tokens, labels, source=pairs.source[:, :source_width], source_pad_mask=source_pad)


def _append_eos(pairs: Pairs, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """target (B, T) -> target with <eos> written after each row's last token (B, T+1), lengths + 1."""
    extended = torch.nn.functional.pad(pairs.target, (0, 1), value=PAD_ID)
    extended.scatter_(1, pairs.target_len.unsqueeze(1), eos_id)
    return extended, pairs.target_len + 1


def _prepend(t: torch.Tensor, value: int | bool) -> torch.Tensor:
    return torch.cat([torch.full((t.size(0), 1), value, dtype=t.dtype), t], dim=1)


def _pad_or_cut(t: torch.Tensor, width: int) -> torch.Tensor:
    if t.size(1) >= width:
        return t[:, :width]
    return torch.nn.functional.pad(t, (0, width - t.size(1)), value=PAD_ID)


# --------------------------------------------------------------------------- the training stream


class TaskData:
    """A task's fixed held-out set and its seeded training stream, kept disjoint.

    The held-out examples come from their own seed. Training batches are drawn from
    the training seed, and any example that equals a held-out one is redrawn, so the
    held-out score always measures generalisation, even for tasks with few examples.
    """

    def __init__(self, task: Task, seed: int, eval_size: int) -> None:
        self.task = task
        self.generator = torch.Generator().manual_seed(seed)
        held_out = task.held_out(eval_size, torch.Generator().manual_seed(_held_out_seed(seed)))
        self._held_out_hashes = None
        if not task.held_out_is_disjoint:
            # Distinct examples only: in a small task, repeats would weigh some examples twice.
            hashes = example_hashes(held_out)
            self._held_out_hashes, first = _first_occurrences(hashes)
            held_out = held_out[first]
        self.held_out = held_out
        space = task.space_size()
        if self._held_out_hashes is not None and space is not None and len(self._held_out_hashes) > space // 2:
            raise UserError(
                f"task {task.name!r} has only {space} distinct examples and the held-out set takes "
                f"{len(self._held_out_hashes)} of them; lower task.eval_size or make the task bigger "
                f"(task.vocab_size, task.max_len)"
            )
        self._held_out_share = self._estimate_held_out_share(seed)

    def _estimate_held_out_share(self, seed: int) -> float:
        """The fraction of training draws that land in the held-out set, from a probe sample."""
        if self._held_out_hashes is None:
            return 0.0
        probe = self.task.sample(PROBE_SIZE, torch.Generator().manual_seed(_held_out_seed(seed + 1)))
        return float(torch.isin(example_hashes(probe), self._held_out_hashes).float().mean())

    def _draws_for(self, n: int) -> int:
        """How many to draw so that n are left once held-out ones are dropped: the expected
        loss plus three standard deviations. Tasks with few distinct short inputs (Dyck: a
        quarter of all draws are held out) then rarely need a second round; tasks where
        under 1% are held out draw n and redraw in the rare batch that falls short."""
        share = self._held_out_share
        if share < 0.01:
            return n
        return math.ceil((n + 3 * math.sqrt(n * share)) / (1 - share))

    def train_pairs(self, n: int) -> Pairs:
        """n training examples, none of them in the held-out set."""
        pairs = self.task.sample(self._draws_for(n), self.generator)
        if self._held_out_hashes is None:
            return pairs
        kept = pairs[~torch.isin(example_hashes(pairs), self._held_out_hashes)]
        for _ in range(100):
            if len(kept) >= n:
                return kept[:n]
            # Redraw a full batch rather than only the missing few: a batch costs about
            # the same to make whatever its size, and one more round usually suffices.
            extra = self.task.sample(n, self.generator)
            kept = Pairs.concat([kept, extra[~torch.isin(example_hashes(extra), self._held_out_hashes)]])
        raise UserError(f"task {self.task.name!r}: cannot draw training examples outside the held-out set")

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.generator.set_state(state["generator"])


PROBE_SIZE = 2048  # examples drawn once to estimate how often a draw is held out


def _first_occurrences(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) -> the distinct values, and the index of each one's first occurrence, in order."""
    distinct, inverse = values.unique(return_inverse=True)
    first = torch.full((len(distinct),), len(values)).scatter_reduce_(0, inverse, torch.arange(len(values)), "amin")
    return distinct, first.sort().values


def _held_out_seed(seed: int) -> int:
    return (seed * 1_000_003 + 0x5EED) % 2**63  # a different stream for every training seed


_HASH_WEIGHTS = torch.randint(-(2**62), 2**62, (4096,), generator=torch.Generator().manual_seed(7))


def example_hashes(pairs: Pairs) -> torch.Tensor:
    """(N,) int64 fingerprints of each example's input (the source, or a language
    model's whole sequence): equal inputs, equal hashes."""
    ids = pairs.source if pairs.source.size(1) > 0 else pairs.target  # (N, L), PAD after the end
    return (ids * _HASH_WEIGHTS[: ids.size(1)]).sum(1)  # int64 arithmetic wraps: a fine hash
