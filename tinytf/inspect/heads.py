"""What did each head learn, and does it matter? A score per head and pattern, and ablation.

For one head's attention weights A (queries x keys, padding left out) and a 0/1 pattern P
of the same shape, the head's score is the attention mass A puts on P's keys, averaged
over the query rows where P has at least one key, then over the inputs:

    score(A, P) = mean over inputs of  mean over rows i with some P[i, j] = 1 of  sum_j A[i, j] P[i, j]

It lies in [0, 1]; 1 means every such query puts all its weight on the pattern's keys.
A row whose pattern holds every key its query can see is left out too, as any head scores
1 there: in a causal map query 0 sees only key 0, itself and the first token at once.
This is TransformerLens's `detect_head` "mul" measure restricted to the rows where the
pattern says something: over all rows a perfect induction head would score about one
half, as the first half of a repeated sequence has no earlier occurrence to look at.
Inputs where the pattern has no row at all (a sequence without duplicates) do not count.

The patterns (a textbook chapter on attention tabulates the first three and the syntactic one):

    self        P[i, i]: the diagonal
    previous    P[i, i-1]: the token before
    first       P[i, 0], e.g. <bos>; a resting place for heads with nothing to do
    duplicate   P[i, j] where j < i holds the same token as i
    induction   P[i, j] where token j-1 equals token i and j-1 < i: "after A came B before;
                I am A again: look at that B"
    <task>      the task's alignment: for each answer token, the source position a correct
                algorithm reads (copy, reverse, sort, histogram; sentences: from the
                position that predicts a verb to its subject, the syntactic pattern; a
                pronoun to its antecedent, coreference; an antonym or synonym to the
                word it relates to, semantic; modular-add: from the query that writes the
                sum to both numbers, operands)

Cross-attention reads another sequence (queries from the answer, keys from the source):
only `first` and the task's alignments apply there. A head's `entropy` (nats, averaged
over its rows) tells broad heads (log T_k for uniform) from sharp ones (0 for one key).

Ablation replaces one head's output `z` (before W_O) by zeros or by its mean over the
inputs, and scores the model again (teacher-forced loss and accuracies, see evaluate.py):
a head whose removal costs nothing does not carry the task, whatever its pattern.

    report = head_scores(run.model, run.framing, held_out, ablate="zero")
    for head in report.heads: head.name, head.scores["previous"], head.label, head.ablation
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from tinytf import arguments
from tinytf.data.batch import Batch
from tinytf.data.framing import Framing
from tinytf.device import eval_mode, model_device
from tinytf.errors import UserError
from tinytf.inspect.evaluate import evaluate
from tinytf.inspect.notebook import notebook_text
from tinytf.model.hooks import Hook
from tinytf.model.names import ActName, act_name, attention_sides, head_name, is_causal, is_value
from tinytf.tasks.base import Pairs
from tinytf.tasks.vocab import PAD_ID

GENERIC_PATTERNS = ("self", "previous", "first", "duplicate", "induction")
CROSS_PATTERNS = ("first",)  # the token patterns that mean something across two sequences
LABEL_THRESHOLD = 0.5  # a head is labelled by its best pattern from this score on
BATCH_SIZE = 256


@dataclass
class HeadScore:
    stack: str  # "encoder" or "decoder"
    layer: int
    kind: str  # "self" or "cross"
    head: int
    scores: dict[str, float | None]  # pattern -> score in [0, 1]; None where it does not apply
    entropy: float  # nats, mean over query rows and inputs
    ablation: dict[str, float] | None = None  # metrics with the head ablated, and their change

    @property
    def name(self) -> str:
        return head_name(act_name(self.stack, self.layer, self.kind), self.head)

    @property
    def label(self) -> str:
        """The best pattern if its score reaches LABEL_THRESHOLD, else "mixed"."""
        scored = {pattern: s for pattern, s in self.scores.items() if s is not None}
        best = max(scored, key=scored.__getitem__, default=None)
        return best if best is not None and scored[best] >= LABEL_THRESHOLD else "mixed"


@dataclass
class HeadReport:
    inputs: int  # how many inputs were scored
    patterns: list[str]
    heads: list[HeadScore]
    ablate: str | None = None  # "zero" or "mean" when heads were ablated
    intact: dict[str, float] | None = None  # the metrics without ablation
    meta: dict[str, object] = field(default_factory=dict)  # where it comes from (run, checkpoint, text)
    note: str | None = None  # set when a typed input's length is outside what the model was trained on

    def _repr_html_(self) -> str:
        """In a notebook: the table `tinytf heads` prints."""
        return notebook_text(render_text(self))

    def to_dict(self) -> dict:
        return {
            **self.meta,
            "inputs": self.inputs,
            "patterns": self.patterns,
            "ablate": self.ablate,
            "intact": self.intact,
            "heads": [{**asdict(h), "label": h.label} for h in self.heads],  # stack, layer, kind, head, scores...
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=1)

    def best(self, pattern: str, layer: int | None = None) -> HeadScore | None:
        """The head (of `layer`, or of any) that scores highest on `pattern`; None if the
        pattern applies to no such head."""
        scored = [h for h in self.heads if h.scores.get(pattern) is not None and layer in (None, h.layer)]
        return max(scored, key=lambda h: h.scores[pattern], default=None)


# ---- the patterns


def token_patterns(
    query_ids: torch.Tensor, key_ids: torch.Tensor, same_sequence: bool, causal: bool = False
) -> dict[str, torch.Tensor]:
    """The generic patterns for one input: query_ids (T_q,), key_ids (T_k,), no padding.
    Returns {name: (T_q, T_k) bool}, each `informative` (`causal`: query i sees keys 0..i
    only). Across two sequences only CROSS_PATTERNS apply."""
    query_len, key_len = query_ids.numel(), key_ids.numel()
    first = torch.zeros(query_len, key_len, dtype=torch.bool)
    first[:, 0] = True
    if not same_sequence:
        return {"first": informative(first, causal)}
    i = torch.arange(query_len).unsqueeze(1)  # (T_q, 1)
    j = torch.arange(key_len).unsqueeze(0)  # (1, T_k)
    same_token = query_ids.unsqueeze(1) == key_ids.unsqueeze(0)  # (T_q, T_k)
    # token j-1 equals token i: the previous token of each key, compared with each query
    previous_of_key = torch.cat([torch.full((1,), PAD_ID), key_ids[:-1]])  # (T_k,), nothing before key 0
    after_same_token = (query_ids.unsqueeze(1) == previous_of_key.unsqueeze(0)) & (j >= 1)  # (T_q, T_k)
    patterns = {
        "self": i == j,
        "previous": j == i - 1,
        "first": first,
        "duplicate": same_token & (j < i),
        "induction": after_same_token & (j - 1 < i),
    }
    return {name: informative(pattern, causal) for name, pattern in patterns.items()}


def informative(pattern: torch.Tensor, causal: bool) -> torch.Tensor:
    """`pattern` (T_q, T_k) without the rows that hold every key their query sees (every
    key, or with `causal` keys 0..i): any head would score 1 there."""
    seen = torch.ones_like(pattern).tril() if causal else torch.ones_like(pattern)  # (T_q, T_k)
    full = (pattern | ~seen).all(dim=1, keepdim=True)  # (T_q, 1)
    return pattern & ~full


def pattern_mass(weights: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor | None:
    """weights (H, T_q, T_k), pattern (T_q, T_k) bool -> each head's mass on the pattern's
    keys, averaged over the rows where the pattern has a key: (H,); None if no row has one."""
    rows = pattern.any(dim=1)  # (T_q,)
    if not bool(rows.any()):
        return None
    mass = (weights * pattern).sum(dim=2)  # (H, T_q, T_k) * (T_q, T_k) -> summed over keys (H, T_q)
    return mass[:, rows].mean(dim=1)  # (H,)


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """weights (H, T_q, T_k) -> mean entropy of the rows, in nats (H,)."""
    logs = torch.log(weights.clamp_min(1e-30))
    return -(weights * logs).sum(dim=2).mean(dim=1)  # (H, T_q) -> (H,)


# ---- scoring a model


@dataclass
class _Example:
    """One framed input: where its queries and keys are, and the task's alignments."""

    batch: Batch  # the batch it belongs to
    row: int
    source: list[int]  # as the task's alignments take them
    target: list[int]


