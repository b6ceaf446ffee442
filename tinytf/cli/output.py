"""What a command writes: its report (`show`: a note on stderr, the text or JSON on stdout
or in --out), `--out` checked before any work is done, files written atomically (never
half a file), progress bars on stderr, and the lines of an input file. It imports no
torch, so a command that only reads (`sweep show`) loads none.
"""

from __future__ import annotations

import contextlib
import csv
import io
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import typer

from tinytf.errors import UserError
from tinytf.files import atomic_writer, read_regular_file

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from tinytf.cli.commands import FigureReport, Report
    from tinytf.data.batch import Progress

# How many things a command works through, and their unit (and from how many a bar is
# drawn) -> a progress callback or None.
ProgressBar = Callable[..., AbstractContextManager["Progress | None"]]
PROGRESS_FROM = 2_000  # inputs or examples; fewer take about a second, without a bar
MAX_INPUT_FILE_BYTES = 10_000_000


def show(report: Report, *, as_json: bool = False, out: Path | None = None) -> None:
    """Every command's output: its note on stderr, then its text or JSON on stdout, or in
    the file `out`."""
    show_note(report)
    emit((report.to_json() if as_json else report.to_text()) + "\n", out)


def show_figure(report: FigureReport, output_format: str, out: Path | None, name: str) -> None:
    """`show` for a report that is also a CSV and a figure: `output_format` "table", "json",
    "csv", or "png" (to `out`, or to a new `name`.png)."""
    if output_format in ("table", "json"):
        show(report, as_json=output_format == "json", out=out)
        return
    show_note(report)
    if output_format == "csv":
        emit(report.to_csv() + "\n", out)
        return
    path = out or fresh_path(Path(f"{name}.png"))
    write_png(path, report.figure())
    typer.echo(f"wrote {path}")


def write_csv(header: list[str], rows: list[list[str]]) -> str:
    """A header and rows as CSV text (no last line break: `show_figure` adds it)."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *rows])
    return out.getvalue().rstrip("\n")


def exact(value: float | None) -> str:
    """A number for a CSV as Python writes it, which reads back as the same float; blank for None."""
    return "" if value is None else repr(float(value))


def emit(content: str, out: Path | None) -> None:
    """`content` on stdout, or in the file `out` (saying so)."""
    if out is None:
        typer.echo(content, nl=False)
    else:
        write_text(out, content)
        typer.echo(f"wrote {out}")


def show_note(report: Report) -> None:
    if report.note is not None:
        typer.echo(f"note: {report.note}", err=True)


def check_figure_out(out: Path | None, output_format: str, name: str) -> None:
    """`check_out` for `show_figure`: any name, but a png's must end in .png (or nothing)."""
    if output_format == "png" and out is not None and out.suffix.lower() not in ("", ".png"):
        raise UserError(f"--out {out}: a {out.suffix} name for --format png; name the file *.png")
    check_out(out, output_format, None, f"{name}.{'txt' if output_format == 'table' else output_format}")


def check_out(out: Path | None, output_format: str, file_formats: tuple[str, ...] | None, example: str) -> None:
    """A `UserError` unless --out can be written: `file_formats` are the --format values a
    command writes to a file, each named by its suffix (None: every format, any name), and
    --out must become a file, a new one in an existing folder or a regular file (replaced),
    not a folder, pipe or device. Checked before the model runs; `example`: a name to suggest."""
    if out is None:
        return
    if file_formats is not None:
        if output_format not in file_formats:
            ordered = sorted(file_formats)
            allowed = f"--format {ordered[0]}" if len(ordered) == 1 else f"{', '.join(ordered[:-1])} or {ordered[-1]}"
            raise UserError(f"--out {out}: --format {output_format} prints to the terminal; --out is for {allowed}")
        wanted = f".{output_format}"
        if out.suffix and out.suffix.lower() != wanted:
            raise UserError(
                f"--out {out}: a {out.suffix} name for --format {output_format}; "
                f"name the file *{wanted} (or give no suffix)"
            )
    try:
        mode = out.stat().st_mode
    except FileNotFoundError:
        if not out.resolve().parent.is_dir():
            raise UserError(f"--out {out}: no folder {out.resolve().parent}; create it first") from None
        return  # a new file: the normal case
    except OSError as err:
        raise UserError(f"--out {out}: cannot write ({err.strerror or err})") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"--out {out}: is a folder; name a file, e.g. {out / example}")
    if not stat.S_ISREG(mode):
        raise UserError(f"--out {out}: not a regular file (a pipe or device); name a file")


@contextlib.contextmanager
def writing(path: Path) -> Iterator[BinaryIO]:
    """A file to write `path`'s new content to, atomically (`files.atomic_writer`), through
    a symbolic link to the file it names, whatever the format. An OSError is a one-line
    `UserError` naming `path`."""
    try:
        with atomic_writer(path.resolve()) as file:
            yield file
    except OSError as err:
        raise UserError(f"{path}: cannot write ({err.strerror or err})") from None


def write_text(path: Path, content: str) -> None:
    with writing(path) as file:
        file.write(content.encode("utf-8"))


def write_png(path: Path, figure: Figure, dpi: int = 120) -> None:
    """`figure` as PNG at `path` (matplotlib cannot read a format from a file object)."""
    with writing(path) as file:
        figure.savefig(file, dpi=dpi, format="png")


def fresh_path(path: Path) -> Path:
    """`path`, or `stem-2.ext`, `stem-3.ext`... whichever does not exist yet: never overwrite."""
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
    return candidate


@contextlib.contextmanager
def progress_bar(total: int, unit: str, at_least: int | None = None) -> Iterator[Progress | None]:
    """A progress callback drawing a tqdm bar on stderr (stdout holds the answers) while
    `total` things are worked through, when there are `at_least` of them (by default
    PROGRESS_FROM); else None."""
    if total < (PROGRESS_FROM if at_least is None else at_least):
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=False) as bar:
        yield bar.update


def input_lines(file: Path) -> list[str]:
    """The lines of a --file: a regular file of at most MAX_INPUT_FILE_BYTES (a pipe or
    /dev/zero would never end), UTF-8, split at "\\n" or "\\r\\n" only, so that line N
    is the file's line N."""
    data = read_regular_file(file, MAX_INPUT_FILE_BYTES, "--file")
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserError(f"{file}: line {line}: not UTF-8 text ({err.reason})") from None
    lines = content.split("\n")  # not splitlines(): it also splits at \x0b, \x1c, \u2028...
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]
