"""Every public function of docs/python-api.md checks what it is given: a wrong type, shape
or range, or an empty input, is a TypeError or ValueError that names the argument, raised
before any work is done (docs/guarantees.md).

Hypothesis draws, for one argument at a time, values that argument must refuse (anything
of another type, numbers outside its range, tensors of other shapes and dtypes), with every
other argument valid. Derandomized: CI tests the same examples every time.
"""

import re

import pytest
import torch
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinytf
from tinytf.attend import attention_report
from tinytf.data import TaskData
from tinytf.evaluate import predict
from tinytf.fourier import frequency_norms
from tinytf.heads import head_scores
from tinytf.inspect.fourier import top_share
from tinytf.inspect.patching import BY
from tinytf.interop import export, to_transformer_lens
from tinytf.model import Transformer
from tinytf.patching import Prompts, attribute, patch, prompts_of
from tinytf.run.load import LoadedRun
from tinytf.tasks import get_task
from tinytf.tasks.base import MinimalPair, Pairs

API = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

CONFIG = tinytf.load_config(
    ROOT / "configs" / "quickstart.yaml", overrides=["model.d_model=16", "model.n_heads=2", "model.d_ff=32"]
)
TASK = get_task(CONFIG.task)
MODEL = tinytf.build_model(CONFIG).eval()
V = MODEL.vocab_size
FRAMING = tinytf.run.setup.Setup.of(CONFIG, data=False).framing
PAIRS = TASK.held_out_pairs("subject", 2)
GROUPS = prompts_of(FRAMING, PAIRS, CONFIG.model.max_len)
TOKENS = GROUPS[0].clean[:1]
EXAMPLES = TASK.sample(3, torch.Generator().manual_seed(0))
RUN = LoadedRun(ROOT, CONFIG, TASK, FRAMING, MODEL, 0)


# --------------------------------------------------------------------------- values to refuse


def tensors(dtypes=(torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.int8)):
    """Small tensors of any of `dtypes`, of 0 to 3 dimensions, empty ones included."""
    shapes = st.lists(st.integers(0, 3), max_size=3)
    return st.builds(lambda dtype, shape: torch.zeros(shape, dtype=dtype), st.sampled_from(dtypes), shapes)


ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.binary(max_size=4),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    tensors(),
)


def but_not(*kinds):
    """Anything that is not one of `kinds` (a bool is refused where an int is asked)."""
    return ANYTHING.filter(lambda value: isinstance(value, bool) or not isinstance(value, kinds))


def not_a_number(low=0, high=None):
    """Whole numbers outside [low, high], and values that are no whole number at all."""
    outside = st.integers(max_value=low - 1)
    if high is not None:
        outside = outside | st.integers(min_value=high + 1)
    numbers = ANYTHING.filter(lambda value: isinstance(value, bool) or not isinstance(value, int | torch.Tensor))
    float_tensors = tensors((torch.float32, torch.float64)) | tensors((torch.int64,)).filter(lambda t: t.numel() != 1)
    return outside | numbers | float_tensors


def not_one_of(*choices):
    return ANYTHING.filter(lambda value: isinstance(value, bool) or value not in choices)


def _not_none(value):
    return value is not None


def _is_prompt(t):
    """Whether tensor `t` could be one prompt's ids: (1, T) of an id dtype."""
    return t.dtype in (torch.long, torch.int) and t.dim() == 2 and t.size(0) == 1 and t.size(1) > 0


def not_prompt_tokens():
    """Anything but a (1, T) tensor of ids in the vocabulary."""
    bad_ids = st.integers(1, 4).flatmap(
        lambda length: st.sampled_from([-1, V, V + 100]).map(lambda bad: torch.full((1, length), bad))
    )
    two_rows = st.integers(2, 3).map(lambda rows: TOKENS.repeat(rows, 1))
    return but_not(torch.Tensor) | tensors().filter(lambda t: not _is_prompt(t)) | bad_ids | two_rows


def bad_devices():
    """What torch.device cannot read (an int is a CUDA device's index: it is not drawn)."""
    return st.sampled_from(["gpu", "cuda:x", "", "cpu:-5", "tpu0"]) | but_not(str, int) | st.just(True)


