"""The Transformer model library: attention, masks, positions, layers, the model.

`tinytf.build_model(config)` builds one from a config (tinytf/run/setup.py): the model
itself knows no config file and no task, only `ModelConfig` and a vocabulary size.
`Transformer`, `MultiHeadAttention` and `attention` are imported on first use, so the
torch-free modules here (`names`, `size`) load without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinytf.model.attention import MultiHeadAttention, attention
    from tinytf.model.transformer import Transformer

__all__ = ["MultiHeadAttention", "Transformer", "attention"]

_HOMES = {"MultiHeadAttention": "attention", "attention": "attention", "Transformer": "transformer"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"tinytf.model.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'tinytf.model' has no attribute {name!r}")
