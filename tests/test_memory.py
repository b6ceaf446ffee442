"""The memory estimate and the check that refuses a config too big for the machine: it errs
high (weights, a training step), refuses sizes that cannot fit together in one line before
anything is allocated, lets the limit key through, and passes every shipped config."""

import re
from pathlib import Path

import pytest
import torch
from conftest import CONFIGS, ROOT, assert_user_error, invoke, tiny_config

import tinytf.training.trainer
from tinytf.data.framing import get_framing
from tinytf.errors import ConfigError
from tinytf.inspect.evaluate import scored_loss
from tinytf.run.setup import Setup, build_model, load_config, load_setup
from tinytf.tasks import get_task
from tinytf.training import memory
from tinytf.training.memory import GB, check_memory, estimate

SORT_DECODER = ROOT / "configs" / "sort-decoder.yaml"
# Each within its bound, together far beyond any laptop: a million held-out examples of
# 4,094 symbols; 64 layers at the widest d_model and d_ff.
LONG_AND_MANY = ["task.max_len=4094", "model.max_len=65536", "task.eval_size=1000000"]
WIDE_AND_DEEP = ["model.d_model=8192", "model.d_ff=32768", "model.n_layers=64"]


@pytest.fixture
def machine_of_16_gb(monkeypatch):
    """A machine of 16 GB, whatever this one has: the default limit is 12.8 GB."""
    monkeypatch.setattr(memory, "physical_memory", lambda: 16 * GB)


def part(config, what):
    (found,) = [p.bytes for p in estimate(Setup.of(config)) if p.what == what]
    return found


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder-decoder"])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope"])
@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_the_model_part_holds_the_weights_gradients_moments_and_a_checkpoint(arch, positional, tie_embeddings):
    sizes = {"d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 256, "max_len": 64}
    config = tiny_config(model={**sizes, "arch": arch, "positional": positional, "tie_embeddings": tie_embeddings})
    model = build_model(config, len(get_task(config.task).vocab))
    parameters = sum(p.numel() for p in model.parameters())
    assert part(config, "the model and its optimizer") == 7 * parameters * 4  # 7 float32 copies of each


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder-decoder"])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_training_step_keeps_no_more_than_its_estimate(arch, dropout):
    """What autograd saves for the backward pass of one step, counted tensor by tensor."""
    config = tiny_config(task={"min_len": 2, "max_len": 30}, model={"arch": arch, "d_model": 32, "dropout": dropout})
    task = get_task(config.task)
    model = build_model(config, len(task.vocab)).train()
    batch = get_framing(task, arch).frame(task.sample(config.train.batch_size, torch.Generator()))
    weights = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    saved = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        scored_loss(model(**batch.model_inputs()), batch.labels)
    step = ("a training step's activations", "a training step's attention weights", "the logits")
    estimated = sum(part(config, what) for what in step)
    # an upper bound, and not a loose one: 2 to 4 times what is saved (a config refused for an
    # estimate far too high would be a config the machine could train)
    assert estimated / 5 <= sum(saved.values()) <= estimated


@pytest.mark.parametrize(
    ("overrides", "largest"),
    [(LONG_AND_MANY, "a training step's attention weights"), (WIDE_AND_DEEP, "the model and its optimizer")],
)
def test_sizes_that_cannot_fit_together_are_refused_before_anything_is_allocated(
    overrides, largest, tmp_path, monkeypatch, machine_of_16_gb
):
    def allocates(*args, **kwargs):
        raise AssertionError("the config was let through: training started to allocate")

    monkeypatch.setattr(tinytf.training.trainer, "TaskData", allocates)
    monkeypatch.setattr(Setup, "build_model", allocates)
    args = [arg for override in overrides for arg in ("--set", override)]
    result = invoke("train", SORT_DECODER, *args, "--runs-dir", tmp_path / "runs")
    assert_user_error(result, f"({largest}: ")
    assert result.stderr.startswith("error: this config needs about ")
    assert result.stderr.rstrip().endswith(
        "more than the 12.8 GB limit (80% of this machine's memory); make it smaller or raise train.memory_limit_gb"
    )
    assert not (tmp_path / "runs").exists()


def test_the_limit_key_decides_when_set(machine_of_16_gb):
    with pytest.raises(ConfigError, match="the model and its optimizer"):
        check_memory(load_setup(SORT_DECODER, WIDE_AND_DEEP))
    check_memory(load_setup(SORT_DECODER, [*WIDE_AND_DEEP, "train.memory_limit_gb=1e6"]))
    with pytest.raises(ConfigError, match=r"more than the 0\.0 GB limit \(train\.memory_limit_gb\)"):
        check_memory(load_setup(SORT_DECODER, ["train.memory_limit_gb=1e-5"]))


def test_a_machine_that_does_not_say_its_memory_is_not_checked(monkeypatch):
    monkeypatch.setattr(memory, "physical_memory", lambda: None)
    config = load_config(SORT_DECODER, WIDE_AND_DEEP)
    assert memory.memory_limit(config) is None
    check_memory(Setup.of(config))


@pytest.mark.parametrize("path", [*CONFIGS, ROOT / "tinytf" / "quickstart.yaml"], ids=lambda p: Path(p).name)
def test_every_shipped_config_fits_a_small_laptop(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # text-decoder reads README.md
    monkeypatch.setattr(memory, "physical_memory", lambda: 4 * GB)
    config = load_config(path)
    assert sum(p.bytes for p in estimate(Setup.of(config))) < 0.5 * GB
    check_memory(Setup.of(config))


@pytest.mark.parametrize("config", ["grokking.yaml", "add-decoder.yaml", "sort-decoder.yaml"])
def test_a_refusal_names_only_keys_the_task_uses(config):
    """modular-add has no task.max_len: its refusal names the keys it has."""
    setup = load_setup(ROOT / "configs" / config, ["train.memory_limit_gb=1e-6"])
    with pytest.raises(ConfigError) as raised:
        check_memory(setup)
    named = set(re.findall(r"task\.(\w+)", str(raised.value)))
    assert named and named <= {*setup.task.config_keys, "eval_size"}, str(raised.value)