def broken_groups():
    """Lists of Prompts whose rows disagree in shape, or whose answers are not ids of the vocabulary."""
    good = GROUPS[0]
    rows, length = good.clean.shape

    def prompts(**changes):
        return [Prompts(**{**good.__dict__, **changes})]

    return st.one_of(
        st.just([]),
        st.lists(but_not(Prompts), min_size=1, max_size=2),
        but_not(list, tuple),
        st.integers(1, 3).map(lambda extra: prompts(corrupt=good.corrupt[:, : max(length - extra, 1)])),
        st.integers(rows + 1, rows + 3).map(lambda n: prompts(answer=torch.zeros(n, dtype=torch.long))),
        st.sampled_from([-1, V, 10 * V]).map(lambda bad: prompts(wrong=torch.full((rows,), bad))),
        tensors()
        .filter(lambda t: t.shape != good.clean.shape or t.dtype != torch.long)
        .map(lambda t: prompts(clean=t)),
    )


def not_an_embedding():
    """Anything but a non-empty (p, D) floating-point tensor."""
    wrong_shape = tensors((torch.float32,)).filter(lambda t: t.dim() != 2 or t.numel() == 0)
    return but_not(torch.Tensor) | wrong_shape | tensors((torch.int64, torch.bool)).filter(lambda t: t.dim() == 2)


# --------------------------------------------------------------------------- the functions, one argument at a time

