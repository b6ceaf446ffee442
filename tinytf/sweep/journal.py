"""The journal file a sweep keeps its study in (Optuna's `JournalFileBackend`: one JSON
record a line), checked before it is used.

Optuna skips a last line without its newline, then appends the next record right after
it: the two glue into one line that is no longer last, and every later read fails. A kill
or a full disk in the middle of an append leaves exactly such a torn line. So before a
sweep writes to its journal, `checked_journal(path, repair=True)` cuts a torn last line
back to the last whole record, keeping the cut bytes in a file beside it and saying so
in a note. A bad line anywhere else (not UTF-8, not one JSON record, not a record of
Optuna's) is refused in one line naming it: that journal is never rewritten by tinytf.
Both happen under Optuna's own lock on the journal, so no append is cut while it runs.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from optuna.storages.journal import JournalFileSymlinkLock

from tinytf.errors import UserError

TORN = ".torn"  # the suffix of the file that keeps a torn last line's bytes

log = logging.getLogger(__name__)


def checked_journal(path: Path, *, repair: bool) -> None:
    """A `UserError` if the journal at `path` has a bad line before its last; with `repair`,
    a torn last line is cut and kept aside (without, it is left: Optuna reads past it)."""
    if not path.is_file():
        return
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        data = path.read_bytes()
        whole = data.rfind(b"\n") + 1  # the bytes up to the last newline: whole records
        for number, line in enumerate(data[:whole].splitlines(), start=1):
            if (problem := _record_problem(line)) is not None:
                raise UserError(
                    f"{path}: line {number} {problem}; tinytf leaves the journal as it is: keep a copy, then "
                    f"delete that line and the ones after it to go on from the records before it, or start "
                    "the sweep again with another --name"
                )
        if repair and whole < len(data):
            _cut(path, data, whole)
    finally:
        lock.release()


def _record_problem(line: bytes) -> str | None:
    """What is wrong with one whole line of the journal, or None for a record."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    try:
        record, end = json.JSONDecoder().raw_decode(text.strip())
    except json.JSONDecodeError:
        return "is not a JSON record"
    if end < len(text.strip()):
        return "holds two records glued together"
    if not isinstance(record, dict) or type(record.get("op_code")) is not int:
        return "is not a record of Optuna's journal (no op_code)"
    return None


def _cut(path: Path, data: bytes, whole: int) -> None:
    """Keep the torn bytes after `whole` in a new file beside `path`, then cut them off."""
    aside, number = path.with_name(path.name + TORN), 1
    while aside.exists():
        number += 1
        aside = path.with_name(f"{path.name}{TORN}-{number}")
    try:
        aside.write_bytes(data[whole:])
        os.truncate(path, whole)
    except OSError as err:
        raise UserError(f"{path}: its last line is torn, and cannot be cut ({err.strerror or err})") from None
    log.warning(
        f"{path}: its last line was torn ({len(data) - whole} bytes: a kill or a full disk while it was "
        f"written); cut, and kept in {aside.name}"
    )
