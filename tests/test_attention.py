"""Attention against independent references: PyTorch's nn.MultiheadAttention and
F.scaled_dot_product_attention, and a NumPy transcription of softmax(Q K^T / sqrt(d_k)) V."""

import importlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tinytf.model.attention import MultiHeadAttention, attention
from tinytf.model.masks import attention_bias, bias_from_allowed, causal_allowed

D_MODEL, N_HEADS = 32, 4
TOL = dict(atol=1e-5, rtol=1e-5)


attention_module = importlib.import_module("tinytf.model.attention")  # tinytf.model.attention is also a function


def numpy_attention(q, k, v, mask=None):
    """Straight from the formula, as the textbooks write it (mask: 1 keep, 0 hide)."""
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
    pad_mask = padding(3, key_len, [key_len, 4, 2]) if "key_padding" in masking else None
    causal = "causal" in masking

    ref_out, ref_weights = reference(
        x,
        context,
        context,
        key_padding_mask=pad_mask,  # torch's key_padding_mask: True = PAD, like our pad_mask
        attn_mask=~causal_allowed(6, key_len) if causal else None,  # nn.MultiheadAttention's: True = hidden
        need_weights=True,
        average_attn_weights=False,
    )

    bias = attention_bias(pad_mask, 6, causal)
    kwargs = dict(context=None if kind == "self" else context, attn_bias=bias, is_causal=causal and bias is None)
    out, weights = ours(x, return_attention=True, **kwargs)
    assert weights.shape == (3, N_HEADS, 6, key_len)
    torch.testing.assert_close(weights, ref_weights, **TOL)
    torch.testing.assert_close(out, ref_out, **TOL)
    fused_out, no_weights = ours(x, **kwargs)  # without weights: the fused kernel
    torch.testing.assert_close(fused_out, ref_out, **TOL)
    assert no_weights is None


@pytest.fixture
def key_lengths(monkeypatch):
    """The key length of every call that takes the explicit path, in order."""
    lengths = []

    def recording_attention(q, k, v, **kwargs):
        lengths.append(k.size(-2))
        return attention(q, k, v, **kwargs)

    monkeypatch.setattr(attention_module, "attention", recording_attention)
    return lengths


@pytest.mark.parametrize("precision", [torch.float32, torch.bfloat16])
def test_the_explicit_path_runs_exactly_when_the_weights_are_asked_for(key_lengths, precision):
    module = MultiHeadAttention(D_MODEL, N_HEADS)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == torch.bfloat16):
        for length in (1, 12, 16, 49):
            _, weights = module(torch.randn(2, length, D_MODEL), is_causal=True)
            assert weights is None
        assert key_lengths == []  # the fused kernel, at every length and precision
        for length in (1, 12, 16, 49):
            _, weights = module(torch.randn(2, length, D_MODEL), is_causal=True, return_attention=True)
            assert weights.shape == (2, N_HEADS, length, length)
    assert key_lengths == [1, 12, 16, 49]


@pytest.mark.parametrize("masking", ["causal", "bias"])
def test_both_paths_give_the_same_gradients(masking):
    torch.manual_seed(0)
    module = MultiHeadAttention(D_MODEL, N_HEADS)
    x = torch.randn(3, 7, D_MODEL)
    bias = attention_bias(padding(3, 7, [7, 5, 2]), 7, causal=True) if masking == "bias" else None
    gradients = []
    for explicit in (False, True):  # the fused kernel; the explicit path (which the weights need)
        module.zero_grad()
        given = x.clone().requires_grad_()
        out, _ = module(given, attn_bias=bias, is_causal=bias is None, return_attention=explicit)
        out.square().sum().backward()
        gradients.append([given.grad, *(p.grad for p in module.parameters())])
    for fused, explicit in zip(*gradients, strict=True):
        torch.testing.assert_close(explicit, fused, **TOL)


def test_attention_matches_numpy_formula():
    rng = np.random.default_rng(42)
    q, k, v = (rng.standard_normal((2, 3, 5, 8)).astype(np.float32) for _ in range(3))
    mask = np.tril(np.ones((5, 5)))  # causal, 1 = may attend
    expected_out, expected_weights = numpy_attention(q, k, v, mask)

    bias = bias_from_allowed(torch.from_numpy(mask).bool())
    out, weights = attention(*map(torch.from_numpy, (q, k, v)), attn_mask=bias)
    np.testing.assert_allclose(weights.numpy(), expected_weights, atol=1e-5)
    np.testing.assert_allclose(out.numpy(), expected_out, atol=1e-5)

    # is_causal=True is the same mask
    out_causal, weights_causal = attention(*map(torch.from_numpy, (q, k, v)), is_causal=True)
    np.testing.assert_allclose(weights_causal.numpy(), expected_weights, atol=1e-5)
    np.testing.assert_allclose(out_causal.numpy(), expected_out, atol=1e-5)


