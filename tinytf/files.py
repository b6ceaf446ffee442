"""Writing files so that a crash never leaves half of one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_writer(path: str | Path) -> Iterator[BinaryIO]:
    """Open a temporary file beside `path` for writing; on success, flush it to disk and
    rename it over `path`. A crash or kill at any moment leaves either the old file or
    the new one, never half of one; an exception leaves the old one and no temporary."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)  # atomic on POSIX and Windows
    finally:
        temporary.unlink(missing_ok=True)
    _fsync_folder(path.parent)


def write_text_atomically(path: str | Path, text: str) -> None:
    with atomic_writer(path) as file:
        file.write(text.encode("utf-8"))


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
