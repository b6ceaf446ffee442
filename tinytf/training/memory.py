"""Whether a config fits in this machine's memory, estimated from the config alone,
before anything is allocated.

Each size has its own bound (config/__init__.py), but bounds do not compose: a long task, a big
held-out set and a wide model, each within its bounds, can together need hundreds of GB.
`check_memory(setup)`, which `tinytf.training.trainer.train` calls before it draws any data or
builds the model, refuses such a config in one line, naming its largest part and the keys
behind it. The limit is `train.memory_limit_gb`, by default 80% of the machine's memory.

The estimate (float32 weights and activations, int64 token ids) adds up:

    the model           its parameters (as model/size.py counts them), their gradients and
                        the optimizer's state (AdamW keeps two moments per parameter; Muon
                        fewer: counted as AdamW), and a checkpoint of them serialised in memory
    the held-out set    task.eval_size examples of source and target ids, and the copies
                        drawing and sorting them make
    a training step     what the backward pass keeps: per token and layer about 16 D + 4 F
                        floats; every head's attention weights (with dropout the explicit
                        path keeps scores, weights, mask and dropped weights); the logits
    looking inside      evaluation's batches of held-out examples, and the attention maps
                        that head scores keep (with log.head_scores)

It errs high on purpose: it is a guard against a config that cannot run, not a profiler.
It weighs one process's need against the host's memory: a container's limit, a GPU's memory
and the other processes of a torchrun job are not counted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tinytf.config import Config, ConfigProblem
from tinytf.model.size import parameter_count, stack_depths
from tinytf.run.setup import Setup
from tinytf.training.constants import EVAL_BATCH, N_HEAD_SCORE_INPUTS

GB = 10**9  # train.memory_limit_gb counts these
FLOAT, ID = 4, 8  # bytes of a float32 and of an int64 token id
MACHINE_SHARE = 0.8  # without train.memory_limit_gb: this share of the machine's memory
FLOATS_PER_D, FLOATS_PER_F = 16, 4  # kept for backward, per token and layer (an upper bound)
ATTENTION_MAPS = 5  # (B, H, T_q, T_k) maps a layer keeps for backward
LOGITS_COPIES = 3  # the logits, their log-softmax and its gradient
MODEL_COPIES = 7  # weights, gradients, two moments, and a checkpoint of the three serialised in memory
HELD_OUT_COPIES = 5  # the held-out ids, the temporaries of drawing them, a sorted copy


@dataclass(frozen=True)
class Part:
    what: str  # "the held-out set"
    bytes: int
    keys: str  # the config keys that drive it: "task.eval_size × task.max_len"


def estimate(setup: Setup) -> list[Part]:
    """What training `setup` needs in memory, part by part."""
    config, task = setup.config, setup.task
    model = config.model
    tokens, source = setup.framing.model_lengths()  # the longest inputs
    vocab, d, f, heads = len(task.vocab), model.d_model, model.d_ff, model.n_heads
    depths = stack_depths(model)
    positions = tokens + source
    # per head: the layers over `tokens` attend to them (and to the source), the source's to itself
    attention_area = depths.over_tokens * tokens * (tokens + source) + depths.over_source * source * source
    step, held_out = setup.examples_per_step, task.held_out_size()
    evaluated = min(EVAL_BATCH, held_out)
    scored = min(N_HEAD_SCORE_INPUTS, held_out) if config.log.attention_every and config.log.head_scores else 0
    # The key the sequences' length follows: task.max_len, or a task's own first key (task.digits, task.modulus).
    length = "task.max_len" if "max_len" in task.config_keys else f"task.{(*task.config_keys, 'name')[0]}"
    return [
        Part(
            "the model and its optimizer",
            MODEL_COPIES * parameter_count(model, vocab) * FLOAT,
            "model.d_model, model.d_ff and model.n_layers",
        ),
        Part(
            "the held-out set",
            HELD_OUT_COPIES * held_out * (task.max_source_len + task.max_target_len) * ID,
            f"task.eval_size × {length}",
        ),
        Part(
            "a training step's activations",
            step * positions * depths.layers * (FLOATS_PER_D * d + FLOATS_PER_F * f) * FLOAT,
            f"train.batch_size × {length} × model.n_layers × model.d_model",
        ),
        Part(
            "a training step's attention weights",
            ATTENTION_MAPS * step * heads * attention_area * FLOAT,
            f"train.batch_size × model.n_heads × {length}² × model.n_layers",
        ),
        Part(
            "the logits",
            LOGITS_COPIES * max(step, evaluated) * tokens * vocab * FLOAT,
            f"train.batch_size or task.eval_size × {length} × the vocabulary",
        ),
        Part(
            "evaluating and scoring heads",
            (evaluated * heads * positions**2 + scored * heads * attention_area) * FLOAT,
            f"task.eval_size × model.n_heads × {length}²",
        ),
    ]


def check_memory(setup: Setup) -> None:
    """A `ConfigProblem` (one `error:` line) if `setup` needs more memory than its limit."""
    limit = memory_limit(setup.config)
    if limit is None:
        return
    allowed, reason = limit
    parts = estimate(setup)
    total = sum(part.bytes for part in parts)
    if total <= allowed:
        return
    largest = max(parts, key=lambda part: part.bytes)
    raise ConfigProblem(
        f"this config needs about {_gb(total)} of memory ({largest.what}: {_gb(largest.bytes)}; "
        f"{largest.keys}), more than the {_gb(allowed)} limit ({reason}); make it smaller or raise "
        "train.memory_limit_gb",
        "train.memory_limit_gb",
    )


def memory_limit(config: Config) -> tuple[int, str] | None:
    """The most memory `config` may need, in bytes, and where that limit comes from; None
    (no check) where it is not set and the machine's memory is unknown."""
    if config.train.memory_limit_gb is not None:
        return round(config.train.memory_limit_gb * GB), "train.memory_limit_gb"
    physical = physical_memory()
    if physical is None:
        return None
    return int(physical * MACHINE_SHARE), f"{MACHINE_SHARE:.0%} of this machine's memory"


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the OS does not say (no sysconf on Windows)."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None


def _gb(n: int) -> str:
    return f"{n / GB:,.1f} GB"
