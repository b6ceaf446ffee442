"""Positional encodings: how a Transformer knows the order of its tokens.

Attention by itself is blind to order (permute the tokens and the outputs permute the
same way), so position must be injected. Every encoding here has the same constructor
signature, `(max_len, d_model, head_dim)`, and is looked up by its config name in
`POSITIONAL_ENCODINGS`. Each is a module whose `forward(x, start)` returns the token
embeddings x (B, T, D) with position information added; `start` is the position of
x's first token.

Rotary encoding (RoPE) adds nothing to the embeddings: it rotates each head's queries
and keys instead (`RotaryPositions.rotate`), which attention calls.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """The fixed table of Vaswani et al. (2017), shape (max_len, D):

        PE[pos, 2i]   = sin(pos / 10000^(2i / D))
        PE[pos, 2i+1] = cos(pos / 10000^(2i / D))

    Each pair of dimensions is a clock ticking at its own frequency, so every position
    gets a unique pattern and PE[pos + k] is a fixed linear function (a rotation) of PE[pos].
    """
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    even_dims = torch.arange(0, d_model, 2, dtype=torch.float64)  # the 2i, (ceil(D/2),)
    angle = position / 10000.0 ** (even_dims / d_model)  # (max_len, ceil(D/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # an odd D has one more sin than cos
    return table.float()


class SinusoidalPositions(nn.Module):
    """Adds the fixed sine/cosine table: no parameters, any length up to max_len."""

    def __init__(self, max_len: int, d_model: int, head_dim: int) -> None:
        super().__init__()
        # A buffer, not a parameter, and not saved in checkpoints: it is recomputed.
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x + self.table[start : start + x.size(1)]  # (B, T, D) + (T, D)


class LearnedPositions(nn.Module):
    """Adds a learned vector per position (as in BERT and GPT-2)."""

    def __init__(self, max_len: int, d_model: int, head_dim: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.empty(max_len, d_model))
        # Start at the sinusoidal table's scale: each of its dimensions has variance 1/2.
        nn.init.normal_(self.table, std=math.sqrt(0.5))

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x + self.table[start : start + x.size(1)]  # (B, T, D) + (T, D)


class NoPositions(nn.Module):
    """No position information at all: the model sees a bag of tokens (plus causality)."""

    def __init__(self, max_len: int, d_model: int, head_dim: int) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x


class RotaryPositions(nn.Module):
    """Rotary position embedding (Su et al., 2021).

    Splits each head's vector into pairs of dimensions (i, i + D_h/2) and rotates pair i
    by the angle pos * theta_i, theta_i = 10000^(-2i / D_h). The score between a query at
    position m and a key at n then depends only on their content and on m - n.
    """

    def __init__(self, max_len: int, d_model: int, head_dim: int) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary positions need an even head width, got {head_dim}")
        half = head_dim // 2
        theta = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / half)  # (D_h/2,)
        angle = torch.arange(max_len, dtype=torch.float64).unsqueeze(1) * theta  # (max_len, D_h/2)
        # One row per position over the whole head width (see rotate): cos for both
        # halves, and sin with the first half's negated.
        cos, sin = angle.cos(), angle.sin()
        self.register_buffer("cos", torch.cat((cos, cos), dim=-1).float(), persistent=False)  # (max_len, D_h)
        self.register_buffer("signed_sin", torch.cat((-sin, sin), dim=-1).float(), persistent=False)  # (max_len, D_h)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x  # the embeddings are untouched; see rotate()

    def rotate(self, t: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Rotate queries or keys t (B, H, T, D_h) by their positions start..start+T-1.

        Pair i of a vector t at position pos, (t_i, t_{i+D_h/2}), turns by a = pos * theta_i:
            t_i         -> t_i cos a - t_{i+D_h/2} sin a
            t_{i+D_h/2} -> t_{i+D_h/2} cos a + t_i sin a
        Over the whole vector that is t * cos + swap_halves(t) * signed_sin: three
        operations on t, not six on its halves. The tables take t's dtype (bf16 under
        train.precision's autocast), so the result stays in it."""
        length, half = t.size(-2), t.size(-1) // 2
        cos = self.cos[start : start + length].to(t.dtype)  # (T, D_h)
        signed_sin = self.signed_sin[start : start + length].to(t.dtype)  # (T, D_h)
        swapped = t.roll(half, dims=-1)  # (B, H, T, D_h): each vector's halves swapped
        return torch.addcmul(t * cos, swapped, signed_sin)  # (B, H, T, D_h): t cos + swapped signed_sin


POSITIONAL_ENCODINGS: dict[str, type[nn.Module]] = {
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "rope": RotaryPositions,
    "none": NoPositions,
}
