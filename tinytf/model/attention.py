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
pattern: see hooks.py), and the fused kernel otherwise: the same math, without ever
materialising the (T_q, T_k) weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tinytf.model.hooks import Probe
from tinytf.model.masks import bias_from_mask, continuation_bias, hides_every_key
from tinytf.model.names import child
from tinytf.model.positional import RotaryPositions


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
    attn_mask: broadcastable to (..., T_q, T_k); bool: True where the query may attend to
        the key (torch's polarity, *not* a pad_mask), or float: a bias added to the scores,
        0 to keep a key, a very negative number to hide it (masks.py builds both).
    dropout_p: dropout on the weights; like torch's, pass 0.0 in eval mode.
    is_causal: query i sees keys j <= i, both counted from the start (queries continuing a
        cached prefix need `causal_allowed(T_q, T_k)` as attn_mask). Not with an attn_mask.
    scale: the factor on Q K^T; by default 1 / sqrt(d_k).

    Returns output (..., T_q, D_h) and the weights (..., T_q, T_k), each row a probability
    distribution over the keys (before dropout). A query with every key masked has nothing
    to attend to: zero weights, a zero output and zero gradients, never NaN. torch's kernel
    gives the same for a bool mask or a row of -inf, but it averages the values on a row of
    the most negative finite float (masks.py's hidden value), where `attention` gives zeros.
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
        # Masking is addition: 0 keeps a key, the most negative float hides it (exp -> 0).
        scores = scores + bias_from_mask(attn_mask, scores.dtype)  # (..., T_q, T_k) + bias broadcast

    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k), each row sums to 1
    if attn_mask is not None:
        # A query that may see no key would get uniform weights over forbidden keys: it
        # gets none at all, so its output is zero (as in torch's kernel for a bool mask).
        weights = weights.masked_fill(hides_every_key(attn_mask), 0.0)  # (..., T_q, 1) broadcast over T_k
    attended = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
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

    def extend(self, k: torch.Tensor | None, v: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this call's keys and values (each (B, H, T_new, D_h)); returns all of them so
        far, (B, H, T_past + T_new, D_h). None, None (cross-attention after its first call,
        whose context does not change): the stored ones."""
        if k is not None:
            if self.keys is not None:
                k = torch.cat([self.keys, k], dim=2)
                v = torch.cat([self.values, v], dim=2)
            self.keys, self.values = k, v
        return self.keys, self.values


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
        Returns the output (B, T_q, D) and, if `return_attention`, the weights (B, H, T_q, T_k).
        A `cache` holds the keys and values of earlier calls (x: only the new positions). A
        `probe` sees, and may replace, q, k, v, pattern and z, named "<self.name>.q" etc.
        """
        if is_causal and attn_bias is not None:
            raise ValueError("pass either is_causal or an attn_bias that already holds the causal mask, not both")
        q, k, v, past = self._queries_keys_values(x, context, rope, cache)
        if is_causal and past:  # the new queries are the last T_q positions, not the first
            is_causal, attn_bias = False, continuation_bias(q.size(2), k.size(2), q.device, q.dtype)
        dropout = self.dropout if self.training else 0.0
        if probe is not None:
            q, k, v = (probe(child(self.name, part), t) for part, t in (("q", q), ("k", k), ("v", v)))
        weights = None
        if return_attention or (probe is not None and probe.wants(child(self.name, "pattern"))):
            heads, weights = attention(q, k, v, attn_mask=attn_bias, dropout_p=dropout, is_causal=is_causal)
            if probe is not None and (hooked := probe(child(self.name, "pattern"), weights)) is not weights:
                weights, heads = hooked, F.dropout(hooked, p=dropout) @ v  # the heads read the hook's weights
        else:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias, dropout_p=dropout, is_causal=is_causal)
            if attn_bias is not None:  # as in `attention`: a query that may see no key reads nothing
                heads = heads.masked_fill(hides_every_key(attn_bias), 0.0)  # (B, H, T_q, D_h)
        if probe is not None:
            heads = probe(child(self.name, "z"), heads)
        batch, _, query_len, _ = heads.shape  # heads: (B, H, T_q, D_h)
        concat = heads.transpose(1, 2).reshape(batch, query_len, -1)  # (B, H, T_q, D_h) -> (B, T_q, H*D_h = D)
        return self.out_proj(concat), (weights if return_attention else None)  # (B, T_q, D)

    def _queries_keys_values(
        self, x: torch.Tensor, context: torch.Tensor | None, rope: RotaryPositions | None, cache: KeyValueCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Q (B, H, T_q, D_h) and K, V (B, H, T_k, D_h), rotated by `rope` and extended by
        `cache`, and how many positions of x's sequence the cache held before."""
        context_cached = cache is not None and context is not None and cache.length > 0
        q, k, v = self._project(x, context, queries_only=context_cached)
        past = cache.length if cache is not None and context is None else 0
        if rope is not None:
            q, k = rope.rotate(q, start=past), rope.rotate(k, start=past)
        if cache is not None:
            k, v = cache.extend(k, v)  # (B, H, T_past + T_q, D_h), or the context's, computed once
        return q, k, v, past

    def _project(
        self, x: torch.Tensor, context: torch.Tensor | None, queries_only: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Q, K, V split into heads (each (B, H, T, D_h)): all three from x, or Q from x and
        K, V from context; K and V are None with `queries_only`."""
        if context is None:  # self-attention: one matmul for all three
            return tuple(self._split_heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))  # (B, T, 3D) -> 3 x
        d_model = x.size(-1)
        w, b = self.qkv_proj.weight, self.qkv_proj.bias
        q = self._split_heads(F.linear(x, w[:d_model], None if b is None else b[:d_model]))  # (B, H, T_q, D_h)
        if queries_only:
            return q, None, None
        kv = F.linear(context, w[d_model:], None if b is None else b[d_model:])  # (B, T_k, 2D)
        return (q, *(self._split_heads(t) for t in kv.chunk(2, dim=-1)))

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        batch, length, _ = t.shape
        return t.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)  # (B, T, D) -> (B, H, T, D_h)
