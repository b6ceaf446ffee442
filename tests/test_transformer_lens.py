"""A tinytf model in TransformerLens 4 computes what it computes in tinytf: the same logits
(to 1e-4, and 1e-5 of the largest), and every `blocks.L.attn.hook_pattern` the attention
weights tinytf reports (to 1e-5), for every shape TransformerLens can hold.

These tests need the `tl` extra (TransformerLens, 0.7 GB): without it they skip, saying
how to install it, except with `CI` set, where `.ci/run` installs it and they must run.
"""

import importlib.util
import itertools
import json

import numpy as np
import pytest
import torch
from conftest import ROOT, invoke
from needs import unavailable
from safetensors import safe_open
from test_interop import SHAPES, perturbed_model

import tinytf


@pytest.fixture(scope="module", autouse=True)
def transformer_lens():
    if importlib.util.find_spec("transformer_lens") is None:
        unavailable("TransformerLens is not installed (the tl extra)", '.venv/bin/pip install -e ".[tl]"')


def assert_same_model(model, bridge, tokens):
    """Logits within 1e-4 (and 1e-5 of the largest); each layer's pattern within 1e-5."""
    stack = "decoder" if model.decoder is not None else "encoder"
    with torch.no_grad():
        ours, attention = model(tokens, return_attention=True)
        theirs, cache = bridge.run_with_cache(tokens)
    gap = (theirs - ours).abs().max()
    assert gap <= 1e-4 and gap <= 1e-5 * ours.abs().max(), gap
    for layer in range(model.config.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        torch.testing.assert_close(pattern, attention[f"{stack}.{layer}.self"], atol=1e-5, rtol=0)


@pytest.mark.parametrize(("arch", "norm", "positional"), SHAPES)
def test_every_shape_computes_the_same_in_transformer_lens(arch, norm, positional):
    from tinytf.interop import to_transformer_lens

    for activation, tied in itertools.product(["gelu", "relu"], [True, False]):
        d_ff = 0 if (activation == "relu") == tied else 32  # attention-only for half of them
        _, model = perturbed_model(arch, norm, positional, tied, activation, d_ff)
        tokens = torch.randint(0, model.vocab_size, (16, model.config.max_len))
        assert_same_model(model, to_transformer_lens(model), tokens)


def test_a_trained_induction_model_has_the_patterns_attend_reports(tmp_path):
    from tinytf.interop import to_transformer_lens

    short = ["train.steps=60", "train.eval_every=60", "train.device=cpu", "log.attention_every=null"]
    settings = [part for setting in short for part in ("--set", setting)]
    config = ROOT / "configs" / "induction-decoder.yaml"
    assert invoke("train", config, "--runs-dir", tmp_path / "runs", *settings).exit_code == 0
    run = tinytf.load_run(next((tmp_path / "runs").iterdir()))
    bridge = to_transformer_lens(run)
    text = "3 1 4 1 5 3 1 4 1 5"
    batch, _ = run.framing.typed_batch(run.model, text)
    assert_same_model(run.model, bridge, batch.tokens)
    report = json.loads(invoke("attend", text, "--run", run.run_dir, "--format", "json").stdout)
    _, cache = bridge.run_with_cache(batch.tokens)
    for entry in report["attention"]:
        pattern = cache[f"blocks.{entry['layer']}.attn.hook_pattern"][0].numpy()
        np.testing.assert_allclose(pattern, np.array(entry["weights"]), atol=1e-5)


@pytest.mark.parametrize("positional", ["sinusoidal", "rope"])
def test_an_exported_file_loads_into_transformer_lens_as_docs_interop_shows(tmp_path, positional):
    """The recipe of docs/interop.md for a file: TransformerLens's own checkpoint conversion."""
    from conftest import train_tiny_run

    run = train_tiny_run(tmp_path, model={"positional": positional}, train={"steps": 4, "eval_every": 4})
    from safetensors.torch import load_file
    from transformer_lens import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

    out = tmp_path / "model.safetensors"
    assert invoke("export", "--run", run, "--to", "transformer-lens", "--out", out).exit_code == 0
    with safe_open(out, framework="pt") as file:
        cfg = TransformerBridgeConfig(**json.loads(file.metadata()["transformer_lens_config"]))
    bridge = TransformerBridge.boot_native(cfg)
    bridge.load_state_dict(convert_tl_checkpoint(load_file(out), bridge.cfg), strict=True)
    loaded = tinytf.load_run(run)
    tokens = torch.randint(0, loaded.model.vocab_size, (16, loaded.config.model.max_len))
    assert_same_model(loaded.model, bridge.eval(), tokens)


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_circuits_are_transformer_lens_s_composition_and_copying_scores(arch):
    from tinytf.inspect.circuits import circuit_report
    from tinytf.interop import to_transformer_lens

    _, model = perturbed_model(arch, "pre", "rope", tied=False, seed=3)
    report = circuit_report(model)
    bridge = to_transformer_lens(model)
    stack, layers, heads = arch, model.config.n_layers, model.config.n_heads
    for mode in ("Q", "K", "V"):
        with torch.no_grad():
            theirs = bridge.all_composition_scores(mode).scores  # (L, H, L, H), zero unless later
        ours = torch.zeros(layers, heads, layers, heads, dtype=torch.float64)
        for c in report.compositions:
            if c.mode == mode:
                (_, early_layer, _, early_head), (_, late_layer, _, late_head) = (
                    name.split(".") for name in (c.early, c.late)
                )
                ours[int(early_layer), int(early_head), int(late_layer), int(late_head)] = c.score
        torch.testing.assert_close(ours, theirs.double(), atol=1e-5, rtol=0)
    with torch.no_grad():
        eigenvalues = (bridge.W_E @ bridge.OV @ bridge.W_U).eigenvalues  # (L, H, ...)
    copying = (eigenvalues.sum(-1) / eigenvalues.abs().sum(-1)).real
    for name, score in report.copying.items():
        _, layer, _, head = name.split(".")
        assert score == pytest.approx(float(copying[int(layer), int(head)]), abs=1e-5), name
    assert {name.split(".")[0] for name in report.copying} == {stack}
