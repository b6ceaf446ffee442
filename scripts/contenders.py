"""The models `bench.py` times against each other: the same causal language model, built
the ways a user could build it.

Every contender takes a `Shape` and maps token ids (B, T) to logits (B, T, V). What
makes the comparison fair: the same width, depth, heads, feed-forward width and
vocabulary; no dropout; the output projection tied to the token embedding; sinusoidal
or learned positions (no matmuls either way). So each does the same matrix products per
step (the FLOPs `bench.model_flops_per_step` counts), and they differ only in what they
do around those products: fused or separate projections, fused or explicit attention,
where the LayerNorms sit, GELU or ReLU.

    tinytf            tinytf.build_model
    tinytf post/relu  tinytf.build_model with the textbook's design: post-LN, ReLU
    torch-encoder     torch.nn.TransformerEncoder with a causal mask
    textbook          a textbook chapter's code: separate W_Q W_K W_V W_O, masked_fill + softmax
    x-transformers    x_transformers.TransformerWrapper, when that package is installed
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

import tinytf
from tinytf.model.positional import sinusoidal_table


@dataclass(frozen=True)
class Shape:
    """A causal LM's size, and the batch it trains on: B = batch, T = seq, D = d_model."""

    vocab: int
    seq: int
    batch: int
    d_model: int
    heads: int
    layers: int
    d_ff: int


def tinytf_model(shape: Shape, **design: str) -> nn.Module:
    """tinytf's decoder as `tinytf.build_model` makes it, with its defaults (pre-LN, GELU)
    unless `design` sets other model keys: one fused (3D, D) Q/K/V projection; attention on
    the path tinytf takes when no weights are asked for."""
    model = {
        "arch": "decoder",
        "d_model": shape.d_model,
        "n_heads": shape.heads,
        "n_layers": shape.layers,
        "d_ff": shape.d_ff,
        "max_len": shape.seq,
        "dropout": 0.0,
        **design,
    }
    task = {"name": "copy", "min_len": 1, "max_len": 3}  # any task whose sequences fit in shape.seq
    return tinytf.build_model({"task": task, "model": model}, vocab_size=shape.vocab)


def tinytf_textbook_design(shape: Shape) -> nn.Module:
    """tinytf with the textbook model's design choices (post-LN, ReLU, so also no final
    LayerNorm): against `textbook` it compares the two implementations of one model."""
    return tinytf_model(shape, norm="post", activation="relu")


class TorchEncoderLM(nn.Module):
    """What PyTorch ships: nn.TransformerEncoder under a causal mask, configured like
    tinytf's defaults (pre-LN, GELU, sinusoidal positions, a final LayerNorm, tied output
    projection). Its attention is nn.MultiheadAttention, which also stores Q/K/V as one
    (3D, D) matrix and, given `is_causal`, calls the same fused kernel: the fairest
    "same design, someone else's code" comparison."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.embedding = nn.Embedding(shape.vocab, shape.d_model)
        self.register_buffer("positions", sinusoidal_table(shape.seq, shape.d_model))
        layer = nn.TransformerEncoderLayer(
            shape.d_model, shape.heads, shape.d_ff, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, shape.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(shape.d_model)
        self.head = nn.Linear(shape.d_model, shape.vocab, bias=False)
        self.head.weight = self.embedding.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(shape.seq))  # (T, T), -inf above
        self.scale = math.sqrt(shape.d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.size(1)
        x = self.embedding(tokens) * self.scale + self.positions[:length]  # (B, T, D)
        x = self.encoder(x, mask=self.mask[:length, :length], is_causal=True)
        return self.head(self.norm(x))  # (B, T, V)


class TextbookAttention(nn.Module):
    """Multi-head attention exactly as a textbook chapter on attention writes it: four separate (D, D)
    projections, scores = Q K^T / sqrt(d_k), masked_fill with -inf, softmax, weights @ V."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_Q = nn.Linear(d_model, d_model, bias=False)
        self.W_K = nn.Linear(d_model, d_model, bias=False)
        self.W_V = nn.Linear(d_model, d_model, bias=False)
        self.W_O = nn.Linear(d_model, d_model, bias=False)

    def split_heads(self, x: torch.Tensor, batch_size: int) -> torch.Tensor:
        return x.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)  # (B, T, D) -> (B, H, T, D_h)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch_size = x.size(0)
        Q, K, V = (self.split_heads(w(x), batch_size) for w in (self.W_Q, self.W_K, self.W_V))
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)  # (B, H, T, T)
        scores = scores.masked_fill(mask == 0, float("-inf"))
        attention_weights = torch.softmax(scores, dim=-1)
        context = (
            torch.matmul(attention_weights, V)  # (B, H, T, D_h)
            .transpose(1, 2)
            .contiguous()
            .view(batch_size, -1, self.num_heads * self.d_k)  # (B, T, H * D_h = D)
        )
        return self.W_O(context)


class TextbookBlock(nn.Module):
    """One layer of the textbook chapter's model: post-LN, as in the original paper; ReLU FFN."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.attention = TextbookAttention(shape.d_model, shape.heads)
        self.norm1, self.norm2 = nn.LayerNorm(shape.d_model), nn.LayerNorm(shape.d_model)
        self.ffn = nn.Sequential(nn.Linear(shape.d_model, shape.d_ff), nn.ReLU(), nn.Linear(shape.d_ff, shape.d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x, mask))
        return self.norm2(x + self.ffn(x))


class TextbookLM(nn.Module):
    """The model a reader of a textbook chapter on attention would write from it: what tinytf's design
    choices (fused projections and attention kernel, pre-LN) are measured against. Same
    products as tinytf, with Q/K/V as three matmuls and the attention spelled out."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.embedding = nn.Embedding(shape.vocab, shape.d_model)
        self.register_buffer("positions", sinusoidal_table(shape.seq, shape.d_model))
        self.blocks = nn.ModuleList(TextbookBlock(shape) for _ in range(shape.layers))
        self.head = nn.Linear(shape.d_model, shape.vocab, bias=False)
        self.head.weight = self.embedding.weight
        self.register_buffer("mask", torch.tril(torch.ones(shape.seq, shape.seq)))  # (T, T), 1 where visible
        self.scale = math.sqrt(shape.d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.size(1)
        x = self.embedding(tokens) * self.scale + self.positions[:length]  # (B, T, D)
        for block in self.blocks:
            x = block(x, self.mask[:length, :length])
        return self.head(x)  # (B, T, V)


def x_transformers_model(shape: Shape) -> nn.Module | None:
    """A widely used third-party implementation, with its flash-attention path (SDPA) on and
    the same head width and FFN width as the others; None when x_transformers is not
    installed (the benchmark then skips it)."""
    try:
        from x_transformers import Decoder, TransformerWrapper
    except ImportError:
        return None
    return TransformerWrapper(
        num_tokens=shape.vocab,
        max_seq_len=shape.seq,
        tie_embedding=True,
        attn_layers=Decoder(
            dim=shape.d_model,
            depth=shape.layers,
            heads=shape.heads,
            attn_dim_head=shape.d_model // shape.heads,
            ff_mult=shape.d_ff / shape.d_model,
            attn_flash=True,
        ),
    )


CONTENDERS: dict[str, Callable[[Shape], nn.Module | None]] = {
    "tinytf": tinytf_model,
    "tinytf post/relu": tinytf_textbook_design,
    "torch-encoder": TorchEncoderLM,
    "textbook": TextbookLM,
    "x-transformers": x_transformers_model,
}
