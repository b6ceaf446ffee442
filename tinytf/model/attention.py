"""Scaled dot-product attention and multi-head attention.

Shape legend (used in every comment below):
    B    batch size
    H    number of heads
    T_q  query length (the sequence that asks)
    T_k  key/value length (the sequence that is looked at; T_k = T_q in self-attention)
    D    model width, d_model
    D_h  head width, d_k = d_v = D / H

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
    MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W_O,  head_i = Attention(Q W_Q_i, K W_K_i, V W_V_i)

`attention` writes the first formula out step by step. It takes the same arguments as
`torch.nn.functional.scaled_dot_product_attention` (PyTorch's fused kernel), with the
same meaning, and also returns the attention weights. `MultiHeadAttention` calls
`attention` when the weights are asked for (`return_attention`, or a probe that wants its
pattern: see hooks.py). Otherwise it takes whichever of the two trained faster where we
measured it: on a CPU, `attention` for 1 to 48 keys except 16 (16 too with heads 32 or
more wide: see `explicit_keys`), causal, padded or neither, and at every length in bf16;
the fused kernel for other lengths, and always on a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tinytf.model.hooks import Probe
from tinytf.model.masks import bias_from_allowed, causal_allowed
from tinytf.model.positional import RotaryPositions

MIN_SOFTMAX_ROW = 16  # shorter rows of scores are padded to this many keys (softmax_over_keys)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k) + mask) V, step by step; returns (output, weights).

    The arguments mean what they mean for `torch.nn.functional.scaled_dot_product_attention`:
    q: (..., T_q, D_h), k: (..., T_k, D_h), v: (..., T_k, D_h)
    attn_mask: broadcastable to (..., T_q, T_k), either
        bool:  True where the query may attend to the key (torch's polarity; the
               "allowed" of masks.py, *not* a pad_mask), or
        float: a bias added to the scores, 0 to keep a key, a very negative number to
               hide it (masks.py builds these).
    dropout_p: dropout on the weights. Like torch's, this function does not look at
        `module.training`: pass 0.0 in eval mode.
    is_causal: hide the future, query i sees keys j <= i. As in torch, both count from the
        start, also when T_q != T_k (queries continuing a cached prefix need
        `causal_allowed(T_q, T_k)` as attn_mask instead). Together with an attn_mask it
        raises ValueError: put the causal part into the mask (torch's documented
        reference refuses the combination too).
    scale: the factor on Q K^T; by default 1 / sqrt(d_k).

    Returns output (..., T_q, D_h) and the attention weights (..., T_q, T_k), each row
    a probability distribution over the keys (before dropout). A query whose keys are
    all masked gets uniform weights, not NaN.
    """
    if is_causal and attn_mask is not None:
        raise ValueError("pass either is_causal or an attn_mask that already holds the causal mask, not both")
    query_len, key_len, d_k = q.size(-2), k.size(-2), q.size(-1)
    if scale is None:
        # Dividing by sqrt(d_k) keeps the scores' variance near 1 whatever the head width,
        # so the softmax does not saturate into a one-hot with vanishing gradients.
        scale = 1 / math.sqrt(d_k)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T_q, D_h) @ (..., D_h, T_k) -> (..., T_q, T_k)

    if is_causal:
        attn_mask = torch.ones(query_len, key_len, dtype=torch.bool, device=q.device).tril()  # (T_q, T_k), j <= i
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            # A bool mask says *whether* to attend; added as 0/1 it would barely change
            # the scores. Turn it into a bias: 0 where allowed, most negative float elsewhere.
            attn_mask = bias_from_allowed(attn_mask, scores.dtype)
        elif not attn_mask.is_floating_point():
            raise TypeError(f"attn_mask must be bool (True = may attend) or float (a bias), got {attn_mask.dtype}")
        scores = scores + attn_mask  # (..., T_q, T_k) + bias broadcast to (..., T_q, T_k)

    weights = softmax_over_keys(scores)  # (..., T_q, T_k), each row sums to 1
    attended = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    output = attended @ v  # (..., T_q, T_k) @ (..., T_k, D_h) -> (..., T_q, D_h)
    return output, weights


