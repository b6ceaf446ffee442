"""tinytf: build, train and look inside tiny Transformers.

The entry points for scripts and notebooks:

    import tinytf
    config = tinytf.load_config("configs/quickstart.yaml", overrides=["model.d_model=64"])
    model = tinytf.build_model(config)                 # vocabulary from the config's task
    result = tinytf.train(config, runs_dir="runs")     # a run folder with checkpoints
    run = tinytf.load_run()                            # the newest under ./runs: model, task, framing, config
    run = tinytf.load_exported("model.safetensors")    # a model `tinytf export` wrote, the same way
    batch, _ = run.framing.typed_batch(run.model, "the cat sat on the mat")  # text -> ids, as attend reads it

Importing tinytf imports neither torch nor the tasks: each entry point is imported on
first use, and `build_model`, `train` and `load_run` bring torch with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tinytf.config import Config
from tinytf.errors import ConfigError, UserError

if TYPE_CHECKING:
    from tinytf.interop.files import load_exported
    from tinytf.run.load import load_run
    from tinytf.run.setup import build_model, load_config
    from tinytf.training.trainer import train

__all__ = ["Config", "ConfigError", "UserError", "build_model", "load_config", "load_exported", "load_run", "train"]

_ENTRY_POINTS = {
    "load_config": "tinytf.run.setup",
    "build_model": "tinytf.run.setup",
    "load_run": "tinytf.run.load",
    "load_exported": "tinytf.interop.files",
    "train": "tinytf.training.trainer",
}


def __getattr__(name: str) -> Any:
    """`tinytf.load_config` and friends, imported on first use (PEP 562)."""
    if name in _ENTRY_POINTS:
        return getattr(importlib.import_module(_ENTRY_POINTS[name]), name)
    raise AttributeError(f"module 'tinytf' has no attribute {name!r}")
