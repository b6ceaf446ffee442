"""One typed config tree, loaded from YAML, validated once.

A config file only states what differs from the defaults below:

    model:
      arch: decoder
      d_model: 64
    train:
      lr: 3e-4

`read_config(path, overrides)` reads the file with `yaml.safe_load` (no code is ever
executed), applies dotted overrides such as ``model.d_model=64`` and validates the
result into frozen dataclass-like models (pydantic). Every mistake becomes a
`ConfigError` whose one-line message names the file (or the `--set` at fault), the key,
the bad value and what is allowed, e.g.::

    configs/x.yaml: model.d_modle: unknown key (did you mean 'd_model'?)

This module is a pure schema: it imports nothing of tinytf but its error types, and
knows no task. The checks that need the task registry (the task exists, fits the
architecture, uses the keys set, fits model.max_len) live one layer up, in
`tinytf.experiment`, and run through the `check` hook of the readers below: use
`tinytf.load_config`, which does both.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator

from tinytf.errors import ConfigError

# Integers are strict (a YAML `true` or `64.5` is not a width); floats accept ints and
# strings such as "3e-4", which YAML 1.1 would otherwise leave as a string.
Int = Annotated[int, Strict()]
PositiveInt = Annotated[int, Strict(), Field(gt=0)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
Bool = Annotated[bool, Strict()]
Beta = Annotated[float, Field(ge=0.0, lt=1.0)]

Arch = Literal["encoder", "decoder", "encoder-decoder"]
Positional = Literal["sinusoidal", "learned", "rope", "none"]


class Section(BaseModel):
    """Base of every config section: immutable; unknown keys and non-finite numbers
    (`.inf`, `1e309`, `.nan`) are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ConfigProblem(ConfigError):
    """A config that passes the schema but fails a check of the layer above it (see
    `tinytf.experiment`). `keys` are the dotted keys at fault: the message then names
    the file or the `--set` that gave them."""

    def __init__(self, message: str, *keys: str) -> None:
        super().__init__(message)
        self.keys = keys


Check = Callable[["Config"], None]  # raises ConfigProblem


class TaskConfig(Section):
    """Which toy task to train on, and its knobs (`tinytf tasks` lists the tasks and
    the keys each one uses; setting a key the task does not use is an error)."""

    name: str = "sort"
    vocab_size: PositiveInt = 10  # symbol tasks: how many distinct input symbols
    min_len: PositiveInt = 4  # sequence length range (words, for sentences)
    max_len: PositiveInt = 12  # (text: the training window)
    digits: Annotated[int, Strict(), Field(gt=0, le=18)] = 3  # add: up to this many digits per number
    answer_order: Literal["msd", "lsd"] = "msd"  # add: most- or least-significant digit first
    bos: Bool = False  # encoder: prepend a <bos> position (a place for "global" attention)
    path: str | None = None  # text: the UTF-8 file to model
    tokenizer: Literal["char", "word"] = "char"  # text: how to split it
    eval_size: PositiveInt = 1000  # held-out examples, disjoint from training


