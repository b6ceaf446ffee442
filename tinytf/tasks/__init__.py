"""The task registry. A task is one module; registering it is one line below.

    from tinytf.tasks import get_task
    task = get_task(config.task)
    pairs = task.sample(64, torch.Generator().manual_seed(0))

Importing the registry does not import torch (see `tinytf/lazy.py`).
"""

from __future__ import annotations

from tinytf.config import TaskConfig
from tinytf.tasks.add import Add
from tinytf.tasks.base import Pairs, Task
from tinytf.tasks.copy import Copy
from tinytf.tasks.dyck import Dyck1, Dyck2
from tinytf.tasks.histogram import DoubleHistogram, Histogram
from tinytf.tasks.induction import Induction
from tinytf.tasks.modular_add import ModularAdd
from tinytf.tasks.most_freq import MostFrequent
from tinytf.tasks.reverse import Reverse
from tinytf.tasks.sentences import Sentences
from tinytf.tasks.sort import Sort
from tinytf.tasks.text import Text
from tinytf.tasks.vocab import Vocabulary

TASKS: dict[str, type[Task]] = {
    task.name: task
    for task in (
        Copy,
        Reverse,
        Sort,
        Add,
        Histogram,
        DoubleHistogram,
        MostFrequent,
        Dyck1,
        Dyck2,
        Sentences,
        Text,
        Induction,
        ModularAdd,
    )
}

# The tasks that draw minimal pairs (`tinytf patch --pairs`), and the kinds each draws
CONSTRUCTIONS: dict[str, tuple[str, ...]] = {
    name: task.constructions for name, task in TASKS.items() if task.constructions
}

__all__ = ["CONSTRUCTIONS", "TASKS", "Pairs", "Task", "Vocabulary", "get_task"]


def get_task(config: TaskConfig) -> Task:
    """The task named by `config.name`, configured by the rest of `config`."""
    return TASKS[config.name](config)
