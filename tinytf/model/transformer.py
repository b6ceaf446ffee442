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
would raise an IndexError on a CPU, and trip a device-side assert on a GPU). So are pad
masks, before the attention masks are built from them: a `pad_mask` that is not bool is a
`TypeError`, one of another shape than its sequence's (B, T) a `ValueError`.

Attention weights are returned, never stored on modules:

    logits, attention = model(tokens, return_attention=True)
    attention["decoder.0.self"]  # (B, H, T, T), the weights of layer 0's self-attention

Names are "<stack>.<layer>.<kind>": stack is "encoder" or "decoder", kind is "self" or
"cross" (decoder layers of an encoder-decoder, queries from T and keys from S).
`return_attention=True` is a shortcut for the activation cache, which holds every named
value (the residual stream, queries, keys, per-head outputs...; see hooks.py); hooks
replace values on the way (head ablation is a hook on "<name>.z"):

    logits, cache = model.run_with_cache(tokens, names=["decoder.0.self.pattern", "decoder.0.resid_post"])
    logits = model.run_with_hooks(tokens, hooks={"decoder.0.self.z": zero_head_1})
    model.hook_names()  # every name this model has

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
from tinytf.model.hooks import Hook, Names, Probe, probe_at
from tinytf.model.layers import LayerCache, TransformerStack
from tinytf.model.masks import attention_bias
from tinytf.model.names import ATTENTION_KINDS, ActName, child, is_value
from tinytf.model.positional import POSITIONAL_ENCODINGS, RotaryPositions


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

        def stack(n_layers: int, causal: bool, cross_attention: bool, name: str) -> TransformerStack:
            return TransformerStack(
                n_layers,
                d_model,
                config.n_heads,
                config.d_ff,
                config.dropout,
                config.activation,
                config.norm,
                causal,
                cross_attention,
                name=name,
            )

        has_encoder = config.arch in ("encoder", "encoder-decoder")
        has_decoder = config.arch in ("decoder", "encoder-decoder")
        # An encoder-decoder may give each stack its own depth; unset means n_layers.
        n_encoder_layers = config.n_encoder_layers or config.n_layers
        n_decoder_layers = config.n_decoder_layers or config.n_layers
        self.encoder, self.decoder = None, None
        if has_encoder:
            self.encoder = stack(n_encoder_layers, causal=False, cross_attention=False, name="encoder")
        if has_decoder:
            self.decoder = stack(n_decoder_layers, causal=True, cross_attention=has_encoder, name="decoder")

        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)  # (B, T, D) -> (B, T, V)
        if config.tie_embeddings:
            # One matrix both reads tokens in and scores them out (Press & Wolf, 2017).
            self.lm_head.weight = self.token_embedding.weight

    @property
    def is_decoder_only(self) -> bool:
        """A causal stack alone (arch=decoder): it reads a prompt and predicts the next token."""
        return self.encoder is None and self.decoder is not None

    @property
    def rope(self) -> RotaryPositions | None:
        return self.positions if isinstance(self.positions, RotaryPositions) else None

    def embed(
        self, tokens: torch.Tensor, start: int = 0, name: str = "tokens", probe: Probe | None = None
    ) -> torch.Tensor:
        """Token ids (B, T) at positions start..start+T-1 -> embeddings with positions (B, T, D).
        `name`: the argument that `tokens` came in as, for the error if they are not ids; the
        probe sees the result as "source_embed" for the source, else "embed"."""
        # The values are checked in eval mode, where typed text and a user's calls come in; a
        # training step trusts the task's batches (reading them back would wait for the GPU).
        check_ids(tokens, self.vocab_size, name, values=not self.training)
        end = start + tokens.size(1)
        if end > self.config.max_len:
            raise ValueError(f"sequence of length {end} is longer than model.max_len={self.config.max_len}")
        x = self.token_embedding(tokens) * math.sqrt(self.config.d_model)  # (B, T, D)
        x = probe_at(probe, "source_embed" if name == "source" else "embed", self.positions(x, start))
        return self.embedding_dropout(x)

    def encode(
        self,
        source: torch.Tensor,
        source_pad_mask: torch.Tensor | None = None,
        *,
        return_attention: bool = False,
        probe: Probe | None = None,
    ) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
        """Run the encoder stack: source ids (B, S) -> encoded source (B, S, D), and its weights.

        source_pad_mask: (B, S) bool, True at PAD positions. The weights are one dict per
        layer, {"self": (B, H, S, S)}, empty unless `return_attention`. A `probe`
        (hooks.py) sees the encoder's named activations.
        """
        if self.encoder is None:
            raise ValueError(f"arch={self.config.arch} has no encoder")
        probe = self._pattern_probe(probe, return_attention)
        argument = "tokens" if self.decoder is None else "source"  # encoder-only: forward's `tokens`
        x = self.embed(source, name=argument, probe=probe)  # (B, S, D)
        mask_argument = "pad_mask" if self.decoder is None else "source_pad_mask"
        check_pad_mask(source_pad_mask, source.shape, mask_argument, of=argument)
        bias = attention_bias(source_pad_mask, source.size(1), causal=False)  # (B, 1, S, S) or None
        encoded = self.encoder(x, bias, rope=self.rope, probe=probe)
        return encoded, _per_layer(self.encoder, probe if return_attention else None)

    def decode(
        self,
        tokens: torch.Tensor,
        *,
        context: torch.Tensor | None = None,
        source_pad_mask: torch.Tensor | None = None,
        pad_mask: torch.Tensor | None = None,
        cache: list[LayerCache] | None = None,
        return_attention: bool = False,
        probe: Probe | None = None,
    ) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
        """Run the causal decoder stack: ids (B, T) -> logits (B, T, V), and its weights.

        context: the encoded source (B, S, D) that cross-attention reads (encoder-decoder
        only), with source_pad_mask (B, S) bool, True at PAD positions of the source.
        pad_mask: (B, T) bool, True at PAD positions of `tokens`.
        cache: from `new_cache()`; `tokens` then holds only the positions after those
        already cached, and the keys and values of all of them are kept for the next call.
        The weights are one dict per layer, {"self": (B, H, T, T), "cross": (B, H, T, S)},
        empty unless `return_attention`.
        """
        if self.decoder is None:
            raise ValueError(f"arch={self.config.arch} has no decoder")
        has_cross_attention = self.encoder is not None
        if has_cross_attention != (context is not None):
            needs = "needs a" if has_cross_attention else "takes no"
            raise ValueError(f"arch={self.config.arch} {needs} `context` (the encoded source)")
        if cache is not None and pad_mask is not None:
            raise ValueError("a cache holds unpadded prefixes: generate sequences of equal length together")
        if cache is not None and (probe is not None or return_attention):
            raise ValueError(
                "a key/value cache holds the model's own keys and values: run the whole sequence "
                "without a cache to read or hook activations"
            )
        probe = self._pattern_probe(probe, return_attention)
        start = cache[0].self_attn.length if cache else 0
        x = self.embed(tokens, start, probe=probe)  # (B, T, D)
        if context is not None:
            check_context(context, source_pad_mask, tokens)
        check_pad_mask(pad_mask, tokens.shape, "pad_mask", of="tokens")
        self_bias = attention_bias(pad_mask, tokens.size(1), causal=True)  # (B, 1, T, T) or None
        # Every decoder query may look at every non-PAD source position.
        context_bias = attention_bias(source_pad_mask, tokens.size(1), causal=False)  # (B, 1, T, S) or None
        hidden = self.decoder(x, self_bias, context, context_bias, rope=self.rope, cache=cache, probe=probe)
        weights = _per_layer(self.decoder, probe if return_attention else None)
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
        `return_attention` also {name: weights (B, H, T_q, T_k)} for every attention
        (the cached "<name>.pattern" values of `run_with_cache`, renamed).
        """
        if not return_attention:
            return self._run(tokens, source, pad_mask, source_pad_mask, probe=None)
        logits, cache = self.run_with_cache(
            tokens, source=source, pad_mask=pad_mask, source_pad_mask=source_pad_mask, names=_is_pattern
        )
        return logits, _patterns(cache)

    def run_with_cache(
        self,
        tokens: torch.Tensor,
        *,
        source: torch.Tensor | None = None,
        pad_mask: torch.Tensor | None = None,
        source_pad_mask: torch.Tensor | None = None,
        names: Names = None,
        hooks: dict[str, Hook] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """As `forward`, and also returns the activations named in `names` (a list of names,
        a predicate on names, or None for all of them), in computation order. `hooks`
        ({name: fn}) replace values on the way, as in `run_with_hooks`; the cache holds
        the replaced ones. Values keep their autograd history: call under
        `torch.no_grad()` unless you want gradients through them. See hooks.py."""
        probe = Probe(self.hook_names(), names, hooks)
        logits = self._run(tokens, source, pad_mask, source_pad_mask, probe)
        return logits, probe.cache

    def run_with_hooks(
        self,
        tokens: torch.Tensor,
        *,
        source: torch.Tensor | None = None,
        pad_mask: torch.Tensor | None = None,
        source_pad_mask: torch.Tensor | None = None,
        hooks: dict[str, Hook],
    ) -> torch.Tensor:
        """As `forward`, with `hooks` {name: fn} applied on the way: fn gets the value at
        `name` and returns the value to use instead, of the same shape (or None to keep
        it). E.g. ablate head 1 of decoder layer 0's self-attention:

            def zero_head_1(z):  # (B, H, T, D_h)
                z = z.clone(); z[:, 1] = 0; return z
            logits = model.run_with_hooks(tokens, hooks={"decoder.0.self.z": zero_head_1})
        """
        probe = Probe(self.hook_names(), names=(), hooks=hooks)
        return self._run(tokens, source, pad_mask, source_pad_mask, probe)

    def hook_names(self) -> list[str]:
        """The names of every activation a probe can read or replace, in computation order."""
        names: list[str] = []
        if self.encoder is not None:
            names.append("embed" if self.decoder is None else "source_embed")
            names += [name for layer in self.encoder.layers for name in layer.hook_names()]
        if self.decoder is not None:
            names.append("embed")
            names += [name for layer in self.decoder.layers for name in layer.hook_names()]
        return names

    def _run(
        self,
        tokens: torch.Tensor,
        source: torch.Tensor | None,
        pad_mask: torch.Tensor | None,
        source_pad_mask: torch.Tensor | None,
        probe: Probe | None,
    ) -> torch.Tensor:
        """The forward pass: logits (B, T, V)."""
        is_seq2seq = self.config.arch == "encoder-decoder"
        if is_seq2seq != (source is not None):
            needs = "needs a" if is_seq2seq else "takes no"
            raise ValueError(f"arch={self.config.arch} {needs} `source` sequence")
        if self.decoder is None:  # encoder-only: a bidirectional stack over `tokens`
            hidden, _ = self.encode(tokens, pad_mask, probe=probe)
            return self.lm_head(hidden)  # (B, T, D) -> (B, T, V)
        context = self.encode(source, source_pad_mask, probe=probe)[0] if is_seq2seq else None
        logits, _ = self.decode(
            tokens, context=context, source_pad_mask=source_pad_mask, pad_mask=pad_mask, probe=probe
        )
        return logits

    def _pattern_probe(self, probe: Probe | None, return_attention: bool) -> Probe | None:
        """encode/decode's `return_attention`: a probe that keeps the patterns."""
        if not return_attention:
            return probe
        if probe is not None:
            raise ValueError("pass either return_attention or a probe (that keeps the patterns), not both")
        return Probe(self.hook_names(), names=_is_pattern)