class ModelConfig(Section):
    """The Transformer's shape. Every dimension of the model comes from here."""

    arch: Arch = "decoder"
    d_model: PositiveInt = 128
    n_heads: PositiveInt = 4
    n_layers: PositiveInt = 2
    # Encoder-decoder only (another arch setting them is an error): depth of each stack;
    # unset means `n_layers`.
    n_encoder_layers: PositiveInt | None = None
    n_decoder_layers: PositiveInt | None = None
    d_ff: PositiveInt = 512
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    activation: Literal["relu", "gelu"] = "gelu"
    # LayerNorm placement: "post" is the original Transformer (x = LN(x + f(x))),
    # "pre" normalises the sublayer's input (x = x + f(LN(x))) and trains more easily.
    norm: Literal["pre", "post"] = "pre"
    positional: Positional = "sinusoidal"
    max_len: PositiveInt = 256
    tie_embeddings: Bool = True

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads} "
                f"(each head gets d_model / n_heads dimensions)"
            )
        if self.positional == "rope" and self.head_dim % 2:
            raise ValueError(f"positional=rope needs an even head width, but d_model / n_heads = {self.head_dim}")
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class TrainConfig(Section):
    """The optimisation loop."""

    steps: PositiveInt = 2000
    batch_size: PositiveInt = 64
    lr: Annotated[float, Field(gt=0.0)] = 1e-3
    warmup_steps: NonNegativeInt = 100
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.01
    # AdamW's moment decay rates (beta1, beta2). A lower beta2 (the Transformer paper's
    # 0.98) adapts faster to growing gradients and damps loss spikes at high learning rates.
    betas: tuple[Beta, Beta] = (0.9, 0.999)
    grad_clip: Annotated[float, Field(gt=0.0)] | None = 1.0
    eval_every: PositiveInt = 200
    checkpoint_every: PositiveInt = 500
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    # Stop early once validation sequence accuracy reaches this fraction.
    stop_at_accuracy: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    compile: Bool = False


class LogConfig(Section):
    """What is written to the run folder and TensorBoard, and how often."""

    every: PositiveInt = 50
    attention_every: PositiveInt = 200


class Config(Section):
    """The whole config tree, one section per concern."""

    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    log: LogConfig = LogConfig()
    seed: Int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain, YAML-ready data: `config_from_dict(c.to_dict()) == c`."""
        return self.model_dump(mode="json")


# --------------------------------------------------------------------------- loading


def read_config(path: str | Path, overrides: Iterable[str] = (), check: Check | None = None) -> Config:
    """Read a YAML config file, apply ``KEY=VALUE`` overrides, validate, then run `check`.

    Raises `ConfigError` with a one-line message for every user mistake.
    """
    return config_from_dict(read_yaml(path), overrides, str(path), check)


def parse_config(
    text: str, overrides: Iterable[str] = (), source: str = "<config>", check: Check | None = None
) -> Config:
    """Validate a YAML document (see `read_config`); `source` names it in errors."""
    return config_from_dict(parse_yaml(text, source), overrides, source, check)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A config file's mapping of sections, unvalidated; a missing or unreadable file is a `ConfigError`."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a config file")
    try:
        return parse_yaml(path.read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read config file: {err}") from None


def parse_yaml(text: str, source: str = "<config>") -> dict[str, Any]:
    """A YAML document -> its mapping of sections, unvalidated (`yaml.safe_load`: no tags run)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: {_describe_yaml_error(err)}") from None
    if data is None:  # an empty file means "all defaults"
        data = {}
    if not isinstance(data, dict):
        sections = ", ".join(Config.model_fields)
        raise ConfigError(f"{source}: expected a mapping of sections ({sections}), got {_kind(data)}")
    return data


def config_from_dict(
    data: Mapping[str, Any], overrides: Iterable[str] = (), source: str = "<dict>", check: Check | None = None
) -> Config:
    """Validate plain data shaped like the YAML file into a `Config`, then run `check`."""
    data = _deep_copy(data)
    override_sources: dict[tuple[str, ...], str] = {}
    for text in overrides:
        key_path, value = _parse_override(text)
        _set_dotted(data, key_path, value, text)
        override_sources[key_path] = f"--set {text}"
    try:
        config = Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_describe_validation_error(err, source, override_sources)) from None
    if check is not None:
        try:
            check(config)
        except ConfigProblem as problem:
            locs = [tuple(key.split(".")) for key in problem.keys]
            where = next((_override_at(loc, override_sources) for loc in locs if _override_at(loc, override_sources)),
                         source)  # fmt: skip
            raise ConfigError(f"{where}: {problem}") from None
    return config


