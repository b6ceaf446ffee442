"""The assembled Transformer: causality, equivariance, padding, both attention paths."""

import re

import pytest
import torch

import tinytf
from tinytf.config import config_from_dict
from tinytf.model import Transformer
from tinytf.model.attention import MultiHeadAttention
from tinytf.model.generation import greedy_generate

ARCHS = ["encoder", "decoder", "encoder-decoder"]
VOCAB = 13


def make_model(arch, **model_keys):
    torch.manual_seed(0)
    keys = dict(arch=arch, d_model=16, n_heads=4, n_layers=2, d_ff=32) | model_keys
    return tinytf.build_model({"model": keys}, vocab_size=VOCAB).eval()


def sample_inputs(arch, batch=3, length=7, source_length=5):
    tokens = torch.randint(0, VOCAB, (batch, length))
    source = torch.randint(0, VOCAB, (batch, source_length)) if arch == "encoder-decoder" else None
    return tokens, source


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("norm", ["pre", "post", "none"])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "none"])
def test_explicit_and_fused_attention_paths_give_the_same_logits(arch, norm, positional):
    model = make_model(arch, norm=norm, positional=positional)
    tokens, source = sample_inputs(arch)
    fused = model(tokens, source=source)
    explicit, attention = model(tokens, source=source, return_attention=True)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    assert fused.shape == (3, 7, VOCAB)

    n_layers = 2
    expected_names = {
        "encoder": [f"encoder.{i}.self" for i in range(n_layers)],
        "decoder": [f"decoder.{i}.self" for i in range(n_layers)],
        "encoder-decoder": [f"encoder.{i}.self" for i in range(n_layers)]
        + [f"decoder.{i}.{kind}" for i in range(n_layers) for kind in ("self", "cross")],
    }[arch]
    assert sorted(attention) == sorted(expected_names)
    for name, weights in attention.items():
        key_len = 5 if name.endswith("cross") or (arch == "encoder-decoder" and name.startswith("encoder")) else 7
        query_len = 5 if name.startswith("encoder") and arch == "encoder-decoder" else 7
        assert weights.shape == (3, 4, query_len, key_len)
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, query_len))


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_decoder_is_causal(arch):
    model = make_model(arch)
    tokens, source = sample_inputs(arch, batch=1, length=9)
    logits, attention = model(tokens, source=source, return_attention=True)
    for t in range(9 - 1):
        changed = tokens.clone()
        changed[0, t + 1 :] = (changed[0, t + 1 :] + 1) % VOCAB
        for return_attention in (False, True):
            out = model(changed, source=source, return_attention=return_attention)
            out = out[0] if return_attention else out
            torch.testing.assert_close(out[:, : t + 1], logits[:, : t + 1], atol=1e-5, rtol=1e-5)
            assert not torch.allclose(out[:, t + 1 :], logits[:, t + 1 :])
    for name, weights in attention.items():
        if name.startswith("decoder") and name.endswith("self"):
            assert torch.triu(weights, diagonal=1).abs().max() == 0


def test_encoder_without_positions_is_permutation_equivariant():
    model = make_model("encoder", positional="none")
    tokens = torch.randint(0, VOCAB, (2, 8))
    permutation = torch.randperm(8)
    logits = model(tokens)
    torch.testing.assert_close(model(tokens[:, permutation]), logits[:, permutation], atol=1e-5, rtol=1e-5)


