"""Run folders: where a training run keeps everything, and how it is found again. The one
place that names a run's files; it imports no torch, so a reader (`sweep show`, a script)
that only reads metrics loads none.

    runs/<name>-<YYYYmmdd-HHMMSS>/
        config.yaml            the fully resolved config
        vocab.json             the task's vocabulary
        checkpoints/last.pt    the latest state (model, optimizer, schedule, RNGs, step)
        checkpoints/best.pt    the state with the best validation score so far
        checkpoints/step-<k>.pt  with train.snapshot_every: the weights at step k (a snapshot)
        metrics.jsonl          one JSON object per logged point
        events.out.tfevents.*  TensorBoard scalars, attention maps, samples
        train.lock             the training lock (empty; locked only while a process trains)

A new run never reuses a folder: creation is atomic and a name already taken gets a
numeric suffix. A run is trained by one process at a time: training holds an OS lock
on `train.lock` (`RunFolder.locked`; filelock, released by the system if the process
dies) and writes its PID to `train.pid` (`claim`), so a second trainer is refused with
that number. Every file is written atomically: a kill leaves the old file or the new one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import filelock

from tinytf.errors import UserError
from tinytf.files import check_run_name, write_bytes_atomically, write_text_atomically
from tinytf.run.setup import Setup, save_config

if TYPE_CHECKING:
    from tinytf.tasks import Task

CONFIG_FILE = "config.yaml"
VOCAB_FILE = "vocab.json"
CHECKPOINTS = "checkpoints"
METRICS_FILE = "metrics.jsonl"
PID_FILE = "train.pid"
LOCK_FILE = "train.lock"  # kept between trainings; the OS lock on it lasts as long as its holder
DATA_FINGERPRINT_FILE = "data.sha256"  # tasks that read a file: its hash when the run was trained
SNAPSHOT = re.compile(r"step-(0|[1-9][0-9]*)")  # a snapshot's name: step-<k>, k without leading zeros

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunFolder:
    """One run folder: the names of its files, reading them, and (for training) its lock."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def config(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def vocab(self) -> Path:
        return self.path / VOCAB_FILE

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    def checkpoint(self, which: str) -> Path:
        """checkpoints/`which`.pt: "last", "best" or a snapshot, "step-<k>" (`check_which`)."""
        return self.path / CHECKPOINTS / f"{check_which(which)}.pt"

    def snapshot(self, step: int) -> Path:
        """checkpoints/step-<step>.pt: the weights at `step` (train.snapshot_every)."""
        return self.checkpoint(snapshot_name(step))

    def snapshots(self) -> list[tuple[int, Path]]:
        """Every snapshot the run holds, as (step, path), the earliest first."""
        folder = self.path / CHECKPOINTS
        paths = folder.glob("step-*.pt") if folder.is_dir() else []
        found = [(int(match[1]), path) for path in paths if (match := SNAPSHOT.fullmatch(path.stem)) and path.is_file()]
        return sorted(found)

    def is_run(self) -> bool:
        return self.config.is_file()

    def has_checkpoint(self, which: str | None = None) -> bool:
        """Whether it holds the `which` checkpoint ("best", "last"); None: either."""
        return any(self.checkpoint(kind).is_file() for kind in ([which] if which else ["last", "best"]))

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every record of metrics.jsonl, in the order logged; a `UserError` naming the first
        line that is not one (torn: is the run still writing it?)."""
        if not self.metrics.is_file():
            raise UserError(f"{self.path}: not a run folder with metrics (no {METRICS_FILE})")
        records = []
        for number, line in enumerate(self.metrics.read_bytes().splitlines(keepends=True), start=1):
            if (record := metrics_record(line)) is None:
                raise UserError(f"{self.metrics}: line {number} is not a metrics record (is the run still writing it?)")
            records.append(record)
        return records

    # ---- training it

    @classmethod
    def create(cls, runs_dir: str | Path, name: str) -> RunFolder:
        """Make a fresh, empty run folder `<runs_dir>/<name>-<timestamp>[-N]`."""
        runs_dir = Path(runs_dir)
        check_run_name(name, runs_dir)
        stem = f"{name}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
        try:
            runs_dir.mkdir(parents=True, exist_ok=True)
            for attempt in range(1, 1000):
                path = runs_dir / (stem if attempt == 1 else f"{stem}-{attempt}")
                try:
                    path.mkdir()  # fails if it exists: two runs can never share a folder
                except FileExistsError:
                    continue
                (path / CHECKPOINTS).mkdir()
                return cls(path)
        except OSError as err:
            raise UserError(f"{runs_dir}: cannot create a run folder ({err.strerror or err})") from None
        raise UserError(f"{runs_dir}: cannot find a free run folder name for {stem!r}")

    @contextlib.contextmanager
    def resuming(self) -> Iterator[RunFolder]:
        """`locked`, for a folder that training wrote: a `UserError`, before a lock file is
        made in it, for one that no training of this tinytf wrote (it has no train.lock)."""
        if not (self.path / LOCK_FILE).is_file():
            raise UserError(f"{self.path}: not a run folder of this tinytf version (it has no {LOCK_FILE})")
        with self.locked():
            yield self

    @contextlib.contextmanager
    def locked(self) -> Iterator[RunFolder]:
        """Hold the run's training lock while the block runs; a `UserError` naming the
        process that holds it if another one does. The lock is the OS's, on `train.lock`
        (made if missing): a killed trainer leaves no stale lock behind. On leaving, the
        train.pid this block's `claim` wrote is removed (one a killed trainer left stays)."""
        lock = filelock.FileLock(self.path / LOCK_FILE, timeout=0)  # timeout=0: try once, never wait
        try:
            lock.acquire()
        except filelock.Timeout:
            pid = self._recorded_pid()
            raise UserError(f"{self.path} is being trained by process {pid}; wait for it or stop it first") from None
        pid_file = self.path / PID_FILE
        found = _stamp(pid_file)
        try:
            yield self
        finally:
            try:
                if _stamp(pid_file) != found and self._recorded_pid() == str(os.getpid()):  # this block claimed it
                    pid_file.unlink(missing_ok=True)
            finally:
                lock.release()

    def claim(self) -> None:
        """Record this process as the run's trainer (within `locked`)."""
        write_text_atomically(self.path / PID_FILE, f"{os.getpid()}\n")

    def training_process(self) -> str | None:
        """The PID (as recorded, or "unknown") of the process training the run now, or None
        when none is. Only a run with a train.pid is probed (training writes it and removes it
        at the end; a killed trainer leaves it): its lock is tried once and released at once."""
        if not ((self.path / PID_FILE).is_file() and (self.path / LOCK_FILE).is_file()):
            return None
        lock = filelock.FileLock(self.path / LOCK_FILE, timeout=0)
        try:
            with lock:
                return None  # free: a trainer killed before it could remove its train.pid
        except filelock.Timeout:
            return self._recorded_pid()
        except OSError:  # a lock file this user may not open: no trainer of theirs holds it
            return None

    def _recorded_pid(self) -> str:
        pid_file = self.path / PID_FILE
        pid = pid_file.read_text().strip() if pid_file.is_file() else ""
        return pid or "unknown"

    def make_ready(self, setup: Setup, step: int, *, resumed: bool) -> int | None:
        """The locked folder made ready to train `setup` from `step`: a new run keeps its
        vocabulary and data file's hash, a resumed one is tidied up to its last checkpoint
        (`tidy_to`); both record their trainer (`claim`) and the config they train with.
        Returns, for a resumed run, the last step whose metrics it dropped that it trains
        again, within its budget (None: none)."""
        redone = None
        if resumed:
            dropped, steps = self.tidy_to(step), setup.config.train.steps
            redone = min(dropped, steps) if dropped is not None and steps > step else None
        else:
            setup.task.vocab.save(self.vocab)
            if (fingerprint := setup.task.data_fingerprint()) is not None:
                write_text_atomically(self.path / DATA_FINGERPRINT_FILE, fingerprint + "\n")
        self.claim()
        save_config(setup, self.config)
        return redone

    def check_data(self, task: Task) -> None:
        """A `UserError` if the run's data file has changed since it was trained: its held-out
        windows, and what training would continue on, are no longer the run's."""
        recorded = self.path / DATA_FINGERPRINT_FILE
        if recorded.is_file() and recorded.read_text().strip() != task.data_fingerprint():
            raise UserError(
                f"task.path: {task.config.path} has changed since {self.path} was trained on it "
                f"(its SHA-256 differs from {DATA_FINGERPRINT_FILE}); its held-out set would not be "
                "the run's: restore the file or train a new run"
            )

    def tidy_to(self, step: int) -> int | None:
        """Before a resumed run continues from `step`: drop metrics.jsonl rows logged after
        that step (they will be logged again), remove the temporary files of writes that a kill
        interrupted, and drop lines that are not metrics (a torn last line, bytes that are not
        UTF-8 or not JSON), saying so in a note (logged: the CLI prints it). Returns the last
        step logged past `step` (None if there was none): steps up to it will be redone."""
        for temporary in [*self.path.glob(".*.tmp"), *(self.path / CHECKPOINTS).glob(".*.tmp")]:
            temporary.unlink(missing_ok=True)
        if not self.metrics.is_file():
            return None
        kept, damaged, dropped = [], [], []
        for number, line in enumerate(self.metrics.read_bytes().splitlines(keepends=True), start=1):
            record = metrics_record(line)
            if record is None:
                damaged.append(number)
            elif record["step"] <= step:
                kept.append(line)
            else:
                dropped.append(record["step"])
        write_bytes_atomically(self.metrics, b"".join(kept))
        if damaged:
            shown = ", ".join(map(str, damaged[:5])) + (", ..." if len(damaged) > 5 else "")
            log.warning(
                f"{self.metrics}: dropped {len(damaged)} line(s) that are not metrics (line {shown}: torn, not UTF-8 "
                "or not a JSON object with a step); the other rows are kept"
            )
        return max(dropped, default=None)