def check_ids(ids: torch.Tensor, vocab_size: int, name: str, values: bool = True) -> None:
    """A clear error unless `ids` is a non-empty (B, L) tensor of token ids, with every id in
    [0, vocab_size) if `values` (which reads them back from the device)."""
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.long, torch.int):
        got = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise TypeError(f"`{name}` must be a tensor of integer token ids (torch.long), not {got}")
    if ids.dim() != 2 or ids.numel() == 0:
        raise ValueError(
            f"`{name}` must hold token ids as (batch, length), neither of them 0; its shape is {tuple(ids.shape)}"
        )
    if not values:
        return
    low, high = torch.stack(torch.aminmax(ids)).tolist()  # one pass, one read back (a sync on CUDA)
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"`{name}` holds ids from {low} to {high}; this model's vocabulary has ids 0 to "
            f"{vocab_size - 1} (vocab_size={vocab_size})"
        )


def check_pad_mask(pad_mask: torch.Tensor | None, shape: tuple[int, ...], name: str, of: str) -> None:
    """A clear error unless `pad_mask` is None or a bool tensor of `shape`, the (B, L) of the
    sequence `of` whose PAD positions it marks."""
    if pad_mask is None:
        return
    if not isinstance(pad_mask, torch.Tensor) or pad_mask.dtype != torch.bool:
        got = pad_mask.dtype if isinstance(pad_mask, torch.Tensor) else type(pad_mask).__name__
        raise TypeError(f"`{name}` must be a tensor of torch.bool, True at the PAD positions of `{of}`, not {got}")
    if pad_mask.shape != shape:
        raise ValueError(
            f"`{name}` must have the shape of `{of}`, {tuple(shape)}: one bool per token, True at PAD; "
            f"its shape is {tuple(pad_mask.shape)}"
        )


