"""A config checked against what it names: the layer above the schema (`config/`, which
knows no task) and the task registry and framings (which know no files).

    setup = load_setup("configs/sort-decoder.yaml", ["task.max_len=16"])
    setup.config, setup.task, setup.framing, setup.examples_per_step
    save_config(setup, run_dir / "config.yaml")

The schema checks each value on its own. `Setup.of` checks what needs the task registry,
and is the one place that does: the task exists and works with the architecture, every
task key that is set is one the task uses, the task's own settings make sense (its file
exists...), its sequences fit `model.max_len`, and `train.batch_size` fits its training
set. It builds the task and framing as it checks, and a `Setup` carries them to every
layer of a run, so one `tinytf train` checks its config once. `load_config` (a `Config`,
for the Python API), `build_model` and training all go through it, so `tinytf config
show` and `tinytf train` accept and refuse the same configs.
Nothing here imports torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinytf import arguments
from tinytf.config import Config, ConfigProblem, config_from_dict, dump_config, read_config, read_yaml
from tinytf.data.framing import FRAMINGS, Framing, get_framing
from tinytf.files import write_text_atomically
from tinytf.tasks import TASKS, Task
from tinytf.tasks.base import examples_per_step
from tinytf.tasks.vocab import Vocabulary

if TYPE_CHECKING:
    from tinytf.model import Transformer

COMMON_TASK_KEYS = ("name", "eval_size")  # every task has these


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> Config:
    """Read a YAML config, apply ``KEY=VALUE`` overrides, validate and check it.
    Every mistake is a `ConfigError` with a one-line message naming the file or `--set`;
    arguments of the wrong type are a `TypeError`."""
    return load_setup(path, overrides).config


def load_setup(path: str | Path, overrides: Iterable[str] = ()) -> Setup:
    """`load_config`, with the task and framing its check built."""
    if not isinstance(path, str | Path):
        raise TypeError(f"load_config: path must be a YAML file's path (str or Path), not {type(path).__name__}")
    items = _override_list(overrides)
    made: list[Setup] = []
    read_config(path, items, check=lambda config: made.append(Setup.of(config)))
    return made[0]


def _override_list(overrides: object) -> list[str]:
    """`overrides` as a list of strings: any iterable of them but a string itself."""

    def refused() -> TypeError:
        return TypeError(f"load_config: overrides must be a list of 'KEY=VALUE' strings, not {overrides!r}"[:200])

    if isinstance(overrides, str | bytes) or not isinstance(overrides, Iterable):
        raise refused()
    try:
        items = list(overrides)
    except TypeError:  # iterable in type only (a tensor of no dimensions)
        raise refused() from None
    if not all(isinstance(item, str) for item in items):
        raise refused()
    return items


def load_run_setup(path: str | Path, overrides: Iterable[str] = (), *, data: bool = True) -> Setup:
    """A run folder's saved config.yaml (see `load_config`), with `overrides` for
    continuing it: those may change how it trains (train.*, log.*), never what it is
    (see `check_unchanged`). `data`: see `check_config`."""
    content = read_yaml(path)
    saved = config_from_dict(content, (), str(path)) if overrides else None  # the schema alone: to compare
    made: list[Setup] = []

    def check(config: Config) -> None:
        made.append(Setup.of(config, data=data))
        if saved is not None:
            check_unchanged(saved, config)

    config_from_dict(content, overrides, str(path), check=check)
    return made[0]


def read_saved_config(path: str | Path) -> Config:
    """A run's saved config.yaml, validated by the schema but not checked against its task
    (what it was trained with, to compare a resumed config to)."""
    return config_from_dict(read_yaml(path), (), str(path))


# What its weights, vocabulary and held-out set depend on, and the optimizer, whose state
# (moments) the checkpoint holds: sections, or single keys.
FIXED_FOR_A_RUN = ("task", "model", "seed", "train.optimizer")


def check_unchanged(saved: Config, resumed: Config) -> None:
    """A resumed run may train differently (train.*, log.*) but stays the same run: its
    task, model, seed and optimizer cannot change (a new seed would even swap its held-out set)."""
    before, after = dotted(saved.to_dict()), dotted(resumed.to_dict())
    for key, value in after.items():
        if (key in FIXED_FOR_A_RUN or key.split(".")[0] in FIXED_FOR_A_RUN) and before.get(key) != value:
            raise ConfigProblem(
                f"{key}: a resumed run keeps its task, model, seed and optimizer "
                f"({key} is {before.get(key)!r} in this run, not {value!r}); train a new run to change it",
                key,
            )


def dotted(data: dict) -> dict:
    """{"model": {"d_model": 64}, "seed": 0} -> {"model.d_model": 64, "seed": 0}"""
    return {
        f"{section}.{key}" if isinstance(values, dict) else section: value
        for section, values in data.items()
        for key, value in (values.items() if isinstance(values, dict) else [(None, values)])
    }


@dataclass(frozen=True)
class Setup:
    """A config checked against its task, with the task and its framing for the config's
    architecture: what every layer of a run works from, worked out once by `Setup.of`."""

    config: Config
    task: Task
    framing: Framing

    @classmethod
    def of(cls, config: Config, *, data: bool = True) -> Setup:
        """Check `config` (see `check_config`) and build its task and framing. `data=False`
        skips the task's own settings check (its file exists...): building a model or
        reading a trained run's saved vocabulary needs no data."""
        task = _known_task(config.task.name)(config.task)
        arch = config.model.arch
        if arch not in task.archs:
            raise ConfigProblem(
                f"task {task.name!r} does not work with model.arch={arch}; it works with: {', '.join(task.archs)}",
                "model.arch",
                "task.name",
            )
        setup = cls(config, task, get_framing(task, arch))
        setup._check_task_keys()
        _check_model_keys(config)
        _check_batch_size(config, task)
        if data:
            task.check()
        longest = max(setup.framing.model_lengths())
        if longest > config.model.max_len:
            raise ConfigProblem(
                f"model.max_len={config.model.max_len} is too short: task {task.name!r} with arch={arch} "
                f"makes sequences of up to {longest} tokens",
                "model.max_len",
                *(f"task.{key}" for key in task.config_keys),
                "model.arch",
            )
        return setup

    @property
    def examples_per_step(self) -> int:
        """train.batch_size as a number of examples: `all` is the task's whole training set."""
        return examples_per_step(self.task, self.config.train.batch_size)

    @property
    def used_task_keys(self) -> tuple[str, ...]:
        """The keys of `config.task` that its task reads with `config.model.arch`."""
        used = {*COMMON_TASK_KEYS, *self.task.config_keys} - (_framing_only_keys() - set(self.framing.task_keys))
        return tuple(key for key in type(self.config.task).model_fields if key in used)  # in the schema's order

    def with_vocab(self, vocab: Vocabulary) -> Setup:
        """The same setup with a trained run's saved vocabulary (its data may have changed or
        gone), on a task of its own: nothing it made from the other vocabulary comes along."""
        task = type(self.task)(self.task.config)
        task.vocab = vocab
        return replace(self, task=task, framing=get_framing(task, self.config.model.arch))

    def with_task_path_resolved(self) -> Setup:
        """The same setup with `task.path` (a text task's file) absolute, so that a run keeps
        working from any folder; the same file, so it stays checked."""
        if self.config.task.path is None:
            return self
        task = self.config.task.model_copy(update={"path": str(Path(self.config.task.path).resolve())})
        return replace(self, config=self.config.model_copy(update={"task": task}))

    def build_model(self) -> Transformer:
        """A freshly initialised model for this setup (torch's global seed draws its weights)."""
        from tinytf.model import Transformer  # torch, imported once a model is built

        return Transformer(self.config.model, len(self.task.vocab))

    def _check_task_keys(self) -> None:
        """Every task key the config sets must be one this task reads with this architecture."""
        config, task, used = self.config, self.task, self.used_task_keys
        for key in type(config.task).model_fields:
            if key not in config.task.model_fields_set or key in used:
                continue
            if key in task.config_keys:  # the task reads it, but only under another framing
                users = ", ".join(f"arch={f.name}" for f in FRAMINGS.values() if key in f.task_keys)
                raise ConfigProblem(
                    f"task.{key}: arch={self.framing.name} does not use it (only {users} does)",
                    f"task.{key}",
                    "model.arch",
                )
            raise ConfigProblem(f"task.{key}: {task.name} does not use it (its keys: {', '.join(used)})", f"task.{key}")


