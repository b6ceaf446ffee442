"""Run folders: where a training run keeps everything, and how it is found again.

    runs/<name>-<YYYYmmdd-HHMMSS>/
        config.yaml            the fully resolved config
        vocab.json             the task's vocabulary
        checkpoints/last.pt    the latest state (model, optimizer, schedule, RNGs, step)
        checkpoints/best.pt    the state with the best validation score so far
        metrics.jsonl          one JSON object per logged point
        events.out.tfevents.*  TensorBoard scalars, attention maps, samples
        train.lock             the training lock (empty; locked only while a process trains)

A new run never reuses a folder: creation is atomic and a name already taken gets a
numeric suffix. A run is trained by one process at a time: training holds an OS lock
on `train.lock` (filelock; released by the system if the process dies) and writes its
PID to `train.pid`, so a second trainer is refused with that number.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import filelock
import torch

from tinytf.config import Config
from tinytf.data.framing import Framing, get_framing
from tinytf.errors import ConfigError, UserError
from tinytf.files import check_run_name, write_bytes_atomically, write_text_atomically
from tinytf.model import Transformer
from tinytf.run.checkpoint import CheckpointError, config_mismatch, load_checkpoint, weights_mismatch
from tinytf.run.setup import build_model, check_unchanged, load_run_config, save_config
from tinytf.tasks import Task, get_task
from tinytf.tasks.vocab import Vocabulary

CONFIG_FILE = "config.yaml"
VOCAB_FILE = "vocab.json"
CHECKPOINTS = "checkpoints"
METRICS_FILE = "metrics.jsonl"
PID_FILE = "train.pid"
LOCK_FILE = "train.lock"  # kept between trainings; the OS lock on it lasts as long as its holder
DATA_FINGERPRINT_FILE = "data.sha256"  # tasks that read a file: its hash when the run was trained

log = logging.getLogger(__name__)


def open_for_resume(run_dir: Path, config: Config, lock: contextlib.ExitStack) -> tuple[dict, Vocabulary]:
    """The run's last state and vocabulary, once `config` is known to continue it. The run
    is locked (on `lock`) before anything is read, so no other trainer writes meanwhile;
    everything is checked before anything is written: a refused resume changes nothing."""
    if not (Path(run_dir) / LOCK_FILE).is_file():  # (locking would create it)
        raise UserError(f"{run_dir}: not a run folder of this tinytf version (it has no {LOCK_FILE})")
    lock.enter_context(exclusive_training(run_dir))
    check_unchanged(load_run_config(run_dir / CONFIG_FILE), config)
    check_data(run_dir, get_task(config.task))
    state = load_checkpoint(checkpoint_path(run_dir, "last"))
    check_belongs(checkpoint_path(run_dir, "last"), state, config, run_dir)
    if config.train.steps < state["step"]:
        raise ConfigError(
            f"train.steps={config.train.steps}: this run has trained {state['step']} steps "
            f"already; resume with train.steps of at least {state['step']}"
        )
    return state, Vocabulary.load(run_dir / VOCAB_FILE)


def prepare_run_dir(
    config: Config,
    task: Task,
    step: int,
    resume: Path | None,
    runs_dir: str | Path,
    name: str,
    lock: contextlib.ExitStack,
) -> tuple[Path, int | None]:
    """The run folder, locked (on `lock`) and claimed, with its config and vocabulary: a new
    one, made only now that the config and the task's data have proven usable, or the
    resumed one, tidied up to its last checkpoint at `step`; and for a resumed run the last
    step whose metrics it dropped that it trains again, within its budget (None: none)."""
    redone = None
    if resume is not None:
        run_dir = resume
        dropped = tidy_for_resume(run_dir, step)
        redone = min(dropped, config.train.steps) if dropped is not None and config.train.steps > step else None
    else:
        run_dir = create_run_dir(runs_dir, name)
        lock.enter_context(exclusive_training(run_dir))
        task.vocab.save(run_dir / VOCAB_FILE)
        record_data(run_dir, task)
    claim(run_dir)
    lock.callback((run_dir / PID_FILE).unlink, missing_ok=True)
    save_config(config, run_dir / CONFIG_FILE)  # after a resume: the config it continues with
    return run_dir, redone


def create_run_dir(runs_dir: str | Path, name: str) -> Path:
    """Make a fresh, empty run folder `<runs_dir>/<name>-<timestamp>[-N]`."""
    runs_dir = Path(runs_dir)
    check_run_name(name, runs_dir)
    stem = f"{name}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 1000):
            run_dir = runs_dir / (stem if attempt == 1 else f"{stem}-{attempt}")
            try:
                run_dir.mkdir()  # fails if it exists: two runs can never share a folder
            except FileExistsError:
                continue
            (run_dir / CHECKPOINTS).mkdir()
            return run_dir
    except OSError as err:
        raise UserError(f"{runs_dir}: cannot create a run folder ({err.strerror or err})") from None
    raise UserError(f"{runs_dir}: cannot find a free run folder name for {stem!r}")


@contextlib.contextmanager
def exclusive_training(run_dir: Path) -> Iterator[None]:
    """Hold the run's training lock while the block runs; a `UserError` naming the
    process that holds it if another one does. The lock is the OS's, on `train.lock`
    (made if missing): a killed trainer leaves no stale lock behind."""
    lock = filelock.FileLock(Path(run_dir) / LOCK_FILE, timeout=0)  # timeout=0: try once, never wait
    try:
        lock.acquire()
    except filelock.Timeout:
        pid_file = Path(run_dir) / PID_FILE
        pid = pid_file.read_text().strip() if pid_file.is_file() else "unknown"
        raise UserError(f"{run_dir} is being trained by process {pid}; wait for it or stop it first") from None
    try:
        yield
    finally:
        lock.release()


def training_process(run_dir: Path) -> str | None:
    """The PID (as recorded, or "unknown") of the process training `run_dir` now, or None
    when none is. Only a run with a train.pid is probed (training writes it and removes it
    at the end; a killed trainer leaves it): its lock is tried once and released at once."""
    pid_file = Path(run_dir) / PID_FILE
    if not (pid_file.is_file() and (Path(run_dir) / LOCK_FILE).is_file()):
        return None
    try:
        with exclusive_training(run_dir):
            return None  # free: a trainer killed before it could remove its train.pid
    except OSError:  # a lock file this user may not open: no trainer of theirs holds it
        return None
    except UserError:
        pid = pid_file.read_text().strip() if pid_file.is_file() else ""
        return pid or "unknown"


def claim(run_dir: Path) -> None:
    """Record this process as the run's trainer (call while holding `exclusive_training`)."""
    write_text_atomically(Path(run_dir) / PID_FILE, f"{os.getpid()}\n")