def test_encoder_with_positions_is_not_permutation_equivariant():
    model = make_model("encoder", positional="sinusoidal")
    tokens = torch.arange(8).unsqueeze(0)
    permutation = torch.tensor([1, 0, 2, 3, 4, 5, 6, 7])
    assert not torch.allclose(model(tokens[:, permutation]), model(tokens)[:, permutation], atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_does_not_change_real_positions(arch):
    """One example alone, and the same example padded inside a batch: same logits."""
    model = make_model(arch)
    tokens, source = sample_inputs(arch, batch=2, length=7, source_length=6)
    short_len, short_source_len = 4, 3
    pad_mask = torch.zeros(2, 7, dtype=torch.bool)
    pad_mask[1, short_len:] = True
    source_pad_mask = None
    if source is not None:
        source_pad_mask = torch.zeros(2, 6, dtype=torch.bool)
        source_pad_mask[1, short_source_len:] = True

    for return_attention in (False, True):
        batched = model(
            tokens, source=source, pad_mask=pad_mask, source_pad_mask=source_pad_mask, return_attention=return_attention
        )
        alone = model(
            tokens[1:, :short_len],
            source=None if source is None else source[1:, :short_source_len],
            return_attention=return_attention,
        )
        if return_attention:
            batched, alone = batched[0], alone[0]
        torch.testing.assert_close(batched[1:, :short_len], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_fully_padded_sequences_give_finite_logits(arch):
    model = make_model(arch)
    tokens, source = sample_inputs(arch, batch=2)
    everything = torch.ones_like(tokens, dtype=torch.bool)
    source_everything = None if source is None else torch.ones_like(source, dtype=torch.bool)
    for return_attention in (False, True):
        out = model(
            tokens,
            source=source,
            pad_mask=everything,
            source_pad_mask=source_everything,
            return_attention=return_attention,
        )
        logits = out[0] if return_attention else out
        assert torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", ARCHS)
def test_a_query_whose_keys_are_all_padding_gets_zero_weights_on_both_paths(arch):
    model = make_model(arch)
    tokens, source = sample_inputs(arch, batch=3, length=7, source_length=5)
    pad_mask = torch.zeros(3, 7, dtype=torch.bool)
    pad_mask[1] = True  # padding only
    pad_mask[2, :2] = True  # padded on the left: its first two queries see no real key behind them
    source_pad_mask = None
    if source is not None:
        source_pad_mask = torch.zeros(3, 5, dtype=torch.bool)
        source_pad_mask[1] = True
    given = dict(source=source, pad_mask=pad_mask, source_pad_mask=source_pad_mask)
    explicit, attention = model(tokens, **given, return_attention=True)
    torch.testing.assert_close(explicit, model(tokens, **given), atol=1e-5, rtol=1e-5)
    for name, weights in attention.items():  # (B, H, T_q, T_k)
        if name.endswith("cross") or (arch == "encoder-decoder" and name.startswith("encoder")):
            sees_nothing = source_pad_mask.all(1, keepdim=True).expand(3, weights.size(2))
        elif name.startswith("decoder"):  # causal: query i sees keys 0..i
            sees_nothing = pad_mask.cumprod(dim=1).bool()
        else:
            sees_nothing = pad_mask.all(1, keepdim=True).expand(3, 7)
        rows = weights.transpose(1, 2)  # (B, T_q, H, T_k)
        assert torch.equal(rows[sees_nothing], torch.zeros_like(rows[sees_nothing])), name
        torch.testing.assert_close(rows[~sees_nothing].sum(-1), torch.ones_like(rows[~sees_nothing][..., 0]))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("return_attention", [False, True])
def test_pad_masks_that_are_not_bool_or_of_another_shape_are_clear_errors(arch, return_attention):
    model = make_model(arch)
    tokens, source = sample_inputs(arch, batch=3, length=7, source_length=5)
    pad_mask = torch.zeros(3, 7, dtype=torch.bool)
    run = dict(source=source, return_attention=return_attention)
    with pytest.raises(TypeError, match=r"`pad_mask` must be a tensor of torch\.bool.*`tokens`, not torch\.int64"):
        model(tokens, pad_mask=pad_mask.long(), **run)
    with pytest.raises(TypeError, match=r"`pad_mask` must be a tensor of torch\.bool.*not list"):
        model(tokens, pad_mask=pad_mask.tolist(), **run)
    for wrong in (pad_mask[:, :6], pad_mask[:2], pad_mask.T, pad_mask[None]):
        expected = r"`pad_mask` must have the shape of `tokens`, \(3, 7\).*its shape is " + re.escape(
            str(tuple(wrong.shape))
        )
        with pytest.raises(ValueError, match=expected):
            model(tokens, pad_mask=wrong, **run)
    if source is not None:
        source_pad_mask = torch.zeros(3, 5, dtype=torch.bool)
        with pytest.raises(TypeError, match=r"`source_pad_mask` must be a tensor of torch\.bool.*not torch\.float32"):
            model(tokens, source_pad_mask=source_pad_mask.float(), **run)
        with pytest.raises(ValueError, match=r"`source_pad_mask` must have the shape of `source`, \(3, 5\)"):
            model(tokens, source_pad_mask=source_pad_mask[:, :4], **run)


def test_decode_checks_the_source_pad_mask_against_the_context():
    model = make_model("encoder-decoder")
    tokens, source = sample_inputs("encoder-decoder", batch=3, length=7, source_length=5)
    context, _ = model.encode(source)
    with pytest.raises(ValueError, match=r"`source_pad_mask` must have the shape of `source`, \(3, 5\)"):
        model.decode(tokens, context=context, source_pad_mask=torch.zeros(3, 7, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"`pad_mask` must be a tensor of torch\.bool"):
        model.decode(tokens, context=context, pad_mask=torch.zeros(3, 7, dtype=torch.int))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_gradients_reach_every_parameter(arch, tie_embeddings):
    model = make_model(arch, tie_embeddings=tie_embeddings, positional="learned", dropout=0.1).train()
    tokens, source = sample_inputs(arch)
    model(tokens, source=source).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert parameter.grad.abs().sum() > 0, name


def test_every_dimension_comes_from_the_config():
    shape = {"d_model": 24, "n_heads": 3, "d_ff": 40, "n_encoder_layers": 3, "n_decoder_layers": 1, "max_len": 11}
    config = config_from_dict({"task": {"max_len": 4}, "model": {"arch": "encoder-decoder", **shape}})
    model = tinytf.build_model(config, vocab_size=17)
    assert len(model.encoder.layers) == 3 and len(model.decoder.layers) == 1
    assert model.token_embedding.weight.shape == (17, 24)
    assert model.decoder.layers[0].ffn.up.weight.shape == (40, 24)
    assert model.encoder.layers[0].self_attn.head_dim == 8
    logits, attention = model(
        torch.zeros(2, 11, dtype=torch.long), source=torch.zeros(2, 4, dtype=torch.long), return_attention=True
    )
    assert logits.shape == (2, 11, 17)
    assert attention["decoder.0.cross"].shape == (2, 3, 11, 4)
    with pytest.raises(ValueError, match="max_len=11"):
        model(torch.zeros(1, 12, dtype=torch.long), source=torch.zeros(1, 4, dtype=torch.long))


def test_tied_embeddings_share_one_matrix():
    model = make_model("decoder", tie_embeddings=True)
    assert model.lm_head.weight is model.token_embedding.weight
    untied = make_model("decoder", tie_embeddings=False)
    assert untied.lm_head.weight is not untied.token_embedding.weight


def test_source_is_required_exactly_for_encoder_decoder():
    tokens = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="needs a `source`"):
        make_model("encoder-decoder")(tokens)
    with pytest.raises(ValueError, match="takes no `source`"):
        make_model("decoder")(tokens, source=tokens)


def test_source_is_keyword_only():
    """model(src, tgt) and model(tgt, src) would both look plausible: neither is allowed."""
    tokens, source = sample_inputs("encoder-decoder")
    with pytest.raises(TypeError):
        make_model("encoder-decoder")(tokens, source)


def test_new_cache_without_a_decoder_is_a_clear_error():
    with pytest.raises(ValueError, match="arch=encoder has no decoder: nothing to cache"):
        make_model("encoder").new_cache()


def test_decode_takes_a_context_exactly_for_encoder_decoder():
    model = make_model("encoder-decoder")
    tokens, source = sample_inputs("encoder-decoder")
    with pytest.raises(ValueError, match="needs a `context`"):
        model.decode(tokens)
    with pytest.raises(TypeError):
        model.decode(tokens, model.encode(source)[0])  # everything after tokens is a keyword
    decoder_only = make_model("decoder")
    with pytest.raises(ValueError, match="takes no `context`"):
        decoder_only.decode(tokens, context=torch.zeros(3, 5, 16))


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_encode_and_decode_compose_to_forward(arch):
    """The documented halves, with the same keyword names as forward(), give forward()'s results."""
    model = make_model(arch)
    tokens, source = sample_inputs(arch, batch=2, length=7, source_length=6)
    pad_mask = torch.zeros(2, 7, dtype=torch.bool)
    pad_mask[1, 5:] = True
    source_pad_mask = None if source is None else torch.zeros(2, 6, dtype=torch.bool)
    if source_pad_mask is not None:
        source_pad_mask[1, 3:] = True

    logits, attention = model(
        tokens, source=source, pad_mask=pad_mask, source_pad_mask=source_pad_mask, return_attention=True
    )
    context, encoder_weights = None, []
    if source is not None:
        context, encoder_weights = model.encode(source, source_pad_mask, return_attention=True)
    halves, decoder_weights = model.decode(
        tokens, context=context, source_pad_mask=source_pad_mask, pad_mask=pad_mask, return_attention=True
    )
    torch.testing.assert_close(halves, logits)
    torch.testing.assert_close(decoder_weights[0]["self"], attention["decoder.0.self"])
    if source is not None:
        torch.testing.assert_close(encoder_weights[0]["self"], attention["encoder.0.self"])
        torch.testing.assert_close(decoder_weights[0]["cross"], attention["decoder.0.cross"])
        assert decoder_weights[0]["cross"][1, :, :, 3:].abs().max() == 0  # source PADs get no weight
    assert model.decode(tokens, context=context, source_pad_mask=source_pad_mask)[1] == [{}, {}]  # not asked


def test_build_model_accepts_a_plain_dict_and_a_config():
    data = {"model": {"arch": "decoder", "d_model": 8, "n_heads": 2}}
    from_dict = tinytf.build_model(data, vocab_size=5)
    from_config = tinytf.build_model(config_from_dict(data), vocab_size=5)
    assert isinstance(from_dict, Transformer) and isinstance(from_config, Transformer)
    assert from_dict.config == from_config.config


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "none"])
def test_cached_decoding_matches_full_recomputation(arch, positional):
    model = make_model(arch, positional=positional)
    tokens, source = sample_inputs(arch, batch=2, length=7)
    context = model.encode(source)[0] if source is not None else None
    full = model(tokens, source=source)
    cache = model.new_cache()
    # a prefix, then single tokens, then two at once: every way generation feeds a cache
    pieces = [tokens[:, :3], tokens[:, 3:4], tokens[:, 4:5], tokens[:, 5:7]]
    incremental = torch.cat([model.decode(piece, context=context, cache=cache)[0] for piece in pieces], dim=1)
    torch.testing.assert_close(incremental, full, atol=1e-5, rtol=1e-5)
    assert cache[0].self_attn.length == 7


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_greedy_generation_with_and_without_cache_agree(arch):
    model = make_model(arch, positional="rope", max_len=40)
    prompt, source = sample_inputs(arch, batch=5, length=4, source_length=6)
    context = model.encode(source)[0] if source is not None else None
    cached = greedy_generate(model, prompt, max_new=20, eos_id=3, context=context)
    recomputed = greedy_generate(model, prompt, max_new=20, eos_id=3, context=context, use_cache=False)
    assert cached == recomputed
    assert any(len(answer) > 3 for answer in cached)  # an untrained model rambles: many steps compared


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder-decoder"])
def test_norm_none_builds_a_model_without_any_layernorm_that_trains(arch, tmp_path):
    from conftest import read_metrics, tiny_config

    from tinytf.training.trainer import train

    config, pre = tiny_config(model={"arch": arch, "norm": "none"}), tiny_config(model={"arch": arch})
    model, with_norms = tinytf.build_model(config, 12), tinytf.build_model(pre, 12)
    assert not any(isinstance(module, torch.nn.LayerNorm) for module in model.modules())
    norms = [m for m in with_norms.modules() if isinstance(m, torch.nn.LayerNorm)]
    size = sum(p.numel() for p in model.parameters())
    assert size == sum(p.numel() for p in with_norms.parameters()) - sum(
        p.numel() for m in norms for p in m.parameters()
    )
    result = train(
        config.model_copy(update={"train": config.train.model_copy(update={"steps": 40})}), runs_dir=tmp_path
    )
    losses = [line["loss"] for line in read_metrics(result.run_dir) if line["split"] == "train"]
    assert result.step == 40 and losses[-1] < losses[0]  # it learns, with no LayerNorm anywhere


