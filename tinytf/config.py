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

Every size has an upper bound (the comments below give the reason for each), and the
YAML itself is bounded before anything is built from it: a config file is a regular file
of at most `MAX_CONFIG_BYTES`; a document may nest at most `MAX_DEPTH` levels and hold at
most `MAX_NODES` values and `MAX_CONFIG_BYTES` characters of scalars, counted with every
alias expanded (so an "alias bomb" is refused before it is built); an alias may not
refer to a node that contains it; and a key may not appear twice in one mapping (YAML
would silently keep the last one).

This module is a pure schema: it imports nothing of tinytf but its error types, and
knows no task. The checks that need the task registry (the task exists, fits the
architecture, uses the keys set, fits model.max_len) live one layer up, in
`tinytf.experiment`, and run through the `check` hook of the readers below: use
`tinytf.load_config`, which does both.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import stat
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

# Limits on the YAML text itself (see the module docstring).
# A config file's size, and its scalars' total length with aliases expanded. A config with
# every key is about 1 KB; parsing 100 KB of YAML takes about 0.1 s (the pure-Python parser).
MAX_CONFIG_BYTES = 100_000
MAX_DEPTH = 32  # nesting of mappings and lists (a valid config nests 3 deep: train.betas)
MAX_NODES = 10_000  # keys and values with aliases expanded (a full config has about 50)

# Upper bounds shared by several keys.
MAX_STEPS = 10_000_000  # train.steps, and every "every N steps" interval: at ~1 ms a step, about 3 hours
MAX_LAYERS = 64  # each layer is one more module and step of the forward pass; tiny models use 1-6
MAX_D_MODEL = 8192  # the residual width (GPT-3's largest is 12288: far beyond a tiny model)


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


# The longest example, in tokens, a task may produce: data.py fingerprints each example
# (to keep held-out examples out of training) with this many weights.
MAX_EXAMPLE_TOKENS = 4096


class TaskConfig(Section):
    """Which toy task to train on, and its knobs (`tinytf tasks` lists the tasks and
    the keys each one uses; setting a key the task does not use is an error)."""

    name: str = "sort"
    # Symbol tasks: how many distinct input symbols. One token each, and most-freq counts
    # them in an (examples x vocab_size) table: at 10,000 its probe batch already takes 300 MB.
    vocab_size: PositiveInt = Field(10, le=10_000)
    # Sequence length range (words, for sentences; text: max_len is the training window).
    # At most MAX_EXAMPLE_TOKENS - 2 = 4094: the widest example is task.max_len + 2 tokens
    # (sentences: <bos> words <eos>).
    min_len: PositiveInt = Field(4, le=MAX_EXAMPLE_TOKENS - 2)
    max_len: PositiveInt = Field(12, le=MAX_EXAMPLE_TOKENS - 2)
    digits: Annotated[int, Strict(), Field(gt=0, le=18)] = 3  # add: up to this many digits per number
    answer_order: Literal["msd", "lsd"] = "msd"  # add: most- or least-significant digit first
    bos: Bool = False  # a <bos> position before the source (a place for "global" attention)
    path: str | None = None  # text: the UTF-8 file to model
    tokenizer: Literal["char", "word"] = "char"  # text: how to split it
    # Held-out examples, disjoint from training. The whole set is drawn and fingerprinted at
    # once, and evaluated at every eval: a million default-sized ones take 0.5 s and 200 MB to draw.
    eval_size: PositiveInt = Field(1000, le=1_000_000)


