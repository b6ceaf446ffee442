"""The Transformer model library: attention, masks, positions, layers, the model."""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from typing import Any

from tinytf.config import Config, config_from_dict
from tinytf.experiment import check_config
from tinytf.model.attention import MultiHeadAttention, attention
from tinytf.model.transformer import Transformer
from tinytf.tasks import get_task

__all__ = ["MultiHeadAttention", "Transformer", "attention", "build_model"]


def build_model(config: Config | Mapping[str, Any], vocab_size: int | None = None) -> Transformer:
    """Build the Transformer that `config` describes.

    config: a `Config`, or plain data shaped like the YAML file; validated and checked
        against its task here (`tinytf.experiment.check_config`).
    vocab_size: size of the token vocabulary; by default the vocabulary of the config's task.
    """
    if isinstance(config, str | PathLike):
        raise TypeError(f"build_model takes a config, not a file ({config!r}): call tinytf.load_config(path) first")
    if not isinstance(config, Config | Mapping):
        raise TypeError(
            f"build_model: config must be a Config or a dict shaped like the YAML file, not {type(config).__name__}"
        )
    if not isinstance(config, Config):
        config = config_from_dict(config)
    check_config(config, data=False)  # a model needs no data: a text task's file may be gone
    if vocab_size is None:
        vocab_size = len(get_task(config.task).vocab)
    return Transformer(config.model, vocab_size)