def dump_config(config: Config, task_keys: Collection[str] | None = None) -> str:
    """The config as YAML, every key with its value (defaults included). `task_keys`,
    if given, are the task section's keys to keep (the ones its task uses)."""
    data = config.to_dict()
    if task_keys is not None:
        data["task"] = {key: value for key, value in data["task"].items() if key in task_keys}
    return yaml.safe_dump(data, sort_keys=False)


# --------------------------------------------------------------------------- overrides


def _parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """``"model.d_model=64"`` -> ``(("model", "d_model"), 64)``; values are YAML scalars."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text}: expected KEY=VALUE with a dotted key, e.g. --set model.d_model=64")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw  # not YAML: keep the string and let validation judge it
    return tuple(key.split(".")), value


def _set_dotted(data: dict[str, Any], key_path: tuple[str, ...], value: Any, text: str) -> None:
    """data[a][b][c] = value for key_path (a, b, c), checking each key against the schema."""
    node = data
    for depth, part in enumerate(key_path):
        section_loc = key_path[:depth]
        if part not in _allowed_keys(section_loc):
            dotted = ".".join(key_path[: depth + 1])
            raise ConfigError(f"--set {text}: {dotted}: {_unknown_key_message(section_loc, part)}")
        if depth == len(key_path) - 1:
            node[part] = value
        elif _section_model(key_path[: depth + 1]) is None:
            raise ConfigError(f"--set {text}: {'.'.join(key_path[: depth + 1])} is a value, not a section")
        else:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                dotted = ".".join(key_path[: depth + 1])
                raise ConfigError(f"--set {text}: {dotted} should be a section, but the config gives it {_kind(node)}")


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _deep_copy(value) if isinstance(value, Mapping) else value for key, value in data.items()}


# --------------------------------------------------------------------------- error messages


def _describe_yaml_error(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}invalid YAML: {problem}"


def _describe_validation_error(err: ValidationError, source: str, override_sources: dict[tuple[str, ...], str]) -> str:
    messages = []
    for error in err.errors():
        loc = tuple(str(part) for part in error["loc"])
        where = _override_at(loc, override_sources) or source
        messages.append(f"{where}: {_describe_one_error(error, loc)}")
    if len(messages) == 1:
        return messages[0]
    return f"{messages[0]} (and {len(messages) - 1} more: {'; '.join(messages[1:])})"


def _override_at(loc: tuple[str, ...], override_sources: dict[tuple[str, ...], str]) -> str | None:
    """The override that set the key at `loc`, or one above it (train.betas for train.betas.1)."""
    return next((override_sources[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in override_sources), None)


def _describe_one_error(error: dict[str, Any], loc: tuple[str, ...]) -> str:
    dotted = ".".join(loc) or "config"
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{dotted}: {_unknown_key_message(loc[:-1], loc[-1])}"
    if kind == "value_error":  # a cross-field check of a whole section
        message = str(error["ctx"]["error"])
        return f"{dotted}: {message}" if loc else message
    if kind == "model_type" or kind == "model_attributes_type":
        return f"{dotted}: expected a section (a mapping of keys), got {_kind(error['input'])}"
    return f"{dotted} = {error['input']!r}: {_lowercase_first(error['msg'])}"


def _unknown_key_message(section_loc: tuple[str, ...], key: str) -> str:
    allowed = _allowed_keys(section_loc)
    suggestion = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"did you mean '{suggestion[0]}'?" if suggestion else f"allowed: {', '.join(allowed)}"
    return f"unknown key ({hint})"


def _section_model(loc: tuple[str, ...]) -> type[BaseModel] | None:
    """The section class at `loc` (() is the whole Config), or None if `loc` is a value."""
    model: type[BaseModel] = Config
    for part in loc:
        annotation = model.model_fields[part].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _allowed_keys(section_loc: tuple[str, ...]) -> list[str]:
    """The keys that the section at `section_loc` accepts."""
    model = _section_model(section_loc)
    return list(model.model_fields) if model is not None else []


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def _lowercase_first(text: str) -> str:
    return text[:1].lower() + text[1:]