def head_scores(
    model: nn.Module,
    framing: Framing,
    pairs: Pairs | None = None,
    *,
    text: str | None = None,
    ablate: str | None = None,
    hooks: Mapping[str, Hook] | None = None,
) -> HeadReport:
    """Score every head of every attention on `pairs` (held-out examples, framed as in
    training) or on one typed `text` (framed as `attend` does, after the model's greedy
    answer; `report.note` says if its length was never trained on). `ablate` ("zero" or
    "mean", needs `pairs`: a `UserError` with `text`) also scores the model with each head
    ablated, and sorts the heads by how much the loss grows. `hooks` ({name: fn}, see
    `Transformer.run_with_hooks`) apply to every pass that is scored or evaluated, e.g. to
    score heads with another head knocked out (a typed input's answer is generated without them)."""
    if (pairs is None) == (text is None):
        raise ValueError("head_scores: pass either `pairs` or `text`")
    if pairs is not None:
        arguments.instance(pairs, "pairs", Pairs, "examples of the task (task.sample(...), TaskData(...).held_out)")
    if ablate not in (None, "zero", "mean"):
        raise ValueError(f"ablate must be 'zero', 'mean' or None, not {ablate!r}")
    if ablate is not None and pairs is None:
        raise UserError("--ablate measures the loss on held-out examples with their answers; drop --text to ablate")
    if pairs is not None and len(pairs) == 0:
        raise ValueError("head_scores: `pairs` holds no examples")
    examples = _typed_examples(model, framing, text) if text is not None else _held_out_examples(framing, pairs)
    totals = _Totals()
    for batch, group in examples:
        with eval_mode(model), torch.no_grad():
            _, cache = model.run_with_cache(
                **_device_inputs(model, batch), names=lambda n: is_value(n, "pattern"), hooks=hooks
            )
        cache = {name: weights.float().cpu() for name, weights in cache.items()}  # one copy a batch, not one an input
        for example in group:
            totals.add(framing, example, _maps(cache, example))
    patterns = [*GENERIC_PATTERNS, *framing.task.alignment_patterns]
    report = HeadReport(totals.inputs, patterns, totals.heads(patterns))
    if text is not None:
        report.note = framing.length_note(framing.typed_input(text, model.config.max_len))
    if ablate is not None:
        _ablate_each(model, framing, pairs, report, ablate, dict(hooks or {}))
    return report


