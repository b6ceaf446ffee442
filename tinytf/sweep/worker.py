"""A sweep's worker process: takes runs from the study one at a time (a setting on a
seed) and trains each in a run folder under the sweep's folder, until none is left.

    python -m tinytf.sweep.worker JOB    # JOB: the JSON that `tinytf.sweep.launch` writes

It stops when its parent (the `tinytf sweep` process) is gone, so that a killed sweep
leaves no training behind; Ctrl-C, which the parent forwards, saves the running run and
closes the trial as cut short, for the next `tinytf sweep` to retry.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

import optuna

from tinytf.errors import EXIT_INTERRUPTED, EXIT_WRITE_FAILED, UserError
from tinytf.run.setup import load_setup
from tinytf.sweep.spec import Job, Param, overrides
from tinytf.sweep.study import (
    HOST,
    ORPHAN_S,
    has_work,
    is_surplus,
    pruned_settings,
    pruner_for,
    queue_seeds,
    repeats_a_setting,
    sampler_for,
    seeds_pending,
    storage_errors,
    storage_for,
)
from tinytf.training.loggers import NullLogger
from tinytf.training.trainer import TrainingDiverged, WriteFailed, train

PARENT_CHECK_S = 0.5  # how often a worker looks for its parent
SEEDS_WAIT_S = 0.2  # how often a worker with nothing to take looks for the seeds another is queueing


class Skipped(Exception):
    """A trial closed without training: surplus, or a setting that makes no valid config."""


class CutShort(Exception):
    """Ctrl-C stopped the trial's training; its run is saved, the trial is retried next time."""


class TargetWatch(NullLogger):
    """Notes when the held-out exact match first reaches the target, and reports the
    objective's progress to Optuna for the pruner (a pruned trial stops here)."""

    def __init__(self, trial: optuna.Trial, job: Job, target: float | None) -> None:
        self.trial, self.job, self.target = trial, job, target
        self.started = time.perf_counter()
        self.seconds: float | None = None
        self.step_reached: int | None = None

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        if split != "val":
            return
        if self.step_reached is None and self.target is not None and values["seq_acc"] >= self.target:
            self.seconds, self.step_reached = time.perf_counter() - self.started, step
        if self.job.sweep.pruner == "none":
            return
        metric = self.job.sweep.objective.metric
        watched = "loss" if metric.endswith("_to_target") else metric.removeprefix("val_")
        self.trial.report(values[watched], step)
        if self.trial.should_prune():
            raise optuna.TrialPruned(
                f"pruned at step {step}: val {watched} {values[watched]:.4g}, worse than the median"
            )


def suggest(trial: optuna.Trial, key: str, param: Param):
    if param.choice is not None:
        return trial.suggest_categorical(key, list(param.choice))
    if param.int_ is not None:
        return trial.suggest_int(key, *param.int_, step=param.step or 1, log=param.log)
    return trial.suggest_float(key, *param.float_, log=param.log)  # type: ignore[misc]


def train_run(trial: optuna.Trial, job: Job, setting: dict, seed: int) -> float:
    """The trial's run: its setting on its seed, and the objective's metric of it (inf, or
    -inf when maximising, for a run that never reached the target or diverged)."""
    metric, worst = job.sweep.objective.metric, math.inf if job.sweep.objective.minimize else -math.inf
    try:
        setup = load_setup(job.base, overrides(setting, seed))
        watch = TargetWatch(trial, job, setup.config.train.stop_at_accuracy)
        result = train(setup, runs_dir=job.folder, name=f"trial-{trial.number:03d}-seed-{seed}", loggers=[watch])
    except TrainingDiverged:  # a result: this setting does not train
        return worst
    except WriteFailed:  # a full disk: not the setting's fault; trained again once there is room
        with contextlib.suppress(OSError):  # (the journal may be on the full disk too)
            trial.set_user_attr("interrupted", True)
        raise
    except UserError as err:  # an invalid combination of values, a full disk...: the run fails for good
        trial.set_user_attr("error", str(err))
        raise Skipped(str(err)) from None
    if result.interrupted:
        raise CutShort
    value = {
        "time_to_target": watch.seconds,
        "steps_to_target": watch.step_reached,
        **{f"val_{key}": result.best.get(key) for key in ("loss", "seq_acc", "token_acc")},
    }[metric]
    trial.set_user_attr("run", result.run_dir.name)
    trial.set_user_attr("seconds", round(time.perf_counter() - watch.started, 3))
    return worst if value is None else value