class ModelConfig(Section):
    """The Transformer's shape. Every dimension of the model comes from here."""

    arch: Arch = "decoder"
    d_model: PositiveInt = Field(128, le=MAX_D_MODEL)
    n_heads: PositiveInt = Field(4, le=MAX_D_MODEL)  # heads divide d_model: never more than d_model of them
    n_layers: PositiveInt = Field(2, le=MAX_LAYERS)
    # Encoder-decoder only (another arch setting them is an error): depth of each stack;
    # unset means `n_layers`.
    n_encoder_layers: PositiveInt | None = Field(None, le=MAX_LAYERS)
    n_decoder_layers: PositiveInt | None = Field(None, le=MAX_LAYERS)
    # Feed-forward width: the usual 4 x d_model, at most at the widest d_model. 0 removes the
    # feed-forward sublayer: an attention-only model, as in interpretability studies.
    d_ff: NonNegativeInt = Field(512, le=4 * MAX_D_MODEL)
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    activation: Literal["relu", "gelu"] = "gelu"
    # LayerNorm placement: "post" is the original Transformer (x = LN(x + f(x))),
    # "pre" normalises the sublayer's input (x = x + f(LN(x))) and trains more easily.
    norm: Literal["pre", "post"] = "pre"
    positional: Positional = "sinusoidal"
    # The positional tables hold max_len x d_model numbers (the sinusoidal one is built
    # in float64): 65,536 positions at the default width take 64 MB.
    max_len: PositiveInt = Field(256, le=65_536)
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

    steps: PositiveInt = Field(2000, le=MAX_STEPS)
    # Examples per step, drawn and framed at once: 65,536 default-sized ones take a few MB,
    # but the activations grow with batch_size x length x d_model.
    batch_size: PositiveInt = Field(64, le=65_536)
    # adamw: AdamW on every weight. muon: Muon on the hidden matrices (attention and
    # feed-forward projections), AdamW on the rest, both at `lr` (tinytf/optim.py).
    optimizer: Literal["adamw", "muon"] = "adamw"
    lr: Annotated[float, Field(gt=0.0)] = 1e-3
    warmup_steps: NonNegativeInt = Field(100, le=MAX_STEPS)
    # The cosine decay's length, counted from step 0: after it the rate stays at lr / 10.
    # None: train.steps. Shorter than steps, the decay ends early and the rest of the
    # budget trains at the low rate (a stop_at_accuracy run may stop anywhere in it).
    decay_steps: PositiveInt | None = Field(None, le=MAX_STEPS)
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.01
    # AdamW's moment decay rates (beta1, beta2). A lower beta2 (the Transformer paper's
    # 0.98) adapts faster to growing gradients and damps loss spikes at high learning rates.
    betas: tuple[Beta, Beta] = (0.9, 0.999)
    grad_clip: Annotated[float, Field(gt=0.0)] | None = 1.0
    eval_every: PositiveInt = Field(200, le=MAX_STEPS)  # intervals: MAX_STEPS already means "never"
    checkpoint_every: PositiveInt = Field(500, le=MAX_STEPS)
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    # The training step's forward pass under torch.autocast(bfloat16): the matrix products
    # in bf16, and what is computed from them (activations; on a CPU also the attention
    # softmax) stays bf16, and so does Muon's orthogonalisation. The weights, the optimizer's
    # state and update, the loss and every evaluation stay float32. auto: bf16 where the
    # hardware multiplies bf16 (CUDA GPUs from Ampere on; CPUs with AVX512-BF16 or AMX),
    # float32 elsewhere; a torchrun job takes bf16 only if every process's machine has it,
    # and a resumed run decides again. fp32: never. bf16: on any CPU or CUDA device (slower
    # than float32 where the hardware lacks it).
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # Stop early once validation sequence accuracy reaches this fraction.
    stop_at_accuracy: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    compile: Bool = False


class LogConfig(Section):
    """What is written to the run folder and TensorBoard, and how often."""

    every: PositiveInt = Field(50, le=MAX_STEPS)
    # Attention maps of a few fixed inputs, every this many steps and at the last one;
    # None: never (runs nobody will look at, such as a sweep's, skip drawing them).
    attention_every: Annotated[PositiveInt, Field(le=MAX_STEPS)] | None = 200
    # With the attention maps: score every head against the attention patterns (heads.py) on a
    # few held-out inputs; TensorBoard gets the grid as `heads/scores` and each pattern's best
    # score as `heads/best/<pattern>`.
    head_scores: Bool = True


class Config(Section):
    """The whole config tree, one section per concern."""

    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    log: LogConfig = LogConfig()
    # torch seeds are 64-bit: torch.Generator.manual_seed takes -2**63..2**64-1 and
    # wraps negative seeds (-1 and 2**64-1 name one stream). 0..2**63-1 is one stream per
    # seed and fits a signed 64-bit integer wherever it is stored.
    seed: Int = Field(0, ge=0, le=2**63 - 1)

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
    """A config file's mapping of sections, unvalidated. A missing or unreadable file, a
    folder, anything but a regular file (a FIFO or a device would never end) and a file
    over `MAX_CONFIG_BYTES` are a `ConfigError`."""
    path = Path(path)
    try:
        status = path.stat()  # before opening: opening a FIFO blocks until a writer comes
        _check_config_file(path, status)
        # O_NONBLOCK: should a FIFO take the file's place after the check, opening it does not block.
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as file:
            _check_config_file(path, os.fstat(file.fileno()))
            data = file.read(MAX_CONFIG_BYTES + 1)  # the file may have grown since
        _check_config_size(path, len(data))
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read config file: {err}") from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, source: str = "<config>") -> dict[str, Any]:
    """A YAML document -> its mapping of sections, unvalidated (a `yaml.SafeLoader`: no tags
    run), within the limits of the module docstring."""
    if len(text) > MAX_CONFIG_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: the config is longer than {MAX_CONFIG_BYTES:,} bytes; is it the right file?")
    try:
        data = _load_yaml(text)
    except _RefusedYaml as err:
        raise ConfigError(f"{source}: {err}") from None
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
    override_sources: dict[tuple[str, ...], str] = {}  # key path -> "--set KEY=VALUE", in the order given
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
            blamed = (_blame(loc, str(problem), override_sources) for loc in locs)
            where = next((where for where in blamed if where), source)
            raise ConfigError(f"{where}: {problem}") from None
    return config


