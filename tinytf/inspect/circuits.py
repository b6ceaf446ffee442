"""How heads work together, read from the weights alone (Elhage et al., 2021, "A
Mathematical Framework for Transformer Circuits").

Each head has a QK circuit, W_QK = W_Q W_K^T (D x D: which query directions look for
which key directions), and an OV circuit, W_OV = W_V W_O (D x D: what it writes for what
it reads), in the residual stream's (input, output) order. A head of a later layer reads
what a head of an earlier layer wrote through its query (Q-), key (K-) or value (V-)
input; how far the two circuits line up is the composition score, between 0 and 1:

    Q: |W_OV_early W_QK_late|_F / (|W_OV_early|_F |W_QK_late|_F)
    K: the same with W_QK_late^T          V: the same with W_OV_late

Matrices of rank D_h in D dimensions score above 0 even at random, so each score is read
against a baseline: the same score between heads of random (Gaussian) weights of the same
shapes, its mean and 95th percentile over BASELINE_SAMPLES pairs drawn from a fixed seed.

A head's OV circuit from token to logit, W_E W_OV W_U (V x V), copies when its eigenvalues
are positive: copying = sum(Re lambda) / sum(|lambda|), 1 for a head that raises the logit
of the token it attends to. W_E is the embedding as the model adds it (scaled by sqrt(D));
the LayerNorms are left out, as in the paper. (TransformerLens's `all_composition_scores`
and `(W_E @ OV @ W_U).eigenvalues` compute the same numbers.) A cross head's circuit reads
the same W_E: source and target tokens share one embedding, so a cross head copies when it
raises the logit of the source token it attends to.

Heads compose wherever one's output reaches another's input. In one stack a head reads what
every earlier head wrote into the residual stream, and in a decoder layer self-attention
runs first, then cross-attention: decoder.0.self.h feeds decoder.0.cross.g, which feeds
decoder.1.self.g. A cross head's queries read the decoder's stream (Q only), its keys and
values the encoder's output, which every encoder head wrote into (K and V only).

A head's QK positional share, where positions are added to the embeddings (learned and
sinusoidal; None for rope, which rotates queries and keys, and for none): through the
direct path, the query q = e_t + p_i of token t at position i (e_t scaled as W_E) scores
keys by what they are, q W_QK e_s^T over the tokens s, and by where they are, q W_QK p_j^T
over the positions j. positional = the mean over queries (t, i) of Var_j / (Var_j + Var_s),
variances across the keys (a score every key gets alike moves no softmax): 1 for a head
that picks its keys by position, 0 by token (Elhage et al. discuss the two QK circuits).
Every token but <pad>, every position the model was trained on (or all max_len of them);
a cross head's queries are the target's, its keys the source's, through the encoder.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

import torch

from tinytf.model import Transformer
from tinytf.model.attention import MultiHeadAttention
from tinytf.model.names import ATTENTION_KINDS, ActName, act_name, attention_sides, head_name
from tinytf.model.positional import LearnedPositions, SinusoidalPositions
from tinytf.tasks.vocab import PAD_ID

MODES = ("Q", "K", "V")
BASELINE_SAMPLES = 200  # random head pairs each mode's baseline is drawn from
BASELINE_SEED = 0

Head = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # W_Q, W_K, W_V (D, D_h); W_O (D_h, D)


@dataclass(frozen=True)
class Composition:
    mode: str  # "Q", "K" or "V": the later head's input that the earlier head's output reaches
    early: str  # a head's name, "decoder.0.self.1": head 1 of layer 0's self-attention
    late: str
    score: float
    ratio: float  # score / the mode's baseline mean


@dataclass
class CircuitReport:
    baseline: dict[str, dict[str, float]]  # mode -> {"mean": ..., "p95": ...}
    compositions: list[Composition]  # every pair that composes, in each of its modes, the highest ratio first
    copying: dict[str, float]  # head -> its OV copying score, every head in the model's order
    positional: dict[str, float | None]  # head -> its QK positional share; None without added positions
    meta: dict[str, object] = field(default_factory=dict)  # where it comes from (run, checkpoint)

    def to_dict(self) -> dict:
        compositions = [asdict(composition) for composition in self.compositions]
        scores = {"copying": self.copying, "positional": self.positional}
        return {**self.meta, "baseline": self.baseline, "compositions": compositions, **scores}


@torch.no_grad()
def circuit_report(model: Transformer, lengths: tuple[int, int] | None = None) -> CircuitReport:
    """Every composition score between a head and a head that reads its output (module
    docstring), with its mode's baseline, and every head's OV copying score and QK positional
    share. lengths: the longest (tokens, source) the model was trained on, whose positions the
    share reads (`Framing.model_lengths()`; source 0 without an encoder-decoder); None: all max_len."""
    heads = head_weights(model)
    baseline = random_baseline(model.config.d_model, model.config.head_dim)
    compositions = []
    for early, early_weights in heads.items():
        for late, late_weights in heads.items():
            for mode in _reads(early, late):
                score = composition_score(early_weights, late_weights, mode)
                compositions.append(Composition(mode, early, late, score, score / baseline[mode]["mean"]))
    compositions.sort(key=lambda composition: -composition.ratio)
    copying = {name: copying_score(model, weights) for name, weights in heads.items()}
    return CircuitReport(baseline, compositions, copying, positional_shares(model, heads, lengths))


def head_weights(model: Transformer) -> dict[str, Head]:
    """Each head's W_Q, W_K, W_V (D, D_h) and W_O (D_h, D), by head name, in the order the
    model runs them: the encoder's layers, then each decoder layer's self- and cross-attention."""
    found = {}
    for stack_name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        for index, layer in enumerate(stack.layers if stack is not None else []):
            for kind, attention in zip(ATTENTION_KINDS, (layer.self_attn, layer.cross_attn), strict=True):
                if attention is not None:
                    found |= _split_heads(attention, act_name(stack_name, index, kind))
    return found


def _split_heads(attention: MultiHeadAttention, name: str) -> dict[str, Head]:
    """The heads of the attention `name`. Cross-attention stacks its W_Q, W_K, W_V as
    self-attention does (attention.py): W_Q reads the decoder, W_K and W_V the encoder."""
    heads, head_dim = attention.n_heads, attention.head_dim
    d_model = heads * head_dim
    weights = attention.qkv_proj.weight.detach().double()  # (3D, D): [W_Q; W_K; W_V], each (out, in)
    q, k, v = weights.view(3, heads, head_dim, d_model).transpose(2, 3)  # each (H, D, D_h)
    w_o = attention.out_proj.weight.detach().double().T.reshape(heads, head_dim, d_model)  # (H, D_h, D)
    return {head_name(name, head): (q[head], k[head], v[head], w_o[head]) for head in range(heads)}


def composition_score(early: Head, late: Head, mode: str) -> float:
    """How far the later head's `mode` input reads what the earlier head writes (module docstring)."""
    w_q, w_k, w_v, w_o = late
    right = {"Q": w_q @ w_k.T, "K": w_k @ w_q.T, "V": w_v @ w_o}[mode]  # (D, D)
    left = early[2] @ early[3]  # the earlier head's W_OV, (D, D)
    return float(torch.linalg.norm(left @ right) / (torch.linalg.norm(left) * torch.linalg.norm(right)))