def test_each_residual_normalises_where_its_kind_says():
    from tinytf.model.layers import Residual

    torch.manual_seed(0)
    x, f = torch.randn(2, 3, 8), torch.nn.Linear(8, 8)
    for norm in ("pre", "post", "none"):
        residual = Residual(8, norm, dropout=0.0)
        layer_norm = residual.norm
        with torch.no_grad():
            if norm != "none":  # not the identity scale, so normalising where it should not shows
                layer_norm.weight.uniform_(0.5, 1.5)
            got = residual.add(x, f(residual.sublayer_input(x)))
            if norm == "pre":  # GPT-2: normalise what the sublayer reads
                expected = x + f(layer_norm(x))
            elif norm == "post":  # the original Transformer: normalise the sum
                expected = layer_norm(x + f(x))
            else:
                expected = x + f(x)
        torch.testing.assert_close(got, expected)


def test_what_a_stack_cannot_run_is_refused_in_words_of_its_own():
    tokens, source = sample_inputs("encoder-decoder")
    cases = [
        (lambda: make_model("decoder").encode(source), "arch=decoder has no encoder"),
        (lambda: make_model("encoder").decode(tokens), "arch=encoder has no decoder"),
    ]
    decoder = make_model("decoder")
    cases.append(
        (
            lambda: decoder.decode(
                tokens, cache=decoder.new_cache(), pad_mask=torch.zeros_like(tokens, dtype=torch.bool)
            ),
            "a cache holds unpadded prefixes: generate sequences of equal length together",
        )
    )
    cases.append(
        (
            lambda: decoder.decode(tokens, cache=decoder.new_cache(), return_attention=True),
            "a key/value cache holds the model's own keys and values: run the whole sequence without a cache "
            "to read or hook activations",
        )
    )
    both = make_model("encoder-decoder")
    context = both.encode(source)[0]
    cases.append(
        (
            lambda: both.decode(tokens[:2], context=context),
            f"the source {tuple(context.shape[:2])} and `tokens` {tuple(tokens[:2].shape)} must hold the same "
            "number of sequences: one source per sequence of tokens",
        )
    )
    layer = both.decoder.layers[0]
    cases.append(
        (
            lambda: layer(torch.zeros(1, 3, 16), self_bias=None, causal=True),
            "this layer has cross-attention: pass the encoder output as `context`",
        )
    )
    for run, message in cases:
        with pytest.raises(ValueError) as caught:
            run()
        assert str(caught.value) == message