def dump_config(config: Config, task_keys: Collection[str] | None = None) -> str:
    """The config as YAML, every key with its value (defaults included). `task_keys`,
    if given, are the task section's keys to keep (the ones its task uses)."""
    data = config.to_dict()
    if task_keys is not None:
        data["task"] = {key: value for key, value in data["task"].items() if key in task_keys}
    return yaml.safe_dump(data, sort_keys=False)


# --------------------------------------------------------------------------- bounded YAML


class _RefusedYaml(Exception):
    """YAML that parses but that a config may not be: too deep, too big once its aliases
    are expanded, recursive, or with a key given twice. The message says where."""


def _check_config_file(path: Path, status: os.stat_result) -> None:
    mode = status.st_mode
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{path}: is a folder, not a config file")
    if not stat.S_ISREG(mode):
        kinds = {
            stat.S_ISFIFO: "a FIFO",
            stat.S_ISCHR: "a character device",
            stat.S_ISBLK: "a block device",
            stat.S_ISSOCK: "a socket",
        }
        kind = next((name for test, name in kinds.items() if test(mode)), "not a regular file")
        raise ConfigError(f"{path}: is {kind}; a config must be a regular file")
    _check_config_size(path, status.st_size)


def _check_config_size(path: Path, size: int) -> None:
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: has {size:,} bytes; a config file may have at most {MAX_CONFIG_BYTES:,} (is it the right file?)"
        )


def _load_yaml(text: str) -> Any:
    """`yaml.safe_load` of a document that `_check_expansion` found bounded, refusing duplicate keys."""
    _check_expansion(text)
    return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader: it runs no tags


def _check_expansion(text: str) -> None:
    """Walk the document's parse events (iteratively: no recursion, nothing built) and
    refuse it once it nests deeper than MAX_DEPTH, or once its nodes or scalar characters,
    with every alias expanded, pass MAX_NODES or MAX_CONFIG_BYTES; or if an alias refers
    to a node that contains it. A few hundred bytes of aliases can otherwise expand to
    billions of nodes, and a recursive alias builds a structure that never ends."""
    # One frame per open mapping or list: [anchor, nodes, characters]; a node's totals are
    # added to its parent's when it ends, and kept under its anchor for aliases to reuse.
    open_nodes: list[list[Any]] = [[None, 0, 0]]
    anchored: dict[str, tuple[int, int]] = {}
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1
        frame = open_nodes[-1]
        if isinstance(event, yaml.DocumentStartEvent):
            anchored.clear()  # anchors are per document
        elif isinstance(event, yaml.CollectionStartEvent):
            if len(open_nodes) > MAX_DEPTH:
                raise _RefusedYaml(f"line {line}: nested deeper than {MAX_DEPTH} levels (a config needs 3)")
            open_nodes.append([event.anchor, 1, 0])
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, nodes, chars = open_nodes.pop()
            _add_expansion(open_nodes[-1], nodes, chars, line)
            if anchor is not None:
                anchored[anchor] = (nodes, chars)
        elif isinstance(event, yaml.ScalarEvent):
            _add_expansion(frame, 1, len(event.value), line)
            if event.anchor is not None:
                anchored[event.anchor] = (1, len(event.value))
        elif isinstance(event, yaml.AliasEvent):
            if any(node[0] == event.anchor for node in open_nodes):
                raise _RefusedYaml(f"line {line}: alias *{event.anchor} refers to a node that contains it")
            _add_expansion(frame, *anchored.get(event.anchor, (1, 0)), line)  # undefined: the loader says so


def _add_expansion(frame: list[Any], nodes: int, chars: int, line: int) -> None:
    frame[1] += nodes
    frame[2] += chars
    if frame[1] > MAX_NODES:
        raise _RefusedYaml(
            f"line {line}: too big: more than {MAX_NODES:,} keys and values, counting what each alias repeats "
            f"(a full config has about 50)"
        )
    if frame[2] > MAX_CONFIG_BYTES:
        raise _RefusedYaml(
            f"line {line}: too big: more than {MAX_CONFIG_BYTES:,} characters of values, "
            f"counting what each alias repeats"
        )


