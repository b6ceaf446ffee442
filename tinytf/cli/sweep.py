"""`tinytf sweep`: many runs of one config over settings and seeds (`tinytf.sweep`).

tinytf sweep SWEEP.yaml [--workers N] [--trials N] [--storage URL] [--name NAME] [--runs-dir DIR]
tinytf sweep show NAME_OR_DIR [--format table|json|csv|png] [--out PATH]
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from tinytf.cli.errors import EXIT_INTERRUPTED, OneLineUsageErrors, user_errors_exit_2


class SweepCommands(OneLineUsageErrors):
    """`tinytf sweep FILE` runs the sweep: a first argument that is no subcommand is `run`'s."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


sweep_app = typer.Typer(
    cls=SweepCommands,
    help="Many runs at once: a config over settings and seeds, on Optuna. `tinytf sweep SWEEP.yaml` runs one.",
    no_args_is_help=True,
)

StorageOption = Annotated[
    str | None,
    typer.Option("--storage", help="A database URL shared by several machines. Default: a file in the sweep's folder."),
]
SweepsDirOption = Annotated[Path, typer.Option("--runs-dir", help="Where sweeps are kept, a folder each.")]


class SweepFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    png = "png"


@sweep_app.command("run")
@user_errors_exit_2
def run(
    sweep_file: Annotated[Path, typer.Argument(help="A sweep file (see sweeps/).", metavar="SWEEP.yaml")],
    workers: Annotated[
        int, typer.Option("--workers", min=1, max=256, help="Runs trained at once, on this machine.")
    ] = 1,
    trials: Annotated[
        int | None, typer.Option("--trials", min=1, help="Settings to try (overrides the file's).")
    ] = None,
    storage: StorageOption = None,
    name: Annotated[str | None, typer.Option("--name", help="The sweep's name. Default: the file's.")] = None,
    runs_dir: SweepsDirOption = Path("sweeps"),
) -> None:
    """Train a config over the settings and seeds of SWEEP.yaml; run it again to continue.

    Example: tinytf sweep sweeps/sort-encoder-lr.yaml --workers 2
    """
    from tinytf.sweep.launch import run_sweep, show_command

    outcome = run_sweep(
        sweep_file, workers=workers, trials=trials, storage=storage, name=name, runs_dir=runs_dir, say=typer.echo
    )
    if outcome.interrupted:
        typer.echo("interrupted: the finished settings are kept; run the same command to continue", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    if outcome.failed_workers:
        typer.echo(f"error: {'; '.join(outcome.failed_workers)}; run the same command to try its runs again", err=True)
        raise typer.Exit(1)
    if outcome.ran and not outcome.finished:
        typer.echo("some settings are still running in another process, or were cut short: run it again to finish")
    if outcome.ran:
        typer.echo(f"results: {show_command(outcome.folder, storage)}")


@sweep_app.command("show")
@user_errors_exit_2
def show(
    sweep: Annotated[
        str, typer.Argument(help="A sweep's folder, or its name under --runs-dir.", metavar="NAME_OR_DIR")
    ],
    output_format: Annotated[
        SweepFormat, typer.Option("--format", help="table, json, csv or png.")
    ] = SweepFormat.table,
    out: Annotated[
        Path | None, typer.Option("--out", help="Where --format png writes. Default: sweep.png in the sweep's folder.")
    ] = None,
    storage: StorageOption = None,
    runs_dir: SweepsDirOption = Path("sweeps"),
) -> None:
    """Rank the settings of a sweep by its objective: each seed's value, mean, worst, run folders.

    Example: tinytf sweep show sort-encoder-lr --format csv
    """
    from tinytf.cli.output import check_out, write_png
    from tinytf.sweep.results import load_results, results_text

    check_out(out, output_format.value, ("png",), "sweep.png")
    results = load_results(sweep, storage=storage, runs_dir=runs_dir)
    if output_format is SweepFormat.png:
        from tinytf.sweep.results import sweep_figure

        # Beside the sweep's runs, where this machine has them (a database's sweep may have none here)
        folder = results.folder if results.folder is not None and results.folder.is_dir() else Path(".")
        path = out or folder / "sweep.png"
        write_png(path, sweep_figure(results))
        typer.echo(f"wrote {path}")
        return
    typer.echo(results_text(results, output_format.value), nl=False)
