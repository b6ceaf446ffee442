"""Activation patching: which parts of a model carry the word that decides its answer.

A minimal pair is two prompts that differ only in that word: "the cat near the dogs"
(next: "sleeps") and "the cats near the dogs" (next: "sleep"). The logit difference

    LD = logit(answer) - logit(wrong)    at the prompt's last position (the next word)

is high on the clean prompt and low on the corrupted one. Run the corrupted prompt again
with one activation replaced by its value in the clean run: if that activation carries the
deciding word, the clean answer comes back. How much of it comes back:

    restored = (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt)

1 when patching the component alone restores the clean answer fully, 0 when it changes
nothing. Over many pairs the LDs are averaged first, then the ratio taken (a pair whose
clean and corrupted LDs nearly agree would make its own ratio explode). Each pair's own
LDs and ratios come with the report too (`PatchReport.per_pair`), to check one by hand.

A question task trained as a decoder is read the same way: "5 7" vs "5 8" in modular
addition, its prompt `[<bos>] source <sep>`, and LD scores the answer's first token ("12"
against "13").

Components, by hook name (hooks.py), for a decoder-only model:

    by="head"            each head's output `decoder.L.self.z[:, h]`, at every position at once
                         (at="all"), at each prompt's last position ("last"), or where the
                         pair's prompts differ, the deciding word ("deciding")
    by="head-position"   the same, one position at a time
    by="layer-position"  `resid_pre`, `attn_out` and `mlp_out` of each layer, one position at a time
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from tinytf import arguments
from tinytf.data.base import Framing
from tinytf.errors import UserError
from tinytf.inspect.notebook import notebook_heatmap, notebook_text
from tinytf.model import Transformer
from tinytf.model.names import act_name, is_value
from tinytf.model.transformer import check_ids
from tinytf.tasks.base import MinimalPair

BY = ("head", "head-position", "layer-position")
AT = ("all", "last", "deciding")  # where by="head" patches each head: every position, the last, the deciding word
LAYER_COMPONENTS = ("resid_pre", "attn_out", "mlp_out")
# The least gap LD_clean - LD_corrupt a share restored is divided by: below it, noise of a
# few hundredths of a logit would read as restoring many times the whole difference.
MIN_LD_GAP = 0.01


@dataclass(frozen=True)
class Prompts:
    """Minimal pairs as ids of equal length, as the model reads them (`prompt_ids`): one row per pair."""

    clean: torch.Tensor  # (N, T)
    corrupt: torch.Tensor  # (N, T)
    answer: torch.Tensor  # (N,): the clean prompt's next token
    wrong: torch.Tensor  # (N,): the corrupted prompt's
    pairs: tuple[MinimalPair, ...]  # (N,): the pairs as text, row by row


@dataclass(frozen=True)
class Patched:
    component: str  # the hook name without its layer: "z", "resid_pre", "attn_out", "mlp_out"
    layer: int
    head: int | None
    position: int | None  # None: every position at once
    restored: float


@dataclass(frozen=True)
class PairPatched:
    """One pair's own values: its prompts, its LDs, and for each component (in the order of
    `PatchReport.results`) the LD with it patched and the share restored, None where the
    pair's clean and corrupted LDs are under MIN_LD_GAP apart (too close to normalise by)."""

    clean: str
    corrupt: str
    answer: str
    wrong: str
    ld_clean: float
    ld_corrupt: float
    ld_patched: list[float]
    restored: list[float | None]


