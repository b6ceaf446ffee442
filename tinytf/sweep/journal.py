"""The journal file a sweep keeps its study in (Optuna's `JournalFileBackend`: one JSON
record a line), checked before it is used.

Optuna skips a last line without its newline, then appends the next record right after
it: the two glue into one line that is no longer last, and every later read fails. A kill
or a full disk in the middle of an append leaves exactly such a torn line. So before a
sweep writes to its journal, `checked_journal(path, repair=True)` cuts a torn last line
back to the last whole record, keeping the cut bytes in a file beside it and saying so
in a note. A bad line anywhere else (not UTF-8, not one JSON record, not a record of
Optuna's, or one Optuna cannot replay) is refused in one line naming it: that journal is
never rewritten by tinytf.
Both happen under Optuna's own lock on the journal, so no append is cut while it runs.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from optuna.storages.journal import BaseJournalBackend, JournalFileSymlinkLock, JournalStorage

from tinytf.errors import UserError, first_line

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
        lines = data[:whole].splitlines()
        for number, line in enumerate(lines, start=1):
            if (problem := _record_problem(line)) is not None:
                raise _damaged(path, number, problem)
        if (unreplayable := _replay_problem([json.loads(line) for line in lines])) is not None:
            raise _damaged(path, *unreplayable)
        if repair and whole < len(data):
            _cut(path, data, whole)
    finally:
        lock.release()


def _damaged(path: Path, number: int, problem: str) -> UserError:
    return UserError(
        f"{path}: line {number} {problem}; tinytf leaves the journal as it is: keep a copy, then "
        f"delete that line and the ones after it to go on from the records before it, or start "
        "the sweep again with another --name"
    )


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


class _Records(BaseJournalBackend):
    """A journal's records in memory, for Optuna to replay (`_replay_problem`)."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records

    def read_logs(self, log_number_from: int) -> list[dict]:
        return self.records[log_number_from:]

    def append_logs(self, logs: list[dict]) -> None:
        self.records.extend(logs)


def _replay_problem(records: list[dict]) -> tuple[int, str] | None:
    """The line number of the first record Optuna cannot replay (an op it does not know, a
    field missing), and why; None when it replays them all. Replayed by Optuna's own
    `JournalStorage` from memory: all at once, and where that fails, one at a time."""
    try:
        JournalStorage(_Records(records))  # what every sound journal takes: one replay
        return None
    except Exception as err:  # found again below, record by record, to name its line
        failure = err
    backend = _Records([])
    storage = JournalStorage(backend)
    line = len(records)  # where the whole failed and no record alone does: the last
    for number, record in enumerate(records, start=1):
        backend.records.append(record)
        try:
            storage.get_all_studies()  # replays the records it has not read yet: this one
        except Exception as err:  # whatever the replay of a damaged record raises, it is that record's
            line, failure = number, err
            break
    return line, f"is a record Optuna cannot replay ({type(failure).__name__}: {first_line(failure)})"
