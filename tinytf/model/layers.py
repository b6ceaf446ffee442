"""The building blocks of a Transformer stack, composed from small modules.

Shape legend: B batch, T_q/T_k query/key length, D model width, F feed-forward width.

One layer class serves every architecture: an encoder layer is self-attention + FFN,
a decoder layer adds cross-attention over the encoder output in between. Causality is
a parameter of the stack, not a different class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from tinytf.model.attention import KeyValueCache, MultiHeadAttention
from tinytf.model.hooks import Probe, probe_at
from tinytf.model.names import child
from tinytf.model.positional import RotaryPositions

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class FeedForward(nn.Module):
    """The position-wise MLP: the same two-layer network applied to every token alone."""

    def __init__(self, d_model: int, d_ff: int, activation: str, dropout: float) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)  # (B, T, D) -> (B, T, F)
        self.down = nn.Linear(d_ff, d_model)  # (B, T, F) -> (B, T, D)
        self.activation = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.dropout(self.activation(self.up(x))))


class Residual(nn.Module):
    """A residual connection with LayerNorm around one sublayer f.

    post-norm (the original Transformer):  x <- LayerNorm(x + Dropout(f(x)))
    pre-norm  (GPT-2 and most since):      x <- x + Dropout(f(LayerNorm(x)))
    no norm   (small algorithmic models):  x <- x + Dropout(f(x))

    Used as `h = res.sublayer_input(x)`, then `x = res.add(x, f(h))`, so that a sublayer
    may return more than its output (attention also returns its weights).
    """

    def __init__(self, d_model: int, norm: str, dropout: float) -> None:
        super().__init__()
        self.pre_norm = norm == "pre"
        self.norm = nn.LayerNorm(d_model) if norm != "none" else nn.Identity()
        self.dropout = nn.Dropout(dropout)

    def sublayer_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.pre_norm else x

    def add(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(sublayer_output)
        return x if self.pre_norm else self.norm(x)


@dataclass
class LayerCache:
    """What one layer keeps between generation steps: its attentions' keys and values."""

    self_attn: KeyValueCache = field(default_factory=KeyValueCache)
    cross_attn: KeyValueCache = field(default_factory=KeyValueCache)


class TransformerLayer(nn.Module):
    """Self-attention, then (if `cross_attention`) attention over a context, then the FFN
    (unless d_ff is 0); each wrapped in a residual connection with LayerNorm.

    `name` ("decoder.1") prefixes the names of its activations (see hooks.py).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        activation: str,
        norm: str,
        cross_attention: bool,
        name: str = "layer",
    ) -> None:
        super().__init__()
        self.name = name
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, name=child(name, "self"))
        self.self_attn_residual = Residual(d_model, norm, dropout)
        self.cross_attn, self.cross_attn_residual = None, None
        if cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout, name=child(name, "cross"))
            self.cross_attn_residual = Residual(d_model, norm, dropout)
        # d_ff = 0: an attention-only layer (no feed-forward sublayer at all)
        self.ffn = FeedForward(d_model, d_ff, activation, dropout) if d_ff > 0 else None
        self.ffn_residual = Residual(d_model, norm, dropout) if d_ff > 0 else None

    def hook_names(self) -> list[str]:
        """The names of this layer's activations, in the order they are computed."""
        names = [
            child(self.name, "resid_pre"),
            *_attention_names(self.self_attn),
            child(self.name, "attn_out"),
            child(self.name, "resid_mid"),
        ]
        if self.cross_attn is not None:
            cross = [child(self.name, "cross_attn_out"), child(self.name, "resid_mid_cross")]
            names += [*_attention_names(self.cross_attn), *cross]
        if self.ffn is not None:
            names.append(child(self.name, "mlp_out"))
        return [*names, child(self.name, "resid_post")]

    def forward(
        self,
        x: torch.Tensor,
        self_bias: torch.Tensor | None,
        causal: bool,
        context: torch.Tensor | None = None,
        context_bias: torch.Tensor | None = None,
        *,
        rope: RotaryPositions | None = None,
        cache: LayerCache | None = None,
        probe: Probe | None = None,
    ) -> torch.Tensor:
        """x: (B, T_q, D); context: (B, T_k, D) encoder output for cross-attention.

        self_bias (B, 1, T_q, T_q) / context_bias (B, 1, T_q, T_k): additive float biases
        (see masks.attention_bias), or None. causal: hide the future in self-attention.
        Returns x (B, T_q, D). A `probe` sees the activations named in `hook_names`.
        """
        self_cache, cross_cache = (cache.self_attn, cache.cross_attn) if cache is not None else (None, None)
        x = probe_at(probe, child(self.name, "resid_pre"), x)

        h = self.self_attn_residual.sublayer_input(x)
        attended, _ = self.self_attn(
            h, attn_bias=self_bias, is_causal=causal and self_bias is None, rope=rope, cache=self_cache, probe=probe
        )
        attended = probe_at(probe, child(self.name, "attn_out"), attended)
        x = probe_at(probe, child(self.name, "resid_mid"), self.self_attn_residual.add(x, attended))

        if self.cross_attn is not None:
            if context is None:
                raise ValueError("this layer has cross-attention: pass the encoder output as `context`")
            h = self.cross_attn_residual.sublayer_input(x)
            # Queries from the decoder, keys and values from the encoder; no rotation:
            # positions in two different sequences are not comparable.
            attended, _ = self.cross_attn(h, context, attn_bias=context_bias, cache=cross_cache, probe=probe)
            attended = probe_at(probe, child(self.name, "cross_attn_out"), attended)
            x = probe_at(probe, child(self.name, "resid_mid_cross"), self.cross_attn_residual.add(x, attended))

        if self.ffn is not None:
            transformed = probe_at(probe, child(self.name, "mlp_out"), self.ffn(self.ffn_residual.sublayer_input(x)))
            x = self.ffn_residual.add(x, transformed)
        return probe_at(probe, child(self.name, "resid_post"), x)


class TransformerStack(nn.Module):
    """`n_layers` identical layers; bidirectional (encoder) or causal (decoder), with or
    without cross-attention. Pre-norm stacks end with a final LayerNorm.
    `name` ("encoder" or "decoder") prefixes its layers' names: "decoder.0", ..."""

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        activation: str,
        norm: str,
        causal: bool,
        cross_attention: bool,
        name: str = "stack",
    ) -> None:
        super().__init__()
        self.causal = causal
        self.layers = nn.ModuleList(
            TransformerLayer(
                d_model, n_heads, d_ff, dropout, activation, norm, cross_attention, name=child(name, index)
            )
            for index in range(n_layers)
        )
        # Pre-norm leaves the residual stream un-normalised; post-norm already ends in LN.
        self.final_norm = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        self_bias: torch.Tensor | None,
        context: torch.Tensor | None = None,
        context_bias: torch.Tensor | None = None,
        *,
        rope: RotaryPositions | None = None,
        cache: list[LayerCache] | None = None,
        probe: Probe | None = None,
    ) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D). With a `cache` (one LayerCache per layer), x holds
        only the positions not yet cached."""
        for index, layer in enumerate(self.layers):
            layer_cache = cache[index] if cache is not None else None
            x = layer(x, self_bias, self.causal, context, context_bias, rope=rope, cache=layer_cache, probe=probe)
        return self.final_norm(x)


def _attention_names(attention: MultiHeadAttention) -> list[str]:
    return [child(attention.name, part) for part in ("q", "k", "v", "pattern", "z")]
