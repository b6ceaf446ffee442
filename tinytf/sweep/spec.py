"""The sweep file: a base config, the keys to vary and how, the seeds, the objective.

    base: ../configs/sort-decoder.yaml    # a config, relative to the sweep file (or the current folder)
    params:                               # dotted config keys
      train.lr: {float: [1.0e-4, 1.0e-2], log: true}
      model.d_model: {choice: [32, 64, 128]}
      model.n_layers: {int: [1, 3]}
    seeds: [0, 1, 2]                      # every setting trains on every seed
    objective: {metric: time_to_target, over_seeds: worst}
    sampler: tpe                          # grid | random | tpe
    pruner: none                          # none | median
    trials: 20                            # settings to try (grid: every one)

`load_sweep` validates it as a config is validated: a mistake is one `ConfigError` naming
the file and line. Every value a parameter can take is tried on the base config (both
ends of a range), and with `sampler: grid` every setting of the grid.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from tinytf.config import MAX_CONFIG_BYTES, MAX_SEED, Config, config_variants
from tinytf.config.plain_yaml import Lines, read_yaml_file
from tinytf.errors import ConfigError, did_you_mean
from tinytf.run.setup import check_config

METRICS = ("time_to_target", "steps_to_target", "val_loss", "val_seq_acc", "val_token_acc")
MINIMIZED = ("time_to_target", "steps_to_target", "val_loss")  # the default direction of each metric
MAX_GRID = 10_000  # settings of a grid: each is a training per seed
Value = StrictBool | StrictInt | StrictFloat | str | None


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, populate_by_name=True)


class Param(_Strict):
    """How one config key varies: a float or int range (`log` spaces it geometrically,
    `step` quantises an int), or a list of choices."""

    float_: tuple[float, float] | None = Field(None, alias="float")  # YAML reads 1e-3 as text: read as a number
    int_: tuple[StrictInt, StrictInt] | None = Field(None, alias="int")
    choice: tuple[Value, ...] | None = Field(None, min_length=1)
    log: StrictBool = False
    step: StrictInt | None = Field(None, ge=1)

    @field_validator("choice", mode="before")
    @classmethod
    def _finite(cls, values: object) -> object:
        """`.nan` or `.inf` as a choice: said as such (the union's own error names a boolean)."""
        if isinstance(values, list | tuple) and any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise ValueError("a choice is a finite number, a string, true, false or null: not .nan or .inf")
        return values

    @model_validator(mode="after")
    def _one_kind(self) -> Param:
        kinds = [name for name, value in (("float", self.float_), ("int", self.int_), ("choice", self.choice)) if value]
        if len(kinds) != 1:
            raise ValueError("give one of float: [low, high], int: [low, high] or choice: [values...]")
        low, high = self.float_ or self.int_ or (1, 1)
        if low > high or (self.log and low <= 0):
            raise ValueError(f"[{low}, {high}]: low must not exceed high{', and be above 0 with log' * self.log}")
        if self.step is not None and (self.int_ is None or self.log):
            raise ValueError("step is for int ranges without log")
        if self.choice is not None and len(set(map(json.dumps, self.choice))) < len(self.choice):
            raise ValueError("a choice is listed twice")
        return self

    def ends(self) -> tuple[Value, ...]:
        """The values to try on the base config: each choice, or both ends of the range."""
        return self.choice or self.float_ or self.int_  # type: ignore[return-value]

    def grid(self) -> Sequence[Value] | None:
        """Every value the key takes in a grid, or None for a float range (no finite grid)."""
        if self.int_ is not None and not self.log:
            return range(self.int_[0], self.int_[1] + 1, self.step or 1)
        return self.choice


class Objective(_Strict):
    metric: Literal[METRICS]  # type: ignore[valid-type]
    direction: Literal["minimize", "maximize"] | None = None  # None: the metric's own
    over_seeds: Literal["worst", "mean"] = "worst"

    @property
    def minimize(self) -> bool:
        return (self.direction or ("minimize" if self.metric in MINIMIZED else "maximize")) == "minimize"


class Sweep(_Strict):
    base: str
    params: dict[str, Param] = {}  # none: one setting, the base config, on every seed
    seeds: tuple[StrictInt, ...] = Field((0,), min_length=1)  # checked by `_check_settings`
    objective: Objective
    sampler: Literal["grid", "random", "tpe"] = "tpe"
    pruner: Literal["none", "median"] = "none"
    trials: StrictInt | None = Field(None, ge=1, le=MAX_GRID)

    def grid_size(self) -> int:
        return math.prod(len(self.params[key].grid() or ()) for key in self.params)

    def grid(self) -> list[dict[str, Value]]:
        """Every setting of the grid, in order (the first key varies slowest)."""
        keys, values = list(self.params), [self.params[key].grid() or [] for key in self.params]
        return [dict(zip(keys, setting, strict=True)) for setting in itertools.product(*values)]

    @property
    def budget(self) -> int:
        """The number of settings the sweep trains."""
        return self.grid_size() if self.is_grid else self.trials  # type: ignore[return-value]

    @property
    def is_grid(self) -> bool:
        """Whether the sweep trains a grid, every setting: `sampler: grid`, or no params at all."""
        return self.sampler == "grid" or not self.params


@dataclass(frozen=True)
class Job:
    """What a worker needs: the sweep (checked by the parent), where it lives, its threads."""

    sweep: Sweep
    base: Path  # the base config, absolute
    name: str
    folder: Path  # the sweep's folder: run folders and the default storage
    storage: str | None
    threads: int

    def to_json(self) -> str:
        sweep = self.sweep.model_dump(mode="json", by_alias=True)
        return json.dumps({**self.__dict__, "sweep": sweep, "base": str(self.base), "folder": str(self.folder)})

    @staticmethod
    def from_json(text: str) -> Job:
        data = json.loads(text)
        paths = {key: Path(data[key]) for key in ("base", "folder")}
        return Job(**{**data, **paths, "sweep": Sweep.model_validate(data["sweep"])})


def overrides(setting: dict[str, Value], seed: int | None = None) -> list[str]:
    """A setting (and seed) as `--set` overrides: values as JSON, which YAML reads back as they were."""
    items = [f"{key}={json.dumps(value)}" for key, value in setting.items()]
    return items if seed is None else [*items, f"seed={seed}"]


def load_sweep(path: str | Path) -> tuple[Sweep, Path, Config]:
    """The sweep file at `path`, its base config's path and the base config, all checked."""
    path = Path(path)
    data, lines = read_yaml_file(path, "sweep file", MAX_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with base, params, seeds, objective...")
    try:
        sweep = Sweep.model_validate(data)
    except ValidationError as err:
        # An unknown key first: a misspelt one (seedz) is why a required one (seeds) seems missing
        first = min(err.errors(), key=lambda error: error["type"] != "extra_forbidden")
        raise ConfigError(_describe(first, path, lines)) from None
    base = next((p for p in (path.parent / sweep.base, Path(sweep.base)) if p.is_file()), path.parent / sweep.base)
    config = _check(sweep, path, base, lines)
    return sweep, base, config


def _check(sweep: Sweep, path: Path, base: Path, lines: Lines) -> Config:
    """The base config, and each value (or grid setting) applied to it: a `ConfigError`
    naming the sweep file's line for the first that does not make a valid config."""
    with _naming(f"{path}: line {lines.get(('base',), 1)}: base"):
        with_overrides = config_variants(base, check_config)
        config = with_overrides([])
    _check_settings(sweep, path, lines)
    if sweep.sampler == "grid":
        for setting in sweep.grid():
            line = lines.get(("params", next(iter(setting), "")), lines.get(("params",), 1))
            with _naming(f"{path}: line {line}: params"):
                with_overrides(overrides(setting))
    else:
        for key, param in sweep.params.items():
            for value in param.ends():
                with _naming(f"{path}: line {lines.get(('params', key), 1)}: params"):
                    with_overrides(overrides({key: value}))
    if sweep.objective.metric.endswith("_to_target") and config.train.stop_at_accuracy is None:
        raise ConfigError(
            f"{path}: line {lines.get(('objective',), 1)}: objective: {sweep.objective.metric} needs "
            f"train.stop_at_accuracy in {base} (the held-out exact match that is the target)"
        )
    return config


def _check_settings(sweep: Sweep, path: Path, lines: Lines) -> None:
    def line(*key: str) -> str:
        return f"{path}: line {lines.get(key, 1)}"

    if len(set(sweep.seeds)) < len(sweep.seeds) or min(sweep.seeds) < 0 or max(sweep.seeds) > MAX_SEED:
        raise ConfigError(f"{line('seeds')}: seeds: each seed once, from 0 to {MAX_SEED} (the config's seed)")
    if "seed" in sweep.params:
        raise ConfigError(
            f"{line('params', 'seed')}: params.seed: every setting trains on each seed of seeds; list them there"
        )
    if sweep.sampler == "grid":
        if ranges := [key for key, param in sweep.params.items() if param.grid() is None]:
            raise ConfigError(
                f"{line('params', ranges[0])}: params.{ranges[0]}: sampler grid needs choice: [...] "
                "(a float range, or a log-spaced one, has no grid)"
            )
        if (size := sweep.grid_size()) > MAX_GRID:
            raise ConfigError(f"{line('params')}: params: the grid has {size:,} settings; at most {MAX_GRID:,}")
    elif sweep.trials is None and sweep.params:
        raise ConfigError(f"{line('sampler')}: sampler {sweep.sampler}: give trials, the number of settings to try")


@contextlib.contextmanager
def _naming(where: str) -> Iterator[None]:
    """A `ConfigError` inside, prefixed with `where`: the sweep file's line that caused it."""
    try:
        yield
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None


def _describe(error: Any, path: Path, lines: Lines) -> str:
    """One pydantic error as `FILE: line N: key: message`, with the keys allowed for an unknown one."""
    loc = tuple(str(part) for part in error["loc"] if not str(part).startswith("function-after"))
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        fields = {(): Sweep, ("objective",): Objective}.get(loc[:-1], Param).model_fields
        allowed = [field.alias or name for name, field in fields.items()]
        near = did_you_mean(loc[-1], allowed).removeprefix("; ")
        message = f"unknown key ({near + ' ' if near else ''}allowed: {', '.join(allowed)})"
    found = max((loc[:n] for n in range(len(loc), 0, -1) if loc[:n] in lines), key=len, default=None)
    where = f"{path}: line {lines[found]}" if found else str(path)
    return f"{where}: {'.'.join(loc) or 'sweep'}: {message}"
