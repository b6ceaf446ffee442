"""`tinytf sweep show`: a sweep's settings ranked by its objective, as a table, JSON, CSV
or a figure of the objective against each parameter."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

from tinytf.config import read_yaml
from tinytf.errors import ConfigError, UserError, did_you_mean
from tinytf.inspect.notebook import notebook_text
from tinytf.sweep.spec import Sweep

if TYPE_CHECKING:
    from matplotlib.figure import Figure
from tinytf.sweep.study import (
    STUDY_FILE,
    Setting,
    masked,
    saved_sweep,
    settings_of,
    storage_errors,
    storage_for,
)

ORDER = {"done": 0, "pruned": 1, "running": 2, "waiting": 3, "cut short": 4, "failed": 5}


@dataclass
class Row:
    """One setting of the sweep, as `sweep show` reports it."""

    rank: int | None  # among the settings done, best first
    trial: int  # the setting's first trial
    state: str
    params: dict
    value: float | None  # the objective over the seeds
    seeds: dict[int, float]  # seed -> the metric of its run
    mean: float | None
    worst: float | None
    seconds: float  # training time, all seeds
    runs: list[str]  # run folders, in the sweep's folder
    note: str  # why it failed or was pruned

    def to_json(self) -> dict:
        def number(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else x

        seeds = {str(seed): number(value) for seed, value in self.seeds.items()}
        numbers = {key: number(getattr(self, key)) for key in ("value", "mean", "worst")}
        return {**self.__dict__, **numbers, "seeds": seeds}


@dataclass
class Results:
    name: str
    folder: Path | None
    sweep: Sweep
    rows: list[Row]
    target: float | None = None  # the runs' train.stop_at_accuracy, for a *_to_target objective

    def _repr_html_(self) -> str:
        """In a notebook: the table `tinytf sweep show` prints."""
        return notebook_text(results_text(self, "table"))


def load_results(sweep: str, *, storage: str | None = None, runs_dir: Path = Path("sweeps")) -> Results:
    """The sweep named `sweep` (a folder, or a name under `runs_dir`), read from its storage."""
    given = Path(sweep)  # a folder: one with the journal, or a path such as `tinytf sweep` prints (sweeps/x)
    folder = given if (given / STUDY_FILE).is_file() or len(given.parts) > 1 else runs_dir / sweep
    name = folder.name
    if storage is None and not (folder / STUDY_FILE).is_file():
        raise UserError(_no_journal(folder))
    store = storage_for(folder, storage, writing=False)  # reading it: a torn last line is Optuna's to skip
    with storage_errors(store):
        if name not in optuna.study.get_all_study_names(store):
            raise UserError(f"{masked(storage) if storage else folder}: no sweep named {name!r} there")
        study = optuna.load_study(study_name=name, storage=store)
    spec = saved_sweep(study)
    rows = [_row(setting, spec) for setting in settings_of(study)]
    done = sorted(
        (r for r in rows if r.state == "done"), key=lambda r: r.value if spec.objective.minimize else -r.value
    )
    for rank, row in enumerate(done, 1):
        row.rank = rank
    rows.sort(key=lambda r: (ORDER[r.state], r.rank or 0, r.trial))
    to_target = spec.objective.metric.endswith("_to_target") and "train.stop_at_accuracy" not in spec.params
    target = _target(folder, rows) if to_target else None
    return Results(name, folder, spec, rows, target)


def _target(folder: Path, rows: list[Row]) -> float | None:
    """The held-out exact match the runs trained to (train.stop_at_accuracy, the same in
    every run of a sweep that does not vary it), read from a run's config; None without one."""
    run = next((folder / run for row in rows for run in row.runs), None)
    if run is None or not (run / "config.yaml").is_file():
        return None
    with contextlib.suppress(ConfigError):
        target = (read_yaml(run / "config.yaml").get("train") or {}).get("stop_at_accuracy")
        return target if isinstance(target, int | float) and not isinstance(target, bool) else None
    return None


