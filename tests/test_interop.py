"""A model leaves tinytf: `tinytf export` writes safetensors files (tinytf's weights, or
TransformerLens's), and each comes back into tinytf with the same logits, bit for bit.
None of this needs TransformerLens installed, and none of it imports it."""

import itertools
import json
import re
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, assert_user_error, invoke
from safetensors import safe_open
from safetensors.torch import save_file

import tinytf
from tinytf.interop.transformer_lens import load_tl_state_dict, tl_config, tl_state_dict
from tinytf.run.setup import build_model

SHAPES = list(itertools.product(["decoder", "encoder"], ["pre", "none"], ["sinusoidal", "learned", "rope", "none"]))


def perturbed_model(arch, norm, positional, tied, activation="gelu", d_ff=32, seed=0):
    """A random model of this shape (d_model 24: sqrt(D) is not a power of 2), its weights
    nudged off their initial values (LayerNorm gains and biases included)."""
    data = {
        "task": {"name": "sort", "vocab_size": 5, "min_len": 3, "max_len": 5},
        "model": {
            "arch": arch,
            "norm": norm,
            "positional": positional,
            "activation": activation,
            "tie_embeddings": tied,
            "d_model": 24,
            "n_heads": 2,
            "n_layers": 2,
            "d_ff": d_ff,
            "dropout": 0.0,
        },
    }
    torch.manual_seed(seed)
    model = build_model(data).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.02 * torch.randn_like(parameter))
    return data, model


@pytest.mark.parametrize(("arch", "norm", "positional"), SHAPES)
def test_transformer_lens_weights_come_back_to_the_same_logits(arch, norm, positional):
    for tied, activation, d_ff in [(True, "gelu", 32), (False, "relu", 0)]:  # attention-only untied
        data, model = perturbed_model(arch, norm, positional, tied, activation, d_ff)
        back = build_model(data).eval()
        load_tl_state_dict(back, tl_state_dict(model))
        tokens = torch.randint(0, model.vocab_size, (4, 9))
        assert torch.equal(back(tokens), model(tokens))


def test_the_transformer_lens_weights_have_its_names_and_shapes():
    _, model = perturbed_model("decoder", "pre", "learned", tied=True)
    state, cfg = tl_state_dict(model), tl_config(model.config, model.vocab_size)
    d_model, heads, d_head, vocab = 24, 2, 12, model.vocab_size
    assert cfg | {"d_mlp": 32} == cfg and cfg["d_head"] == d_head and cfg["attention_dir"] == "causal"
    assert state["embed.W_E"].shape == (vocab, d_model)
    assert state["pos_embed.W_pos"].shape == (model.config.max_len, d_model)
    assert state["blocks.1.attn.W_Q"].shape == (heads, d_model, d_head)
    assert state["blocks.1.attn.W_O"].shape == (heads, d_head, d_model)
    assert state["blocks.0.mlp.W_in"].shape == (d_model, 32) and state["unembed.W_U"].shape == (d_model, vocab)
    # W_E is the embedding as the model adds it (scaled by sqrt(D)); W_U the unscaled one
    assert torch.allclose(state["embed.W_E"], model.token_embedding.weight * d_model**0.5)
    assert torch.equal(state["unembed.W_U"], model.token_embedding.weight.T)
    # Head h's queries: x @ W_Q[h] + b_Q[h] is the model's own q for that head
    x = torch.randn(3, d_model)
    q = model.decoder.layers[1].self_attn.qkv_proj(x)[:, :d_model].view(3, heads, d_head)
    by_head = torch.einsum("nd,hde->nhe", x, state["blocks.1.attn.W_Q"]) + state["blocks.1.attn.b_Q"]
    assert torch.allclose(by_head, q, atol=1e-6)
    rotary = tl_config(perturbed_model("encoder", "none", "rope", tied=False)[1].config, vocab)
    assert rotary["positional_embedding_type"] == "rotary" and rotary["normalization_type"] is None
    assert rotary["attention_dir"] == "bidirectional" and rotary["rotary_dim"] == d_head


@pytest.mark.parametrize("to", ["safetensors", "transformer-lens"])
def test_an_exported_run_loads_back_with_identical_logits(trained, to, tmp_path):
    _, run_dir = trained
    out = tmp_path / "model.safetensors"
    original = tinytf.load_run(run_dir)
    result = invoke("export", "--run", run_dir, "--to", to, "--out", out)
    if original.config.model.arch == "encoder-decoder" and to == "transformer-lens":
        assert_user_error(result, "TransformerLens has no encoder-decoder block (cross-attention)")
        assert not out.exists()
        return
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {out}\n"
    exported = tinytf.load_exported(out)
    assert exported.config == original.config and exported.step == original.step
    assert exported.vocab.tokens == original.vocab.tokens
    pairs = original.task.sample(8, torch.Generator().manual_seed(0))
    inputs = original.framing.frame(pairs).model_inputs()
    assert torch.equal(exported.model(**inputs), original.model(**inputs))
    with safe_open(out, framework="pt") as file:  # any safetensors reader opens it
        metadata = file.metadata()
    assert metadata["format"] == ("tinytf" if to == "safetensors" else "transformer-lens")
    assert tinytf.load_config(_written(tmp_path, metadata["tinytf_config"])) == original.config