VOCABULARY = f"this model's vocabulary has ids 0 to {VOCAB - 1} (vocab_size={VOCAB})"


def test_token_ids_are_checked_and_refused_in_words():
    model = make_model("decoder")  # in eval mode: typed input, where every id is read back and checked
    good = torch.zeros(1, 3, dtype=torch.long)
    cases = [
        ([[1, 2]], TypeError, "`tokens` must be a tensor of integer token ids (torch.long), not list"),
        (good.float(), TypeError, "`tokens` must be a tensor of integer token ids (torch.long), not torch.float32"),
        (good[0], ValueError, "`tokens` must hold token ids as (batch, length), neither of them 0; its shape is (3,)"),
        (
            good[:, :0],
            ValueError,
            "`tokens` must hold token ids as (batch, length), neither of them 0; its shape is (1, 0)",
        ),
        (
            good + VOCAB,
            ValueError,
            f"`tokens` holds ids from {VOCAB} to {VOCAB}; {VOCABULARY}",
        ),
        (
            good - 1,
            ValueError,
            f"`tokens` holds ids from -1 to -1; {VOCABULARY}",
        ),
    ]
    for tokens, error, message in cases:
        with pytest.raises(error) as caught:
            model(tokens)
        assert str(caught.value) == message
    model(good + VOCAB - 1)  # the last id is one