def tidy_for_resume(run_dir: Path, step: int) -> int | None:
    """Before a resumed run continues from `step`: drop metrics.jsonl rows logged after
    that step (they will be logged again), remove the temporary files of writes that a kill
    interrupted, and drop lines that are not metrics (a torn last line, bytes that are not
    UTF-8 or not JSON), saying so in a note (logged: the CLI prints it). Returns the last
    step logged past `step` (None if there was none): steps up to it will be redone."""
    run_dir = Path(run_dir)
    for temporary in [*run_dir.glob(".*.tmp"), *(run_dir / CHECKPOINTS).glob(".*.tmp")]:
        temporary.unlink(missing_ok=True)
    metrics = run_dir / METRICS_FILE
    if not metrics.is_file():
        return None
    kept, damaged, dropped = [], [], []
    for number, line in enumerate(metrics.read_bytes().splitlines(keepends=True), start=1):
        logged = _step_of(line)
        if logged is None:
            damaged.append(number)
        elif logged <= step:
            kept.append(line)
        else:
            dropped.append(logged)
    write_bytes_atomically(metrics, b"".join(kept))
    if damaged:
        shown = ", ".join(map(str, damaged[:5])) + (", ..." if len(damaged) > 5 else "")
        log.warning(
            f"{metrics}: dropped {len(damaged)} line(s) that are not metrics (line {shown}: torn, not UTF-8 or not "
            "a JSON object with a step); the other rows are kept"
        )
    return max(dropped, default=None)


def _step_of(line: bytes) -> int | None:
    """The step of a whole metrics.jsonl line, or None if it is not one."""
    if not line.endswith(b"\n"):  # torn: the process died while writing it
        return None
    try:
        step = json.loads(line.decode("utf-8")).get("step")
    except (ValueError, AttributeError):  # (UnicodeDecodeError is a ValueError)
        return None
    return step if type(step) is int else None


def record_data(run_dir: Path, task: Task) -> None:
    """Keep the hash of the data file the run trains on (text task), to notice changes."""
    fingerprint = task.data_fingerprint()
    if fingerprint is not None:
        write_text_atomically(Path(run_dir) / DATA_FINGERPRINT_FILE, fingerprint + "\n")


def check_data(run_dir: Path, task: Task) -> None:
    """A `UserError` if the run's data file has changed since it was trained: its held-out
    windows, and what training would continue on, are no longer the run's."""
    recorded = Path(run_dir) / DATA_FINGERPRINT_FILE
    if recorded.is_file() and recorded.read_text().strip() != task.data_fingerprint():
        raise UserError(
            f"task.path: {task.config.path} has changed since {run_dir} was trained on it "
            f"(its SHA-256 differs from {DATA_FINGERPRINT_FILE}); its held-out set would not be "
            "the run's: restore the file or train a new run"
        )


