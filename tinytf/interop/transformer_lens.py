"""A tinytf model in TransformerLens's terms: its config and weights, both ways.

TransformerLens (TL) names a Transformer's weights per head and in the (input, output)
order (`W_Q[h]`: (D, D_h), where tinytf's `qkv_proj` stacks W_Q, W_K, W_V in torch's
(output, input) order). The two models compute the same function once the weights are
laid out for each other:

    tinytf                                  TL's checkpoint names (HookedTransformer's)
    token_embedding * sqrt(D)           ->  embed.W_E            (V, D)
    the sinusoidal or learned table     ->  pos_embed.W_pos      (n_ctx, D); none: zeros
    qkv_proj rows of head h, transposed ->  blocks.L.attn.W_Q[h] (D, D_h), and W_K, W_V
    out_proj columns of head h, T       ->  blocks.L.attn.W_O[h] (D_h, D)
    ffn.up, ffn.down, transposed        ->  blocks.L.mlp.W_in    (D, F), W_out (F, D)
    the pre-norm LayerNorms             ->  blocks.L.ln1, ln2, ln_final (w, b)
    lm_head, transposed                 ->  unembed.W_U          (D, V), b_U zeros

RoPE: tinytf rotates each head's dimensions i and i + D_h/2 together; TL 4 rotates
adjacent pairs (2i, 2i + 1), and TL 3 either (`rotary_adjacent_pairs`). The TL weights
put each head's query and key dimensions in the adjacent order: q.k, so the attention,
is unchanged by one reordering of both. TL 4 (`TransformerBridgeConfig`) and TL 3
(`HookedTransformerConfig`) both take `tl_config`'s keyword arguments.

TL has no block for post-norm residuals or cross-attention: such models are refused
(`unsupported`), with the route docs/interop.md gives. TL is imported in
`to_transformer_lens` alone.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from tinytf import arguments
from tinytf.config import ModelConfig
from tinytf.model import Transformer
from tinytf.model.positional import LearnedPositions, SinusoidalPositions
from tinytf.run.load import LoadedRun

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which tinytf's LayerNorms use


def unsupported(config: ModelConfig) -> str | None:
    """Why TL cannot hold a model of `config`, or None when it can."""
    if config.arch == "encoder-decoder":
        return (
            "TransformerLens has no encoder-decoder block (cross-attention); docs/interop.md gives the "
            "route through a Hugging Face encoder-decoder class, or export it --to safetensors"
        )
    if config.norm == "post":
        return (
            "TransformerLens's blocks normalise before each sublayer (pre-norm) and this model after it "
            "(model.norm=post); docs/interop.md gives the route through Hugging Face's OPT, or export it "
            "--to safetensors"
        )
    return None


def tl_config(config: ModelConfig, vocab_size: int) -> dict:
    """The keyword arguments of TL's config (`TransformerBridgeConfig`) for a model of `config`."""
    cfg = {
        "n_layers": config.n_layers,
        "d_model": config.d_model,
        "n_heads": config.n_heads,
        "d_head": config.head_dim,
        "d_vocab": vocab_size,
        "n_ctx": config.max_len,
        "act_fn": config.activation,  # "gelu" is F.gelu in both, not its tanh approximation
        "normalization_type": "LN" if config.norm == "pre" else None,
        "eps": LAYER_NORM_EPS,
        "attention_dir": "causal" if config.arch == "decoder" else "bidirectional",
        "positional_embedding_type": "rotary" if config.positional == "rope" else "standard",
        "default_prepend_bos": False,  # the vocabulary travels with the export: ids, not a tokenizer
    }
    if config.d_ff > 0:
        cfg["d_mlp"] = config.d_ff
    else:
        cfg["attn_only"] = True
    if config.positional == "rope":  # the weights are reordered for adjacent pairs (module docstring)
        cfg |= {"rotary_dim": config.head_dim, "rotary_base": 10000, "rotary_adjacent_pairs": True}
    return cfg