def test_a_vocabulary_has_at_least_one_token():
    config = config_from_dict({"model": {"d_model": 16, "n_heads": 4}})
    with pytest.raises(ValueError) as caught:
        Transformer(config.model, 0)
    assert str(caught.value) == "vocab_size must be positive, got 0"
    assert Transformer(config.model, 1).vocab_size == 1


def test_token_embeddings_start_at_the_scale_that_sqrt_d_makes_one():
    torch.manual_seed(0)
    model = tinytf.build_model({"model": {"d_model": 64, "n_heads": 4}}, vocab_size=500)
    assert float(model.token_embedding.weight.detach().std()) == pytest.approx(64**-0.5, rel=0.05)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_the_input_is_each_token_times_sqrt_d_plus_its_position_from_0(arch, positional):
    model = make_model(arch, positional=positional)
    tokens, source = sample_inputs(arch)
    names = ["embed", "source_embed"] if arch == "encoder-decoder" else ["embed"]
    _, cache = model.run_with_cache(tokens, source=source, names=names)
    for name, ids in zip(names, (tokens, source), strict=False):  # the decoder's tokens, the encoder's source
        expected = model.token_embedding(ids) * 16**0.5 + model.positions.table[: ids.size(1)]
        torch.testing.assert_close(cache[name], expected)


