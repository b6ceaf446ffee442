"""The training loop, run folders and checkpoints, through the library API."""

import itertools
import math
import os
import pickle

import pytest
import torch
from conftest import CtrlCAt, read_metrics, tiny_config

from tinytf import training
from tinytf.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tinytf.config import config_from_dict
from tinytf.data import TaskData
from tinytf.distributed import OneProcess
from tinytf.errors import UserError
from tinytf.framing import get_framing
from tinytf.loggers import RecordingLogger
from tinytf.model import build_model
from tinytf.runs import checkpoint_path, create_run_dir, load_run, newest_run
from tinytf.tasks import get_task
from tinytf.training import (
    Trainer,
    _assemble,
    learning_rate_factor,
    make_optimizer,
    select_device,
    step_precision,
    train,
)


def final_weights(run_dir):
    return load_checkpoint(checkpoint_path(run_dir, "last"))["model"]


def assert_same_weights(expected, actual):
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


def test_a_run_folder_holds_everything(tmp_path):
    result = train(tiny_config(), runs_dir=tmp_path, name="sort")
    run_dir = result.run_dir
    assert run_dir.parent == tmp_path and run_dir.name.startswith("sort-")
    assert result.step == 12 and not result.interrupted
    for name in ("config.yaml", "vocab.json", "checkpoints/last.pt", "checkpoints/best.pt", "metrics.jsonl"):
        assert (run_dir / name).is_file(), name
    assert list(run_dir.glob("events.out.tfevents.*"))
    records = read_metrics(run_dir)
    assert {r["split"] for r in records} == {"train", "val"}
    for record in records:
        assert {"step", "split", "loss", "token_acc", "seq_acc", "lr", "tokens_per_s"} <= set(record)
    assert [r["step"] for r in records if r["split"] == "val"] == [4, 8, 12]
    assert load_checkpoint(checkpoint_path(run_dir, "last"))["step"] == 12
    assert load_run(run_dir, "best").step == result.best["step"]