def check_config(config: Config, *, data: bool = True) -> Config:
    """Raise `ConfigProblem` (a `ConfigError`) if `config` does not fit its task; return it.
    `data=False`: see `Setup.of`."""
    return Setup.of(config, data=data).config


def dump_checked_config(setup: Setup) -> str:
    """The config as YAML, every key with its value, the task section limited to the
    keys its task uses (so that loading it back passes `check_config`)."""
    return dump_config(setup.config, setup.used_task_keys)


def save_config(setup: Setup, path: str | Path) -> None:
    """Write the fully resolved config (see `dump_checked_config`) atomically."""
    write_text_atomically(path, dump_checked_config(setup))


def describe_tasks() -> list[str]:
    """One block per task (name, description, architectures, config keys, an example) for `tinytf tasks`."""
    framing_only = {key: [f.name for f in FRAMINGS.values() if key in f.task_keys] for key in _framing_only_keys()}
    lines = []
    for name, cls in TASKS.items():
        keys = [
            f"{key} (arch={', '.join(framing_only[key])} only)"
            if key in framing_only and not set(cls.archs) <= set(framing_only[key])
            else key
            for key in (*cls.config_keys, "eval_size")
        ]
        lines += [
            name,
            f"  {cls.description}",
            f"  architectures: {', '.join(cls.archs)}",
            f"  keys: task.name, task.{', task.'.join(keys)}",
        ]
        lines += [f"  example: {cls.example()}", ""]
    return lines


