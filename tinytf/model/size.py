"""How big a Transformer is, from its `ModelConfig` alone: no torch, nothing built.

    stack_depths(config)                 StackDepths(encoder=2, decoder=2): layers per stack
    parameter_count(config, vocab_size)  what `Transformer(config, vocab_size)` holds

Both follow transformer.py, layers.py, attention.py and positional.py as they build the
model; a test holds the count equal to the built model's for every option that changes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytf.config import ModelConfig

# Learned (max_len, D) tables per positional encoding (positional.py); the sinusoidal and
# rotary tables are buffers, not parameters. A new encoding fails here until it is counted.
POSITION_TABLES = {"sinusoidal": 0, "learned": 1, "rope": 0, "none": 0}


@dataclass(frozen=True)
class StackDepths:
    """The layers of each stack, 0 where the architecture has none."""

    encoder: int
    decoder: int

    @property
    def layers(self) -> int:
        return self.encoder + self.decoder

    @property
    def cross_attention(self) -> bool:
        """Whether decoder layers also attend to the encoded source (encoder-decoder)."""
        return self.encoder > 0 and self.decoder > 0

    @property
    def over_tokens(self) -> int:
        """Layers that read the model's `tokens`: the decoder, or an encoder-only model's encoder."""
        return self.decoder or self.encoder

    @property
    def over_source(self) -> int:
        """Layers that read the `source`: an encoder-decoder's encoder, else 0."""
        return self.encoder if self.decoder else 0


def stack_depths(config: ModelConfig) -> StackDepths:
    has_encoder = config.arch in ("encoder", "encoder-decoder")
    has_decoder = config.arch in ("decoder", "encoder-decoder")
    # An encoder-decoder may give each stack its own depth; unset means n_layers.
    return StackDepths(
        encoder=(config.n_encoder_layers or config.n_layers) if has_encoder else 0,
        decoder=(config.n_decoder_layers or config.n_layers) if has_decoder else 0,
    )


def parameter_count(config: ModelConfig, vocab_size: int) -> int:
    """The number of parameters of `Transformer(config, vocab_size)`, tied ones counted once."""
    d, f = config.d_model, config.d_ff
    norm = 2 * d if config.norm != "none" else 0  # a residual's LayerNorm: weight and bias
    attention = 4 * d * d + 4 * d + norm  # [W_Q; W_K; W_V] and W_O with biases, and its residual
    feed_forward = 2 * d * f + f + d + norm if f else 0  # up (D -> F) and down (F -> D) with biases; d_ff=0: none
    final_norm = 2 * d if config.norm == "pre" else 0  # pre-norm stacks end with a LayerNorm

    def stack(n_layers: int, cross_attention: bool) -> int:
        if not n_layers:
            return 0
        return n_layers * ((2 if cross_attention else 1) * attention + feed_forward) + final_norm

    depths = stack_depths(config)
    tokens = (1 if config.tie_embeddings else 2) * vocab_size * d  # the embedding, and lm_head unless tied
    positions = POSITION_TABLES[config.positional] * config.max_len * d
    return stack(depths.encoder, False) + stack(depths.decoder, depths.cross_attention) + tokens + positions