@dataclass
class PatchReport:
    pairs: int
    ld_clean: float  # averaged over the pairs
    ld_corrupt: float
    clean_correct: float  # the share of pairs whose clean LD is above 0
    results: list[Patched] = field(default_factory=list)  # restored from the averaged LDs
    per_pair: list[PairPatched] = field(default_factory=list)  # one per pair, grouped by prompt length
    at: str = "all"  # where by="head" patched each head (AT)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def colour_limit(self) -> float:
        """The half-width of the maps' colour scale, symmetric about 0: 1, or the largest |restored|."""
        return max(1.0, *(abs(result.restored) for result in self.results))

    def grids(self) -> list[PatchGrid]:
        """`restored` as one grid per component, as the heatmaps draw it: rows (layer, head),
        columns positions; or, patched at every position at once (by head), rows (layer,
        None) and columns heads."""
        grids = []
        for component in dict.fromkeys(result.component for result in self.results):
            results = [result for result in self.results if result.component == component]
            by_position = results[0].position is not None
            cells = [((r.layer, r.head), r.position) if by_position else ((r.layer, None), r.head) for r in results]
            rows, columns = (list(dict.fromkeys(cell[i] for cell in cells)) for i in (0, 1))
            values = np.zeros((len(rows), len(columns)))
            for (row, column), result in zip(cells, results, strict=True):
                values[rows.index(row), columns.index(column)] = result.restored
            grids.append(PatchGrid(component, by_position, rows, columns, values))
        return grids

    def _repr_html_(self) -> str:
        """In a notebook: the LDs, and each component's map as `tinytf patch --format png` draws it."""
        limit, maps = self.colour_limit, []
        for grid in self.grids():
            rows = [str(layer) if head is None else f"{layer}.{head}" for layer, head in grid.rows]
            columns = [str(c - len(grid.columns)) if grid.by_position else str(c) for c in grid.columns]
            axes = (
                "layer.head" if grid.rows[0][1] is not None else "layer",
                "position" if grid.by_position else "head",
            )
            maps.append(
                notebook_heatmap(f"restored: {grid.component} patched", rows, columns, grid.values, limit, axes)
            )
        summary = (
            f"{self.pairs} pair{'s' * (self.pairs > 1)}; logit difference clean {self.ld_clean:.3f}, "
            f"corrupted {self.ld_corrupt:.3f}; restored: 0 no change, 1 the clean answer back"
        )
        return f"<p>{summary}</p>" + "".join(maps)


@dataclass(frozen=True)
class PatchGrid:
    """One component's shares restored as a grid (see `PatchReport.grids`)."""

    component: str
    by_position: bool
    rows: list[tuple[int, int | None]]  # (layer, head or None)
    columns: list[int]  # positions, or heads
    values: np.ndarray  # (rows, columns)


def prompts_of(framing: Framing, pairs: Sequence[MinimalPair], max_len: int) -> list[Prompts]:
    """Minimal pairs as text -> `Prompts` as the decoder-only model `framing` reads typed
    text (`prompt_ids`), one group per prompt length. A `UserError` for a framing that is
    not a decoder's, or a pair whose prompts differ in length, hold words the vocabulary
    lacks or outrun `max_len`, or whose answer or wrong answer is not one token."""
    arguments.instance(framing, "framing", Framing, "a run's framing (run.framing)")
    pairs = arguments.sequence_of(pairs, "pairs", MinimalPair, "MinimalPair (task.held_out_pairs(...))")
    max_len = arguments.whole_number(max_len, "max_len", low=1)
    check_next_token(framing)
    groups: dict[int, list[tuple[list[int], list[int], int, int, MinimalPair]]] = {}
    for pair in pairs:
        clean, corrupt = (prompt_ids(framing, text, max_len) for text in (pair.clean, pair.corrupt))
        if len(clean) != len(corrupt):
            lengths = [len(framing.task.vocab.tokenize(text)) for text in (pair.clean, pair.corrupt)]
            raise UserError(
                f"the clean prompt has {lengths[0]} tokens, the corrupted one {lengths[1]}: "
                "a minimal pair differs in words, not in length"
            )
        if pair.answer == pair.wrong:
            raise UserError(
                f"the answer and the wrong answer are both {pair.answer!r}: their logit difference is 0 "
                "whatever the model does; give two different tokens"
            )
        answers = [framing.task.vocab.encode(word) for word in (pair.answer, pair.wrong)]
        if any(len(ids) != 1 for ids in answers):
            raise UserError(f"{pair.answer!r} and {pair.wrong!r} must each be one token")
        groups.setdefault(len(clean), []).append((clean, corrupt, answers[0][0], answers[1][0], pair))
    return [
        Prompts(*(torch.tensor([row[i] for row in rows]) for i in range(4)), tuple(row[4] for row in rows))
        for _, rows in sorted(groups.items())
    ]


def prompt_ids(framing: Framing, text: str, max_len: int) -> list[int]:
    """What a decoder-only model (see `check_next_token`) has read when it writes the token
    LD scores: a language model's prompt as typed, a question's `[<bos>] source <sep>`."""
    prompt = framing.next_token_prompt(framing.typed_input(text, max_len))
    if prompt is None:
        check_next_token(framing)
    return prompt


