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

    Used as `h = res.sublayer_input(x)`, then `x = res.add(x, f(h))`, so that a sublayer
    may return more than its output (attention also returns its weights).
    """

    def __init__(self, d_model: int, norm: str, dropout: float) -> None:
        super().__init__()
        self.pre_norm = norm == "pre"
        self.norm = nn.LayerNorm(d_model)
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
    """Self-attention, then (if `cross_attention`) attention over a context, then the FFN;
    each wrapped in a residual connection with LayerNorm."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        activation: str,
        norm: str,
        cross_attention: bool,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.self_attn_residual = Residual(d_model, norm, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout) if cross_attention else None
        self.cross_attn_residual = Residual(d_model, norm, dropout) if cross_attention else None
        self.ffn = FeedForward(d_model, d_ff, activation, dropout)
        self.ffn_residual = Residual(d_model, norm, dropout)

    def forward(
        self,
        x: torch.Tensor,
        self_bias: torch.Tensor | None,
        causal: bool,
        context: torch.Tensor | None = None,
        context_bias: torch.Tensor | None = None,
        *,
        rope: RotaryPositions | None = None,
        return_attention: bool = False,
        cache: LayerCache | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """x: (B, T_q, D); context: (B, T_k, D) encoder output for cross-attention.

        self_bias (B, 1, T_q, T_q) / context_bias (B, 1, T_q, T_k): additive float biases
        (see masks.attention_bias), or None. causal: hide the future in self-attention.
        Returns x (B, T_q, D) and, if `return_attention`, {"self": (B, H, T_q, T_q),
        "cross": (B, H, T_q, T_k)} -- the weights of each attention in this layer.
        """
        weights: dict[str, torch.Tensor] = {}
        self_cache, cross_cache = (cache.self_attn, cache.cross_attn) if cache is not None else (None, None)

        h = self.self_attn_residual.sublayer_input(x)
        attended, weights["self"] = self.self_attn(
            h, attn_bias=self_bias, is_causal=causal and self_bias is None, rope=rope,
            return_attention=return_attention, cache=self_cache,
        )  # fmt: skip
        x = self.self_attn_residual.add(x, attended)

        if self.cross_attn is not None:
            if context is None:
                raise ValueError("this layer has cross-attention: pass the encoder output as `context`")
            h = self.cross_attn_residual.sublayer_input(x)
            # Queries from the decoder, keys and values from the encoder; no rotation:
            # positions in two different sequences are not comparable.
            attended, weights["cross"] = self.cross_attn(
                h, context, attn_bias=context_bias, return_attention=return_attention, cache=cross_cache
            )
            x = self.cross_attn_residual.add(x, attended)

        x = self.ffn_residual.add(x, self.ffn(self.ffn_residual.sublayer_input(x)))
        return x, (weights if return_attention else {})


class TransformerStack(nn.Module):
    """`n_layers` identical layers; bidirectional (encoder) or causal (decoder), with or
    without cross-attention. Pre-norm stacks end with a final LayerNorm."""

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
    ) -> None:
        super().__init__()
        self.causal = causal
        self.layers = nn.ModuleList(
            TransformerLayer(d_model, n_heads, d_ff, dropout, activation, norm, cross_attention)
            for _ in range(n_layers)
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
        return_attention: bool = False,
        cache: list[LayerCache] | None = None,
    ) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
        """x: (B, T, D) -> (B, T, D), plus each layer's attention weights (see TransformerLayer).
        With a `cache` (one LayerCache per layer), x holds only the positions not yet cached."""
        per_layer = []
        for index, layer in enumerate(self.layers):
            layer_cache = cache[index] if cache is not None else None
            x, weights = layer(
                x, self_bias, self.causal, context, context_bias,
                rope=rope, return_attention=return_attention, cache=layer_cache,
            )  # fmt: skip
            per_layer.append(weights)
        return self.final_norm(x), per_layer