def check_context(context: torch.Tensor, source_pad_mask: torch.Tensor | None, tokens: torch.Tensor) -> None:
    """A clear error unless the encoded source `context` (B, S, D) holds one sequence per
    sequence of `tokens`, and `source_pad_mask` (if any) is its (B, S) bool mask."""
    source_shape = context.shape[:2]  # (B, S) of the source that was encoded
    if context.size(0) != tokens.size(0):
        raise ValueError(
            f"the source {tuple(source_shape)} and `tokens` {tuple(tokens.shape)} must hold the same "
            "number of sequences: one source per sequence of tokens"
        )
    check_pad_mask(source_pad_mask, source_shape, "source_pad_mask", of="source")


def _is_pattern(name: str) -> bool:
    return is_value(name, "pattern")


def _patterns(cache: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The attention weights among cached values, named "<stack>.<layer>.<kind>"."""
    return {ActName.parse(name).attention: w for name, w in cache.items() if _is_pattern(name)}


def _per_layer(stack: TransformerStack, probe: Probe | None) -> list[dict[str, torch.Tensor]]:
    """A stack's weights kept by `probe`, one {"self": w, "cross": w} dict per layer ({} each without a probe)."""
    weights = _patterns(probe.cache) if probe is not None else {}
    return [
        {kind: weights[child(layer.name, kind)] for kind in ATTENTION_KINDS if child(layer.name, kind) in weights}
        for layer in stack.layers
    ]