def objective(trial: optuna.Trial, job: Job, study: optuna.Study) -> float:
    """Train the trial's run. A new setting's first trial takes the first seed and queues
    the others, for any worker to take."""
    trial.set_user_attr("worker", {"host": HOST, "pid": os.getpid()})
    if is_surplus(study, trial, job.sweep.budget):
        trial.set_user_attr("surplus", True)
        raise Skipped("every setting is taken, or this run is")
    setting = {key: suggest(trial, key, param) for key, param in job.sweep.params.items()}
    seed = trial.user_attrs.get("seed")
    if seed is None:  # a new setting
        if job.sweep.is_grid and repeats_a_setting(study, trial):
            trial.set_user_attr("surplus", True)
            raise Skipped("another process took this setting")
        seed = job.sweep.seeds[0]
        trial.set_user_attr("seed", seed)
        queue_seeds(study, trial.number, trial.params, list(job.sweep.seeds[1:]))
        trial.set_user_attr("seeds_queued", True)
    said = f"trial {trial.number} ({', '.join(overrides(setting, seed))})"
    try:
        if trial.user_attrs.get("setting") in pruned_settings(study):
            raise optuna.TrialPruned("not trained: another seed of its setting was pruned")
        value = train_run(trial, job, setting, seed)
    except (Skipped, optuna.TrialPruned) as err:
        print(f"{said}: {'' if isinstance(err, optuna.TrialPruned) else 'not trained: '}{err}", flush=True)
        raise
    except (CutShort, KeyboardInterrupt):
        trial.set_user_attr("interrupted", True)  # by Ctrl-C: trained again, however often
        print(f"{said}: stopped; its run is saved, and the next `tinytf sweep` trains it again", flush=True)
        raise
    except WriteFailed as err:
        print(f"{said}: stopped, the next `tinytf sweep` trains it again: {err}", flush=True)
        raise
    print(f"{said}: {job.sweep.objective.metric} {value:.4g}", flush=True)
    return value


def watch_parent(parent: int) -> None:
    """End this process at once if its parent goes (a killed sweep leaves no worker behind)."""

    def check() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=check, daemon=True).start()


def take_runs(study: optuna.Study, job: Job, run: Callable[[optuna.Trial], float], cut: list[int]) -> None:
    """Train runs until none is left, or one is cut short (`cut`). With none to take while a
    live worker is queueing its setting's other seeds, wait for them: up to ORPHAN_S by
    this process's own clock, in case that worker is gone."""
    waiting_since = None
    while not cut:
        if has_work(study, job.sweep.budget):
            waiting_since = None
            study.optimize(run, n_trials=1, catch=(Skipped, CutShort))
            continue
        if not seeds_pending(study, job.sweep.seeds):
            return
        if waiting_since is None:
            waiting_since = time.monotonic()
            print("waiting for the runs another worker is queueing", flush=True)
        elif time.monotonic() - waiting_since > ORPHAN_S:
            return  # that worker is gone after all
        time.sleep(SEEDS_WAIT_S)


def main(argv: list[str]) -> int:
    """Take runs until none is left; 0, or EXIT_INTERRUPTED after Ctrl-C (forwarded by the parent)."""
    try:
        job = Job.from_json(sys.stdin.read())  # on stdin, not in argv: no size limit, no secret in `ps`
        watch_parent(int(argv[0]))
        import torch

        torch.set_num_threads(job.threads)
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # it would log a caught exception with its traceback
        sampler, pruner = sampler_for(job.sweep), pruner_for(job.sweep)
        storage = storage_for(job.folder, job.storage)
        with storage_errors(storage):
            study = optuna.load_study(study_name=job.name, storage=storage, sampler=sampler, pruner=pruner)
        cut = []

        def run(trial: optuna.Trial) -> float:
            try:
                return objective(trial, job, study)
            except CutShort:
                cut.append(trial.number)
                raise

        take_runs(study, job, run, cut)
    except KeyboardInterrupt:  # Ctrl-C outside a run; a trial it cut short is closed as failed
        return EXIT_INTERRUPTED
    except WriteFailed:  # said with its trial
        return EXIT_WRITE_FAILED
    except OSError as err:  # the study's journal on a full disk
        print(f"cannot write {err.filename or 'the study'}: {err.strerror or err}", flush=True)
        return EXIT_WRITE_FAILED
    except UserError as err:  # the storage: gone, or its journal damaged since the sweep began
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    return EXIT_INTERRUPTED if cut else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