def softmax_over_keys(scores: torch.Tensor) -> torch.Tensor:
    """torch.softmax(scores, dim=-1), quicker on a CPU for rows of fewer than 16 keys.

    PyTorch's CPU softmax is slow on rows shorter than 16 floats (one AVX-512 vector):
    forward and backward, (64, 4, 12, 12) scores took 0.85 ms on one thread, and 0.20 ms
    padded to (64, 4, 12, 16) as here, padding and slicing included; 16 keys took 0.12 ms
    unpadded. So a short row gets -inf scores up to 16 keys: keys whose weight is exactly
    0, dropped again after.
    """
    key_len = scores.size(-1)
    padded = pad_short_rows(scores)  # (..., T_q, T_k) -> (..., T_q, max(T_k, 16)) on a CPU
    if padded is scores:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(padded, dim=-1)[..., :key_len].contiguous()  # (..., T_q, 16) -> (..., T_q, T_k)


def pad_short_rows(x: torch.Tensor) -> torch.Tensor:
    """x itself, or on a CPU, if its last dimension is shorter than MIN_SOFTMAX_ROW, x padded
    to that length with -inf: entries whose softmax is exactly 0 (see softmax_over_keys;
    the loss pads small vocabularies' logits the same way)."""
    length = x.size(-1)
    if length >= MIN_SOFTMAX_ROW or x.device.type != "cpu":
        return x
    return F.pad(x, (0, MIN_SOFTMAX_ROW - length), value=float("-inf"))  # (..., length) -> (..., 16)


# The shape rule, from whole training steps of a 2-layer causal LM on a 2-core CPU, each
# path forced. Head width 16:
# with 20 to 48 keys the explicit path took 0.78-0.98x the kernel's time (five runs; once
# 1.04x). At exactly 16 keys the kernel wins (1.07-1.10x in four runs, causal and padded).
# Below 16 the explicit path gained once its softmax was padded to 16 keys
# (softmax_over_keys): 0.90x and 0.95x at 8 and 10 keys, 1.05x and 1.03x at 12 and 13
# (causal), 0.91-0.94x from 8 to 13 under a padding bias. On the shipped configs'
# own steps (batch 64; 8 to 13 keys where they changed path), this rule and the padding
# took 0.90-1.03x the time of the rule before (17-48 keys; median 0.97x over 30 configs).
# Under 8 keys nothing was timed at head width 16. Head width 32: 0.72-1.01x from 8 to 48
# keys. Head width 64: 0.92-1.03x from 8 to 64, a tie. From 49 keys the kernel runs (at 64
# keys, head width 16, the paths swing between 0.92x and 1.17x over causal and padded runs).
# All of these timings are float32. Under a padding bias (a 2-layer encoder, rows padded
# to the longest) the same lengths gain as without.
WIDE_HEAD_DIM = 32  # heads at least this wide take the explicit path at 16 keys too
EXPLICIT_KEYS_WIDE_HEADS = range(1, 49)  # head widths of WIDE_HEAD_DIM and more
EXPLICIT_KEYS = frozenset(EXPLICIT_KEYS_WIDE_HEADS) - {16}  # narrower heads: not at exactly 16 keys


def explicit_keys(head_dim: int) -> Container[int]:
    """Key lengths at which a CPU takes the explicit path: where it trained faster than the
    fused kernel, or (12 and 13 causal keys) where the shipped configs' steps gained overall."""
    return EXPLICIT_KEYS_WIDE_HEADS if head_dim >= WIDE_HEAD_DIM else EXPLICIT_KEYS


