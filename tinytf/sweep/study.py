"""A sweep's study in Optuna, and its bookkeeping: which settings and runs are done,
running, cut short or still to try, on one machine or many.

Each Optuna trial is one run: a setting (the trial's params) on one seed. The sampler
proposes a setting for the first seed; its other seeds are queued at once, as trials of
the same params, so that idle workers take them. A trial's value is its run's metric;
a setting's objective (worst or mean over its seeds) is reckoned here. Trials carry user
attributes:
- `seed`, and `setting`: the number of the setting's first trial; `seeds_queued` on a
  setting's first trial once its other seeds are queued;
- `worker`: the host and process that ran it, so that a trial left running by a process
  that is gone (killed) can be told from one still running;
- `retry_of`, `kills`: set on the retry a cut-short run gets (killed, or stopped by Ctrl-C),
  with the kills along its retries; `interrupted`: the run was stopped by Ctrl-C;
- `surplus`: a trial asked for once every setting was taken (two processes asking at
  the same moment), closed as failed without training;
- `error`: why a run failed for good (a setting that makes no valid config...);
- `run`, `seconds`: its run folder and time inside `train()`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.samplers import RandomSampler
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from tinytf.config import Config
from tinytf.errors import UserError, first_line
from tinytf.run.setup import dotted
from tinytf.sweep.journal import checked_journal
from tinytf.sweep.spec import Sweep

STUDY_FILE = "study.journal"  # the default storage, in the sweep's folder
HOST = socket.gethostname()
CREATE_TRIES = 4  # making a study, when another process makes the same database's tables
ORPHAN_S = 60  # a trial still without its worker this long after it began lost its process between two calls


def storage_for(folder: Path, url: str | None, *, writing: bool = True) -> optuna.storages.BaseStorage | str:
    """`url` (sqlite:///..., postgresql://..., mysql://...; see `database_url`) or the journal
    file in `folder`, checked (journal.py); `writing`: its torn last line, if any, is cut first."""
    if url is not None:
        return database_url(url)
    folder.mkdir(parents=True, exist_ok=True)
    checked_journal(folder / STUDY_FILE, repair=writing)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / STUDY_FILE)))


def sampler_for(sweep: Sweep) -> optuna.samplers.BaseSampler:
    """No fixed seed: processes sharing a study would otherwise propose the same settings."""
    if sweep.is_grid:
        return optuna.samplers.GridSampler({key: list(param.grid() or ()) for key, param in sweep.params.items()})
    return optuna.samplers.RandomSampler() if sweep.sampler == "random" else optuna.samplers.TPESampler()


def pruner_for(sweep: Sweep) -> optuna.pruners.BasePruner:
    return optuna.pruners.MedianPruner() if sweep.pruner == "median" else optuna.pruners.NopPruner()


def open_study(
    sweep: Sweep, name: str, storage: optuna.storages.BaseStorage | str, base: Config | None = None
) -> optuna.Study:
    """The study `name` in `storage`, made for `sweep` if new. A study made by another
    sweep file (other params, seeds, objective or sampler), or on a base config that has
    changed since, is refused: its values would not compare. `trials` may grow, to try
    more settings."""
    direction = "minimize" if sweep.objective.minimize else "maximize"
    with storage_errors(storage):
        study = _created(name, storage, sweep, direction)
    made_by = sweep.model_dump(mode="json", by_alias=True, exclude={"trials"})
    saved = study.user_attrs.get("sweep")
    if saved is None:
        # New, or cut off before it recorded its sweep file: no trial yet, in the sweep's direction
        fresh = study.directions == [StudyDirection[direction.upper()]] and not study.get_trials(deepcopy=False)
        if not fresh:
            raise UserError(f"{foreign_study_message(study)}; give this sweep another --name")
        study.set_user_attr("sweep", made_by)
    elif saved != made_by:
        changed = sorted(key for key in made_by if made_by[key] != saved.get(key))
        raise UserError(
            f"the sweep {name!r} was started with other {', '.join(changed)}: give this one another --name "
            "(only trials may change between runs of a sweep)"
        )
    if base is not None:
        _check_base(study, name, base)
    return study


def _created(name: str, storage: optuna.storages.BaseStorage | str, sweep: Sweep, direction: str) -> optuna.Study:
    """The study, made if new. Two processes making a new database's tables at the same
    moment: one of them fails (a table or row the other just made); it tries again."""

    def create() -> optuna.Study:
        sampler, pruner = sampler_for(sweep), pruner_for(sweep)
        return optuna.create_study(
            study_name=name, storage=storage, sampler=sampler, pruner=pruner, direction=direction, load_if_exists=True
        )

    for attempt in range(1, CREATE_TRIES):
        try:
            return create()
        except SQLAlchemyError:
            time.sleep(0.2 * attempt)
    return create()  # the last try: its error is the user's


def _check_base(study: optuna.Study, name: str, base: Config) -> None:
    """Record the base config the study's runs train on; refuse one that has changed since."""
    config = json.loads(json.dumps(base.to_dict()))
    saved = study.user_attrs.get("base")
    if saved is None:
        study.set_user_attr("base", config)
        return
    before, after = dotted(saved), dotted(config)
    changed = [
        f"{key}: {before.get(key)!r} -> {after.get(key)!r}" for key in after if before.get(key) != after.get(key)
    ]
    if changed:
        raise UserError(
            f"the base config of the sweep {name!r} has changed since it started ({'; '.join(changed[:3])}): "
            "its runs would not compare; restore it, or start a new sweep with another --name"
        )


# The drivers SQLAlchemy may use for a URL that names none (postgresql://...), in the order
# tried, with what installs each; the first installed one is used.
POSTGRES_DRIVERS = {"psycopg": 'pip install "psycopg[binary]"', "psycopg2": "pip install psycopg2-binary"}


def database_url(url: str) -> str:
    """`--storage URL` as Optuna opens it: a PostgreSQL URL that names no driver gets the one
    installed (SQLAlchemy's default need not be); an in-memory database, which each worker
    process would have its own of, is refused."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UserError(f"--storage {url}: not a database URL (sqlite:///FILE, postgresql://USER@HOST/DB...)") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise UserError(
            f"--storage {masked(url)}: an in-memory database lives and dies with one process, and each worker "
            "is its own process; give a file, e.g. sqlite:///sweeps.db"
        )
    if parsed.drivername == "postgresql":
        installed = [driver for driver in POSTGRES_DRIVERS if importlib.util.find_spec(driver) is not None]
        if not installed:
            raise UserError(
                f"--storage {masked(url)}: no PostgreSQL driver is installed; {POSTGRES_DRIVERS['psycopg']} "
                f"(or {POSTGRES_DRIVERS['psycopg2']})"
            )
        return parsed.set(drivername=f"postgresql+{installed[0]}").render_as_string(hide_password=False)
    return url


def masked(url: str) -> str:
    """A database URL with its password shown as ***, for messages: they end up in logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


@contextlib.contextmanager
def storage_errors(storage: optuna.storages.BaseStorage | str) -> Iterator[None]:
    """A database URL that cannot be opened, or whose driver is missing, as one `UserError`
    (the URL's password masked)."""
    where = f"--storage {masked(storage)}" if isinstance(storage, str) else STUDY_FILE
    try:
        yield
    except ImportError as err:
        raise UserError(f"{where}: its database driver is not installed ({first_line(err)})") from None
    except (SQLAlchemyError, ValueError, RuntimeError) as err:  # a URL of an unknown kind, a database it cannot open
        raise UserError(f"{where}: {first_line(err)}") from None


def saved_sweep(study: optuna.Study) -> Sweep:
    """The sweep file a study was made by, as recorded in it."""
    if "sweep" not in study.user_attrs:
        raise UserError(foreign_study_message(study))
    return Sweep.model_validate(study.user_attrs["sweep"])


def foreign_study_message(study: optuna.Study) -> str:
    """Why a study without a recorded sweep file cannot be read as a sweep."""
    return f"the study {study.study_name!r} was not made by tinytf sweep (it records no sweep file)"


FINAL = ("done", "pruned", "failed")  # a run's or a setting's states that no later sweep changes


def run_state(trial: FrozenTrial) -> str:
    """done, pruned, failed (for good), running, waiting, or cut short (to train again).

    A run cut short by Ctrl-C (`interrupted`) is always trained again; one whose process
    was killed, once (`kills` counts them along its retries): a run that kills its process
    every time, or crashes it, ends as failed instead of being retried forever."""
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return "done" if trial.state == TrialState.COMPLETE else "pruned"
    if trial.state in (TrialState.RUNNING, TrialState.WAITING):
        return trial.state.name.lower()
    if "error" in trial.user_attrs or (trial.user_attrs.get("kills", 0) and "interrupted" not in trial.user_attrs):
        return "failed"
    return "cut short"


@dataclass
class Setting:
    """One setting: the latest run of each of its seeds (a retry replaces the run it retries)."""

    number: int  # its first trial's
    params: dict
    runs: dict[int, FrozenTrial] = field(default_factory=dict)  # seed -> run

    def states(self) -> dict[int, str]:
        return {seed: run_state(run) for seed, run in self.runs.items()}

    def state(self, seeds: int) -> str:
        states = set(self.states().values())
        for state in ("pruned", "failed", "running", "waiting", "cut short"):
            if state in states:
                return state
        return "done" if len(self.runs) == seeds else "waiting"


def run_key(trial: FrozenTrial | optuna.Trial) -> tuple[int, int | None]:
    """(setting, seed): the run a trial trains."""
    return trial.user_attrs.get("setting", trial.number), trial.user_attrs.get("seed")


def counts(trial: FrozenTrial) -> bool:
    """A trial that is, or was, a run: not surplus, and not closed before it had a seed."""
    return "surplus" not in trial.user_attrs and ("seed" in trial.user_attrs or not trial.state.is_finished())


def settings_of(study: optuna.Study) -> list[Setting]:
    """The study's settings in the order they were first tried."""
    settings: dict[int, Setting] = {}
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if counts(trial) and "seed" in trial.user_attrs:
            number, seed = run_key(trial)
            settings.setdefault(number, Setting(number, dict(trial.params))).runs[seed] = trial
    return list(settings.values())


def pruned_settings(study: optuna.Study) -> set[int]:
    """The settings one of whose runs was pruned: their other seeds need not train."""
    return {run_key(trial)[0] for trial in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))}


