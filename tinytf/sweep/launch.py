"""`tinytf sweep`: open (or continue) a sweep's study and run its worker processes.

The parent process checks the sweep file, opens the study, fails the trials that killed
processes of this host left running and queues their retries, then starts `--workers`
processes (`tinytf.sweep.worker`) with the cores divided among them and waits. Workers
run in their own process group: Ctrl-C reaches the parent alone, which forwards one
SIGINT to each, so that each saves its run once.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tinytf.device import machine_cores, threads_asked
from tinytf.errors import EXIT_INTERRUPTED, EXIT_WRITE_FAILED, UserError
from tinytf.files import check_run_name
from tinytf.sweep.spec import Job, load_sweep
from tinytf.sweep.study import (
    FINAL,
    HOST,
    masked,
    open_study,
    retry_cut_short,
    settings_of,
    storage_errors,
    storage_for,
)


def available_cores() -> int:
    """The cores the workers share: OMP_NUM_THREADS if set (a limit the user chose), else this process's."""
    asked = threads_asked()
    return asked if asked is not None else machine_cores()


@dataclass
class Outcome:
    folder: Path
    finished: bool  # every setting is done (or failed for good)
    ran: bool  # workers were started: the sweep was not finished already
    interrupted: bool
    failed_workers: list[str] = field(default_factory=list)  # how each worker that failed ended, in words


def run_sweep(
    path: Path,
    *,
    workers: int = 1,
    trials: int | None = None,
    storage: str | None = None,
    name: str | None = None,
    runs_dir: Path = Path("sweeps"),
    say=print,
) -> Outcome:
    """Run the sweep file at `path` until every setting is trained (see the module)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sweep, base, base_config = load_sweep(path)
    if trials is not None:
        if sweep.is_grid:
            raise UserError(f"--trials: this sweep trains every setting of its grid ({sweep.budget})")
        sweep = sweep.model_copy(update={"trials": trials})
    name = _sweep_name(path, name, runs_dir)
    folder = runs_dir / name
    store = storage_for(folder, storage)
    study = open_study(sweep, name, store, base_config)
    with storage_errors(store):
        retried = retry_cut_short(study, store, sweep.seeds)
    if retried:
        say(f"trying again the trials cut short: {', '.join(map(str, retried))}")
    done = [s for s in settings_of(study) if s.state(len(sweep.seeds)) in FINAL]
    if len(done) >= sweep.budget:
        say(f"sweep {name}: finished, {len(done)} settings; see them with: {show_command(folder, storage)}")
        return Outcome(folder, finished=True, ran=False, interrupted=False)
    threads = max(1, available_cores() // workers)
    say(
        f"sweep {name}: {sweep.budget} settings x {len(sweep.seeds)} seeds ({len(done)} settings done), "
        f"{workers} worker(s) of {threads} thread(s), runs in {folder}"
    )
    job = Job(sweep, base.resolve(), name, folder, storage, threads)
    ended, stopped = _run_workers(job, workers)
    interrupted = {EXIT_INTERRUPTED, -signal.SIGINT}  # a worker Ctrl-C reached before it could say so
    stopped |= any(code in interrupted for _, code in ended)
    with storage_errors(store):
        finished = sum(s.state(len(sweep.seeds)) in FINAL for s in settings_of(study)) >= sweep.budget
        failed = [
            _how_it_ended(number, pid, code, study)
            for number, (pid, code) in enumerate(ended, start=1)
            if code not in (0, *interrupted)
        ]
    return Outcome(folder, finished, ran=True, interrupted=stopped, failed_workers=failed)


def _sweep_name(path: Path, name: str | None, runs_dir: Path) -> str:
    """--name, or the sweep file's name; a `UserError` for one that names no folder, saying
    where it came from."""
    if name is not None:
        check_run_name(name, runs_dir)
        return name
    try:
        check_run_name(path.stem, runs_dir)
    except UserError:
        message = f"{path}: a sweep is named after its file, and {path.stem!r} names no folder; give --name"
        raise UserError(message) from None
    return path.stem


def _how_it_ended(number: int, pid: int, code: int, study: optuna.Study) -> str:
    """`worker 2 (process 4242) was killed by SIGKILL while training trial 5`."""
    if code == EXIT_WRITE_FAILED:
        how = "stopped: it could not write a file, as it says above (a full disk?)"
    elif code < 0:
        how = f"was killed by {signal.Signals(-code).name}"
    else:
        how = f"exited with code {code}"
    mine = [
        trial.number
        for trial in study.get_trials(deepcopy=False)
        if trial.user_attrs.get("worker") == {"host": HOST, "pid": pid} and trial.state != TrialState.COMPLETE
    ]
    during = f" while training trial {', '.join(map(str, mine))}" if mine else ""
    return f"worker {number} (process {pid}) {how}{during}"


def show_command(folder: Path, storage: str | None) -> str:
    """The `tinytf sweep show` command for the sweep in `folder` (stored at `storage`, if
    given), shell-quoted to paste as it is; a database password is shown as *** (printed
    commands end up in logs), to be typed again."""
    storage = masked(storage) if storage is not None else None
    return shlex.join(["tinytf", "sweep", "show", str(folder), *(["--storage", storage] if storage else [])])


def _run_workers(job: Job, workers: int) -> tuple[list[tuple[int, int]], bool]:
    """Start the workers and wait for them: each one's (pid, exit code), and whether Ctrl-C
    stopped them."""
    env = {**os.environ, "OMP_NUM_THREADS": str(job.threads), "MKL_NUM_THREADS": str(job.threads)}
    command = [sys.executable, "-m", "tinytf.sweep.worker", str(os.getpid())]
    processes = [
        subprocess.Popen(command, env=env, start_new_session=True, stdin=subprocess.PIPE, text=True)
        for _ in range(workers)
    ]
    for process in processes:  # the job (the storage URL with its password, the sweep file) on stdin
        with contextlib.suppress(BrokenPipeError):  # a worker that died at start: its exit code tells
            process.stdin.write(job.to_json())
            process.stdin.close()
    try:
        for process in processes:
            process.wait()
    except KeyboardInterrupt:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # once: a second would stop a run before it saves
        for process in processes:
            _wait_through_interrupts(process)
        return [(process.pid, process.returncode) for process in processes], True
    return [(process.pid, process.returncode) for process in processes], False


def _wait_through_interrupts(process: subprocess.Popen) -> None:
    while True:
        try:
            process.wait()
            return
        except KeyboardInterrupt:  # another Ctrl-C: the workers are already saving
            continue