@dataclass
class KeyValueCache:
    """The keys and values one attention module has computed so far. During generation a
    new token's query attends to them instead of recomputing the whole prefix."""

    keys: torch.Tensor | None = None  # (B, H, T_past, D_h)
    values: torch.Tensor | None = None  # (B, H, T_past, D_h)

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.size(2)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, for self-attention (keys from `x`) and cross-attention
    (keys from `context`, e.g. the encoder's output).

    W_Q, W_K and W_V are stored stacked in one (3D, D) matrix, the layout of
    `torch.nn.MultiheadAttention.in_proj_weight`: self-attention projects all three
    with a single matmul; cross-attention applies the W_Q rows to the queries and the
    W_K, W_V rows to the context.
    """

    def __init__(
        self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, name: str = "attention"
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.name = name  # where its activations are found, e.g. "decoder.1.cross" (see hooks.py)
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.dropout = dropout
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)  # [W_Q; W_K; W_V]
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O
        # Without weights asked for, on a CPU: the explicit path for these key lengths, the
        # fused kernel otherwise (same math; see explicit_keys). range(0): never.
        self.explicit_keys = explicit_keys(self.head_dim)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        attn_bias: torch.Tensor | None = None,
        is_causal: bool = False,
        rope: RotaryPositions | None = None,
        return_attention: bool = False,
        cache: KeyValueCache | None = None,
        probe: Probe | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, T_q, D) queries; context: (B, T_k, D) keys/values, or None for self-attention.

        attn_bias: float, added to the scores, broadcastable to (B, H, T_q, T_k) (see
        masks.attention_bias); is_causal: hide the future instead (not both).
        Returns the output (B, T_q, D) and, if `return_attention`, the per-head attention
        weights (B, H, T_q, T_k); otherwise None, from the faster path for this shape.
        With a `cache`, self-attention appends this call's keys and values to it (x holds
        only the new positions) and cross-attention computes the context's once.
        A `probe` sees (and its hooks may replace) q, k, v, pattern and z, named
        "<self.name>.q" and so on.
        """
        if is_causal and attn_bias is not None:
            raise ValueError("pass either is_causal or an attn_bias that already holds the causal mask, not both")
        cached_context = cache is not None and context is not None and cache.keys is not None
        q, k, v = self._project(x, None if cached_context else context, queries_only=cached_context)
        q = self._split_heads(q)  # (B, T_q, D) -> (B, H, T_q, D_h)
        if cached_context:
            k, v = cache.keys, cache.values  # the context does not change between steps
        else:
            k, v = self._split_heads(k), self._split_heads(v)  # each (B, T_k, D) -> (B, H, T_k, D_h)
        past = cache.length if cache is not None and context is None else 0  # positions already cached
        if rope is not None:
            q, k = rope.rotate(q, start=past), rope.rotate(k, start=past)
        if cache is not None and not cached_context:
            if past:
                k = torch.cat([cache.keys, k], dim=2)  # (B, H, T_past + T_q, D_h)
                v = torch.cat([cache.values, v], dim=2)
            cache.keys, cache.values = k, v
        if is_causal and past:
            # The new queries are the last T_q positions (is_causal would align them with
            # the first); one query alone may see everything.
            is_causal = False
            if q.size(2) > 1:
                attn_bias = bias_from_allowed(causal_allowed(q.size(2), k.size(2), q.device), q.dtype)  # (T_q, T_k)
        dropout = self.dropout if self.training else 0.0
        if probe is not None:
            q, k, v = (probe(f"{self.name}.{part}", t) for part, t in (("q", q), ("k", k), ("v", v)))

        if return_attention or (probe is not None and probe.wants(f"{self.name}.pattern")):
            heads, weights = attention(q, k, v, attn_mask=attn_bias, dropout_p=dropout, is_causal=is_causal)
            if probe is not None:
                hooked = probe(f"{self.name}.pattern", weights)
                if hooked is not weights:  # a hook replaced the weights: the heads read the new ones
                    weights = hooked
                    heads = F.dropout(weights, p=dropout) @ v  # (B, H, T_q, T_k) @ (B, H, T_k, D_h)
        elif q.device.type == "cpu" and (q.dtype == torch.bfloat16 or k.size(2) in self.explicit_keys):
            # (bf16, as under train.precision's autocast: the fused kernel was 1.5-6x slower at
            # every length measured, 12 to 96 keys; the shape rule is float32's)
            heads, weights = attention(q, k, v, attn_mask=attn_bias, dropout_p=dropout, is_causal=is_causal)
        else:
            # Same math and same arguments, fused: never materialises the (T_q, T_k) weights.
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias, dropout_p=dropout, is_causal=is_causal)
            weights = None
        if probe is not None:
            heads = probe(f"{self.name}.z", heads)
        # heads: (B, H, T_q, D_h); weights: (B, H, T_q, T_k) or None
        batch, _, query_len, _ = heads.shape
        concat = heads.transpose(1, 2).reshape(batch, query_len, -1)  # (B, H, T_q, D_h) -> (B, T_q, H*D_h = D)
        return self.out_proj(concat), (weights if return_attention else None)  # (B, T_q, D)

    def _project(
        self, x: torch.Tensor, context: torch.Tensor | None, queries_only: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Q, K, V (each (B, T, D)): all three from x, or Q from x and K, V from context."""
        if context is None and not queries_only:  # self-attention: one matmul for all three
            return self.qkv_proj(x).chunk(3, dim=-1)  # (B, T, 3D) -> 3 x (B, T, D)
        d_model = x.size(-1)
        w, b = self.qkv_proj.weight, self.qkv_proj.bias
        q = F.linear(x, w[:d_model], None if b is None else b[:d_model])  # (B, T_q, D)
        if queries_only:
            return q, None, None
        kv = F.linear(context, w[d_model:], None if b is None else b[d_model:])  # (B, T_k, 2D)
        return (q, *kv.chunk(2, dim=-1))

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        batch, length, _ = t.shape
        return t.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)  # (B, T, D) -> (B, H, T, D_h)