def copying_score(model: Transformer, head: Head) -> float:
    """sum(Re lambda) / sum(|lambda|) over the eigenvalues of W_E W_OV W_U, taken from the
    (D_h, D_h) matrix W_O W_U W_E W_V, which has the same non-zero eigenvalues."""
    _, _, w_v, w_o = head
    w_e = model.token_embedding.weight.detach().double() * math.sqrt(model.config.d_model)  # (V, D)
    w_u = model.lm_head.weight.detach().double().T  # (D, V)
    eigenvalues = torch.linalg.eigvals(w_o @ w_u @ w_e @ w_v)  # (D_h,) complex
    return float(eigenvalues.real.sum() / eigenvalues.abs().sum())


def positional_shares(
    model: Transformer, heads: dict[str, Head], lengths: tuple[int, int] | None
) -> dict[str, float | None]:
    """Each head's QK positional share (module docstring) over the first `lengths` (tokens,
    source) positions, or all max_len; every head None where no positions are added."""
    if not isinstance(model.positions, LearnedPositions | SinusoidalPositions):
        return dict.fromkeys(heads)  # rope rotates queries and keys, none has no positions
    table = model.positions.table.detach().double()  # (max_len, D): p_i, added to the embeddings
    tokens_len, source_len = lengths or (len(table), len(table))  # source_len 0: no source (attention_sides' None)
    w_e = model.token_embedding.weight.detach().double() * math.sqrt(model.config.d_model)  # (V, D), as added
    w_e = w_e[torch.arange(len(w_e)) != PAD_ID]  # (V - 1, D): <pad> is never a key
    shares = {}
    for name, head in heads.items():
        query_len, key_len = attention_sides(ActName.parse(name).attention, tokens_len, source_len or None)
        shares[name] = positional_share(w_e, table[:query_len], table[:key_len], head)
    return shares


