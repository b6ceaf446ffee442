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
and `(W_E @ OV @ W_U).eigenvalues` compute the same numbers.)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from tinytf.model import Transformer
from tinytf.model.names import ActName, act_name, head_name

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
    compositions: list[Composition]  # every (earlier, later) pair in each mode, the highest ratio first
    copying: dict[str, float]  # head -> its OV copying score
    meta: dict[str, object] = field(default_factory=dict)  # where it comes from (run, checkpoint)

    def to_dict(self) -> dict:
        compositions = [asdict(composition) for composition in self.compositions]
        return {**self.meta, "baseline": self.baseline, "compositions": compositions, "copying": self.copying}


@torch.no_grad()
def circuit_report(model: Transformer) -> CircuitReport:
    """Every composition score between a head and a head of a later layer of the same stack's
    self-attention, with its mode's baseline, and every head's OV copying score."""
    heads = head_weights(model)
    baseline = random_baseline(model.config.d_model, model.config.head_dim)
    compositions = []
    for early, early_weights in heads.items():
        for late, late_weights in heads.items():
            if not _feeds(early, late):
                continue
            for mode in MODES:
                score = composition_score(early_weights, late_weights, mode)
                compositions.append(Composition(mode, early, late, score, score / baseline[mode]["mean"]))
    compositions.sort(key=lambda composition: -composition.ratio)
    copying = {name: copying_score(model, weights) for name, weights in heads.items()}
    return CircuitReport(baseline, compositions, copying)


def head_weights(model: Transformer) -> dict[str, Head]:
    """Each self-attention head's W_Q, W_K, W_V (D, D_h) and W_O (D_h, D), by head name."""
    d_model, heads, head_dim = model.config.d_model, model.config.n_heads, model.config.head_dim
    found = {}
    for stack_name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        for index, layer in enumerate(stack.layers if stack is not None else []):
            attention = layer.self_attn
            q, k, v = attention.qkv_proj.weight.detach().double().view(3, heads, head_dim, d_model).transpose(2, 3)
            w_o = attention.out_proj.weight.detach().double().T.reshape(heads, head_dim, d_model)
            for head in range(heads):
                found[head_name(act_name(stack_name, index, "self"), head)] = (q[head], k[head], v[head], w_o[head])
    return found


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


def random_baseline(d_model: int, head_dim: int) -> dict[str, dict[str, float]]:
    """Each mode's composition score between heads of random Gaussian weights: mean, 95th percentile."""
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


def _feeds(early: str, late: str) -> bool:
    """Whether head `early` writes into the residual stream head `late` reads: same stack, earlier layer."""
    writer, reader = ActName.parse(early), ActName.parse(late)  # a head's name parses as its attention's
    return writer.stack == reader.stack and writer.layer < reader.layer


def render_text(report: CircuitReport) -> str:
    """The compositions, the highest ratio to the baseline first, then each head's copying score."""
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
    lines.append(f"\n{'head':<18} {'OV copying':>10}")
    lines += [f"{name:<18} {score:>10.3f}" for name, score in report.copying.items()]
    return "\n".join(lines)
