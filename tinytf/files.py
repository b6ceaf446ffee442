"""Writing files so that a crash never leaves half of one; reading a user's file so that
a pipe, a device or a huge file is refused instead of read forever."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from tinytf.errors import UserError

# What a path is, when it is neither a regular file nor a folder.
SPECIAL_FILES = {
    stat.S_ISFIFO: "a FIFO",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
    stat.S_ISSOCK: "a socket",
}


@contextlib.contextmanager
def atomic_writer(path: str | Path) -> Iterator[BinaryIO]:
    """Open a temporary file beside `path` for writing; on success, flush it to disk and
    rename it over `path`. A crash or kill at any moment leaves either the old file or
    the new one, never half of one; an exception leaves the old one and no temporary.
    An `OSError` (a full disk...) names `path`, whichever step met it."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)  # atomic on POSIX and Windows
    except OSError as err:
        if err.filename not in (None, str(temporary)):
            raise
        raise OSError(err.errno, err.strerror or str(err), str(path)) from err  # the file meant, not its temporary
    finally:
        temporary.unlink(missing_ok=True)
    _fsync_folder(path.parent)


def write_bytes_atomically(path: str | Path, data: bytes) -> None:
    with atomic_writer(path) as file:
        file.write(data)


def write_text_atomically(path: str | Path, text: str) -> None:
    write_bytes_atomically(path, text.encode("utf-8"))


def append_text(path: str | Path, text: str) -> None:
    """Append `text` to the file at `path` (made if missing); an `OSError` names `path`."""
    with naming_errors(path), open(path, "a", encoding="utf-8") as file:
        file.write(text)


@contextlib.contextmanager
def naming_errors(path: str | Path) -> Iterator[None]:
    """An `OSError` raised in the block names `path` (writing to an open file raises one without a name)."""
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror or str(err), str(path)) from err


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def read_regular_file(path: str | Path, max_bytes: int, what: str, error: type[UserError] = UserError) -> bytes:
    """The bytes of the regular file at `path`, which may hold at most `max_bytes`.

    A missing or unreadable file, a folder, a FIFO, device or socket (reading one may block
    or never end) and a longer file raise `error`, one line naming `path`; `what` names the
    file's role in it ("config file", "--file"). The opened file is checked again, in case
    another took its place after the first check."""
    check_regular_file(path, max_bytes, what, error)  # before opening: opening a FIFO blocks until a writer comes
    try:
        # O_NONBLOCK: should a FIFO take the file's place after the check, opening it does not block.
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as file:
            _check_status(path, os.fstat(file.fileno()), max_bytes, what, error)
            data = file.read(max_bytes + 1)  # the file may have grown since
    except OSError as err:
        raise error(_cannot_read(path, err, what)) from None
    if len(data) > max_bytes:
        raise error(f"{path}: cannot read: more than {max_bytes:,} bytes; {what} takes at most {max_bytes:,} bytes")
    return data


def check_regular_file(path: str | Path, max_bytes: int, what: str, error: type[UserError] = UserError) -> None:
    """Refuse `path` as `read_regular_file` would, from its status alone: it never opens the file."""
    try:
        status = os.stat(path)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the name
        raise error(_cannot_read(path, err, what)) from None
    _check_status(path, status, max_bytes, what, error)


def _cannot_read(path: str | Path, err: OSError | ValueError, what: str) -> str:
    if isinstance(err, FileNotFoundError):
        return f"{path}: cannot read: {what} not found"
    return f"{path}: cannot read: {getattr(err, 'strerror', None) or err}"


def _check_status(path: str | Path, status: os.stat_result, max_bytes: int, what: str, error: type[UserError]) -> None:
    mode = status.st_mode
    if stat.S_ISDIR(mode):
        raise error(f"{path}: cannot read: is a folder; {what} must be a regular file")
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in SPECIAL_FILES.items() if test(mode)), "a special file")
        raise error(f"{path}: cannot read: not a regular file ({kind}); {what} must be a regular file")
    if status.st_size > max_bytes:
        raise error(f"{path}: cannot read: {status.st_size:,} bytes; {what} takes at most {max_bytes:,} bytes")


def check_run_name(name: str, runs_dir: str | Path) -> None:
    """A `UserError` unless `name` is one plain, visible folder name, so that the run stays
    inside `runs_dir` and its name prints on one line as it is (no control characters)."""
    if not name.strip() or name.startswith(".") or any(char in name for char in "/\\") or not name.isprintable():
        raise UserError(
            f"--name {name!r}: a run name is one folder name of visible characters, without '/', '\\', "
            f"a leading '.' or control characters (the run goes inside {runs_dir})"
        )