@pytest.mark.parametrize("arch", ARCHS)
def test_rotary_positions_turn_every_self_attention(arch):
    rope, none = make_model(arch, positional="rope"), make_model(arch, positional="none")
    none.load_state_dict(rope.state_dict())  # the same weights: rope adds no parameters
    tokens, source = sample_inputs(arch)
    _, turned = rope(tokens, source=source, return_attention=True)
    _, plain = none(tokens, source=source, return_attention=True)
    for name in turned:
        if name.endswith(".self"):
            assert not torch.allclose(turned[name], plain[name]), name


def test_a_feed_forward_of_width_one_is_still_one():
    narrow = make_model("decoder", d_ff=1)
    assert narrow.decoder.layers[0].ffn is not None
    assert torch.isfinite(narrow(sample_inputs("decoder")[0])).all()  # and runs, in its residual connection
    assert make_model("decoder", d_ff=0).decoder.layers[0].ffn is None


def test_every_attention_drops_out_at_the_models_rate():
    model = make_model("encoder-decoder", dropout=0.3)
    attentions = [module for module in model.modules() if isinstance(module, MultiHeadAttention)]
    assert len(attentions) == 2 + 2 * 2  # the encoder's self, the decoder's self and cross, in 2 layers
    assert all(attention.dropout == 0.3 for attention in attentions)


def test_attention_is_asked_for_one_way_at_a_time():
    from tinytf.model.hooks import Probe

    model = make_model("decoder")
    tokens, _ = sample_inputs("decoder")
    with pytest.raises(ValueError) as caught:
        model.decode(tokens, return_attention=True, probe=Probe(model.hook_names()))
    assert str(caught.value) == "pass either return_attention or a probe (that keeps the patterns), not both"
    keeping = Probe(model.hook_names(), names=lambda name: name.endswith(".pattern"))
    assert model.decode(tokens, probe=keeping)[1] == [{}, {}]  # the probe keeps them; decode returns none unasked
    both = make_model("encoder-decoder")
    source = sample_inputs("encoder-decoder")[1]
    keeping = Probe(both.hook_names(), names=lambda name: name.endswith(".pattern"))
    assert both.encode(source, probe=keeping)[1] == [{}, {}]  # nor does encode
