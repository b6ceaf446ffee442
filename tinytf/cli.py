"""The `tinytf` command line: a thin layer over the library.

Each command parses its options, calls one library function and formats the result.
A `UserError` raised anywhere below becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from tinytf.config import dump_config, load_config
from tinytf.errors import UserError
from tinytf.tasks import describe_tasks

app = typer.Typer(
    help="Build, train and look inside tiny Transformers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
config_app = typer.Typer(help="Inspect and validate config files.", no_args_is_help=True)
app.add_typer(config_app, name="config")

Command = TypeVar("Command", bound=Callable[..., object])

OverridesOption = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE", help="Override a config value, e.g. --set model.d_model=64."),
]


def user_errors_exit_2(command: Command) -> Command:
    """Turn a `UserError` into `error: <message>` on stderr and exit code 2, no traceback."""

    @functools.wraps(command)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return command(*args, **kwargs)
        except UserError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(code=2) from None

    return wrapper  # type: ignore[return-value]


@config_app.command("show")
@user_errors_exit_2
def config_show(
    config: Annotated[Path, typer.Argument(help="A YAML config file.")],
    overrides: OverridesOption = None,
) -> None:
    """Validate CONFIG and print it fully resolved, defaults included.

    Example: tinytf config show configs/quickstart.yaml --set model.d_model=64
    """
    typer.echo(dump_config(load_config(config, overrides or ())), nl=False)


@app.command("tasks")
@user_errors_exit_2
def tasks() -> None:
    """List every task: what it asks, the architectures it works with, an example.

    Example: tinytf tasks
    """
    for line in describe_tasks():
        typer.echo(line)


def main() -> None:
    app(prog_name="tinytf")
