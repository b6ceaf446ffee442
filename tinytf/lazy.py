"""`torch`, imported the first time one of its attributes is used.

Tasks and framings describe themselves (names, architectures, config keys, sequence
lengths) without torch; only sampling and framing batches need it. Importing torch
takes over a second, so the modules that `tinytf --help`, `tinytf config show` and
config checking load write `from tinytf.lazy import torch`: the import happens when
the first batch is made, not when the CLI starts. Everywhere else, `import torch`.

This is the standard library's recipe (`importlib.util.LazyLoader`); once loaded, the
module is the ordinary `torch` module.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """The module `name`, to be executed on first attribute access (at once if already loaded)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


torch = lazy_import("torch")
