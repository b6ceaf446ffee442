"""One typed config tree, loaded from YAML, validated once.

A config file only states what differs from the defaults below:

    model:
      arch: decoder
      d_model: 64

`read_config(path, overrides)` reads the file (with `tinytf.config.plain_yaml`: no code is ever
executed), applies dotted overrides such as ``model.d_model=64`` and validates the result
into frozen models (pydantic). Every mistake becomes a `ConfigError` whose one line names
the file and line (or the `--set` at fault), the key and what is wrong, e.g.::

    configs/x.yaml: line 2: model.d_modle: unknown key (did you mean 'd_model'?)
    configs/x.yaml: line 3: train.batch_size: Input should be less than or equal to 65536

Every size has an upper bound (the comments below give the reason for each). A config
file is a regular file of at most `MAX_CONFIG_BYTES`; its YAML has no anchors or aliases,
no deep nesting and no key twice in one mapping (see `tinytf.config.plain_yaml`).

This module is a pure schema that knows no task; of tinytf it imports only the error
types and the file and YAML readers. The checks that need the task registry (the task
exists, fits the architecture, uses the keys set, fits model.max_len) live one layer up,
in `tinytf.run.setup`, and run through the `check` hook of the readers below: use
`tinytf.load_config`, which does both.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, Strict, ValidationError, model_validator

from tinytf.config.keys import KeyTree, Sources, kind, parse_override
from tinytf.config.plain_yaml import Lines, parse_yaml_text, read_yaml_file
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
MAX_CONFIG_BYTES = 100_000  # a config file's size: one with every key is about 1 KB

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
    `tinytf.run.setup`). `keys` are the dotted keys at fault: the message then names
    the file or the `--set` that gave them."""

    def __init__(self, message: str, *keys: str) -> None:
        super().__init__(message)
        self.keys = keys


Check = Callable[["Config"], None]  # raises ConfigProblem


class _SectionCheck(ValueError):
    """A cross-field check of one section failing; `keys` are the section's keys it is
    about, so that an override of one of them is named as the one at fault."""

    def __init__(self, message: str, *keys: str) -> None:
        super().__init__(message)
        self.keys = keys