def check_next_token(framing: Framing) -> None:
    """A `UserError` unless `framing` is a decoder-only model's, one that predicts the next token."""
    if not framing.predicts_next_token:
        raise UserError(
            f"patching and attribution read decoder-only models (the next token after a prompt); this run is "
            f"an {framing.name}: train it with model.arch=decoder"
        )


def logit_difference(logits: torch.Tensor, answer: torch.Tensor, wrong: torch.Tensor) -> torch.Tensor:
    """(N, T, V) logits -> (N,) LD at the last position."""
    last = logits[:, -1]  # (N, V): the next word
    return last.gather(1, answer.long()[:, None])[:, 0] - last.gather(1, wrong.long()[:, None])[:, 0]


def patch(model: Transformer, groups: Sequence[Prompts], by: str = "head", at: str = "all") -> PatchReport:
    """Patch every component of `by` (see the module docstring) from each clean prompt into
    its corrupted one, over `groups` of pairs (pairs of one length each), by="head" at the
    positions `at` names; `model` in eval mode."""
    arguments.instance(model, "model", Transformer, "a tinytf Transformer")
    groups = arguments.sequence_of(groups, "groups", Prompts, "Prompts (prompts_of(...))")
    for index, prompts in enumerate(groups):
        _check_prompts(prompts, f"groups[{index}]", model.vocab_size)
    if by not in BY:
        raise ValueError(f"by={by!r}: one of {', '.join(BY)}")
    if at not in AT or (at != "all" and by != "head"):
        raise ValueError(f"at={at!r}: one of {', '.join(AT)}, and only 'all' unless by='head'")
    if by != "head" and len(groups) > 1:
        lengths = " and ".join(str(prompts.clean.size(1)) for prompts in groups)
        raise UserError(
            f"{by} compares positions, which do not line up across prompts of {lengths} tokens: patch by head"
        )
    if not model.is_decoder_only:
        raise UserError("activation patching reads decoder-only models (the next token after a prompt)")
    runs = [_patch_group(model, prompts, by, at) for prompts in groups]
    pairs = sum(len(prompts.answer) for prompts in groups)
    ld_clean = sum(float(run.clean.sum()) for run in runs) / pairs
    ld_corrupt = sum(float(run.corrupt.sum()) for run in runs) / pairs
    if abs(ld_clean - ld_corrupt) < MIN_LD_GAP:
        raise UserError(
            f"the clean and corrupted prompts' logit differences ({ld_clean:.4g} and {ld_corrupt:.4g}) are "
            f"{abs(ld_clean - ld_corrupt):.2g} apart, under {MIN_LD_GAP}: too close to normalise by; "
            "is the model trained, and do the prompts differ where it reads?"
        )
    report = PatchReport(pairs, ld_clean, ld_corrupt, sum(float((run.clean > 0).sum()) for run in runs) / pairs, at=at)
    for key in runs[0].patched:
        ld_patched = sum(float(run.patched[key].sum()) for run in runs) / pairs
        restored = (ld_patched - ld_corrupt) / (ld_clean - ld_corrupt)
        report.results.append(Patched(*key, restored))
    report.per_pair = [pair for prompts, run in zip(groups, runs, strict=True) for pair in _per_pair(prompts, run)]
    return report


def _check_prompts(prompts: Prompts, name: str, vocab_size: int) -> None:
    """A ValueError unless `prompts` holds N >= 1 rows of one length and N answers in the vocabulary."""
    clean, corrupt = prompts.clean, prompts.corrupt
    check_ids(clean, vocab_size, f"{name}.clean")
    check_ids(corrupt, vocab_size, f"{name}.corrupt")
    if corrupt.shape != clean.shape:
        raise ValueError(f"{name}: clean {tuple(clean.shape)} and corrupt {tuple(corrupt.shape)} differ in shape")
    for part in ("answer", "wrong"):
        ids = arguments.id_tensor(getattr(prompts, part), f"{name}.{part}", 1)
        if len(ids) != len(clean):
            raise ValueError(f"{name}.{part} holds {len(ids)} ids for {len(clean)} prompts: one per prompt")
        if ids.min() < 0 or ids.max() >= vocab_size:
            raise ValueError(f"{name}.{part} must hold token ids from 0 to {vocab_size - 1}")