def is_fresh(trial: FrozenTrial | optuna.Trial) -> bool:
    """A trial of a new setting, proposed by the sampler (not a queued seed or retry)."""
    return "setting" not in trial.user_attrs


def is_surplus(study: optuna.Study, trial: optuna.Trial, budget: int) -> bool:
    """True for a trial that must not train: a new setting beyond the budget (asked at
    the same moment as the last one), or a run that an earlier trial has, or is, training
    (two processes queued the same seed or the same retry)."""
    others = [t for t in study.get_trials(deepcopy=False) if t.number < trial.number and counts(t)]
    if is_fresh(trial):
        return sum(map(is_fresh, others)) >= budget
    return any(run_key(t) == run_key(trial) and run_state(t) != "cut short" for t in others)


def repeats_a_setting(study: optuna.Study, trial: optuna.Trial) -> bool:
    """A new grid setting that an earlier one already took (two processes asking at once)."""
    others = study.get_trials(deepcopy=False)
    return any(t.number < trial.number and is_fresh(t) and counts(t) and t.params == trial.params for t in others)


def has_work(study: optuna.Study, budget: int) -> bool:
    """Whether a process may take a trial: a run waits, or settings are left to try."""
    trials = [trial for trial in study.get_trials(deepcopy=False) if counts(trial)]
    return sum(map(is_fresh, trials)) < budget or any(t.state == TrialState.WAITING for t in trials)


