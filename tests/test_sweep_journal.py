"""A sweep's journal (Optuna's JournalFileBackend) survives a torn last record -- what a
kill or a full disk in the middle of an append leaves -- and a bad line inside it is
refused in one line, never rewritten."""

import logging
import os
import subprocess
import sys

import optuna
import pytest
from conftest import SUBPROCESS_ENV, assert_user_error, invoke
from test_sweep import write_sweep

from tinytf.errors import UserError
from tinytf.sweep.journal import TORN
from tinytf.sweep.spec import Job, load_sweep
from tinytf.sweep.study import STUDY_FILE, storage_for


def add_trials(folder, n, name="torn"):
    """`n` more finished trials in the study `name` of the journal in `folder`, as a sweep run adds them."""
    study = optuna.create_study(study_name=name, storage=storage_for(folder, None), load_if_exists=True)
    for _ in range(n):
        trial = study.ask()
        study.tell(trial, trial.suggest_float("x", 0, 1))
    return study


def trials_in(folder, name="torn"):
    return len(optuna.load_study(study_name=name, storage=storage_for(folder, None, writing=False)).trials)


@pytest.fixture(autouse=True)
def quiet_optuna():
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def test_a_torn_last_record_is_cut_kept_aside_and_the_sweep_goes_on(tmp_path, caplog):
    add_trials(tmp_path, 3)
    journal = tmp_path / STUDY_FILE
    whole = journal.read_bytes()
    journal.write_bytes(whole[:-30])  # the last record torn, as a full disk leaves it
    torn = whole[whole[:-30].rfind(b"\n") + 1 : -30]
    assert trials_in(tmp_path) == 3  # reading skips it, and changes nothing
    assert journal.read_bytes() == whole[:-30]
    with caplog.at_level(logging.WARNING, logger="tinytf"):
        add_trials(tmp_path, 2)  # `tinytf sweep FILE` again: cut first, then append
        add_trials(tmp_path, 2)  # and again: before the repair, this made every read fail
    study = optuna.load_study(study_name="torn", storage=storage_for(tmp_path, None, writing=False))
    states = [trial.state.name for trial in study.trials]
    assert states == ["COMPLETE"] * 2 + ["RUNNING"] + ["COMPLETE"] * 4  # the torn record: trial 2's end
    assert (tmp_path / (STUDY_FILE + TORN)).read_bytes() == torn
    assert journal.read_bytes().endswith(b"\n")
    (note,) = [record.getMessage() for record in caplog.records]
    assert "its last line was torn" in note and f"kept in {STUDY_FILE}{TORN}" in note


BAD_LINES = {
    "not UTF-8": (b"\xff\xfe{}\n", "is not UTF-8 text"),
    "glued": (b'{"op_code": 0, "worker_id": "a"}{"op_code": 1}\n', "holds two records glued together"),
    "not JSON": (b"hello\n", "is not a JSON record"),
    "no op": (b'{"step": 1}\n', "is not a record of Optuna's journal"),
    "unknown op": (b'{"op_code": 99, "worker_id": "a"}\n', "is a record Optuna cannot replay"),
    "op without its fields": (b'{"op_code": 4, "worker_id": "a"}\n', "is a record Optuna cannot replay"),
}


@pytest.mark.parametrize("bad", BAD_LINES, ids=list(BAD_LINES))
def test_a_bad_line_inside_the_journal_is_one_error_naming_it_and_the_file_is_kept(bad, tmp_path):
    folder = tmp_path / "sweeps" / "torn"
    add_trials(folder, 2)
    journal = folder / STUDY_FILE
    lines = journal.read_bytes().splitlines(keepends=True)
    damaged = b"".join([lines[0], BAD_LINES[bad][0], *lines[1:]])
    journal.write_bytes(damaged)
    with pytest.raises(UserError, match=f"line 2 {BAD_LINES[bad][1]}"):
        storage_for(folder, None)
    assert_user_error(invoke("sweep", "show", folder), f"{journal}: line 2 {BAD_LINES[bad][1]}")
    assert journal.read_bytes() == damaged and not list(folder.glob(f"*{TORN}*"))


def test_a_worker_meeting_a_damaged_journal_says_so_in_one_line(tmp_path):
    sweep, base, _ = load_sweep(write_sweep(tmp_path))
    folder = tmp_path / "sweeps" / "grid"
    add_trials(folder, 1, name="grid")
    journal = folder / STUDY_FILE
    journal.write_bytes(b"hello\n" + journal.read_bytes())  # damaged since the sweep began
    job = Job(sweep, base, "grid", folder, None, 1)
    worker = subprocess.run(
        [sys.executable, "-m", "tinytf.sweep.worker", str(os.getpid())],
        input=job.to_json(),
        capture_output=True,
        text=True,
        env=SUBPROCESS_ENV,
        timeout=120,
    )
    assert worker.returncode == 2 and "Traceback" not in worker.stderr
    assert (
        worker.stderr == f"error: {journal}: line 1 is not a JSON record; tinytf leaves the journal as it is: "
        "keep a copy, then delete that line and the ones after it to go on from the records before it, or start "
        "the sweep again with another --name\n"
    )