class _ConfigLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` (no tags run) that refuses a key given twice in one mapping:
    YAML would keep the last one and silently drop the first (a second `model:` section
    would replace the first whole)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first_lines: dict[Any, int] = {}
            for key_node, _ in node.value:  # before merge keys (<<) are flattened in: those may be overridden
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = first_lines.get(key)
                except TypeError:  # an unhashable key: the base class explains
                    continue
                if first is not None:
                    raise _RefusedYaml(f"line {line}: duplicate key {_short_repr(key)} (first at line {first})")
                first_lines[key] = line
        return super().construct_mapping(node, deep=deep)


# --------------------------------------------------------------------------- overrides


def _parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """``"model.d_model=64"`` -> ``(("model", "d_model"), 64)``; values are YAML scalars."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text}: expected KEY=VALUE with a dotted key, e.g. --set model.d_model=64")
    try:
        value = _load_yaml(raw) if raw.strip() else None
    except _RefusedYaml as err:
        raise ConfigError(f"--set {text}: {err}") from None
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
        message = _describe_one_error(error, loc)
        where = _blame(loc, message, override_sources) or source
        messages.append(f"{where}: {message}")
    if len(messages) == 1:
        return messages[0]
    return f"{messages[0]} (and {len(messages) - 1} more: {'; '.join(messages[1:])})"


def _blame(loc: tuple[str, ...], message: str, override_sources: dict[tuple[str, ...], str]) -> str | None:
    """The override(s) at fault for an error at `loc` ("--set ..."), or None for the config file.

    The override that set the key at `loc` or one above it (train.betas for train.betas.1).
    Failing that, when `loc` is a section (a cross-field check of the whole section, such
    as model: d_model % n_heads), the overrides of keys inside it: those whose key the
    message names, or, if the message names none of the section's keys, the first. If it
    names only keys that no override set, the file is at fault.
    """
    exact = _override_at(loc, override_sources)
    if exact is not None or not loc or _section_model(loc) is None:
        return exact
    inside = [key for key in override_sources if len(key) > len(loc) and key[: len(loc)] == loc]
    if not inside:
        return None
    section = re.escape(".".join(loc))
    named = {
        key for key in _allowed_keys(loc) if re.search(rf"(?<![\w.])(?:{section}\.)?{re.escape(key)}(?!\w)", message)
    }
    if not named:
        return override_sources[inside[0]]
    blamed = dict.fromkeys(override_sources[key] for key in inside if key[len(loc)] in named)
    return " ".join(blamed) or None


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
    value = error["input"]
    bounds = _int_bounds(loc) if kind in ("int_type", "int_parsing", "int_from_float") else None
    if bounds is not None:  # say what is allowed, and whether e.g. "1e12" (a string to YAML) is too large
        low, high = bounds
        allowed = f"from {low} to {high}" if high is not None else f"of at least {low}"
        number = _as_number(value)
        off = "too large" if high is not None and number > high else "too small" if number < low else ""
        return f"{dotted} = {_short_repr(value)}: input should be an integer {allowed}" + (f" ({off})" if off else "")
    return f"{dotted} = {_short_repr(value)}: {_lowercase_first(error['msg'])}"


def _int_bounds(loc: tuple[str, ...]) -> tuple[int, int | None] | None:
    """(lowest, highest or None) allowed for the integer key at `loc`, or None if it is not one."""
    model = _section_model(loc[:-1]) if loc else None
    field = model.model_fields.get(loc[-1]) if model is not None else None
    if field is None:
        return None
    constraints, types, pending = list(field.metadata), [], [field.annotation]
    while pending:  # unwrap `X | None` and Annotated[int, ...]
        annotation = pending.pop()
        metadata = getattr(annotation, "__metadata__", ())
        for item in metadata:
            constraints += [item, *getattr(item, "metadata", ())]  # a Field(...) inside Annotated holds its own
        if metadata:
            pending.append(annotation.__origin__)
        elif annotation is int:
            types.append(int)
        else:
            pending += [arg for arg in getattr(annotation, "__args__", ()) if arg is not type(None)]
    if int not in types:
        return None
    low = max(
        [c.ge for c in constraints if hasattr(c, "ge")] + [c.gt + 1 for c in constraints if hasattr(c, "gt")],
        default=None,
    )
    high = min((c.le for c in constraints if hasattr(c, "le")), default=None)
    return None if low is None else (low, high)


def _as_number(value: Any) -> float:
    """A float or a number written as a string ("1e12"), else NaN (which compares false)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return math.nan
    try:
        return float(value)
    except (ValueError, OverflowError):
        return math.nan


def _short_repr(value: Any, limit: int = 100) -> str:
    """repr(value), cut to `limit` characters: a message stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _unknown_key_message(section_loc: tuple[str, ...], key: str) -> str:
    allowed = _allowed_keys(section_loc)
    suggestion = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"did you mean '{suggestion[0]}'?" if suggestion else f"allowed: {', '.join(allowed)}"
    return f"unknown key ({hint})"


def _section_model(loc: tuple[str, ...]) -> type[BaseModel] | None:
    """The section class at `loc` (() is the whole Config), or None if `loc` is a value (or no key)."""
    model: type[BaseModel] = Config
    for part in loc:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
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