def test_tensorboard_events_hold_scalars_and_attention_images(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = train(tiny_config(train={"betas": [0.9, 0.98]}), runs_dir=tmp_path).run_dir
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    from tensorboard.plugins.hparams import plugin_data_pb2

    hparams = {}
    for content in events.PluginTagToContent("hparams").values():
        session = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
        hparams.update({key: value.string_value or value.number_value for key, value in session.hparams.items()})
    assert hparams["train.betas"] == "[0.9, 0.98]" and hparams["model.d_model"] == 16
    scalars = set(events.Tags()["scalars"])
    for tag in (
        "train/loss",
        "train/token_acc",
        "train/lr",
        "train/grad_norm",
        "train/tokens_per_s",
        "val/loss",
        "val/token_acc",
        "val/seq_acc",
    ):
        assert tag in scalars, tag
    images = [tag for tag in events.Tags()["images"] if "attention" in tag]
    assert "attention/sample0/decoder.0.self" in images
    assert [event.step for event in events.Images("attention/sample0/decoder.0.self")] == [6, 12]


def test_encoder_decoder_runs_log_cross_attention(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = tiny_config(model={"arch": "encoder-decoder"}, train={"steps": 6})
    run_dir = train(config, runs_dir=tmp_path).run_dir
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    events.Reload()
    assert {
        "attention/sample0/encoder.0.self",
        "attention/sample0/decoder.0.self",
        "attention/sample0/decoder.0.cross",
    } <= set(events.Tags()["images"])


def test_training_is_deterministic_on_cpu(tmp_path):
    first = train(tiny_config(), runs_dir=tmp_path / "a").run_dir
    second = train(tiny_config(), runs_dir=tmp_path / "b").run_dir
    losses = [[r["loss"] for r in read_metrics(run)] for run in (first, second)]
    assert losses[0] == losses[1]
    other_seed = train(tiny_config(seed=1), runs_dir=tmp_path / "c").run_dir
    assert [r["loss"] for r in read_metrics(other_seed)] != losses[0]


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_ctrl_c_then_resume_ends_with_the_same_weights(optimizer, tmp_path):
    config = tiny_config(train={"optimizer": optimizer})
    uninterrupted = train(config, runs_dir=tmp_path / "a")

    stopped = train(config, runs_dir=tmp_path / "b", loggers=[CtrlCAt(5)])
    assert stopped.interrupted and stopped.step == 5
    assert load_checkpoint(checkpoint_path(stopped.run_dir, "last"))["step"] == 5
    resumed = train(config, resume=stopped.run_dir)
    assert resumed.run_dir == stopped.run_dir and resumed.step == 12 and not resumed.interrupted

    assert_same_weights(final_weights(uninterrupted.run_dir), final_weights(resumed.run_dir))


def test_a_resumed_run_takes_the_optimizer_settings_of_its_config(tmp_path):
    """The checkpoint gives the optimizer's state; train.lr, betas and weight decay come
    from the resumed config, as in a fresh run with those settings."""
    stopped = train(tiny_config(), runs_dir=tmp_path / "a", loggers=[CtrlCAt(6)])
    changed = {"lr": 0.02, "betas": [0.8, 0.9], "weight_decay": 0.5}
    resumed = train(tiny_config(train=changed), resume=stopped.run_dir)
    fresh = train(tiny_config(train=changed), runs_dir=tmp_path / "b")
    rates = [
        {r["step"]: r["lr"] for r in read_metrics(run.run_dir) if r["split"] == "train" and r["step"] > 6}
        for run in (resumed, fresh)
    ]
    assert rates[0] == rates[1] and len(rates[0]) == 3  # steps 8, 10, 12
    groups = load_checkpoint(checkpoint_path(resumed.run_dir, "last"))["optimizer"]["param_groups"]
    assert [g["betas"] for g in groups] == [(0.8, 0.9)] * 2 and groups[0]["weight_decay"] == 0.5


def test_stop_at_accuracy_stops_at_the_first_evaluation_that_reaches_it(tmp_path):
    # Tuned to learn fast: the 0.1 exact-match threshold is first reached at step 60 of 300 (seed 0 on CPU).
    settings = {"steps": 300, "eval_every": 10, "lr": 0.01, "batch_size": 16, "stop_at_accuracy": 0.1}
    result = train(tiny_config(train=settings, log={"every": 5}), runs_dir=tmp_path)
    records = read_metrics(result.run_dir)
    reached = [r for r in records if r["split"] == "val" and r["seq_acc"] >= 0.1]
    assert reached, "the threshold was never reached: the test needs a faster-learning config"
    first = reached[0]
    assert first["step"] < 300  # otherwise stopping there would prove nothing
    assert result.step == first["step"] and not result.interrupted
    assert result.final["seq_acc"] == first["seq_acc"]
    assert max(r["step"] for r in records) == first["step"]  # no train or val row after the stop
    assert load_checkpoint(checkpoint_path(result.run_dir, "last"))["step"] == first["step"]


def test_runs_never_share_a_folder(tmp_path):
    folders = {create_run_dir(tmp_path, "same") for _ in range(5)}
    assert len(folders) == 5 and all(folder.is_dir() for folder in folders)


def test_newest_run_and_missing_runs(tmp_path):
    with pytest.raises(UserError, match="no runs in"):
        newest_run(tmp_path)
    result = train(tiny_config(train={"steps": 2}), runs_dir=tmp_path)
    assert newest_run(tmp_path) == result.run_dir


def test_checkpoint_writes_are_atomic(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint({"step": 1, "weights": torch.ones(3)}, path)

    def crash_midway(obj, file, *args, **kwargs):
        file.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash_midway)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"step": 2, "weights": torch.zeros(3)}, path)
    assert load_checkpoint(path)["step"] == 1  # the previous checkpoint survives whole
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # and no temporary file is left


