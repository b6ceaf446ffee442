"""The activation cache and hooks: run_with_cache, run_with_hooks, hook_names."""

from __future__ import annotations

import importlib

import pytest
import torch

from tinytf.config import config_from_dict
from tinytf.model.names import ActName, act_name, is_value
from tinytf.model.transformer import Transformer

VOCAB = 11
attention_module = importlib.import_module("tinytf.model.attention")  # tinytf.model.attention is also a function
ARCHS = ["encoder", "decoder", "encoder-decoder"]


def make_model(arch: str, **model_keys) -> Transformer:
    keys = dict(arch=arch, d_model=16, n_heads=4, n_layers=2, d_ff=32) | model_keys
    torch.manual_seed(0)
    return Transformer(config_from_dict({"model": keys}).model, VOCAB).eval()


def inputs(arch: str, batch: int = 3, length: int = 7, source_length: int = 5) -> dict:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (batch, length), generator=generator)
    pad_mask = torch.zeros(batch, length, dtype=torch.bool)
    pad_mask[1, length - 2 :] = True
    found = {"tokens": tokens, "pad_mask": pad_mask}
    if arch == "encoder-decoder":
        found["source"] = torch.randint(0, VOCAB, (batch, source_length), generator=generator)
        found["source_pad_mask"] = torch.zeros(batch, source_length, dtype=torch.bool)
        found["source_pad_mask"][2, source_length - 1 :] = True
    return found


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_patterns_are_the_returned_attention_weights(arch):
    model = make_model(arch)
    given = inputs(arch)
    logits, attention = model(**given, return_attention=True)
    cached_logits, cache = model.run_with_cache(**given)
    torch.testing.assert_close(cached_logits, logits)
    patterns = {name.removesuffix(".pattern"): w for name, w in cache.items() if name.endswith(".pattern")}
    assert list(patterns) == list(attention)
    for name, weights in attention.items():
        torch.testing.assert_close(patterns[name], weights)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("norm", ["pre", "post", "none"])
def test_the_last_resid_post_gives_the_logits_through_the_final_norm_and_head(arch, norm):
    model = make_model(arch, norm=norm)
    given = inputs(arch)
    logits, cache = model.run_with_cache(**given)
    stack = model.decoder if model.decoder is not None else model.encoder
    last = f"{stack.layers[-1].name}.resid_post"
    torch.testing.assert_close(model.lm_head(stack.final_norm(cache[last])), logits)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_name_is_cached_in_computation_order_with_its_documented_shape(arch):
    model = make_model(arch)
    given = inputs(arch, batch=3, length=7, source_length=5)
    _, cache = model.run_with_cache(**given)
    assert list(cache) == model.hook_names()
    for name, value in cache.items():
        reads_source = name.startswith("source_embed") or (arch == "encoder-decoder" and name.startswith("encoder"))
        length = 5 if reads_source else 7
        keys = 5 if reads_source or ".cross." in name else 7
        part = name.rsplit(".", 1)[-1]
        expected = {
            "pattern": (3, 4, length, keys),
            "q": (3, 4, length, 4),
            "k": (3, 4, keys, 4),
            "v": (3, 4, keys, 4),
            "z": (3, 4, length, 4),
        }.get(part, (3, length, 16))
        assert tuple(value.shape) == expected, name


def test_embed_is_what_the_first_layer_reads_without_dropout():
    model = make_model("decoder")
    _, cache = model.run_with_cache(**inputs("decoder"), names=["embed", "decoder.0.resid_pre"])
    assert list(cache) == ["embed", "decoder.0.resid_pre"]
    torch.testing.assert_close(cache["embed"], cache["decoder.0.resid_pre"])


@pytest.mark.parametrize("arch", ARCHS)
def test_a_hook_that_returns_its_input_changes_nothing(arch):
    model = make_model(arch)
    given = inputs(arch)
    plain = model(**given)
    seen = []

    def same(value):
        seen.append(value.shape)
        return value.clone()

    hooked = model.run_with_hooks(**given, hooks={name: same for name in model.hook_names()})
    assert len(seen) == len(model.hook_names())
    torch.testing.assert_close(hooked, plain)
    observe_only = model.run_with_hooks(**given, hooks={"embed": lambda value: None})  # None keeps the value
    torch.testing.assert_close(observe_only, plain)


@pytest.mark.parametrize("arch", ARCHS)
def test_zeroing_a_heads_z_equals_zeroing_its_w_o_columns(arch):
    model = make_model(arch)
    given = inputs(arch)
    attention_name = (
        "decoder.1.cross" if arch == "encoder-decoder" else f"{'encoder' if arch == 'encoder' else 'decoder'}.1.self"
    )
    head, head_dim = 2, 4

    def zero_head(z):  # (B, H, T_q, D_h)
        z = z.clone()
        z[:, head] = 0
        return z

    ablated = model.run_with_hooks(**given, hooks={f"{attention_name}.z": zero_head})
    stack, layer, kind = attention_name.split(".")
    module = getattr(getattr(model, stack).layers[int(layer)], f"{kind}_attn")
    with torch.no_grad():
        module.out_proj.weight[:, head * head_dim : (head + 1) * head_dim] = 0
    torch.testing.assert_close(ablated, model(**given))
    assert not torch.allclose(ablated, make_model(arch)(**given))  # the head did matter


