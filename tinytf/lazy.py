"""`torch`, imported the first time one of its attributes is used.

Tasks and framings describe themselves (names, architectures, config keys, sequence
lengths) without torch; only sampling and framing batches need it. Importing torch
takes over a second, so the modules that `tinytf --help`, `tinytf config show` and
config checking load write `from tinytf.lazy import torch`: torch is imported when the
first batch is made, not when the command line starts. Everywhere else, `import torch`.
"""

from __future__ import annotations

import importlib
from typing import Any


class _LazyModule:
    """Stands for a module; the first attribute looked up imports it, every lookup reads
    from it (about a microsecond each, nothing next to the tensor work it names)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self._name), attribute)


torch: Any = _LazyModule("torch")