def seeds_pending(study: optuna.Study, seeds: tuple[int, ...]) -> bool:
    """Whether a new setting's first run, in a process that is alive, has yet to queue its
    other seeds (`queue_seeds`): a process that finds no work waits for them then, rather
    than leave them all to train one after another in that one process. (A trial on another
    host, or whose worker is not yet said, counts: the waiting process bounds its own wait.)"""
    if len(seeds) < 2:
        return False
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not is_fresh(trial) or "surplus" in trial.user_attrs or "seeds_queued" in trial.user_attrs:
            continue
        worker = trial.user_attrs.get("worker")
        if worker is None or worker["host"] != HOST or _alive(worker["pid"]):  # (another host's: alive)
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def queue_seeds(study: optuna.Study, setting: int, params: dict, seeds: list[int]) -> None:
    """Queue a run of `params` per seed, for any worker to take."""
    for seed in seeds:
        study.enqueue_trial(params, user_attrs={"setting": setting, "seed": seed})


def retry_cut_short(
    study: optuna.Study, storage: optuna.storages.BaseStorage | str, seeds: tuple[int, ...]
) -> list[int]:
    """Fail the trials this host left running in processes that are gone (killed), queue
    the seeds a setting's killed first trial left unqueued, and queue one more run for
    each run cut short; the numbers of the trials to train again. `storage`: the study's."""
    # Failed through a copy of the study whose sampler does nothing after a trial: the grid
    # sampler's would stop the study once its last setting is told, outside any optimize().
    bookkeeping = optuna.load_study(study_name=study.study_name, storage=storage, sampler=RandomSampler())
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get("worker")
        orphan = worker is None and time.time() - trial.datetime_start.timestamp() > ORPHAN_S
        if orphan or (worker and worker["host"] == HOST and not _alive(worker["pid"])):
            try:
                bookkeeping.tell(trial.number, state=TrialState.FAIL)
            except ValueError:  # another process on this host failed it first
                continue
    trials, retried = study.get_trials(deepcopy=False), []
    for setting in settings_of(study):
        if trials[setting.number].state != TrialState.RUNNING:  # its process queued the other seeds, or died first
            queue_seeds(study, setting.number, setting.params, [seed for seed in seeds if seed not in setting.runs])
        for seed, trial in setting.runs.items():
            if run_state(trial) == "cut short":
                kills = trial.user_attrs.get("kills", 0) + ("interrupted" not in trial.user_attrs)
                attrs = {"setting": setting.number, "seed": seed, "retry_of": trial.number, "kills": kills}
                study.enqueue_trial(trial.params, user_attrs=attrs)
                retried.append(trial.number)
    return retried