def _no_journal(folder: Path) -> str:
    """Why `sweep show` finds no sweep in `folder` without --storage, and what was likely
    meant: its folder without a journal holds the runs of a sweep stored in a database; no
    folder at all, a mistyped name (the nearest sweep there) or a sweep not started."""
    missing = f"no sweep {folder.name!r} in {folder.parent}/ (no {folder / STUDY_FILE})"
    if folder.is_dir():
        return f"{missing}; a sweep stored in a database: add --storage URL"
    parent = folder.parent
    sweeps = [path.name for path in parent.iterdir() if (path / STUDY_FILE).is_file()] if parent.is_dir() else []
    if hint := did_you_mean(folder.name, sweeps):
        return missing + hint
    return f"{missing}; start one with tinytf sweep SWEEP.yaml (a sweep stored in a database: add --storage URL)"


def _row(setting: Setting, spec: Sweep) -> Row:
    """A setting's row: its runs' values, and the objective over them once every seed is done."""
    state = setting.state(len(spec.seeds))
    states = setting.states()
    done = {seed: run for seed, run in setting.runs.items() if states[seed] == "done"}
    seeds = {seed: run.value for seed, run in done.items()}
    values = list(seeds.values())
    worst = (max if spec.objective.minimize else min)(values) if values else None
    mean = statistics.fmean(values) if values else None
    notes = [run.user_attrs["error"] for run in setting.runs.values() if "error" in run.user_attrs]
    if state == "pruned":
        pruned = [run for run in setting.runs.values() if run.state == optuna.trial.TrialState.PRUNED]
        notes.append(f"pruned at step {max(pruned[0].intermediate_values, default=0)}")
    return Row(
        rank=None,
        trial=setting.number,
        state=state,
        params=setting.params,
        value=(mean if spec.objective.over_seeds == "mean" else worst) if state == "done" else None,
        seeds=seeds,
        mean=mean,
        worst=worst,
        seconds=round(sum(run.user_attrs.get("seconds", 0.0) for run in done.values()), 1),
        runs=[run.user_attrs["run"] for run in done.values() if "run" in run.user_attrs],
        note="; ".join(notes[:1]),
    )


def results_text(results: Results, output_format: str) -> str:
    """What `sweep show` prints: the table, JSON or CSV."""
    if output_format == "json":
        return json.dumps(_json(results), indent=1) + "\n"
    return _csv(results) if output_format == "csv" else _table(results)


def _json(results: Results) -> dict:
    objective = results.sweep.objective
    return {
        "name": results.name,
        "metric": objective.metric,
        "direction": "minimize" if objective.minimize else "maximize",
        "over_seeds": objective.over_seeds,
        "seeds": list(results.sweep.seeds),
        "settings": [row.to_json() for row in results.rows],
    }


def _csv(results: Results) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    keys, seeds = list(results.sweep.params), results.sweep.seeds
    seed_columns = [f"seed {seed}" for seed in seeds]
    writer.writerow(
        ["rank", "trial", "state", *keys, "value", *seed_columns, "mean", "worst", "seconds", "runs", "note"]
    )
    for row in results.rows:
        params, values = [row.params.get(key) for key in keys], [row.seeds.get(seed) for seed in seeds]
        summary = [row.mean, row.worst, row.seconds, " ".join(row.runs), row.note]
        writer.writerow([row.rank, row.trial, row.state, *params, row.value, *values, *summary])
    return buffer.getvalue()