def snapshot_name(step: int) -> str:
    """The checkpoint name of the snapshot of `step`: "step-<step>"."""
    return f"step-{step}"


def run_with(which: str | None) -> str | None:
    """The checkpoint a run must hold to be picked as the newest (`newest_run`) for a
    command that reads `which`: best or last itself; for a snapshot, any checkpoint (a
    run's snapshots are its own: the command then says which it has)."""
    return which if which in ("best", "last", None) else None


def is_checkpoint_name(which: object) -> bool:
    """Whether `which` names a checkpoint: "best", "last" or a snapshot's "step-<k>"."""
    return isinstance(which, str) and (which in ("best", "last") or SNAPSHOT.fullmatch(which) is not None)


def check_which(which: str) -> str:
    """`which` if it names a checkpoint (`is_checkpoint_name`); else a `UserError`."""
    if is_checkpoint_name(which):
        return which
    raise UserError(f"checkpoint {which!r}: name best, last or a snapshot's step-K (e.g. step-100)")


def _stamp(path: Path) -> tuple[int, int] | None:
    """(inode, modification time) of `path`, None if it is missing: whether it was rewritten."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return status.st_ino, status.st_mtime_ns


def metrics_record(line: bytes) -> dict[str, Any] | None:
    """A whole metrics.jsonl line as its record, or None if it is not one: torn (the process
    died while writing it), not UTF-8, or not a JSON object with a whole-number step."""
    if not line.endswith(b"\n"):
        return None
    try:
        record = json.loads(line.decode("utf-8"))
    except ValueError:  # (UnicodeDecodeError is a ValueError)
        return None
    return record if isinstance(record, dict) and type(record.get("step")) is int else None


# ---- finding runs


def newest_run(runs_dir: str | Path, which: str | None = None) -> Path:
    """The most recently modified run folder under `runs_dir` that has a checkpoint, or the
    `which` one ("best", "last"): a run that crashed or was stopped before it has nothing
    to look at."""
    runs = _runs_newest_first(runs_dir)
    if not runs:
        raise UserError(f"no runs in {runs_dir}/; train one first: tinytf train configs/quickstart.yaml")
    with_checkpoint = [run for run in runs if RunFolder(run).has_checkpoint(which)]
    if not with_checkpoint:
        kind = f"a {which} checkpoint" if which else "a checkpoint"
        raise UserError(f"no run in {runs_dir}/ has {kind} yet (the newest is {runs[0].name}); train longer")
    return with_checkpoint[0]


def skipped_runs(runs_dir: str | Path, which: str | None = None) -> list[Path]:
    """The runs newer than `newest_run(runs_dir, which)` that it passed over."""
    runs = _runs_newest_first(runs_dir)
    return runs[: next((i for i, run in enumerate(runs) if RunFolder(run).has_checkpoint(which)), len(runs))]


def _runs_newest_first(runs_dir: str | Path) -> list[Path]:
    runs_dir = Path(runs_dir)
    folders = [path for path in runs_dir.iterdir() if path.is_dir()] if runs_dir.is_dir() else []
    runs = [path for path in folders if RunFolder(path).is_run()]
    return sorted(runs, key=lambda path: (path / CONFIG_FILE).stat().st_mtime, reverse=True)


def resolve_run(run: str | Path | None, runs_dir: str | Path = "runs", which: str | None = None) -> Path:
    """`--run` as given, or the newest run under `runs_dir` (that has the `which` checkpoint)."""
    if run is None:
        return newest_run(runs_dir, which)
    run_dir = Path(run)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: run folder not found")
    if not RunFolder(run_dir).is_run():
        raise UserError(f"{run_dir}: not a tinytf run folder (no {CONFIG_FILE})")
    return run_dir