class Payload:
    """Unpickling this runs a command: what a tampered checkpoint would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_tampered_checkpoint_is_refused_without_running_its_code(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    with open(path, "wb") as file:
        pickle.dump({"format": "tinytf-checkpoint-1", "model": Payload(marker)}, file)
    with pytest.raises(CheckpointError, match="not a tinytf checkpoint: it holds Python objects"):
        load_checkpoint(path)
    assert not marker.exists()
    # ...and the same through torch's own zip format
    torch.save({"format": "tinytf-checkpoint-1", "model": Payload(marker)}, path)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)
    assert not marker.exists()


def test_other_files_are_not_checkpoints(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"\x00not torch")
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"step": 3}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a tinytf checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_learning_rate_warms_up_then_decays():
    factors = [learning_rate_factor(step, 10, 100) for step in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(factors[10:]))
    assert factors[-1] == pytest.approx(0.1, abs=1e-3)


def test_a_shorter_decay_ends_early_and_then_holds_a_tenth(tmp_path):
    factors = [learning_rate_factor(step, 10, 50) for step in range(100)]
    assert factors[30] < learning_rate_factor(30, 10, 100)
    assert factors[50:] == pytest.approx([0.1] * 50)
    # The trainer's optimizer follows train.decay_steps, and train.steps still ends the run.
    result = train(tiny_config(train={"steps": 12, "warmup_steps": 2, "decay_steps": 6, "lr": 1e-2}), runs_dir=tmp_path)
    assert result.step == 12
    logged = [(row["step"], row["lr"]) for row in read_metrics(result.run_dir) if "lr" in row]
    after_the_decay = [lr for step, lr in logged if 6 <= step < 12]  # over train.steps, lr would still fall here
    assert after_the_decay and after_the_decay == pytest.approx([1e-3] * len(after_the_decay))


def test_unavailable_device_is_a_user_error():
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no cuda device"):
            select_device("cuda")
    assert select_device("cpu").type == "cpu"


def test_precision_auto_is_bf16_where_the_hardware_multiplies_bf16(monkeypatch):
    cpu, cuda, mps = torch.device("cpu"), torch.device("cuda"), torch.device("mps")
    for native in (True, False):
        monkeypatch.setattr(training, "cpu_multiplies_bf16", lambda native=native: native)
        monkeypatch.setattr(training, "gpu_multiplies_bf16", lambda native=native: not native)
        expected = ["bf16", "fp32", "fp32"] if native else ["fp32", "bf16", "fp32"]
        assert [step_precision(device, "auto") for device in (cpu, cuda, mps)] == expected
    assert step_precision(cpu, "bf16") == "bf16" and step_precision(cuda, "fp32") == "fp32"
    with pytest.raises(UserError, match="precision=bf16 runs on cpu or cuda"):
        step_precision(mps, "bf16")


class AnotherProcessSaysYes(OneProcess):
    """A job in which some other process answers True to every `any` question."""

    def any(self, flag: bool) -> bool:
        return True


def test_a_job_takes_bf16_only_if_every_process_chose_it(monkeypatch):
    """auto on a machine that multiplies bf16: bf16 alone, float32 (the step and Muon's
    orthogonalisation) when another process of the job chose float32."""
    monkeypatch.setattr(training, "cpu_multiplies_bf16", lambda: True)
    config = tiny_config(train={"precision": "auto", "optimizer": "muon"})
    alone = _assemble(config, None, (), OneProcess())
    assert alone.precision == "bf16" and alone.optimizer.parts[0].dtype == torch.bfloat16
    in_a_job = _assemble(config, None, (), AnotherProcessSaysYes())
    assert in_a_job.precision == "fp32" and in_a_job.optimizer.parts[0].dtype == torch.float32


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_step_multiplies_in_its_precision_and_keeps_float32_weights(precision, tmp_path):
    config = tiny_config(train={"precision": precision, "steps": 4, "optimizer": "muon"})
    result = train(config, runs_dir=tmp_path)
    assert all(math.isfinite(r["loss"]) for r in read_metrics(result.run_dir))
    weights = final_weights(result.run_dir)
    assert {tensor.dtype for tensor in weights.values()} == {torch.float32}
    trainer = _assemble(config, None, (), OneProcess())
    logits, _, _ = trainer._train_step(trainer.model, trainer.window)
    step_dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    assert logits.dtype == step_dtype
    assert trainer.optimizer.parts[0].dtype == step_dtype  # Muon orthogonalises in the step's dtype


@pytest.mark.slow  # needs a C++ compiler, and compiling takes long
def test_compiled_and_eager_training_give_the_same_losses(tmp_path):
    """train.compile: true runs the step through torch.compile; the numbers must not change.
    (Without dropout: compiled code draws its dropout masks from a different random stream.)"""
    no_dropout = {"dropout": 0.0}
    eager = train(
        tiny_config(model=no_dropout, train={"steps": 6, "eval_every": 100}, log={"every": 1}), runs_dir=tmp_path / "a"
    )
    compiled = train(
        tiny_config(model=no_dropout, train={"steps": 6, "eval_every": 100, "compile": True}, log={"every": 1}),
        runs_dir=tmp_path / "b",
    )
    losses = [[r["loss"] for r in read_metrics(run.run_dir) if r["split"] == "train"] for run in (eager, compiled)]
    assert len(losses[0]) == 6
    assert losses[1] == pytest.approx(losses[0], abs=1e-4)


def test_optimizer_takes_the_configs_betas_and_decays_only_matrices():
    config = config_from_dict({"train": {"betas": [0.8, 0.98], "weight_decay": 0.1}})
    optimizer = make_optimizer(build_model(config), config.train, torch.device("cpu"))
    decayed, not_decayed = optimizer.param_groups
    assert decayed["betas"] == not_decayed["betas"] == (0.8, 0.98)
    assert decayed["weight_decay"] == 0.1 and not_decayed["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() == 1 for p in not_decayed["params"])


@pytest.mark.parametrize("section, key", [("log", "attention_every"), ("train", "eval_every")])
def test_logging_never_changes_the_training_run(section, key, tmp_path):
    """Attention maps, evaluations and logged predictions run in eval mode without
    gradients: with dropout on, how often they happen leaves the weights bit for bit alike."""
    assert tiny_config().model.dropout > 0  # dropout draws from the random stream that logging must not touch
    often = train(tiny_config(**{section: {key: 1}}), runs_dir=tmp_path / "often")
    rarely = train(tiny_config(**{section: {key: 1000}}), runs_dir=tmp_path / "rarely")
    assert often.step == rarely.step == 12
    assert_same_weights(final_weights(often.run_dir), final_weights(rarely.run_dir))


def test_a_trainer_built_from_its_parts_reports_to_its_loggers_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny_config()
    torch.manual_seed(config.seed)
    task = get_task(config.task)
    model = build_model(config, vocab_size=len(task.vocab))
    data = TaskData(task, config.seed, config.task.eval_size)
    recorder = RecordingLogger()
    trainer = Trainer(
        model, get_framing(task, config.model.arch), data, config.train, config.log, [recorder], run_dir=None
    )
    result = trainer.run()

    assert list(tmp_path.iterdir()) == []  # no run folder, no checkpoint, no metrics file
    assert result.run_dir is None and result.step == 12 and not result.interrupted
    assert recorder.of("start") == [(None, 0)]
    metrics = recorder.of("metrics")
    assert [step for step, split, _ in metrics if split == "train"] == [2, 4, 6, 8, 10, 12]
    val = [(step, values) for step, split, values in metrics if split == "val"]
    assert [step for step, _ in val] == [4, 8, 12]
    assert [(step, sample) for step, sample, _ in recorder.of("attention")] == [
        (6, "sample0"),
        (6, "sample1"),
        (12, "sample0"),
        (12, "sample1"),
    ]
    texts = recorder.of("text")
    assert [(step, tag) for step, tag, _ in texts] == [(4, "predictions"), (8, "predictions"), (12, "predictions")]
    assert all(markdown.startswith("| input | target | prediction |") for _, _, markdown in texts)
    (finish,) = recorder.of("finish")
    assert finish[0] == 12
    assert finish[1]["final_seq_acc"] == val[-1][1]["seq_acc"] == result.final["seq_acc"]
    assert finish[1]["final_loss"] == val[-1][1]["loss"]
    assert finish[1]["best_seq_acc"] == result.best["seq_acc"]

    # train(config) assembles exactly these parts: the same run, the same numbers.
    assembled = train(config, runs_dir=tmp_path / "assembled")
    logged = [r for r in read_metrics(assembled.run_dir) if r["split"] == "val"]
    assert [r["loss"] for r in logged] == [values["loss"] for _, values in val]
    assert_same_weights(model.state_dict(), final_weights(assembled.run_dir))
