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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tinytf.model.masks import bias_from_allowed, causal_mask
from tinytf.model.positional import RotaryPositions


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_bias: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k) + bias) V, step by step; returns (output, weights).

    q: (..., T_q, D_h), k: (..., T_k, D_h), v: (..., T_k, D_h)
    attn_bias: additive, broadcastable to (..., T_q, T_k) -- 0 keeps a key, a very
        negative number masks it (see masks.py).
    is_causal: hide the future (key j > query i); use it instead of a bias, not with one.
    Returns output (..., T_q, D_h) and the attention weights (..., T_q, T_k), each row
    a probability distribution over the keys (before dropout).
    """
    d_k = q.size(-1)
    # Dividing by sqrt(d_k) keeps the scores' variance near 1 whatever the head width,
    # so the softmax does not saturate into a one-hot with vanishing gradients.
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, D_h) @ (..., D_h, T_k) -> (..., T_q, T_k)
    if is_causal:
        future = ~causal_mask(q.size(-2), k.size(-2), q.device)  # (T_q, T_k)
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
    if attn_bias is not None:
        scores = scores + attn_bias
    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k), each row sums to 1
    attended = F.dropout(weights, p=dropout) if dropout > 0 else weights
    output = attended @ v  # (..., T_q, T_k) @ (..., T_k, D_h) -> (..., T_q, D_h)
    return output, weights


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

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.dropout = dropout
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)  # [W_Q; W_K; W_V]
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
        is_causal: bool = False,
        rope: RotaryPositions | None = None,
        need_weights: bool = False,
        cache: KeyValueCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, T_q, D) queries; context: (B, T_k, D) keys/values, or None for self-attention.

        Returns the output (B, T_q, D) and, if `need_weights`, the per-head attention
        weights (B, H, T_q, T_k); otherwise None, and PyTorch's fused kernel is used.
        With a `cache`, self-attention appends this call's keys and values to it (x holds
        only the new positions) and cross-attention computes the context's once.
        """
        if is_causal and attn_bias is not None:
            raise ValueError("pass either is_causal or an attn_bias that already holds the causal mask, not both")
        cached_context = cache is not None and context is not None and cache.keys is not None
        q, k, v = self._project(x, None if cached_context else context, queries_only=cached_context)
        q = self._split_heads(q)  # (B, T_q, D) -> (B, H, T_q, D_h)
        if cached_context:
            k, v = cache.keys, cache.values  # the context does not change between steps
        else:
            k, v = self._split_heads(k), self._split_heads(v)  # each (B, H, T_k, D_h)
        past = cache.length if cache is not None and context is None else 0  # positions already cached
        if rope is not None:
            q, k = rope.rotate(q, start=past), rope.rotate(k, start=past)
        if cache is not None and not cached_context:
            if past:
                k = torch.cat([cache.keys, k], dim=2)  # (B, H, T_past + T_q, D_h)
                v = torch.cat([cache.values, v], dim=2)
            cache.keys, cache.values = k, v
        if is_causal and past:
            # The new queries are the last T_q positions; one query alone may see everything.
            is_causal = False
            if q.size(2) > 1:
                attn_bias = bias_from_allowed(causal_mask(q.size(2), k.size(2), q.device), q.dtype)
        dropout = self.dropout if self.training else 0.0

        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, attn_bias, is_causal, dropout)
        else:
            # Same math, fused: never materialises the (T_q, T_k) weights it would throw away.
            heads = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_bias, dropout_p=dropout, is_causal=is_causal and attn_bias is None
            )  # (B, H, T_q, D_h)
            weights = None

        batch, _, query_len, _ = heads.shape
        concat = heads.transpose(1, 2).reshape(batch, query_len, -1)  # (B, H, T_q, D_h) -> (B, T_q, H*D_h = D)
        return self.out_proj(concat), weights  # (B, T_q, D)

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