# The longest example, in tokens, a task may produce: data/heldout.py fingerprints each example
# (to keep held-out examples out of training) with this many weights.
MAX_EXAMPLE_TOKENS = 4096
DEFAULT_EVAL_SIZE = 1000  # held-out examples when task.eval_size is unset
MAX_SEED = 2**63 - 1  # torch's seeds are 64-bit signed


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
    # modular-add: (a + b) mod modulus, trained on a fixed, seeded train_fraction of the
    # modulus² pairs; the rest is held out. A million pairs at most.
    modulus: Annotated[int, Strict(), Field(ge=2, le=1000)] = 113
    train_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.3
    # Held-out examples, disjoint from training; unset: DEFAULT_EVAL_SIZE, or all a fixed table leaves
    # out. Drawn at once, evaluated at every eval: a million default-sized ones take 0.5 s and 200 MB.
    eval_size: Annotated[PositiveInt, Field(le=1_000_000)] | None = None


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
    # LayerNorm placement: "post" is the original Transformer (x = LN(x + f(x))), "pre"
    # normalises the sublayer's input (x = x + f(LN(x))) and trains more easily; "none" has no LayerNorm.
    norm: Literal["pre", "post", "none"] = "pre"
    positional: Positional = "sinusoidal"
    # The positional tables hold max_len x d_model numbers (the sinusoidal one is built
    # in float64): 65,536 positions at the default width take 64 MB.
    max_len: PositiveInt = Field(256, le=65_536)
    tie_embeddings: Bool = True

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        if self.d_model % self.n_heads:
            raise _SectionCheck(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads} "
                f"(each head gets d_model / n_heads dimensions)",
                "d_model",
                "n_heads",
            )
        if self.positional == "rope" and self.head_dim % 2:
            raise _SectionCheck(
                f"positional=rope needs an even head width, but d_model / n_heads = {self.head_dim}",
                "positional",
                "d_model",
                "n_heads",
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


MAX_BATCH = 65_536


def _examples_or_all(value: object) -> int | str:
    """train.batch_size: a number of examples in 1..MAX_BATCH, or "all" (checked here, so
    that a wrong value gets one message rather than one per accepted type)."""
    if value == "all":
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("Input should be a valid integer, or all")
    if not 0 < value <= MAX_BATCH:
        raise ValueError(
            "Input should be greater than 0" if value <= 0 else f"Input should be less than or equal to {MAX_BATCH}"
        )
    return value


class TrainConfig(Section):
    """The optimisation loop."""

    steps: PositiveInt = Field(2000, le=MAX_STEPS)
    # Examples per step, drawn and framed at once: 65,536 default-sized ones take a few MB,
    # but the activations grow with batch_size x length x d_model. all: every step trains on
    # the whole training set of a task that has a fixed one (modular-add): full-batch training.
    batch_size: Annotated[int | Literal["all"], PlainValidator(_examples_or_all)] = 64
    # adamw: AdamW on every weight. muon: Muon on the hidden matrices (attention and
    # feed-forward projections), AdamW on the rest, both at `lr` (tinytf/training/optim.py).
    optimizer: Literal["adamw", "muon"] = "adamw"
    lr: Annotated[float, Field(gt=0.0)] = 1e-3
    warmup_steps: NonNegativeInt = Field(100, le=MAX_STEPS)
    # After the warm-up: cosine decay to lr / 10, or the constant lr (as grokking studies train).
    schedule: Literal["cosine", "constant"] = "cosine"
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
    # Keep the weights at steps 0, N, 2N, ... and the last as checkpoints/step-<k>.pt, to
    # look inside the model over training (tinytf heads --over-training). None: keep none.
    snapshot_every: Annotated[PositiveInt, Field(le=MAX_STEPS)] | None = None
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    # bf16: the training step's forward pass under torch.autocast(bfloat16), on a CPU or CUDA;
    # weights, optimizer, loss and evaluation stay float32. auto: bf16 on CUDA GPUs from Ampere
    # on, float32 on CPUs and MPS (a torchrun job: bf16 only if every process takes it).
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # Stop early once validation sequence accuracy reaches this fraction.
    stop_at_accuracy: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    compile: Bool = False
    # Refuse, before allocating anything, a config whose estimated memory (tinytf/training/memory.py) exceeds
    # this many GB (10^9 bytes; a million: a petabyte). None: 80% of this machine's memory, if known.
    memory_limit_gb: Annotated[float, Field(gt=0.0, le=1e6)] | None = None

    @model_validator(mode="after")
    def _check_schedule(self) -> TrainConfig:
        if self.schedule == "constant" and self.decay_steps is not None:
            raise _SectionCheck(
                f"decay_steps={self.decay_steps} with schedule=constant, which does not decay; unset decay_steps "
                f"or use schedule=cosine",
                "decay_steps",
                "schedule",
            )
        return self


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
    seed: Int = Field(0, ge=0, le=MAX_SEED)

    def to_dict(self) -> dict[str, Any]:
        """Plain, YAML-ready data: `config_from_dict(c.to_dict()) == c`."""
        return self.model_dump(mode="json")


# --------------------------------------------------------------------------- loading

KEYS = KeyTree(Config)  # the dotted keys overrides set and errors name


def read_config(path: str | Path, overrides: Iterable[str] = (), check: Check | None = None) -> Config:
    """Read a YAML config file, apply ``KEY=VALUE`` overrides, validate, then run `check`.

    Raises `ConfigError` with a one-line message for every user mistake.
    """
    return config_variants(path, check)(overrides)


def config_variants(path: str | Path, check: Check | None = None) -> Callable[[Iterable[str]], Config]:
    """Read a YAML config file once: the function returned validates it with a set of
    overrides (see `read_config`), as a sweep does for each of its settings."""
    data, lines = _read_document(path)
    return lambda overrides: _validate(data, overrides, str(path), check, lines)


def parse_config(
    text: str, overrides: Iterable[str] = (), source: str = "<config>", check: Check | None = None
) -> Config:
    """Validate a YAML document (see `read_config`); `source` names it in errors."""
    data, lines = _parse_document(text, source)
    return _validate(data, overrides, source, check, lines)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A config file's mapping of sections, unvalidated; a file that `read_regular_file`
    refuses (a FIFO, a device, one over `MAX_CONFIG_BYTES`...) is a `ConfigError`."""
    return _read_document(path)[0]


def config_from_dict(
    data: Mapping[str, Any], overrides: Iterable[str] = (), source: str = "<dict>", check: Check | None = None
) -> Config:
    """Validate plain data shaped like the YAML file into a `Config`, then run `check`."""
    return _validate(data, overrides, source, check, {})


def dump_config(config: Config, task_keys: Collection[str] | None = None) -> str:
    """The config as YAML, every key with its value (defaults included). `task_keys`,
    if given, are the task section's keys to keep (the ones its task uses)."""
    data = config.to_dict()
    if task_keys is not None:
        data["task"] = {key: value for key, value in data["task"].items() if key in task_keys}
    return yaml.safe_dump(data, sort_keys=False)


def _read_document(path: str | Path) -> tuple[dict[str, Any], Lines]:
    return _sections(*read_yaml_file(path, "config file", MAX_CONFIG_BYTES), str(path))


def _parse_document(text: str, source: str) -> tuple[dict[str, Any], Lines]:
    """The document's mapping of sections, and the line of each key in it."""
    if len(text) > MAX_CONFIG_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: the config is longer than {MAX_CONFIG_BYTES:,} bytes; is it the right file?")
    return _sections(*parse_yaml_text(text, source), source)


def _sections(data: Any, lines: Lines, source: str) -> tuple[dict[str, Any], Lines]:
    if data is None:  # an empty file means "all defaults"
        data = {}
    if not isinstance(data, dict):
        sections = ", ".join(Config.model_fields)
        raise ConfigError(f"{source}: expected a mapping of sections ({sections}), got {kind(data)}")
    return data, lines


def _validate(
    data: Mapping[str, Any], overrides: Iterable[str], source: str, check: Check | None, lines: Lines
) -> Config:
    """Apply the overrides, validate, run `check`; each error names the `--set` at fault,
    or `source` and the line of the key in it (`lines`)."""
    data = _deep_copy(data)
    override_sources: Sources = {}
    for text in overrides:
        key_path, value = parse_override(text)
        KEYS.set_dotted(data, key_path, value, text)
        override_sources[key_path] = f"--set {text}"
    try:
        config = Config.model_validate(data)
    except ValidationError as err:
        messages = [KEYS.describe_error(error, source, lines, override_sources) for error in err.errors()]
        more = f" (and {len(messages) - 1} more: {'; '.join(messages[1:])})" if len(messages) > 1 else ""
        raise ConfigError(messages[0] + more) from None
    if check is not None:
        try:
            check(config)
        except ConfigProblem as problem:
            locs = [tuple(key.split(".")) for key in problem.keys]
            raise ConfigError(f"{KEYS.where(locs, (), source, lines, override_sources)}: {problem}") from None
    return config


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _deep_copy(value) if isinstance(value, Mapping) else value for key, value in data.items()}
