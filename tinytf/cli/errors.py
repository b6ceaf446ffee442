"""How the command line reports a mistake: one `error: ` line on stderr and exit code 2,
whether click finds it in the command line (an unknown option, a bad value, a missing
argument) or the library raises a `UserError`; never a usage text, a boxed panel or a
traceback. Ctrl-C is `interrupted` and exit code 130.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

import pydantic
import typer
from typer import TyperException
from typer.core import TyperGroup

from tinytf.errors import EXIT_INTERRUPTED, UserError

Command = TypeVar("Command", bound=Callable[..., object])

EXIT_BROKEN_PIPE = 141  # the shell's status of a program that SIGPIPE stopped (`cat big | head -1`)


class OneLineUsageErrors(TyperGroup):
    """The command group: a usage error (unknown option or command, bad value, missing
    argument) is one `error: ` line on stderr and exit code 2, like a `UserError`,
    instead of click's usage text and boxed panel."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            # `tinytf` (or `tinytf config`) alone: the help, and the exit code of a usage
            # error. Rich, where installed, prints the help itself and returns "".
            if help_text := ctx.get_help():
                typer.echo(help_text)
            ctx.exit(2)
        return super().parse_args(ctx, args)

    def main(self, *args: object, standalone_mode: bool = True, **kwargs: object) -> object:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except TyperException as err:
            typer.echo(f"error: {usage_error_line(err)}", err=True)
            sys.exit(2)
        except typer.Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        # Without standalone mode, click returns the exit code of a `typer.Exit` (and of
        # --help), or the command's return value: None, for every tinytf command.
        sys.exit(code if isinstance(code, int) else 0)


def usage_error_line(err: TyperException) -> str:
    """click's message for a usage error, on one line and named by the option it is about:
    `--format: 'bogus' is not one of 'table', 'json', ...` rather than `Invalid value for
    '--format': ...`."""
    # A missing argument is a BadParameter without a message: click's own line names it.
    if isinstance(err, typer.BadParameter) and err.message and err.param is not None:
        names = getattr(err.param, "opts", None) or [err.param.human_readable_name]
        message = f"{max(names, key=len)}: {_converter_message(err)}"
    else:
        message = err.format_message()
    message = " ".join(message.split()).removesuffix(".")
    if message[:2].istitle():  # "Missing argument" -> "missing argument", as tinytf's own errors
        message = message[0].lower() + message[1:]
    return message


def _converter_message(err: typer.BadParameter) -> str:
    """The message of the error that the value's converter raised, when typer validated the
    value with pydantic (which wraps it as "Value error, ..."); else click's message."""
    cause = err.__cause__
    if isinstance(cause, pydantic.ValidationError) and cause.errors():
        raised = cause.errors()[0].get("ctx", {}).get("error")
        if isinstance(raised, Exception):
            return str(raised)
    return err.message


def user_errors_exit_2(command: Command) -> Command:
    """Turn a `UserError` into `error: <message>` on stderr and exit code 2, and Ctrl-C
    into exit code 130; never a traceback for either. A file or folder the user may not
    read or write (a full disk) is one such line too, wherever the library met it."""

    @functools.wraps(command)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            with notes_on_stderr():
                return command(*args, **kwargs)
        except BrokenPipeError:  # stdout's reader left (`tinytf attend ... | head -1`): stop quietly
            _silence_stdout()
            raise typer.Exit(code=EXIT_BROKEN_PIPE) from None
        except (UserError, OSError) as err:
            if isinstance(err, OSError):  # a folder the user may not read, a full disk...
                reason = err.strerror or str(err)
                err = UserError(f"{err.filename}: {reason}" if err.filename is not None else reason)
            # One line even when the message quotes what the user typed, line breaks and all.
            typer.echo("error: " + str(err).replace("\r", "\\r").replace("\n", "\\n"), err=True)
            raise typer.Exit(code=2) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(code=EXIT_INTERRUPTED) from None

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def notes_on_stderr() -> Iterator[None]:
    """While a command runs, what the library logs (`logging.getLogger("tinytf")`, level
    WARNING: e.g. what a resume dropped from a damaged metrics.jsonl) is a `note: ` line on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("note: %(message)s"))
    library = logging.getLogger("tinytf")
    library.addHandler(handler)
    try:
        yield
    finally:
        library.removeHandler(handler)


def _silence_stdout() -> None:
    """Point stdout at the null device, so that Python's flush at exit does not raise
    BrokenPipeError again (the recipe of Python's `signal` documentation)."""
    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):  # (stdout not a file: a test's buffer)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
