"""What the model is fed: a task's examples framed into batches for an architecture, the
held-out set and the training stream.

`from tinytf.data import TaskData` is the public path of the held-out set and training
stream; it is imported on first use, so the framings load without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinytf.data.heldout import TaskData

__all__ = ["TaskData"]


def __getattr__(name: str) -> Any:
    if name == "TaskData":
        from tinytf.data.heldout import TaskData

        return TaskData
    raise AttributeError(f"module 'tinytf.data' has no attribute {name!r}")