def _per_pair(prompts: Prompts, run: _GroupRun) -> Iterator[PairPatched]:
    """Each pair of a group with its own LDs and shares restored (see `PairPatched`)."""
    for row, pair in enumerate(prompts.pairs):
        clean, corrupt = float(run.clean[row]), float(run.corrupt[row])
        patched = [float(lds[row]) for lds in run.patched.values()]
        differ = abs(clean - corrupt) >= MIN_LD_GAP
        restored = [(ld - corrupt) / (clean - corrupt) if differ else None for ld in patched]
        yield PairPatched(pair.clean, pair.corrupt, pair.answer, pair.wrong, clean, corrupt, patched, restored)


@dataclass
class _GroupRun:
    clean: torch.Tensor  # (N,) LDs
    corrupt: torch.Tensor
    patched: dict[tuple[str, int, int | None, int | None], torch.Tensor]  # component key -> (N,) LDs


@torch.no_grad()
def _patch_group(model: Transformer, prompts: Prompts, by: str, at: str) -> _GroupRun:
    """One forward pass per component over a group of same-length pairs."""

    def ld(logits: torch.Tensor) -> torch.Tensor:
        return logit_difference(logits, prompts.answer, prompts.wrong)

    # Only what is patched: caching a `.pattern` would take attention off the fused kernel.
    patched = ("z",) if by != "layer-position" else LAYER_COMPONENTS
    clean_logits, cache = model.run_with_cache(prompts.clean, names=lambda name: is_value(name, *patched))
    run = _GroupRun(ld(clean_logits), ld(model(prompts.corrupt)), {})
    for key, name, replace in _components(model, cache, by, prompts.clean.size(1), _at_mask(prompts, at)):
        run.patched[key] = ld(model.run_with_hooks(prompts.corrupt, hooks={name: replace}))
    return run


def _components(
    model: Transformer, cache: dict[str, torch.Tensor], by: str, length: int, mask: torch.Tensor | None
) -> Iterator[tuple[tuple[str, int, int | None, int | None], str, Callable[[torch.Tensor], torch.Tensor]]]:
    """(result key, hook name, replacement) for each component of `by`; `mask` (N, T): the
    positions by="head" patches in each row (None: every one)."""
    layers, heads = len(model.decoder.layers), model.config.n_heads
    positions = [None] if by == "head" else range(length)
    if by in ("head", "head-position"):
        for layer in range(layers):
            name = act_name("decoder", layer, "self", "z")  # (N, H, T, D_h)
            for head in range(heads):
                for position in positions:
                    where = (slice(None), head, slice(None) if position is None else position)
                    replace = (
                        _from_clean(cache[name], where) if mask is None else _from_clean_at(cache[name], head, mask)
                    )
                    yield ("z", layer, head, position), name, replace
        return
    for layer in range(layers):
        for component in LAYER_COMPONENTS:
            name = act_name("decoder", layer, value=component)  # (N, T, D)
            if name in cache:  # (no mlp_out with d_ff: 0)
                for position in positions:
                    yield (component, layer, None, position), name, _from_clean(cache[name], (slice(None), position))


def _from_clean(clean: torch.Tensor, where: tuple) -> Callable[[torch.Tensor], torch.Tensor]:
    """A hook that puts the clean run's value at `where` into the corrupted run's."""

    def replace(value: torch.Tensor) -> torch.Tensor:
        value = value.clone()
        value[where] = clean[where]
        return value

    return replace


def _at_mask(prompts: Prompts, at: str) -> torch.Tensor | None:
    """(N, T) bool: the positions of each pair where by="head" patches for `at`; None: all."""
    if at == "all":
        return None
    if at == "deciding":
        return prompts.clean != prompts.corrupt  # the tokens of the word that decides the answer
    mask = torch.zeros(prompts.clean.shape, dtype=torch.bool)
    mask[:, -1] = True  # the prompt's last position: where the answer is read
    return mask