def test_unmasked_attention_matches_numpy_and_rows_sum_to_one():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((4, 7)).astype(np.float32), *(rng.standard_normal((2, 6, 7)).astype(np.float32))
    expected_out, expected_weights = numpy_attention(q, k, v)
    out, weights = attention(*map(torch.from_numpy, (q, k, v)))
    np.testing.assert_allclose(out.numpy(), expected_out, atol=1e-5)
    np.testing.assert_allclose(weights.numpy(), expected_weights, atol=1e-5)
    np.testing.assert_allclose(weights.sum(-1).numpy(), np.ones(4), atol=1e-6)


def test_fully_masked_query_rows_stay_finite():
    ours, _ = twin_modules()
    x = torch.randn(2, 5, D_MODEL)
    everything_padded = torch.ones(2, 5, dtype=torch.bool)
    bias = attention_bias(everything_padded, 5, causal=True)
    for return_attention in (True, False):
        out, weights = ours(x, attn_bias=bias, return_attention=return_attention)
        assert torch.isfinite(out).all()
        if return_attention:
            assert torch.isfinite(weights).all()


def test_masked_keys_get_zero_weight():
    ours, _ = twin_modules()
    x = torch.randn(2, 5, D_MODEL)
    pad_mask = padding(2, 5, [5, 3])
    _, weights = ours(x, attn_bias=attention_bias(pad_mask, 5, causal=False), return_attention=True)
    assert weights[1, :, :, 3:].abs().max() == 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, N_HEADS, 5))


def test_causal_and_bias_together_is_refused():
    ours, _ = twin_modules()
    x = torch.randn(1, 3, D_MODEL)
    with pytest.raises(ValueError, match="either"):
        ours(x, attn_bias=torch.zeros(1, 1, 3, 3), is_causal=True)


