"""The work behind the `tinytf` commands, apart from Typer, one module per idea: train;
looking inside a trained run (attend, heads, patch and attribute, predict and eval). Each
command loads its run, calls the library and returns a report that renders itself
(`to_text`, `to_json`) and carries its `note` for stderr; app.py parses the options and
shows the report (`show`). These modules load torch: app.py imports them inside its
commands, so `tinytf --help` starts at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tinytf.data.heldout import TaskData
from tinytf.errors import UserError
from tinytf.run.folder import RunFolder
from tinytf.run.load import LoadedRun
from tinytf.tasks.base import Pairs

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class Report(Protocol):
    """What a command shows: text (a table, lines), or JSON, and a note for stderr."""

    note: str | None

    def to_text(self) -> str: ...

    def to_json(self) -> str: ...


class FigureReport(Report, Protocol):
    """A report that is also a CSV (a row per thing measured) and a figure."""

    def to_csv(self) -> str: ...

    def figure(self) -> Figure: ...


def run_heading(loaded: LoadedRun, checkpoint: str) -> str:
    return f"run {loaded.run_dir} ({checkpoint} checkpoint, step {loaded.step})"


def first_held_out(loaded: LoadedRun, n: int | None) -> Pairs:
    """The run's first `n` held-out examples (all of them for None): a `UserError` if the
    task's data file changed since training, or if there are fewer than `n`."""
    RunFolder(loaded.run_dir).check_data(loaded.task)
    held_out = TaskData(loaded.task, loaded.config.seed).held_out
    if n is not None and n > len(held_out):
        raise UserError(f"--n {n}: the run's held-out set has {len(held_out)} examples (task.eval_size)")
    return held_out if n is None else held_out[:n]


def typed_length_note(loaded: LoadedRun, text: str) -> str | None:
    """A note when typed `text` is shorter or longer than every input the model trained on."""
    framing = loaded.framing
    return framing.length_note(framing.typed_input(text, loaded.config.model.max_len))


__all__ = ["FigureReport", "Report", "first_held_out", "run_heading", "typed_length_note"]