def positional_share(
    w_e: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor, head: Head
) -> float | None:
    """The mean over queries e_t + p_i (t a row of w_e (V, D), p_i one of `query_positions`
    (N_q, D)) of Var_j / (Var_j + Var_s), the variances across keys of its scores to each
    position j of `key_positions` (N_k, D) and to each token s; None if no query's scores vary."""
    w_q, w_k = head[0], head[1]
    query_token, query_position = w_e @ w_q, query_positions @ w_q  # (V, D_h), (N_q, D_h): q W_Q in two parts
    token_variance = _score_variance(query_token, query_position, w_e @ w_k)  # (V, N_q)
    position_variance = _score_variance(query_token, query_position, key_positions @ w_k)  # (V, N_q)
    total = token_variance + position_variance
    choosing = total > 0  # queries whose scores differ between keys
    if not choosing.any():
        return None
    return float((position_variance[choosing] / total[choosing]).mean())


def _score_variance(query_token: torch.Tensor, query_position: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Var over `keys` (K, D_h) of the score of each query e_t + p_i, whose W_Q images are
    the rows a_t of `query_token` (V, D_h) plus b_i of `query_position` (N_q, D_h): (V, N_q)."""
    keys = keys - keys.mean(0)  # (K, D_h): centred keys give each query's scores less their mean
    by_token, by_position = query_token @ keys.T, query_position @ keys.T  # (V, K), (N_q, K)
    # mean over keys of (a_t k + b_i k)^2, expanded: no (V, N_q, K) tensor is built
    square_sum = by_token.square().sum(1, keepdim=True) + by_position.square().sum(1) + 2 * by_token @ by_position.T
    return (square_sum / len(keys)).clamp_min(0.0)  # (V, N_q); rounding may dip below 0


def random_baseline(d_model: int, head_dim: int) -> dict[str, dict[str, float]]:
    """Each mode's composition score between heads of random Gaussian weights: mean, 95th percentile."""
    return {mode: dict(numbers) for mode, numbers in _baseline(d_model, head_dim).items()}  # a copy of its own


@functools.cache  # seeded: the same shapes give the same numbers (`--over-training` asks once per snapshot)
def _baseline(d_model: int, head_dim: int) -> dict[str, dict[str, float]]:
    generator = torch.Generator().manual_seed(BASELINE_SEED)

    def random_head() -> Head:
        shapes = [(d_model, head_dim)] * 3 + [(head_dim, d_model)]
        return tuple(torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes)  # type: ignore[return-value]

    pairs = [(random_head(), random_head()) for _ in range(BASELINE_SAMPLES)]
    baseline = {}
    for mode in MODES:
        scores = torch.tensor([composition_score(early, late, mode) for early, late in pairs])
        baseline[mode] = {"mean": float(scores.mean()), "p95": float(scores.quantile(0.95))}
    return baseline


def _reads(early: str, late: str) -> tuple[str, ...]:
    """The inputs (modes) through which head `late` reads what head `early` writes; () if none:
    Q, K, V for a self head later in the same stack; Q for a cross head later in the decoder;
    K, V for a cross head and any encoder head (its keys and values read the encoder's output)."""
    writer, reader = ActName.parse(early), ActName.parse(late)  # a head's name parses as its attention's
    if writer.stack == "encoder" and reader.kind == "cross":
        return ("K", "V")
    if writer.stack != reader.stack or _place(writer) >= _place(reader):
        return ()
    return ("Q",) if reader.kind == "cross" else MODES


def _place(attention: ActName) -> tuple[int, int]:
    """Where an attention runs in its stack: its layer, then self-attention before cross-attention."""
    return attention.layer, ATTENTION_KINDS.index(attention.kind)


def render_text(report: CircuitReport) -> str:
    """The compositions, the highest ratio to the baseline first, then each head's copying
    score and QK positional share."""
    baseline = ", ".join(
        f"{mode} {report.baseline[mode]['mean']:.3f} (p95 {report.baseline[mode]['p95']:.3f})" for mode in MODES
    )
    lines = [f"random baseline, mean (95th percentile): {baseline}"]
    if not report.compositions:
        lines.append("no composition: every head is in layer 0 of its stack, none reads what another wrote")
    else:
        lines.append(f"{'from':<18} {'to':<18} {'composition':>13} {'score':>6} {'x baseline':>10}")
    for c in report.compositions:
        lines.append(f"{c.early:<18} {c.late:<18} {c.mode + '-composition':>13} {c.score:>6.3f} {c.ratio:>9.1f}x")
    lines.append(f"\n{'head':<18} {'OV copying':>10} {'QK positional':>13}")
    for name, score in report.copying.items():
        positional = report.positional[name]
        lines.append(f"{name:<18} {score:>10.3f} {'-' if positional is None else f'{positional:.3f}':>13}")
    if None in report.positional.values():
        lines.append("QK positional -: no positions added to the embeddings (rope, none), or scores that never vary")
    return "\n".join(lines)