def _from_clean_at(clean: torch.Tensor, head: int, mask: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """A hook that puts the clean run's output of `head` into the corrupted run's where `mask` (N, T) holds."""

    def replace(value: torch.Tensor) -> torch.Tensor:  # (N, H, T, D_h)
        value = value.clone()
        value[:, head] = torch.where(mask.to(value.device)[..., None], clean[:, head], value[:, head])
        return value

    return replace


# --------------------------------------------------------------------------- direct logit attribution


@dataclass(frozen=True)
class Contribution:
    component: str  # "embed", "z" (a head, through W_O), "mlp_out" or "biases"
    layer: int | None
    head: int | None
    contribution: float  # its share of LD, through the final LayerNorm


@dataclass
class Attribution:
    ld: float
    components: list[Contribution]

    def to_dict(self) -> dict:
        return asdict(self)

    def to_text(self) -> str:
        """The LD and a table of the parts' shares, the largest first (`tinytf attribute` prints it)."""
        lines = [f"logit difference {self.ld:.3f} = the sum of the contributions below"]
        lines.append(f"{'component':<10} {'layer':>5} {'head':>4} {'contribution':>12}")
        for part in sorted(self.components, key=lambda part: -abs(part.contribution)):
            layer, head = ("-" if value is None else value for value in (part.layer, part.head))
            lines.append(f"{part.component:<10} {layer:>5} {head:>4} {part.contribution:>12.3f}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """In a notebook: `to_text`'s table."""
        return notebook_text(self.to_text())


@torch.no_grad()
def attribute(model: Transformer, tokens: torch.Tensor, answer: int, wrong: int) -> Attribution:
    """Direct logit attribution of LD = logit(answer) - logit(wrong) after `tokens` (1, T):
    in a pre-norm decoder the stream reaching the output is a sum, the embedding plus every
    head's output (z_h W_O_h) and every MLP's, plus biases. The final LayerNorm is linear
    once its scale is fixed to the run's, so each part's contribution is
    (part - mean(part)) / scale * gamma . (W_U[answer] - W_U[wrong]), and they add up to LD."""
    arguments.instance(model, "model", Transformer, "a tinytf Transformer")
    check_ids(tokens, model.vocab_size, "tokens")
    if tokens.size(0) != 1:
        raise ValueError(f"tokens must be one prompt, shape (1, T), not {tuple(tokens.shape)}: attribute one at a time")
    answer = arguments.token_id(answer, "answer", model.vocab_size)
    wrong = arguments.token_id(wrong, "wrong", model.vocab_size)
    if answer == wrong:
        raise ValueError(f"answer and wrong are both {answer}: their logit difference is 0 whatever the model does")
    if not model.is_decoder_only:
        raise UserError("logit attribution reads decoder-only models (the next token after a prompt)")
    if model.config.norm == "post":
        raise UserError(
            "logit attribution needs model.norm=pre or none: with post-norm a LayerNorm follows every sublayer, "
            "so the stream reaching the output is not a sum of the sublayers' outputs"
        )
    kept = ("z", "mlp_out", "resid_post")  # the parts, and the stream reaching the output
    logits, cache = model.run_with_cache(tokens, names=lambda name: name == "embed" or is_value(name, *kept))
    norm, layers = model.decoder.final_norm, model.decoder.layers
    direction = model.lm_head.weight[answer] - model.lm_head.weight[wrong]  # (D,)
    final = cache[act_name("decoder", len(layers) - 1, value="resid_post")][0, -1]  # (D,): the stream at the end
    layer_norm = isinstance(norm, torch.nn.LayerNorm)  # model.norm=none: the stream reaches W_U as it is
    scale = torch.sqrt(final.var(unbiased=False) + norm.eps) if layer_norm else 1.0
    gamma = norm.weight if layer_norm else 1.0

    def through_norm(part: torch.Tensor) -> float:
        centred = part - part.mean() if layer_norm else part
        return float((centred / scale * gamma) @ direction)

    parts = [Contribution("embed", None, None, through_norm(cache["embed"][0, -1]))]
    biases = torch.zeros_like(final)
    for index, layer in enumerate(layers):
        z = cache[act_name("decoder", index, "self", "z")][0, :, -1]  # (H, D_h): each head's output at the end
        w_o = layer.self_attn.out_proj.weight.view(final.numel(), *z.shape)  # (D, H, D_h): W_O by head
        for head in range(z.size(0)):
            parts.append(Contribution("z", index, head, through_norm(w_o[:, head] @ z[head])))
        if layer.self_attn.out_proj.bias is not None:
            biases += layer.self_attn.out_proj.bias
        if (mlp_out := act_name("decoder", index, value="mlp_out")) in cache:  # (no MLP with d_ff: 0)
            parts.append(Contribution("mlp_out", index, None, through_norm(cache[mlp_out][0, -1])))
    final_bias = float(norm.bias @ direction) if layer_norm else 0.0
    parts.append(Contribution("biases", None, None, through_norm(biases) + final_bias))
    return Attribution(float(logits[0, -1, answer] - logits[0, -1, wrong]), parts)