def checkpoint_path(run_dir: Path, which: str) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"{which}.pt"


def is_run_dir(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file()


def newest_run(runs_dir: str | Path, which: str | None = None) -> Path:
    """The most recently modified run folder under `runs_dir` that has a checkpoint, or the
    `which` one ("best", "last"): a run that crashed or was stopped before it has nothing
    to look at."""
    runs = _runs_newest_first(runs_dir)
    if not runs:
        raise UserError(f"no runs in {runs_dir}/; train one first: tinytf train configs/quickstart.yaml")
    with_checkpoint = [run for run in runs if has_checkpoint(run, which)]
    if not with_checkpoint:
        kind = f"a {which} checkpoint" if which else "a checkpoint"
        raise UserError(f"no run in {runs_dir}/ has {kind} yet (the newest is {runs[0].name}); train longer")
    return with_checkpoint[0]


def skipped_runs(runs_dir: str | Path, which: str | None = None) -> list[Path]:
    """The runs newer than `newest_run(runs_dir, which)` that it passed over."""
    runs = _runs_newest_first(runs_dir)
    return runs[: next((i for i, run in enumerate(runs) if has_checkpoint(run, which)), len(runs))]


def has_checkpoint(run_dir: Path, which: str | None = None) -> bool:
    """Whether `run_dir` holds the `which` checkpoint ("best", "last"); None: either."""
    return any(checkpoint_path(run_dir, kind).is_file() for kind in ([which] if which else ["last", "best"]))


def _runs_newest_first(runs_dir: str | Path) -> list[Path]:
    runs_dir = Path(runs_dir)
    runs = [path for path in runs_dir.iterdir() if path.is_dir() and is_run_dir(path)] if runs_dir.is_dir() else []
    return sorted(runs, key=lambda path: (path / CONFIG_FILE).stat().st_mtime, reverse=True)


def resolve_run(run: str | Path | None, runs_dir: str | Path = "runs", which: str | None = None) -> Path:
    """`--run` as given, or the newest run under `runs_dir` (that has the `which` checkpoint)."""
    if run is None:
        return newest_run(runs_dir, which)
    run_dir = Path(run)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: run folder not found")
    if not is_run_dir(run_dir):
        raise UserError(f"{run_dir}: not a tinytf run folder (no {CONFIG_FILE})")
    return run_dir


def check_belongs(path: Path, state: dict, config: Config, run_dir: Path) -> None:
    """A `CheckpointError` unless the checkpoint `state` (read from `path`) was trained with
    the model and task settings of `config` (the run's config.yaml, with any overrides)."""
    if (found := config_mismatch(state, config.model, config.task)) is not None:
        raise CheckpointError(
            f"{path} does not belong with {run_dir / CONFIG_FILE}: {found}; was config.yaml edited, "
            "or the checkpoint copied from another run?"
        )


@dataclass
class LoadedRun:
    run_dir: Path
    config: Config
    task: Task
    framing: Framing
    model: Transformer  # in eval mode
    step: int  # the training step the checkpoint was saved at

    @property
    def vocab(self) -> Vocabulary:
        return self.task.vocab


def load_task(run_dir: Path, config: Config) -> Task:
    """The run's task, with the vocabulary saved in the run (the task's data may be gone)."""
    task = get_task(config.task)
    task.vocab = Vocabulary.load(Path(run_dir) / VOCAB_FILE)
    return task


def load_run(run_dir: str | Path | None = None, which: str = "best", device: str | torch.device = "cpu") -> LoadedRun:
    """A trained model from its run folder (None: the newest under ./runs with the `which`
    checkpoint, as the commands pick without --run), with its task, framing and saved vocabulary."""
    run_dir = resolve_run(run_dir, which=which)
    config = load_run_config(run_dir / CONFIG_FILE, data=False)  # the saved vocabulary is all it needs
    task = load_task(run_dir, config)
    path = checkpoint_path(run_dir, which)
    if not path.exists():
        raise UserError(f"{run_dir}: no {which} checkpoint yet ({path.relative_to(run_dir)}); train longer or wait")
    state = load_checkpoint(path)
    check_belongs(path, state, config, run_dir)
    model = build_model(config, vocab_size=len(task.vocab))
    if (found := weights_mismatch(model.state_dict(), state["model"])) is not None:
        raise CheckpointError(f"{path} does not fit {run_dir / CONFIG_FILE} and {VOCAB_FILE}: {found}")
    model.load_state_dict(state["model"])
    framing = get_framing(task, config.model.arch)
    return LoadedRun(run_dir, config, task, framing, model.to(device).eval(), int(state.get("step", 0)))