class _Totals:
    """Each attention's pattern scores and entropies summed over the inputs, and how many."""

    def __init__(self) -> None:
        self.sums: dict[tuple[str, str], torch.Tensor] = defaultdict(lambda: 0)  # (attention, pattern) -> (H,)
        self.counts: dict[tuple[str, str], int] = defaultdict(int)  # inputs where the pattern applied
        self.entropy_sums: dict[str, torch.Tensor] = defaultdict(lambda: 0)  # attention -> (H,)
        self.inputs = 0

    def add(self, framing: Framing, example: _Example, maps: dict[str, tuple[torch.Tensor, ...]]) -> None:
        """One input's maps, from `_maps`."""
        self.inputs += 1
        for attention_name, (weights, query_ids, key_ids) in maps.items():
            for name, mask in _patterns(framing, example, attention_name, query_ids, key_ids).items():
                score = pattern_mass(weights, mask)
                if score is not None:
                    self.sums[attention_name, name] = self.sums[attention_name, name] + score
                    self.counts[attention_name, name] += 1
            self.entropy_sums[attention_name] = self.entropy_sums[attention_name] + row_entropy(weights)

    def heads(self, patterns: list[str]) -> list[HeadScore]:
        """Each head's mean score per pattern (None where the pattern never applied) and entropy."""
        heads = []
        for attention_name, entropy_sum in self.entropy_sums.items():
            attention = ActName.parse(attention_name)
            entropy = entropy_sum / self.inputs
            for h in range(entropy.numel()):
                scores = {
                    pattern: (
                        float(self.sums[attention_name, pattern][h] / self.counts[attention_name, pattern])
                        if self.counts[attention_name, pattern]
                        else None
                    )
                    for pattern in patterns
                }
                heads.append(HeadScore(attention.stack, attention.layer, attention.kind, h, scores, float(entropy[h])))
        return heads


