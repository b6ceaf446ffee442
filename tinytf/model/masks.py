"""Attention masks, named by their polarity, and the additive biases built from them.

Shape legend: B batch, T_q query length, T_k key length.

Three conventions, each with its own name, so that no caller has to negate one mask to
pass it to a function that expects another:

    pad_mask  (B, T_k) bool, True at a PAD position: a key to *hide*. The model's public
              inputs use this one (`model(tokens, pad_mask=...)`).
    allowed   bool, True where query i *may* attend to key j (`causal_allowed` returns
              one). torch's `attn_mask` uses the same polarity when it is bool.
    bias      float, *added* to the attention scores: 0 where attention is allowed, a
              very large negative number where it is not. `exp` of that number is 0,
              so a masked key gets zero weight. This is what attention consumes.

We use the most negative finite float rather than -inf on purpose: a query whose keys
are *all* masked then keeps finite scores instead of a softmax of 0/0 = NaN (in its value
and in its gradient). Attention then gives that query zero weights (`hides_every_key`
finds it), as torch's fused kernel does for a bool mask.
"""

from __future__ import annotations

import torch


def causal_allowed(query_len: int, key_len: int, device: torch.device | None = None) -> torch.Tensor:
    """True where query i may attend to key j, i.e. j <= i (no peeking at the future).

    With key_len > query_len (queries that continue a cached prefix) the queries are the
    *last* `query_len` positions. Shape (T_q, T_k).
    """
    offset = key_len - query_len
    query_pos = torch.arange(query_len, device=device).unsqueeze(1) + offset  # (T_q, 1)
    key_pos = torch.arange(key_len, device=device).unsqueeze(0)  # (1, T_k)
    return key_pos <= query_pos  # (T_q, 1) vs (1, T_k) -> (T_q, T_k)


def continuation_bias(query_len: int, key_len: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
    """The causal bias of `query_len` new queries that continue a cached prefix of
    `key_len - query_len` keys, (T_q, T_k); None for one query, which may see every key."""
    if query_len == 1:
        return None
    return bias_from_allowed(causal_allowed(query_len, key_len, device), dtype)


def bias_from_allowed(allowed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Bool "may attend" mask (True = allowed) -> additive bias of the same shape:
    0 where allowed, the most negative finite float where not."""
    bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return bias.masked_fill_(~allowed, torch.finfo(dtype).min)


def bias_from_mask(attn_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """torch's `attn_mask` as a bias to add to the scores, in `dtype` for a bool mask.

    A bool mask says *whether* to attend (True = may attend); added as 0/1 it would barely
    change the scores, so it becomes 0 where allowed, the most negative float elsewhere. A
    float mask is a bias already; its -inf becomes the most negative float, which hides a
    key as well and cannot turn a fully masked row into a softmax of 0/0 = NaN.
    """
    if attn_mask.dtype == torch.bool:
        return bias_from_allowed(attn_mask, dtype)
    if not attn_mask.is_floating_point():
        raise TypeError(f"attn_mask must be bool (True = may attend) or float (a bias), got {attn_mask.dtype}")
    return attn_mask.clamp(min=torch.finfo(attn_mask.dtype).min)


def hides_every_key(mask: torch.Tensor) -> torch.Tensor:
    """True for each query that `mask` lets see no key at all; (..., T_q, T_k) -> (..., T_q, 1).

    mask: bool "may attend" (a row all False), or a float bias (a row all hidden: the most
    negative float, as `bias_from_allowed` writes it, or -inf).
    """
    if mask.dtype == torch.bool:
        return ~mask.any(dim=-1, keepdim=True)
    return (mask <= torch.finfo(mask.dtype).min).all(dim=-1, keepdim=True)


def attention_bias(
    pad_mask: torch.Tensor | None,
    query_len: int,
    causal: bool,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor | None:
    """The additive bias for a stack's attention, built once per forward pass.

    pad_mask: (B, T_k) bool, True where the key is a PAD token (hidden), or None.
    causal: also hide the future (see `causal_allowed`).
    Returns (B, 1, T_q, T_k) -- broadcast over heads -- or None when nothing is masked.
    A causal mask without padding returns None too: attention applies that one itself
    (`is_causal=True`), which lets the fused kernel skip the masked half.
    """
    if pad_mask is None:
        return None
    batch, key_len = pad_mask.shape
    allowed = ~pad_mask[:, None, None, :]  # PAD = hidden -> allowed = not PAD; (B, T_k) -> (B, 1, 1, T_k)
    if causal:
        allowed = allowed & causal_allowed(query_len, key_len, pad_mask.device)  # (B, 1, T_q, T_k)
    else:
        allowed = allowed.expand(batch, 1, query_len, key_len)  # (B, 1, T_q, T_k)
    return bias_from_allowed(allowed, dtype)