def tl_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """`model`'s weights under TL's checkpoint names and shapes (see the module docstring)."""
    if (reason := unsupported(model.config)) is not None:
        raise ValueError(reason)
    config, stack = model.config, model.decoder if model.decoder is not None else model.encoder
    d_model, heads, head_dim = config.d_model, config.n_heads, config.head_dim
    state = {"embed.W_E": model.token_embedding.weight * math.sqrt(d_model)}
    if config.positional != "rope":
        state["pos_embed.W_pos"] = _position_table(model)
    for index, layer in enumerate(stack.layers):
        block = f"blocks.{index}"
        attention = layer.self_attn
        q, k, v = attention.qkv_proj.weight.view(3, heads, head_dim, d_model).transpose(2, 3)  # 3 x (H, D, D_h)
        biases = list(attention.qkv_proj.bias.view(3, heads, head_dim))
        if config.positional == "rope":
            order = _halves_to_adjacent_pairs(head_dim)
            q, k = q[..., order], k[..., order]
            biases[0], biases[1] = biases[0][..., order], biases[1][..., order]
        state |= {f"{block}.attn.W_{name}": w for name, w in zip("QKV", (q, k, v), strict=True)}
        state |= {f"{block}.attn.b_{name}": b for name, b in zip("QKV", biases, strict=True)}
        state[f"{block}.attn.W_O"] = attention.out_proj.weight.T.reshape(heads, head_dim, d_model)
        state[f"{block}.attn.b_O"] = attention.out_proj.bias
        if config.norm == "pre":
            state |= _norm(f"{block}.ln1", layer.self_attn_residual.norm)
        if layer.ffn is not None:
            if config.norm == "pre":
                state |= _norm(f"{block}.ln2", layer.ffn_residual.norm)
            state[f"{block}.mlp.W_in"], state[f"{block}.mlp.b_in"] = layer.ffn.up.weight.T, layer.ffn.up.bias
            state[f"{block}.mlp.W_out"], state[f"{block}.mlp.b_out"] = layer.ffn.down.weight.T, layer.ffn.down.bias
    if config.norm == "pre":
        state |= _norm("ln_final", stack.final_norm)
    state["unembed.W_U"] = model.lm_head.weight.T
    state["unembed.b_U"] = torch.zeros(model.vocab_size)
    return {name: value.detach().clone().contiguous() for name, value in state.items()}


def load_tl_state_dict(model: Transformer, state: dict[str, torch.Tensor]) -> None:
    """The inverse of `tl_state_dict`: TL-named weights into `model`, built from the same
    config. A ValueError for weights it would not give back as they are: other names, or a
    tied model's W_E that is not its W_U."""
    config, stack = model.config, model.decoder if model.decoder is not None else model.encoder
    d_model, heads, head_dim = config.d_model, config.n_heads, config.head_dim
    _check_names(model, state)
    unembed = state["unembed.W_U"].T
    if config.tie_embeddings and not torch.allclose(state["embed.W_E"], unembed * math.sqrt(d_model), atol=1e-6):
        raise ValueError("embed.W_E is not unembed.W_U (times sqrt(d_model)), as a tied model's embedding must be")
    # Tied: the one matrix is W_U's, which TL keeps unscaled (W_E / sqrt(D) would round it)
    embed = unembed if config.tie_embeddings else state["embed.W_E"] / math.sqrt(d_model)
    ours: dict[str, torch.Tensor] = {"lm_head.weight": unembed, "token_embedding.weight": embed}
    if config.positional == "learned":
        ours["positions.table"] = state["pos_embed.W_pos"]
    prefix = "decoder" if model.decoder is not None else "encoder"
    for index, layer in enumerate(stack.layers):
        block, here = f"blocks.{index}", f"{prefix}.layers.{index}"
        q, k, v = (state[f"{block}.attn.W_{name}"] for name in "QKV")
        biases = [state[f"{block}.attn.b_{name}"] for name in "QKV"]
        if config.positional == "rope":  # back from adjacent pairs to tinytf's halves
            order = _halves_to_adjacent_pairs(head_dim).argsort()
            q, k = q[..., order], k[..., order]
            biases[0], biases[1] = biases[0][..., order], biases[1][..., order]
        ours[f"{here}.self_attn.qkv_proj.weight"] = torch.stack((q, k, v)).transpose(2, 3).reshape(3 * d_model, d_model)
        ours[f"{here}.self_attn.qkv_proj.bias"] = torch.stack(biases).reshape(-1)
        ours[f"{here}.self_attn.out_proj.weight"] = state[f"{block}.attn.W_O"].reshape(heads * head_dim, d_model).T
        ours[f"{here}.self_attn.out_proj.bias"] = state[f"{block}.attn.b_O"]
        if config.norm == "pre":
            ours |= _ours(f"{here}.self_attn_residual.norm", state, f"{block}.ln1")
        if layer.ffn is not None:
            if config.norm == "pre":
                ours |= _ours(f"{here}.ffn_residual.norm", state, f"{block}.ln2")
            ours[f"{here}.ffn.up.weight"], ours[f"{here}.ffn.up.bias"] = (
                state[f"{block}.mlp.W_in"].T,
                state[f"{block}.mlp.b_in"],
            )
            ours[f"{here}.ffn.down.weight"], ours[f"{here}.ffn.down.bias"] = (
                state[f"{block}.mlp.W_out"].T,
                state[f"{block}.mlp.b_out"],
            )
    if config.norm == "pre":
        ours |= _ours(f"{prefix}.final_norm", state, "ln_final")
    model.load_state_dict({name: value.contiguous() for name, value in ours.items()})


