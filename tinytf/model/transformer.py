"""The Transformer: encoder, decoder or encoder-decoder, assembled from the same parts.

Shape legend: B batch, T target/decoder length, S source/encoder length, D model width,
H heads, V vocabulary size.

    tokens -> embedding * sqrt(D) -> + positions -> [stack of layers] -> logits

    arch="encoder"          one bidirectional stack over `tokens`, a prediction per position
    arch="decoder"          one causal stack over `tokens`: position t predicts token t+1
    arch="encoder-decoder"  a bidirectional stack over `source`; a causal stack over
                            `tokens` whose layers also attend to the encoded source

Calls (everything after `tokens` is a keyword, so the two sequences cannot be swapped):

    logits = model(tokens)                          # encoder or decoder: (B, T) -> (B, T, V)
    logits = model(tokens, source=source)           # encoder-decoder: + source (B, S)
    logits = model(tokens, pad_mask=pad_mask)       # pad_mask (B, T) bool, True at PAD

Padding masks are always `pad_mask` (the tokens') and `source_pad_mask` (the source's),
True at PAD positions, the keys that get zero attention weight.

Inputs are checked before the embedding reads them: ids outside [0, vocab_size), an
empty batch or sequence, and a source batch of another size than `tokens` are a
`ValueError` naming the argument, ids that are not integers a `TypeError` (the embedding
would raise an IndexError on a CPU, and trip a device-side assert on a GPU).

Attention weights are returned, never stored on modules:

    logits, attention = model(tokens, return_attention=True)
    attention["decoder.0.self"]  # (B, H, T, T), the weights of layer 0's self-attention

Names are "<stack>.<layer>.<kind>": stack is "encoder" or "decoder", kind is "self" or
"cross" (decoder layers of an encoder-decoder, queries from T and keys from S).

Generation runs the two halves separately, with a key/value cache for the decoder:

    context, _ = model.encode(source, source_pad_mask)  # (B, S, D)
    cache = model.new_cache()
    logits, _ = model.decode(prompt, context=context, source_pad_mask=source_pad_mask, cache=cache)
    logits, _ = model.decode(next_token, context=context, source_pad_mask=source_pad_mask, cache=cache)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tinytf.config import ModelConfig
from tinytf.model.layers import LayerCache, TransformerStack
from tinytf.model.masks import attention_bias
from tinytf.model.positional import POSITIONAL_ENCODINGS, RotaryPositions

_compiling = getattr(torch.compiler, "is_compiling", lambda: False)  # torch < 2.3 has none: always check


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig, vocab_size: int) -> None:
        super().__init__()
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        self.config = config
        self.vocab_size = vocab_size
        d_model = config.d_model

        self.token_embedding = nn.Embedding(vocab_size, d_model)
        # Scaled by sqrt(D) in forward(), so embeddings start with unit variance per
        # dimension: the same scale as the positional encodings added to them.
        nn.init.normal_(self.token_embedding.weight, std=d_model**-0.5)
        self.positions = POSITIONAL_ENCODINGS[config.positional](config.max_len, d_model, config.head_dim)
        self.embedding_dropout = nn.Dropout(config.dropout)

        def stack(n_layers: int, causal: bool, cross_attention: bool) -> TransformerStack:
            return TransformerStack(
                n_layers, d_model, config.n_heads, config.d_ff, config.dropout,
                config.activation, config.norm, causal, cross_attention,
            )  # fmt: skip

        has_encoder = config.arch in ("encoder", "encoder-decoder")
        has_decoder = config.arch in ("decoder", "encoder-decoder")
        # An encoder-decoder may give each stack its own depth; unset means n_layers.
        n_encoder_layers = config.n_encoder_layers or config.n_layers
        n_decoder_layers = config.n_decoder_layers or config.n_layers
        self.encoder = stack(n_encoder_layers, causal=False, cross_attention=False) if has_encoder else None
        self.decoder = stack(n_decoder_layers, causal=True, cross_attention=has_encoder) if has_decoder else None

        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)  # (B, T, D) -> (B, T, V)
        if config.tie_embeddings:
            # One matrix both reads tokens in and scores them out (Press & Wolf, 2017).
            self.lm_head.weight = self.token_embedding.weight

    @property
    def rope(self) -> RotaryPositions | None:
        return self.positions if isinstance(self.positions, RotaryPositions) else None

    def embed(self, tokens: torch.Tensor, start: int = 0, name: str = "tokens") -> torch.Tensor:
        """Token ids (B, T) at positions start..start+T-1 -> embeddings with positions (B, T, D).
        `name`: the argument that `tokens` came in as, for the error if they are not ids."""
        check_ids(tokens, self.vocab_size, name)
        end = start + tokens.size(1)
        if end > self.config.max_len:
            raise ValueError(f"sequence of length {end} is longer than model.max_len={self.config.max_len}")
        x = self.token_embedding(tokens) * math.sqrt(self.config.d_model)  # (B, T, D)
        return self.embedding_dropout(self.positions(x, start))

    def encode(
        self, source: torch.Tensor, source_pad_mask: torch.Tensor | None = None, *, return_attention: bool = False
    ) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
        """Run the encoder stack: source ids (B, S) -> encoded source (B, S, D), and its weights.

        source_pad_mask: (B, S) bool, True at PAD positions. The weights (one dict per
        layer, see TransformerLayer) are empty unless `return_attention`.
        """
        if self.encoder is None:
            raise ValueError(f"arch={self.config.arch} has no encoder")
        x = self.embed(source, name="tokens" if self.decoder is None else "source")  # encoder-only: forward's `tokens`
        bias = attention_bias(source_pad_mask, source.size(1), causal=False)  # (B, 1, S, S) or None
        return self.encoder(x, bias, rope=self.rope, return_attention=return_attention)

    def decode(
        self,
        tokens: torch.Tensor,
        *,
        context: torch.Tensor | None = None,
        source_pad_mask: torch.Tensor | None = None,
        pad_mask: torch.Tensor | None = None,
        cache: list[LayerCache] | None = None,
        return_attention: bool = False,
    ) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
        """Run the causal decoder stack: ids (B, T) -> logits (B, T, V), and its weights.

        context: the encoded source (B, S, D) that cross-attention reads (encoder-decoder
        only), with source_pad_mask (B, S) bool, True at PAD positions of the source.
        pad_mask: (B, T) bool, True at PAD positions of `tokens`.
        cache: from `new_cache()`; `tokens` then holds only the positions after those
        already cached, and the keys and values of all of them are kept for the next call.
        """
        if self.decoder is None:
            raise ValueError(f"arch={self.config.arch} has no decoder")
        has_cross_attention = self.encoder is not None
        if has_cross_attention != (context is not None):
            needs = "needs a" if has_cross_attention else "takes no"
            raise ValueError(f"arch={self.config.arch} {needs} `context` (the encoded source)")
        if cache is not None and pad_mask is not None:
            raise ValueError("a cache holds unpadded prefixes: generate sequences of equal length together")
        start = cache[0].self_attn.length if cache else 0
        x = self.embed(tokens, start)  # (B, T, D)
        if context is not None and context.size(0) != tokens.size(0):
            source_shape = tuple(context.shape[:2])  # (B, S) of the source that was encoded
            raise ValueError(f"the source {source_shape} and `tokens` {tuple(tokens.shape)} must hold the same "
                             "number of sequences: one source per sequence of tokens")  # fmt: skip
        self_bias = attention_bias(pad_mask, tokens.size(1), causal=True)  # (B, 1, T, T) or None
        # Every decoder query may look at every non-PAD source position.
        context_bias = attention_bias(source_pad_mask, tokens.size(1), causal=False)  # (B, 1, T, S) or None
        hidden, weights = self.decoder(
            x, self_bias, context, context_bias, rope=self.rope, return_attention=return_attention, cache=cache
        )
        return self.lm_head(hidden), weights  # (B, T, D) -> (B, T, V)

    def new_cache(self) -> list[LayerCache]:
        """An empty key/value cache for `decode`, one entry per decoder layer."""
        if self.decoder is None:
            raise ValueError(f"arch={self.config.arch} has no decoder: nothing to cache")
        return [LayerCache() for _ in self.decoder.layers]

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        source: torch.Tensor | None = None,
        pad_mask: torch.Tensor | None = None,
        source_pad_mask: torch.Tensor | None = None,
        return_attention: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """tokens: (B, T) ids; source: (B, S) ids, for arch=encoder-decoder only.

        pad_mask / source_pad_mask: (B, T) / (B, S) bool, True at PAD positions; those
        keys get zero attention weight. Returns logits (B, T, V), and with
        `return_attention` also {name: weights (B, H, T_q, T_k)} for every attention.
        """
        is_seq2seq = self.config.arch == "encoder-decoder"
        if is_seq2seq != (source is not None):
            needs = "needs a" if is_seq2seq else "takes no"
            raise ValueError(f"arch={self.config.arch} {needs} `source` sequence")

        attention: dict[str, torch.Tensor] = {}
        if self.decoder is None:  # encoder-only: a bidirectional stack over `tokens`
            hidden, encoder_weights = self.encode(tokens, pad_mask, return_attention=return_attention)
            attention.update(_name_weights("encoder", encoder_weights))
            logits = self.lm_head(hidden)  # (B, T, D) -> (B, T, V)
        else:
            context = None
            if is_seq2seq:
                context, encoder_weights = self.encode(source, source_pad_mask, return_attention=return_attention)
                attention.update(_name_weights("encoder", encoder_weights))
            logits, decoder_weights = self.decode(
                tokens, context=context, source_pad_mask=source_pad_mask, pad_mask=pad_mask,
                return_attention=return_attention,
            )  # fmt: skip
            attention.update(_name_weights("decoder", decoder_weights))
        return (logits, attention) if return_attention else logits


def check_ids(ids: torch.Tensor, vocab_size: int, name: str) -> None:
    """A clear error unless `ids` is a non-empty (B, L) tensor of token ids in [0, vocab_size)."""
    if _compiling():  # a compiled training step reads the task's own batches; a check would split its graph
        return
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.long, torch.int):
        got = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise TypeError(f"`{name}` must be a tensor of integer token ids (torch.long), not {got}")
    if ids.dim() != 2 or ids.numel() == 0:
        raise ValueError(f"`{name}` must hold token ids as (batch, length), neither of them 0; "
                         f"its shape is {tuple(ids.shape)}")  # fmt: skip
    low, high = torch.stack(torch.aminmax(ids)).tolist()  # one pass, one read back (a sync on CUDA)
    if low < 0 or high >= vocab_size:
        raise ValueError(f"`{name}` holds ids from {low} to {high}; this model's vocabulary has ids 0 to "
                         f"{vocab_size - 1} (vocab_size={vocab_size})")  # fmt: skip


def _name_weights(stack: str, per_layer: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """[{"self": w, "cross": w}, ...] -> {"decoder.0.self": w, "decoder.0.cross": w, ...}"""
    return {f"{stack}.{index}.{kind}": w for index, weights in enumerate(per_layer) for kind, w in weights.items()}