def _patterns(
    framing: Framing, example: _Example, attention_name: str, query_ids: torch.Tensor, key_ids: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The patterns that apply to one attention map of one example, {name: (T_q, T_k) bool}:
    the generic ones, and the task's alignments that the framing places in this attention."""
    causal = is_causal(attention_name)
    patterns = token_patterns(query_ids, key_ids, same_sequence=query_ids is key_ids, causal=causal)
    attention = ActName.parse(attention_name)
    stack, kind = attention.stack, attention.kind
    if (stack, kind) != framing.alignment_attention:  # the task's alignments lie in another attention
        return patterns
    for name, alignment in framing.alignments(example.source, example.target, len(query_ids), len(key_ids)).items():
        if (alignment.stack, alignment.kind) == (stack, kind) and alignment.pairs:
            mask = torch.zeros(len(query_ids), len(key_ids), dtype=torch.bool)
            queries, keys = zip(*alignment.pairs, strict=True)
            mask[list(queries), list(keys)] = True
            patterns[name] = informative(mask, causal)
    return patterns


def _held_out_examples(framing: Framing, pairs: Pairs) -> Iterator[tuple[Batch, list[_Example]]]:
    for start in range(0, len(pairs), BATCH_SIZE):
        chunk = pairs[start : start + BATCH_SIZE]
        batch = framing.frame(chunk)
        yield batch, [_Example(batch, row, *chunk.example(row)) for row in range(len(chunk))]


def _typed_examples(model: nn.Module, framing: Framing, text: str) -> Iterator[tuple[Batch, list[_Example]]]:
    batch, answer = framing.typed_batch(model, text)
    source = framing.typed_input(text, model.config.max_len)
    if not framing.answers_questions:  # a language model: the typed sequence is the "target"
        source, answer = [], source
    elif answer is None:  # an encoder answers every position at once
        answer = framing.answer_typed(model, [source])[0]
    yield batch, [_Example(batch, 0, source, answer)]


def _device_inputs(model: nn.Module, batch: Batch) -> dict[str, torch.Tensor | None]:
    return batch.to(model_device(model)).model_inputs()


def _maps(
    cache: dict[str, torch.Tensor], example: _Example
) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Each attention's weights for one example without padding, (H, T_q, T_k), with the
    ids its queries and keys read (the same tensor object for self-attention: `_patterns`
    tells self- from cross-attention by it)."""
    batch, row = example.batch, example.row
    tokens = batch.tokens[row][batch.tokens[row] != PAD_ID]  # (T,) what the model read, unpadded
    source = None if batch.source is None else batch.source[row][batch.source[row] != PAD_ID]  # (S,)
    found = {}
    for name, weights in cache.items():
        attention_name = ActName.parse(name).attention
        query_ids, key_ids = attention_sides(attention_name, tokens, source)
        found[attention_name] = (weights[row, :, : len(query_ids), : len(key_ids)], query_ids, key_ids)
    return found


# ---- ablation


def _ablate_each(
    model: nn.Module, framing: Framing, pairs: Pairs, report: HeadReport, how: str, hooks: dict[str, Hook]
) -> None:
    """Fill each head's `ablation` and sort the heads, the most harmful removal first.
    `hooks`: the caller's, applied in every pass (before the ablation, at the same name)."""
    intact = evaluate(model, framing, pairs, hooks=hooks)
    means = _mean_head_outputs(model, framing, pairs, hooks) if how == "mean" else {}
    for head in report.heads:
        attention = ActName(head.stack, head.layer, head.kind)
        name = attention.of("z")
        replacement = means[str(attention)][head.head] if how == "mean" else None
        ablation = _replace_head(head.head, replacement)
        ablated = evaluate(model, framing, pairs, hooks={**hooks, name: _then(hooks.get(name), ablation)})
        head.ablation = {**ablated, **{f"{key}_change": ablated[key] - intact[key] for key in intact}}
    report.heads.sort(key=lambda h: (-h.ablation["loss_change"], h.stack, h.layer, h.kind, h.head))
    report.ablate, report.intact = how, intact


def _replace_head(head: int, value: torch.Tensor | None):
    """A hook on "<attention>.z" (B, H, T_q, D_h) that sets head `head` to zeros or to `value` (D_h,)."""

    def hook(z: torch.Tensor) -> torch.Tensor:
        z = z.clone()
        z[:, head] = 0 if value is None else value.to(z)
        return z

    return hook


def _then(first: Hook | None, second: Hook) -> Hook:
    """A hook that applies `first` (if any), then `second`."""
    if first is None:
        return second

    def both(value: torch.Tensor) -> torch.Tensor:
        replaced = first(value)
        return second(value if replaced is None else replaced)

    return both


def _mean_head_outputs(
    model: nn.Module, framing: Framing, pairs: Pairs, hooks: dict[str, Hook]
) -> dict[str, torch.Tensor]:
    """Each attention's mean z over the inputs' real (non-PAD) query positions: {name: (H, D_h)}."""
    sums: dict[str, torch.Tensor] = defaultdict(lambda: 0)
    counts: dict[str, int] = defaultdict(int)
    for batch, _ in _held_out_examples(framing, pairs):
        with eval_mode(model), torch.no_grad():
            _, cache = model.run_with_cache(
                **_device_inputs(model, batch), names=lambda n: is_value(n, "z"), hooks=hooks
            )
        for name, z in cache.items():  # z: (B, H, T_q, D_h)
            attention_name = ActName.parse(name).attention
            query_side, _ = attention_sides(attention_name, batch.tokens, batch.source)
            real = (query_side != PAD_ID).to(z.device)  # (B, T_q)
            sums[attention_name] = sums[attention_name] + (z * real[:, None, :, None]).sum(dim=(0, 2))  # (H, D_h)
            counts[attention_name] += int(real.sum())
    return {name: sums[name] / max(counts[name], 1) for name in sums}


# ---- output


def render_table(report: HeadReport) -> str:
    """One row per head (stack.layer.kind.head), one column per pattern, then entropy and
    label; with ablation, the loss and exact-match accuracy and their change."""
    columns = [*report.patterns, "entropy"]
    header = ["head", *columns, "label"]
    if report.ablate is not None:
        header += ["loss", "Δloss", "seq_acc", "Δseq_acc"]
    rows = []
    for head in report.heads:
        cells = [head.name, *("-" if head.scores[p] is None else f"{head.scores[p]:.2f}" for p in report.patterns)]
        cells += [f"{head.entropy:.2f}", head.label]
        if head.ablation is not None:
            a = head.ablation
            cells += [
                f"{a['loss']:.3f}",
                f"{a['loss_change']:+.3f}",
                f"{a['seq_acc']:.3f}",
                f"{a['seq_acc_change']:+.3f}",
            ]
        rows.append(cells)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:  # names left-aligned, numbers right-aligned
        padded = [cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(padded)

    return "\n".join(line(cells) for cells in (header, *rows))


def render_text(report: HeadReport) -> str:
    """`render_table`, after a line with the intact model's metrics when heads were ablated."""
    if report.intact is None:
        return render_table(report)
    intact = report.intact
    return (
        f"intact: loss {intact['loss']:.3f}, token_acc {intact['token_acc']:.3f}, seq_acc {intact['seq_acc']:.3f}; "
        f"each head {report.ablate}-ablated in turn, the most harmful first\n{render_table(report)}"
    )