def test_causal_allowed_aligns_queries_to_the_end_of_the_keys():
    assert causal_allowed(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert causal_allowed(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_attention_bias_hides_pad_keys_and_the_future():
    pad_mask = torch.tensor([[False, False, True]])  # True = PAD
    bias = attention_bias(pad_mask, 3, causal=True)  # (1, 1, 3, 3)
    hidden = torch.finfo(bias.dtype).min
    assert bias[0, 0].tolist() == [[0, hidden, hidden], [0, 0, hidden], [0, 0, hidden]]
    assert attention_bias(None, 3, causal=True) is None


def random_qkv(query_len=5, key_len=7, seed=0):
    torch.manual_seed(seed)
    return torch.randn(2, 3, query_len, 8), torch.randn(2, 3, key_len, 8), torch.randn(2, 3, key_len, 8)


def some_allowed(query_len=5, key_len=7, seed=1):
    """A random bool mask (True = may attend) that leaves every query at least one key."""
    allowed = torch.rand(query_len, key_len, generator=torch.Generator().manual_seed(seed)) > 0.5
    allowed[:, 0] = True
    return allowed  # (T_q, T_k)


TORCH_SDPA_CASES = {
    "no-mask": lambda t_q, t_k: {},
    "bool-mask": lambda t_q, t_k: {"attn_mask": some_allowed(t_q, t_k)},  # True = may attend
    "bool-mask-full-shape": lambda t_q, t_k: {"attn_mask": some_allowed(t_q, t_k).expand(2, 3, t_q, t_k)},
    "float-mask": lambda t_q, t_k: {"attn_mask": torch.randn(t_q, t_k)},  # added to the scores
    "is_causal": lambda t_q, t_k: {"is_causal": True},
    "scale": lambda t_q, t_k: {"scale": 0.3},
    "bool-mask+scale": lambda t_q, t_k: {"attn_mask": some_allowed(t_q, t_k), "scale": 2.0},
    "dropout_p=0": lambda t_q, t_k: {"dropout_p": 0.0},
}


@pytest.mark.parametrize("case", TORCH_SDPA_CASES)
@pytest.mark.parametrize("query_len", [5, 7])  # T_q < T_k and self-attention's T_q = T_k
def test_attention_matches_torch_sdpa(case, query_len):
    """Same arguments, same meaning as F.scaled_dot_product_attention: same output."""
    q, k, v = random_qkv(query_len=query_len, key_len=7)
    arguments = TORCH_SDPA_CASES[case](query_len, 7)
    out, weights = attention(q, k, v, **arguments)
    expected = F.scaled_dot_product_attention(q, k, v, **arguments)
    torch.testing.assert_close(out, expected, **TOL)
    assert weights.shape == (2, 3, query_len, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, query_len))  # rows are distributions


def test_bool_mask_means_may_attend_not_plus_one():
    q, k, v = random_qkv()
    allowed = some_allowed()  # (T_q, T_k)
    out, weights = attention(q, k, v, attn_mask=allowed)
    out_bias, weights_bias = attention(q, k, v, attn_mask=bias_from_allowed(allowed))
    torch.testing.assert_close(out, out_bias)
    torch.testing.assert_close(weights, weights_bias)
    assert weights[..., ~allowed].abs().max() == 0  # a hidden key gets exactly zero weight

    out_plus_one, _ = attention(q, k, v, attn_mask=allowed.float())  # the trap: 0/1 added to the scores
    assert not torch.allclose(out, out_plus_one, atol=1e-3)


def test_attention_rejects_integer_masks():
    q, k, v = random_qkv()
    with pytest.raises(TypeError, match="bool"):
        attention(q, k, v, attn_mask=some_allowed().long())


def test_attention_refuses_is_causal_with_a_mask():
    q, k, v = random_qkv(query_len=7)
    with pytest.raises(ValueError, match="either"):
        attention(q, k, v, attn_mask=causal_allowed(7, 7), is_causal=True)


def test_attention_weights_are_taken_before_dropout():
    q, k, v = random_qkv()
    torch.manual_seed(0)
    out, weights = attention(q, k, v, dropout_p=0.5)
    _, undropped = attention(q, k, v)
    torch.testing.assert_close(weights, undropped)
    assert not torch.allclose(out, undropped @ v)  # the output did see dropout


MASK_KINDS = ["bool", "-inf", "most-negative-float"]  # the three ways to hide a key


def hiding_query_2(kind, query_len=5, key_len=7):
    """A (T_q, T_k) mask of the given kind under which query 2 may see no key and every other
    query at least one; returns it with the same mask as bool (True = may attend)."""
    allowed = some_allowed(query_len, key_len)
    allowed[2] = False
    if kind == "bool":
        return allowed, allowed
    hidden = float("-inf") if kind == "-inf" else torch.finfo(torch.float32).min
    return allowed, torch.zeros(query_len, key_len).masked_fill(~allowed, hidden)


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_a_query_that_may_see_no_key_gets_zero_weights_and_a_zero_output(kind):
    q, k, v = random_qkv()
    allowed, mask = hiding_query_2(kind)
    out, weights = attention(q, k, v, attn_mask=mask)
    assert torch.equal(weights[..., 2, :], torch.zeros(2, 3, 7))  # exactly zero, not uniform, not NaN
    assert torch.equal(out[..., 2, :], torch.zeros(2, 3, 8))
    # torch's kernel with the bool mask gives the same zeros, and the other rows are torch's
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=allowed), **TOL)
    seeing = [0, 1, 3, 4]
    same_mask = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out[..., seeing, :], same_mask[..., seeing, :], **TOL)
    torch.testing.assert_close(weights[..., seeing, :].sum(-1), torch.ones(2, 3, 4))


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_gradients_through_a_query_that_may_see_no_key_are_finite_and_torchs(kind):
    allowed, mask = hiding_query_2(kind)
    gradients = []
    for ours in (True, False):
        q, k, v = (t.requires_grad_() for t in random_qkv())
        if ours:
            out, _ = attention(q, k, v, attn_mask=mask)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        out.sum().backward()
        gradients.append([q.grad, k.grad, v.grad])
    for ours, torchs in zip(*gradients, strict=True):
        assert torch.isfinite(ours).all()
        torch.testing.assert_close(ours, torchs, **TOL)
    assert torch.equal(gradients[0][0][..., 2, :], torch.zeros(2, 3, 8))  # its output depends on nothing


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_both_paths_give_a_query_whose_keys_are_all_padding_nothing_to_read(kind):
    ours, _ = twin_modules()
    x = torch.randn(3, 6, D_MODEL)
    context = None if kind == "self" else torch.randn(3, 5, D_MODEL)
    key_len = 6 if context is None else 5
    bias = attention_bias(padding(3, key_len, [key_len, 0, 3]), 6, causal=kind == "self")  # sequence 1: all PAD
    results = []
    for explicit in (True, False):
        given = x.clone().requires_grad_()
        out, weights = ours(given, context, attn_bias=bias, return_attention=explicit)
        out.sum().backward()
        results.append((out, given.grad))
        if explicit:
            assert torch.equal(weights[1], torch.zeros(N_HEADS, 6, key_len))
            torch.testing.assert_close(weights[[0, 2]].sum(-1), torch.ones(2, N_HEADS, 6))
    (explicit_out, explicit_grad), (fused_out, fused_grad) = results
    torch.testing.assert_close(fused_out, explicit_out, **TOL)
    torch.testing.assert_close(fused_grad, explicit_grad, **TOL)
    # reading no value, each of those queries outputs W_O's bias alone, and sends back no gradient
    torch.testing.assert_close(explicit_out[1], ours.out_proj.bias.expand(6, D_MODEL))
    assert torch.equal(explicit_grad[1], torch.zeros(6, D_MODEL))