def _known_task(name: str) -> type[Task]:
    if name not in TASKS:
        suggestion = difflib.get_close_matches(name, TASKS, n=1)
        hint = f"did you mean '{suggestion[0]}'? " if suggestion else ""
        raise ConfigProblem(f"task.name: {name!r} is not a task; {hint}known tasks: {', '.join(TASKS)}", "task.name")
    return TASKS[name]


def _check_model_keys(config: Config) -> None:
    """Model keys that only some architectures use must be unset (null) for the others."""
    arch = config.model.arch
    for key in {key for framing in FRAMINGS.values() for key in framing.model_keys} - set(FRAMINGS[arch].model_keys):
        if getattr(config.model, key) is not None:
            users = ", ".join(f"arch={f.name}" for f in FRAMINGS.values() if key in f.model_keys)
            raise ConfigProblem(
                f"model.{key}: arch={arch} does not use it (only {users} does); use model.n_layers",
                f"model.{key}",
                "model.arch",
            )


def _check_batch_size(config: Config, task: Task) -> None:
    """`train.batch_size: all` needs a fixed training set, and no batch may be larger than one."""
    batch, size = config.train.batch_size, task.train_size()
    if batch == "all" and size is None:
        raise ConfigProblem(
            f"train.batch_size: all trains on a fixed training set, but task {task.name!r} draws fresh "
            f"examples at every step; give a number",
            "train.batch_size",
        )
    if batch != "all" and size is not None and batch > size:
        raise ConfigProblem(
            f"train.batch_size={batch} is more than the training set's {size} examples "
            f"(train.batch_size: all trains on every one of them)",
            "train.batch_size",
        )


def _framing_only_keys() -> set[str]:
    """Task keys that only some framings read (task.bos: not the language model's)."""
    return {key for framing in FRAMINGS.values() for key in framing.task_keys}


def build_model(config: Config | Mapping[str, Any], vocab_size: int | None = None) -> Transformer:
    """Build the Transformer that `config` describes.

    config: a `Config`, or plain data shaped like the YAML file; validated and checked
        against its task here (`tinytf.run.setup.check_config`).
    vocab_size: size of the token vocabulary; by default the vocabulary of the config's task.
    """
    if isinstance(config, str | PathLike):
        raise TypeError(f"build_model takes a config, not a file ({config!r}): call tinytf.load_config(path) first")
    if not isinstance(config, Config | Mapping):
        raise TypeError(
            f"build_model: config must be a Config or a dict shaped like the YAML file, not {type(config).__name__}"
        )
    if not isinstance(config, Config):
        config = config_from_dict(config)
    vocab_size = arguments.optional_whole_number(vocab_size, "vocab_size", low=1)
    setup = Setup.of(config, data=False)  # a model needs no data: a text task's file may be gone
    if vocab_size is None:
        return setup.build_model()
    from tinytf.model import Transformer  # torch, imported once a model is built

    return Transformer(config.model, vocab_size)
