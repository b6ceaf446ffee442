"""Training one run: the loop, its reports, its optimizer, its processes.

`from tinytf.training import Trainer` (and `TrainResult`, `train`) is the public path of
the training loop; each is imported on first use, so the torch-free modules here (the
memory estimate) load without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinytf.training.trainer import Trainer, TrainResult, train

__all__ = ["TrainResult", "Trainer", "train"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tinytf.training import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'tinytf.training' has no attribute {name!r}")
