"""Attention masks, as additive biases on the attention scores.

Shape legend: B batch, T_q query length, T_k key length.

A mask says which keys each query may look at. We carry it as a *bias* added to the
scores before the softmax: 0 where attention is allowed, a very large negative number
where it is not. `exp` of that number is 0, so a masked key gets zero weight.

We use the most negative finite float rather than -inf on purpose: a query whose keys
are *all* masked then gets finite (uniform) weights instead of 0/0 = NaN.
"""

from __future__ import annotations

import torch


def causal_mask(query_len: int, key_len: int, device: torch.device | None = None) -> torch.Tensor:
    """True where query i may attend to key j, i.e. j <= i (no peeking at the future).

    With key_len > query_len (queries that continue a cached prefix) the queries are the
    *last* `query_len` positions. Shape (T_q, T_k).
    """
    offset = key_len - query_len
    query_pos = torch.arange(query_len, device=device).unsqueeze(1) + offset  # (T_q, 1)
    key_pos = torch.arange(key_len, device=device).unsqueeze(0)  # (1, T_k)
    return key_pos <= query_pos  # (T_q, T_k)


def attention_bias(
    key_padding: torch.Tensor | None,
    query_len: int,
    causal: bool,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor | None:
    """The additive bias for a stack's attention, built once per forward pass.

    key_padding: (B, T_k) bool, True where the key is a PAD token, or None.
    Returns (B, 1, T_q, T_k) -- broadcast over heads -- or None when nothing is masked.
    A causal mask without padding returns None too: attention applies that one itself
    (`is_causal=True`), which lets the fused kernel skip the masked half.
    """
    if key_padding is None:
        return None
    batch, key_len = key_padding.shape
    allowed = ~key_padding[:, None, None, :]  # (B, 1, 1, T_k)
    if causal:
        allowed = allowed & causal_mask(query_len, key_len, key_padding.device)  # (B, 1, T_q, T_k)
    else:
        allowed = allowed.expand(batch, 1, query_len, key_len)  # (B, 1, T_q, T_k)
    return bias_from_allowed(allowed, dtype)


def bias_from_allowed(allowed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Boolean "may attend" mask -> additive bias: 0 where allowed, most negative float elsewhere."""
    bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return bias.masked_fill_(~allowed, torch.finfo(dtype).min)