def test_a_pattern_hook_changes_what_the_heads_read():
    model = make_model("decoder")
    given = inputs("decoder")
    name = "decoder.0.self.pattern"
    same = model.run_with_hooks(**given, hooks={name: lambda w: w.clone()})
    torch.testing.assert_close(same, model(**given))

    def attend_to_first(w):  # every query reads key 0 only
        replaced = torch.zeros_like(w)
        replaced[..., 0] = 1
        return replaced

    logits, cache = model.run_with_cache(
        **given, names=[name, "decoder.0.self.z", "decoder.0.self.v"], hooks={name: attend_to_first}
    )
    assert torch.equal(cache[name][..., 0], torch.ones_like(cache[name][..., 0]))  # the cache holds the new value
    # z of every query is then the first position's value vector
    torch.testing.assert_close(
        cache["decoder.0.self.z"], cache["decoder.0.self.v"][:, :, :1].expand_as(cache["decoder.0.self.z"])
    )
    assert not torch.allclose(logits, model(**given))


def test_names_keep_only_what_is_asked_and_nothing_means_the_fused_kernel(monkeypatch):
    model = make_model("encoder-decoder")
    given = inputs("encoder-decoder")
    _, cache = model.run_with_cache(**given, names=lambda name: name.endswith(".z"))
    assert list(cache) == [name for name in model.hook_names() if name.endswith(".z")]

    def explicit_path_used(*args, **kwargs):
        raise AssertionError("the explicit attention ran although no pattern was asked for")

    monkeypatch.setattr(attention_module, "attention", explicit_path_used)
    _, nothing = model.run_with_cache(**given, names=[])
    assert nothing == {}
    _, residuals = model.run_with_cache(**given, names=["decoder.1.resid_post", "encoder.0.self.q"])
    assert list(residuals) == ["encoder.0.self.q", "decoder.1.resid_post"]  # computation order
    model.run_with_hooks(**given, hooks={"decoder.0.cross.z": lambda z: z * 0})


def test_unknown_names_and_bad_hooks_are_clear_errors():
    model = make_model("decoder")
    given = inputs("decoder")
    with pytest.raises(ValueError, match=r"'decoder\.0\.self\.patern'.*did you mean 'decoder\.0\.self\.pattern'"):
        model.run_with_cache(**given, names=["decoder.0.self.patern"])
    with pytest.raises(ValueError, match=r"no activation is named 'encoder\.0\.self\.z'"):
        model.run_with_hooks(**given, hooks={"encoder.0.self.z": lambda z: z})
    with pytest.raises(ValueError, match=r"must return a tensor of shape \(3, 4, 7, 4\)"):
        model.run_with_hooks(**given, hooks={"decoder.0.self.z": lambda z: z[:, :2]})
    with pytest.raises(TypeError, match="not the string"):
        model.run_with_cache(**given, names="embed")
    with pytest.raises(TypeError, match="must be a function"):
        model.run_with_hooks(**given, hooks={"embed": 3})


def test_a_hook_returning_another_dtype_or_no_tensor_is_a_clear_error():
    model = make_model("decoder")
    given = inputs("decoder")
    expected = (
        r"the hook at 'decoder\.0\.self\.z' must return a tensor of shape \(3, 4, 7, 4\) and dtype torch\.float32"
    )
    with pytest.raises(TypeError, match=rf"{expected}.*not dtype torch\.float64"):
        model.run_with_hooks(**given, hooks={"decoder.0.self.z": lambda z: z.double()})
    with pytest.raises(TypeError, match=r"'decoder\.1\.self\.pattern' must return .*torch\.float32.*torch\.float16"):
        model.run_with_cache(**given, hooks={"decoder.1.self.pattern": lambda w: w.half()})
    with pytest.raises(TypeError, match=r"'embed' must return a tensor of shape \(3, 7, 16\).*not list"):
        model.run_with_hooks(**given, hooks={"embed": lambda x: x.tolist()})


def test_a_key_value_cache_cannot_be_probed():
    model = make_model("decoder")
    with pytest.raises(ValueError, match="without a cache"):
        model.decode(torch.tensor([[1, 2]]), cache=model.new_cache(), return_attention=True)


def test_an_attention_only_model_has_no_feed_forward():
    attention_only = make_model("decoder", d_ff=0)
    assert all(layer.ffn is None for layer in attention_only.decoder.layers)
    assert not any(name.endswith("mlp_out") for name in attention_only.hook_names())
    with_ffn = make_model("decoder")
    n_params = sum(p.numel() for p in attention_only.parameters())
    assert sum(p.numel() for p in with_ffn.parameters()) - n_params == 2 * (2 * 16 * 32 + 32 + 16 + 2 * 16)
    given = inputs("decoder")
    logits, cache = attention_only.run_with_cache(**given)
    layer = "decoder.1"
    torch.testing.assert_close(cache[f"{layer}.resid_post"], cache[f"{layer}.resid_mid"])
    assert logits.shape == (3, 7, VOCAB)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_name_reads_back_into_its_parts_and_builds_again(arch):
    model = make_model(arch)
    for name in model.hook_names():
        if name in ("embed", "source_embed"):
            continue
        parts = ActName.parse(name)
        assert str(parts) == name and parts.stack in ("encoder", "decoder")
        assert act_name(parts.stack, parts.layer, parts.kind, parts.value) == name
        if parts.kind is not None:  # an attention's value: its attention's weights are returned under that name
            assert parts.attention == name.rpartition(".")[0] and parts.value in ("q", "k", "v", "pattern", "z")
    assert ActName.parse("decoder.1.cross.pattern") == ActName("decoder", 1, "cross", "pattern")
    assert ActName.parse("encoder.0.resid_post") == ActName("encoder", 0, None, "resid_post")
    assert ActName("decoder", 1, "self").of("z") == "decoder.1.self.z" and ActName.parse("decoder.1.self").value is None
    assert is_value("decoder.0.self.z", "z", "mlp_out") and not is_value("embed", "embed")
