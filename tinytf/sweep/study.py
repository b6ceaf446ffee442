"""A sweep's study in Optuna, and its bookkeeping: which settings are done, running, cut
short or still to try, on one machine or many.

A *setting* is one Optuna trial (its params), trained on every seed of the sweep; its
value is the objective over the seeds. Trials carry user attributes:
- `worker`: the host and process that ran it, so that a trial left running by a process
  that is gone (killed) can be told from one still running;
- `retry_of`: set on the one retry a cut-short trial gets (killed, or stopped by Ctrl-C);
- `surplus`: a trial asked for once every setting was taken (two processes asking at
  the same moment), closed as failed without training;
- `error`: why a trial failed for good (a setting that makes no valid config...);
- `seeds`: per seed, its run folder, value, steps and seconds.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from tinytf.errors import UserError
from tinytf.sweep.spec import Sweep

STUDY_FILE = "study.journal"  # the default storage, in the sweep's folder
HOST = socket.gethostname()


def storage_for(folder: Path, url: str | None) -> optuna.storages.BaseStorage | str:
    """`url` (sqlite:///..., postgresql://..., mysql://...) or the journal file in `folder`."""
    if url is not None:
        return url
    folder.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / STUDY_FILE)))


def sampler_for(sweep: Sweep) -> optuna.samplers.BaseSampler:
    """No fixed seed: processes sharing a study would otherwise propose the same settings."""
    if sweep.is_grid:
        return optuna.samplers.GridSampler({key: list(param.grid() or ()) for key, param in sweep.params.items()})
    return optuna.samplers.RandomSampler() if sweep.sampler == "random" else optuna.samplers.TPESampler()


def pruner_for(sweep: Sweep) -> optuna.pruners.BasePruner:
    return optuna.pruners.MedianPruner() if sweep.pruner == "median" else optuna.pruners.NopPruner()


def open_study(sweep: Sweep, name: str, storage: optuna.storages.BaseStorage | str) -> optuna.Study:
    """The study `name` in `storage`, made for `sweep` if new. A study made by another
    sweep file (other params, seeds, objective or sampler) is refused: its values would
    not compare. `trials` may grow, to try more settings."""
    direction = "minimize" if sweep.objective.minimize else "maximize"
    try:
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            sampler=sampler_for(sweep),
            pruner=pruner_for(sweep),
            direction=direction,
            load_if_exists=True,
        )
    except (ImportError, ValueError, RuntimeError) as err:  # a URL of an unknown kind, a database it cannot open
        raise UserError(f"--storage: cannot open the study {name!r}: {err}") from None
    made_by = sweep.model_dump(mode="json", by_alias=True, exclude={"trials"})
    saved = study.user_attrs.get("sweep")
    if saved is None:
        study.set_user_attr("sweep", made_by)
    elif saved != made_by:
        changed = sorted(key for key in made_by if made_by[key] != saved.get(key))
        raise UserError(
            f"the sweep {name!r} was started with other {', '.join(changed)}: give this one another --name "
            "(only trials may change between runs of a sweep)"
        )
    return study


def saved_sweep(study: optuna.Study) -> Sweep:
    return Sweep.model_validate(study.user_attrs["sweep"])


@dataclass
class Setting:
    """One setting: its first trial and, if that was cut short, its retry."""

    first: FrozenTrial
    retry: FrozenTrial | None = None
    latest: FrozenTrial = field(init=False)

    def __post_init__(self) -> None:
        self.latest = self.first

    @property
    def state(self) -> str:
        """done, pruned, failed (for good), running, waiting, or cut short (to retry)."""
        trial = self.latest
        if trial.state == TrialState.COMPLETE:
            return "done"
        if trial.state == TrialState.PRUNED:
            return "pruned"
        if trial.state in (TrialState.RUNNING, TrialState.WAITING):
            return trial.state.name.lower()
        return "failed" if "error" in trial.user_attrs or self.retry is not None else "cut short"


def settings_of(study: optuna.Study) -> list[Setting]:
    """The study's settings in the order they were first tried."""
    settings: dict[int, Setting] = {}
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if "surplus" in trial.user_attrs:
            continue
        origin = trial.user_attrs.get("retry_of")
        if origin is None:
            settings[trial.number] = Setting(trial)
        elif origin in settings and settings[origin].retry is None:
            settings[origin].retry = settings[origin].latest = trial
    return list(settings.values())


def is_surplus(study: optuna.Study, trial: optuna.Trial, budget: int) -> bool:
    """True for a trial that must not train: a new setting beyond the budget (asked at
    the same moment as the last one), or a second retry of one cut-short trial."""
    others = [t for t in study.get_trials(deepcopy=False) if t.number < trial.number]
    origin = trial.user_attrs.get("retry_of")
    if origin is None:
        return sum("retry_of" not in t.user_attrs for t in others) >= budget
    return any(t.user_attrs.get("retry_of") == origin for t in others)


def has_work(study: optuna.Study, budget: int) -> bool:
    """Whether a process may take a trial: a retry waits, or settings are left to try."""
    trials = study.get_trials(deepcopy=False)
    fresh = sum("retry_of" not in t.user_attrs for t in trials)
    return fresh < budget or any(t.state == TrialState.WAITING for t in trials)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def retry_cut_short(study: optuna.Study) -> list[int]:
    """Fail the trials this host left running in processes that are gone (killed), and
    queue one retry for each setting cut short; the numbers of the trials retried."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get("worker", {})
        if worker.get("host") == HOST and not _alive(worker.get("pid", 0)):
            try:
                study.tell(trial.number, state=TrialState.FAIL)
            except ValueError:  # another process on this host failed it first
                continue
    retried = []
    for setting in settings_of(study):
        if setting.state == "cut short":
            study.enqueue_trial(setting.first.params, user_attrs={"retry_of": setting.first.number})
            retried.append(setting.first.number)
    return retried


def describe_setting(params: dict) -> str:
    return ", ".join(f"{key}={json.dumps(value)}" for key, value in params.items())