def to_transformer_lens(run: LoadedRun | Transformer) -> TransformerBridge:
    """A live TransformerLens 4.x model (`TransformerBridge`, in eval mode) computing what
    the run's model (or `run`, a model) computes: `run_with_cache`, `blocks.L.attn.hook_pattern`,
    TL's patching, SAELens. Needs the `tl` extra (pip install -e ".[tl]"); TL is
    imported here, on first call. Like TL, it takes ids without padding."""
    model = run.model if isinstance(run, LoadedRun) else run
    arguments.instance(model, "run", Transformer, "a loaded run (tinytf.load_run) or a tinytf Transformer")
    if (reason := unsupported(model.config)) is not None:
        raise ValueError(reason)
    try:
        from transformer_lens import TransformerBridgeConfig
        from transformer_lens.model_bridge import TransformerBridge
        from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint
    except ImportError as err:
        raise ImportError(f'to_transformer_lens needs TransformerLens 4: pip install -e ".[tl]" ({err})') from err
    bridge = TransformerBridge.boot_native(TransformerBridgeConfig(**tl_config(model.config, model.vocab_size)))
    bridge.load_state_dict(convert_tl_checkpoint(tl_state_dict(model), bridge.cfg), strict=True)
    device = next(model.parameters()).device
    return (bridge if device.type == "cpu" else bridge.to(device)).eval()  # built on the CPU


def _halves_to_adjacent_pairs(head_dim: int) -> torch.Tensor:
    """(D_h,) the head dimensions in the order that puts i and i + D_h/2 side by side."""
    half = head_dim // 2
    return torch.stack((torch.arange(half), torch.arange(half) + half), dim=1).flatten()


def _check_names(model: Transformer, state: dict[str, torch.Tensor]) -> None:
    """A ValueError unless `state` holds exactly the names `tl_state_dict` gives `model`."""
    expected = set(tl_state_dict(model))
    if set(state) != expected:
        missing, unknown = sorted(expected - set(state)), sorted(set(state) - expected)
        raise ValueError(f"TransformerLens weights missing: {missing[:3]}, unknown: {unknown[:3]}")


def _position_table(model: Transformer) -> torch.Tensor:
    """(n_ctx, D) what tinytf adds to the embeddings at each position: TL's W_pos."""
    if isinstance(model.positions, SinusoidalPositions | LearnedPositions):
        return model.positions.table
    return torch.zeros(model.config.max_len, model.config.d_model)  # positional: none


def _norm(name: str, norm: torch.nn.LayerNorm) -> dict[str, torch.Tensor]:
    return {f"{name}.w": norm.weight, f"{name}.b": norm.bias}


def _ours(name: str, state: dict[str, torch.Tensor], tl_name: str) -> dict[str, torch.Tensor]:
    return {f"{name}.weight": state[f"{tl_name}.w"], f"{name}.bias": state[f"{tl_name}.b"]}