def _written(folder, text):
    path = folder / "config.yaml"
    path.write_text(text)
    return path


def test_a_post_norm_model_is_refused_for_transformer_lens_naming_the_route(tmp_path):
    from conftest import train_tiny_run

    run_dir = train_tiny_run(tmp_path, model={"norm": "post"}, train={"steps": 2, "eval_every": 2})
    result = invoke("export", "--run", run_dir, "--to", "transformer-lens", "--out", tmp_path / "m.safetensors")
    assert_user_error(result, "(model.norm=post); docs/interop.md gives the route")
    assert invoke("export", "--run", run_dir, "--to", "safetensors", "--out", tmp_path / "m.safetensors").exit_code == 0


def test_what_cannot_be_exported_or_loaded_is_one_line(run, tmp_path):
    assert_user_error(
        invoke("export", "--run", run, "--to", "safetensors", "--out", tmp_path / "m.pt"),
        "--out " + str(tmp_path / "m.pt") + ": both formats are safetensors files",
    )
    assert_user_error(
        invoke("export", "--run", run, "--to", "safetensors", "--out", tmp_path / "no" / "m.safetensors"),
        "create it first",
    )
    result = invoke("export", "--run", run, "--to", "onnx", "--out", tmp_path / "m.safetensors")
    assert result.exit_code == 2 and "onnx" in result.output
    not_safetensors = tmp_path / "text.safetensors"
    not_safetensors.write_text("hello")
    with pytest.raises(tinytf.UserError, match="not a safetensors file"):
        tinytf.load_exported(not_safetensors)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(2)}, foreign, metadata={"format": "pt"})
    with pytest.raises(tinytf.UserError, match="tinytf export did not write"):
        tinytf.load_exported(foreign)
    with pytest.raises(tinytf.UserError, match=r"not found|No such file"):
        tinytf.load_exported(tmp_path / "missing.safetensors")


def test_weights_that_do_not_fit_the_header_are_one_line(run, tmp_path):
    out = tmp_path / "m.safetensors"
    assert invoke("export", "--run", run, "--to", "safetensors", "--out", out).exit_code == 0
    with safe_open(out, framework="pt") as file:
        metadata, tensors = file.metadata(), {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118
    tensors.pop("lm_head.weight", None)
    tensors["token_embedding.weight"] = tensors["token_embedding.weight"][:, :4].contiguous()
    save_file(tensors, out, metadata=metadata)
    with pytest.raises(tinytf.UserError, match="its weights do not fit its config"):
        tinytf.load_exported(out)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"embed.W_E": lambda w: w + 1}, "embed.W_E is not unembed.W_U"),  # tied in tinytf: one matrix
        ({"blocks.9.attn.W_Q": None}, "unknown: ['blocks.9.attn.W_Q']"),
        ({"ln_final.w": "drop"}, "missing: ['ln_final.w']"),
    ],
)
def test_transformer_lens_weights_that_tinytf_would_not_give_back_are_one_line(run, tmp_path, change, message):
    out = tmp_path / "m.safetensors"
    assert invoke("export", "--run", run, "--to", "transformer-lens", "--out", out).exit_code == 0
    with safe_open(out, framework="pt") as file:
        metadata, tensors = file.metadata(), {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118
    for name, how in change.items():
        if how == "drop":
            del tensors[name]
        else:
            tensors[name] = torch.zeros(2) if how is None else how(tensors[name])
    save_file(tensors, out, metadata=metadata)
    with pytest.raises(tinytf.UserError, match=f"its weights do not fit its config .*{re.escape(message)}"):
        tinytf.load_exported(out)


def test_a_header_step_that_is_not_a_number_is_one_line(run, tmp_path):
    out = tmp_path / "m.safetensors"
    assert invoke("export", "--run", run, "--to", "safetensors", "--out", out).exit_code == 0
    with safe_open(out, framework="pt") as file:
        metadata, tensors = file.metadata(), {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118
    save_file(tensors, out, metadata=metadata | {"step": "ten"})
    with pytest.raises(tinytf.UserError, match="its header's step is 'ten', not a step number"):
        tinytf.load_exported(out)


def test_no_command_imports_transformer_lens(run, tmp_path):
    """TransformerLens is an optional extra of 0.7 GB and 10 s of import: only the live
    conversion imports it, never a command or the export."""
    code = (
        "import sys; from tinytf.cli import app; from typer.testing import CliRunner; "
        f"r = CliRunner().invoke(app.app, ['export', '--run', {str(run)!r}, '--to', 'transformer-lens', "
        f"'--out', {str(tmp_path / 'm.safetensors')!r}]); assert r.exit_code == 0, r.output; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('transformer_lens', 'transformers')))))"
    )
    done = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
