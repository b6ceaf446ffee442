"""The task registry. A task is one module; registering it is one line below.

from tinytf.tasks import get_task
task = get_task(config.task)
pairs = task.sample(64, torch.Generator().manual_seed(0))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tinytf.tasks.add import Add
from tinytf.tasks.base import Pairs, Task
from tinytf.tasks.copy import Copy
from tinytf.tasks.dyck import Dyck1, Dyck2
from tinytf.tasks.histogram import DoubleHistogram, Histogram
from tinytf.tasks.most_freq import MostFrequent
from tinytf.tasks.reverse import Reverse
from tinytf.tasks.sentences import Sentences
from tinytf.tasks.sort import Sort
from tinytf.tasks.text import Text
from tinytf.tasks.vocab import Vocabulary

if TYPE_CHECKING:
    from tinytf.config import TaskConfig

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
    )
}

__all__ = ["TASKS", "Pairs", "Task", "Vocabulary", "describe_tasks", "get_task"]


def get_task(config: TaskConfig) -> Task:
    """The task named by `config.name`, configured by the rest of `config`."""
    return TASKS[config.name](config)


def describe_tasks() -> list[str]:
    """One block per task (name, description, architectures, an example) for `tinytf tasks`."""
    from tinytf.config import TaskConfig

    lines = []
    for name, cls in TASKS.items():
        lines += [f"{name}", f"  {cls.description}", f"  architectures: {', '.join(cls.archs)}"]
        if name == "text":
            lines.append("  example: task.path: my.txt -> windows of the file, each predicting its next token")
        else:
            task = cls(TaskConfig(name=name, min_len=4, max_len=6))
            source, target = task.sample(1, torch.Generator().manual_seed(0)).example(0)
            shown = task.render(target) if task.language_model else f"{task.render(source)}  ->  {task.render(target)}"
            lines.append(f"  example: {shown}")
        lines.append("")
    return lines