def _cell(value: object, metric: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isinf(value):
            return "never" if metric.endswith("_to_target") else str(value)
        return f"{value:.4g}"
    return str(value)


def _table(results: Results) -> str:
    metric, keys, seeds = results.sweep.objective.metric, list(results.sweep.params), results.sweep.seeds
    header = ["rank", "trial", *keys, metric, *(f"seed {s}" for s in seeds), "mean", "worst", "seconds", "state"]
    lines = [header]
    for row in results.rows:
        lines.append(
            [_cell(row.rank), str(row.trial), *(_cell(row.params.get(k)) for k in keys), _cell(row.value, metric)]
            + [_cell(row.seeds.get(s), metric) for s in seeds]
            + [_cell(row.mean, metric), _cell(row.worst, metric), _cell(row.seconds), row.state]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)) for line in lines)
    direction = "lower" if results.sweep.objective.minimize else "higher"
    title = f"sweep {results.name}: {metric}, {results.sweep.objective.over_seeds} over seeds, {direction} is better"
    runs = f"run folders: {results.folder}/trial-NNN-seed-S-*" if results.folder else ""
    return "\n".join(filter(None, [title, text, runs])) + "\n"


def sweep_figure(results: Results) -> Figure:
    """A sweep's objective against each parameter: a dot per seed's run, a ring per setting
    (its objective over the seeds); a log axis for a log-spaced parameter. Without params,
    each seed's run against its seed. Runs that never reached the target (infinite) are left out.
    The value axis says what the metric measures, in what unit (`metric_label`)."""
    from matplotlib.figure import Figure

    keys = list(results.sweep.params) or ["seed"]
    figure = Figure(figsize=(max(6, 4 * len(keys)), 3.6), layout="constrained")
    metric = results.sweep.objective.metric
    for ax, key in zip(figure.subplots(1, len(keys), squeeze=False)[0], keys, strict=True):
        # A choice with a value that is not a number (train.batch_size: [64, all]): one place per
        # choice, in the sweep file's order.
        choices = (results.sweep.params[key].choice if key != "seed" else None) or ()
        categories = [json.dumps(v) for v in choices] if any(map(_not_a_number, choices)) else None
        for row in results.rows:
            runs = [(seed, value) for seed, value in row.seeds.items() if math.isfinite(value)]
            x = categories.index(json.dumps(row.params.get(key))) if categories else row.params.get(key)
            xs = [seed for seed, _ in runs] if key == "seed" else [x] * len(runs)
            ax.scatter(xs, [value for _, value in runs], s=10, color="tab:blue", alpha=0.4)
            if key != "seed" and row.value is not None and math.isfinite(row.value):
                ax.scatter([x], [row.value], s=60, facecolors="none", edgecolors="tab:red")
        if categories:
            ax.set_xticks(range(len(categories)), [label.strip('"') for label in categories])
        if (
            key != "seed" and results.sweep.params[key].log and not categories
        ):  # places, not numbers, on a category axis
            ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel(metric_label(metric, results.target), fontsize=8)
    over, seeds = results.sweep.objective.over_seeds, results.sweep.seeds
    if not results.sweep.params:
        shown = "a dot per seed's run"
    elif len(seeds) == 1:
        shown = f"a ringed dot per setting: its run on seed {seeds[0]}"
    else:
        shown = f"dots: each run; rings: each setting, the {over} over its {len(seeds)} seeds"
    figure.suptitle(f"sweep {results.name}: {metric}\n({shown})")
    return figure


def metric_label(metric: str, target: float | None) -> str:
    """What the objective's `metric` measures, with its unit; `target`: the held-out exact
    match a *_to_target metric waits for (train.stop_at_accuracy), if known."""
    reached = f"{target * 100:g}%" if target is not None else "the target (train.stop_at_accuracy)"
    return {
        "time_to_target": f"seconds to {reached} held-out exact match",
        "steps_to_target": f"steps to {reached} held-out exact match",
        "val_loss": "held-out loss (nats per token), best checkpoint",
        "val_seq_acc": "held-out exact-match accuracy, best checkpoint",
        "val_token_acc": "held-out token accuracy, best checkpoint",
    }.get(metric, metric)


def _not_a_number(value: object) -> bool:
    return isinstance(value, bool) or not isinstance(value, int | float)
