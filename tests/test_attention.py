"""Attention against independent references: PyTorch's nn.MultiheadAttention and a
NumPy transcription of softmax(Q K^T / sqrt(d_k)) V."""

import numpy as np
import pytest
import torch
from torch import nn

from tinytf.model.attention import MultiHeadAttention, scaled_dot_product_attention
from tinytf.model.masks import attention_bias, bias_from_allowed, causal_mask

D_MODEL, N_HEADS = 32, 4
TOL = dict(atol=1e-5, rtol=1e-5)


def numpy_attention(q, k, v, mask=None):
    """Straight from the formula, as the source material writes it (mask: 1 keep, 0 hide)."""
    scores = q @ np.swapaxes(k, -2, -1) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask == 0, -1e9, scores)
    exp = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = exp / exp.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def twin_modules(seed=0):
    """Our MultiHeadAttention and torch's, holding the same weights."""
    torch.manual_seed(seed)
    reference = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True)
    nn.init.normal_(reference.in_proj_bias)  # non-zero biases, so copying them is tested too
    nn.init.normal_(reference.out_proj.bias)
    ours = MultiHeadAttention(D_MODEL, N_HEADS)
    with torch.no_grad():
        ours.qkv_proj.weight.copy_(reference.in_proj_weight)
        ours.qkv_proj.bias.copy_(reference.in_proj_bias)
        ours.out_proj.weight.copy_(reference.out_proj.weight)
        ours.out_proj.bias.copy_(reference.out_proj.bias)
    return ours.eval(), reference.eval()


def padding(batch, length, lengths):
    """(B, T) bool, True at PAD positions, for sequences of the given real lengths."""
    return torch.arange(length).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)


@pytest.mark.parametrize("kind", ["self", "cross"])
@pytest.mark.parametrize("masking", ["none", "key_padding", "causal", "causal+key_padding"])
def test_multi_head_attention_matches_torch(kind, masking):
    ours, reference = twin_modules()
    x = torch.randn(3, 6, D_MODEL)
    context = x if kind == "self" else torch.randn(3, 6 if "causal" in masking else 9, D_MODEL)
    key_len = context.size(1)
    key_padding = padding(3, key_len, [key_len, 4, 2]) if "key_padding" in masking else None
    causal = "causal" in masking

    ref_out, ref_weights = reference(
        x, context, context,
        key_padding_mask=key_padding,
        attn_mask=~causal_mask(6, key_len) if causal else None,
        need_weights=True, average_attn_weights=False,
    )  # fmt: skip

    bias = attention_bias(key_padding, 6, causal)
    kwargs = dict(context=None if kind == "self" else context, attn_bias=bias, is_causal=causal and bias is None)
    out, weights = ours(x, need_weights=True, **kwargs)
    fused_out, no_weights = ours(x, need_weights=False, **kwargs)

    assert weights.shape == (3, N_HEADS, 6, key_len)
    torch.testing.assert_close(weights, ref_weights, **TOL)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(fused_out, ref_out, **TOL)  # the fused SDPA path: same outputs
    assert no_weights is None


def test_scaled_dot_product_attention_matches_numpy_formula():
    rng = np.random.default_rng(42)
    q, k, v = (rng.standard_normal((2, 3, 5, 8)).astype(np.float32) for _ in range(3))
    mask = np.tril(np.ones((5, 5)))  # causal, 1 = may attend
    expected_out, expected_weights = numpy_attention(q, k, v, mask)

    bias = bias_from_allowed(torch.from_numpy(mask).bool())
    out, weights = scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)), attn_bias=bias)
    np.testing.assert_allclose(weights.numpy(), expected_weights, atol=1e-5)
    np.testing.assert_allclose(out.numpy(), expected_out, atol=1e-5)

    # is_causal=True is the same mask
    out_causal, weights_causal = scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)), is_causal=True)
    np.testing.assert_allclose(weights_causal.numpy(), expected_weights, atol=1e-5)
    np.testing.assert_allclose(out_causal.numpy(), expected_out, atol=1e-5)


def test_unmasked_attention_matches_numpy_and_rows_sum_to_one():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((4, 7)).astype(np.float32), *(rng.standard_normal((2, 6, 7)).astype(np.float32))
    expected_out, expected_weights = numpy_attention(q, k, v)
    out, weights = scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)))
    np.testing.assert_allclose(out.numpy(), expected_out, atol=1e-5)
    np.testing.assert_allclose(weights.numpy(), expected_weights, atol=1e-5)
    np.testing.assert_allclose(weights.sum(-1).numpy(), np.ones(4), atol=1e-6)


def test_fully_masked_query_rows_stay_finite():
    ours, _ = twin_modules()
    x = torch.randn(2, 5, D_MODEL)
    everything_padded = torch.ones(2, 5, dtype=torch.bool)
    bias = attention_bias(everything_padded, 5, causal=True)
    for need_weights in (True, False):
        out, weights = ours(x, attn_bias=bias, need_weights=need_weights)
        assert torch.isfinite(out).all()
        if need_weights:
            assert torch.isfinite(weights).all()


def test_masked_keys_get_zero_weight():
    ours, _ = twin_modules()
    x = torch.randn(2, 5, D_MODEL)
    key_padding = padding(2, 5, [5, 3])
    _, weights = ours(x, attn_bias=attention_bias(key_padding, 5, causal=False), need_weights=True)
    assert weights[1, :, :, 3:].abs().max() == 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, N_HEADS, 5))


def test_causal_and_bias_together_is_refused():
    ours, _ = twin_modules()
    x = torch.randn(1, 3, D_MODEL)
    with pytest.raises(ValueError, match="either"):
        ours(x, attn_bias=torch.zeros(1, 1, 3, 3), is_causal=True)


def test_causal_mask_aligns_queries_to_the_end_of_the_keys():
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert causal_mask(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
