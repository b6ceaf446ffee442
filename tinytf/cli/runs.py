"""Which run a `tinytf` command looks at, and how the command says so.

With `--run`, that run. Without, the newest run under `--runs-dir` that has a checkpoint
(`run/folder.py`'s `resolve_run`), which the command names as `run RUN (best checkpoint, step N)`: the
heading of a table printed on stdout or, when stdout holds data (JSON, predictions) or a
file is written, a line on stderr once the work is done. An error about what was asked of
the model (an unknown token, a construction) names it instead, so that it stays one line.
Newer runs passed over, and a run still being trained, are `note:` lines.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tinytf.errors import UserError

if TYPE_CHECKING:
    from tinytf.run.load import LoadedRun


def load_chosen_run(run: Path | None, runs_dir: Path, checkpoint: str) -> LoadedRun:
    """`--run`, or the newest run under `--runs-dir` that has a checkpoint; says which
    newer runs it passed over (crashed or stopped before their first checkpoint), and
    whether the run is still being trained (it is used: its checkpoint so far)."""
    from tinytf.run.folder import RunFolder, resolve_run, run_with, skipped_runs
    from tinytf.run.load import load_run

    picked = run_with(checkpoint)  # what the newest run must hold to be picked
    if run is None:
        for skipped in skipped_runs(runs_dir, picked):
            kind = f"no {picked} checkpoint" if picked else "no checkpoint"
            typer.echo(f"note: skipping {skipped} ({kind} yet)", err=True)
    run_dir = resolve_run(run, runs_dir, picked)
    if (pid := RunFolder(run_dir).training_process()) is not None:
        which = f"the newest run, {run_dir}," if run is None else str(run_dir)
        note = f"{which} is still training (process {pid}); using its {checkpoint} checkpoint so far"
        typer.echo(f"note: {note}", err=True)
    return load_run(run_dir, checkpoint)


@contextlib.contextmanager
def chosen_run(run: Path | None, runs_dir: Path, checkpoint: str, *, heading: bool) -> Iterator[LoadedRun]:
    """The run to look at (`load_chosen_run`), for the block that asks its model; when it
    was picked by default (no `--run`), a `UserError` of the block names the run (an error
    stays one line), and unless the command prints a heading that names it (`heading`), a
    `run` line on stderr does once the block is done."""
    from tinytf.cli.commands import run_heading

    loaded = load_chosen_run(run, runs_dir, checkpoint)
    try:
        yield loaded
    except UserError as err:
        if run is None and str(loaded.run_dir) not in str(err):
            raise UserError(f"{loaded.run_dir}: {err}") from None
        raise
    if run is None and not heading:
        typer.echo(run_heading(loaded, checkpoint), err=True)