# (argument name, call with the drawn value in that argument's place, values to refuse)
CASES = {
    "attribute.model": ("model", lambda v: attribute(v, TOKENS, 1, 2), but_not(Transformer)),
    "attribute.tokens": ("tokens", lambda v: attribute(MODEL, v, 1, 2), not_prompt_tokens()),
    "attribute.answer": ("answer", lambda v: attribute(MODEL, TOKENS, v, 2), not_a_number(high=V - 1)),
    "attribute.wrong": ("wrong", lambda v: attribute(MODEL, TOKENS, 1, v), not_a_number(high=V - 1)),
    "patch.groups": ("groups", lambda v: patch(MODEL, v), broken_groups()),
    "patch.by": ("by", lambda v: patch(MODEL, GROUPS, by=v), not_one_of(*BY)),
    "prompts_of.framing": ("framing", lambda v: prompts_of(v, PAIRS, 32), but_not()),
    "prompts_of.pairs": (
        "pairs",
        lambda v: prompts_of(FRAMING, v, 32),
        st.just([]) | but_not(list, tuple) | st.lists(but_not(MinimalPair), min_size=1, max_size=2),
    ),
    "prompts_of.max_len": ("max_len", lambda v: prompts_of(FRAMING, PAIRS, v), not_a_number(low=1)),
    "frequency_norms.embedding": ("embedding", frequency_norms, not_an_embedding()),
    "top_share.norms": (
        "norms",
        top_share,
        but_not(list, tuple, torch.Tensor)
        | st.just([])
        | tensors().filter(lambda t: t.dim() != 1 or t.numel() == 0 or not t.dtype.is_floating_point),
    ),
    "top_share.k": ("k", lambda v: top_share([1.0, 2.0], v), not_a_number(low=1)),
    "TaskData.task": ("task", lambda v: TaskData(v, 0), but_not()),
    "TaskData.seed": ("seed", lambda v: TaskData(TASK, v), not_a_number(high=2**63 - 1)),
    "TaskData.eval_size": ("eval_size", lambda v: TaskData(TASK, 0, v), not_a_number(low=1).filter(_not_none)),
    "TaskData.train_pairs": ("n", lambda v: TaskData(TASK, 0, 8).train_pairs(v), not_a_number(low=1)),
    "Task.sample.n": ("n", lambda v: TASK.sample(v, torch.Generator()), not_a_number()),
    "Task.sample.generator": ("generator", lambda v: TASK.sample(2, v), but_not(torch.Generator)),
    "Task.held_out_pairs.construction": ("construction", lambda v: TASK.held_out_pairs(v, 2), not_one_of("subject")),
    "Task.held_out_pairs.n": ("n", lambda v: TASK.held_out_pairs("subject", v), not_a_number(low=1)),
    "Task.held_out_pairs.seed": (
        "seed",
        lambda v: TASK.held_out_pairs("subject", 2, v),
        not_a_number(high=2**63 - 1),
    ),
    "Task.held_out_pairs.held_out": (
        "held_out",
        lambda v: TASK.held_out_pairs("subject", 2, 0, v),
        but_not(Pairs).filter(_not_none),
    ),
    "train.config": ("config", lambda v: tinytf.train(v, runs_dir="unused"), but_not()),
    "train.runs_dir": ("runs_dir", lambda v: tinytf.train(CONFIG, runs_dir=v), but_not(str)),
    "train.name": ("name", lambda v: tinytf.train(CONFIG, runs_dir="unused", name=v), but_not(str)),
    "train.resume": ("resume", lambda v: tinytf.train(CONFIG, resume=v), but_not(str).filter(_not_none)),
    "train.loggers": (
        "loggers",
        lambda v: tinytf.train(CONFIG, runs_dir="unused", loggers=v),
        but_not(list, tuple) | st.lists(but_not(), min_size=1, max_size=2),
    ),
    "build_model.config": ("config", tinytf.build_model, but_not(dict)),
    "build_model.vocab_size": (
        "vocab_size",
        lambda v: tinytf.build_model(CONFIG, v),
        not_a_number(low=1).filter(_not_none),
    ),
    "load_config.path": ("path", tinytf.load_config, but_not(str)),
    "load_config.overrides": (
        "overrides",
        lambda v: tinytf.load_config(ROOT / "configs" / "quickstart.yaml", v),
        but_not(list, tuple, dict).filter(lambda v: not isinstance(v, torch.Tensor) or v.dim() == 0 or v.numel())
        | st.lists(but_not(str), min_size=1, max_size=2),
    ),
    "load_run.run_dir": ("run_dir", tinytf.load_run, but_not(str).filter(_not_none)),
    "load_run.which": ("which", lambda v: tinytf.load_run("unused", v), not_one_of("best", "last")),
    "load_run.device": ("device", lambda v: tinytf.load_run("unused", device=v), bad_devices()),
    "predict.texts": (
        "texts",
        lambda v: predict(MODEL, FRAMING, v),
        but_not(list, tuple) | st.lists(but_not(str), min_size=1, max_size=2),
    ),
    "export.run": ("run", lambda v: export(v, "safetensors", "unused.safetensors"), but_not()),
    "export.to": ("to", lambda v: export(RUN, v, "unused.safetensors"), not_one_of("safetensors", "transformer-lens")),
    "export.out": ("out", lambda v: export(RUN, "safetensors", v), but_not(str)),
    "load_exported.path": ("path", tinytf.load_exported, but_not(str)),
    "load_exported.device": ("device", lambda v: tinytf.load_exported("unused", v), bad_devices()),
    "to_transformer_lens.run": ("run", to_transformer_lens, but_not()),
    "attention_report.text": ("text", lambda v: attention_report(MODEL, FRAMING, v), but_not(str)),
    "typed_batch.text": ("text", lambda v: FRAMING.typed_batch(MODEL, v), but_not(str)),
    "head_scores.pairs": ("pairs", lambda v: head_scores(MODEL, FRAMING, v), but_not(Pairs).filter(_not_none)),
    "head_scores.ablate": (
        "ablate",
        lambda v: head_scores(MODEL, FRAMING, EXAMPLES, ablate=v),
        not_one_of(None, "zero", "mean"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@API
@given(data=st.data())
def test_a_public_function_refuses_a_wrong_argument_naming_it(case, data):
    name, call, wrong = CASES[case]
    value = data.draw(wrong, label=name)
    with pytest.raises((TypeError, ValueError)) as raised:
        call(value)
    assert re.search(rf"(?<![\w.]){re.escape(name)}\b", str(raised.value)), f"{case}: {raised.value!r}"