def test_refusals_say_what_to_pass_instead():
    q, k, v = random_qkv(query_len=7)
    with pytest.raises(ValueError) as caught:
        attention(q, k, v, attn_mask=causal_allowed(7, 7), is_causal=True)
    assert str(caught.value) == "pass either is_causal or an attn_mask that already holds the causal mask, not both"
    ours, _ = twin_modules()
    with pytest.raises(ValueError) as caught:
        ours(torch.randn(1, 3, D_MODEL), attn_bias=torch.zeros(1, 1, 3, 3), is_causal=True)
    assert str(caught.value) == "pass either is_causal or an attn_bias that already holds the causal mask, not both"
    with pytest.raises(ValueError) as caught:
        MultiHeadAttention(30, 4)
    assert str(caught.value) == "d_model=30 must be divisible by n_heads=4"


def test_attention_dropout_is_dropout_of_the_weights_before_they_read_the_values():
    q, k, v = random_qkv()
    torch.manual_seed(0)
    out, weights = attention(q, k, v, dropout_p=0.25)
    torch.manual_seed(0)
    torch.testing.assert_close(out, F.dropout(weights, p=0.25) @ v)  # the same draw: p, and 1/(1-p) kept


@pytest.mark.parametrize("return_attention", [True, False], ids=["explicit", "fused"])
def test_a_module_drops_attention_while_training_alone(return_attention):
    torch.manual_seed(0)
    x = torch.randn(2, 5, D_MODEL)
    plain = MultiHeadAttention(D_MODEL, N_HEADS)  # dropout 0 unless asked
    dropping = MultiHeadAttention(D_MODEL, N_HEADS, dropout=0.5)
    dropping.load_state_dict(plain.state_dict())
    train_plain = [plain.train()(x, return_attention=return_attention)[0] for _ in range(2)]
    torch.testing.assert_close(train_plain[0], train_plain[1])  # no dropout by default, even in training
    eval_out = dropping.eval()(x, return_attention=return_attention)[0]
    torch.testing.assert_close(eval_out, train_plain[0])  # none in eval mode either
    trained = dropping.train()(x, return_attention=return_attention)[0]
    assert not torch.allclose(trained, eval_out)  # and some while training, on either path


def test_a_module_without_biases_has_none_and_attends_as_torchs():
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True, bias=False)
    ours = MultiHeadAttention(D_MODEL, N_HEADS, bias=False)
    assert ours.qkv_proj.bias is None and ours.out_proj.bias is None
    with torch.no_grad():
        ours.qkv_proj.weight.copy_(reference.in_proj_weight)
        ours.out_proj.weight.copy_(reference.out_proj.weight)
    x, context = torch.randn(2, 5, D_MODEL), torch.randn(2, 7, D_MODEL)
    torch.testing.assert_close(ours(x)[0], reference(x, x, x, need_weights=False)[0], **TOL)
    torch.testing.assert_close(
        ours(x, context=context)[0], reference(x, context, context, need_weights=False)[0], **TOL
    )
