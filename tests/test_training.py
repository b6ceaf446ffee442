"""The training loop through the library API: TensorBoard and metrics, determinism, early
stopping, the schedule, devices and precision, and divergence stopped before it reaches the
weights."""

import contextlib
import io
import itertools
import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import (
    assert_same_weights,
    final_weights,
    invoke,
    read_metrics,
    tiny_config,
    tiny_data,
    write_config,
)
from needs import unavailable

from tinytf.config import config_from_dict
from tinytf.data.framing import get_framing
from tinytf.data.heldout import TaskData
from tinytf.run.checkpoint import load_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.run.setup import Setup, build_model
from tinytf.tasks import get_task
from tinytf.training.distributed import OneProcess
from tinytf.training.loggers import MetricsFileLogger, NullLogger, ProgressBarLogger, RecordingLogger
from tinytf.training.optim import learning_rate, make_optimizer
from tinytf.training.trainer import (
    Trainer,
    TrainingDiverged,
    _assemble,
    train,
)


def test_tensorboard_events_hold_scalars_and_attention_images(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = train(tiny_config(train={"betas": [0.9, 0.98]}, log={"attention_every": 6}), runs_dir=tmp_path).run_dir
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

    config = tiny_config(model={"arch": "encoder-decoder"}, train={"steps": 6}, log={"attention_every": 6})
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
    assert load_checkpoint(RunFolder(result.run_dir).checkpoint("last"))["step"] == first["step"]


def factor(step, warmup_steps, decay_steps):
    """The schedule's multiplier of train.lr at `step`."""
    settings = tiny_config(train={"lr": 1.0, "steps": 100, "warmup_steps": warmup_steps, "decay_steps": decay_steps})
    return learning_rate(step, settings.train)


def test_learning_rate_warms_up_then_decays():
    factors = [factor(step, 10, 100) for step in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(factors[10:]))
    assert factors[-1] == pytest.approx(0.1, abs=1e-3)


def test_a_constant_schedule_holds_the_rate_after_the_warm_up():
    settings = tiny_config(train={"lr": 0.5, "steps": 100, "warmup_steps": 10, "schedule": "constant"}).train
    factors = [learning_rate(step, settings) for step in range(100)]
    assert factors[:10] == pytest.approx([0.05 * (step + 1) for step in range(10)])
    assert factors[10:] == [0.5] * 90


def test_a_shorter_decay_ends_early_and_then_holds_a_tenth(tmp_path):
    factors = [factor(step, 10, 50) for step in range(100)]
    assert factors[30] < factor(30, 10, 100)
    assert factors[50:] == pytest.approx([0.1] * 50)
    # The trainer's optimizer follows train.decay_steps, and train.steps still ends the run.
    result = train(tiny_config(train={"steps": 12, "warmup_steps": 2, "decay_steps": 6, "lr": 1e-2}), runs_dir=tmp_path)
    assert result.step == 12
    logged = [(row["step"], row["lr"]) for row in read_metrics(result.run_dir) if "lr" in row]
    after_the_decay = [lr for step, lr in logged if 6 <= step < 12]  # over train.steps, lr would still fall here
    assert after_the_decay and after_the_decay == pytest.approx([1e-3] * len(after_the_decay))


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_step_multiplies_in_its_precision_and_keeps_float32_weights(precision, tmp_path):
    config = tiny_config(train={"precision": precision, "steps": 4, "optimizer": "muon"})
    result = train(config, runs_dir=tmp_path)
    assert all(math.isfinite(r["loss"]) for r in read_metrics(result.run_dir))
    weights = final_weights(result.run_dir)
    assert {tensor.dtype for tensor in weights.values()} == {torch.float32}
    trainer = _assemble(Setup.of(config), (), OneProcess())
    logits, _, _ = trainer._train_step(trainer.model, trainer.window)
    step_dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    assert logits.dtype == step_dtype
    assert trainer.optimizer.parts[0].dtype == step_dtype  # Muon orthogonalises in the step's dtype


@pytest.mark.slow  # needs a C++ compiler, and compiling takes long
@pytest.mark.learning
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

    def every(steps):
        sections = {"train": {"steps": 6}, "log": {}}
        sections[section] = {**sections[section], key: steps}
        return tiny_config(**sections)

    often = train(every(1), runs_dir=tmp_path / "often")
    rarely = train(every(1000), runs_dir=tmp_path / "rarely")
    assert often.step == rarely.step == 6
    assert_same_weights(final_weights(often.run_dir), final_weights(rarely.run_dir))


def test_a_trainer_built_from_its_parts_reports_to_its_loggers_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny_config(log={"attention_every": 6})
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


def trainer_with(tmp_path, make_logger, **train_keys):
    """A Trainer of the tiny config, built from its parts, with the logger `make_logger(model)`;
    returns it, its model and its run folder (checkpoints go there)."""
    config = tiny_config(train=train_keys)
    task = get_task(config.task)
    model = build_model(config)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    trainer = Trainer(
        model,
        get_framing(task, "decoder"),
        TaskData(task, 0, 40),
        config.train,
        config.log,
        [make_logger(model)],
        run_dir=run_dir,
    )
    return trainer, model, run_dir


class PoisonAt(NullLogger):
    """Makes the weights non-finite once step `at` is done (as a blown-up update would)."""

    def __init__(self, model, at):
        self.model, self.at = model, at

    def step(self, step):
        if step == self.at:
            with torch.no_grad():
                next(self.model.parameters()).fill_(float("nan"))


def test_divergence_stops_keeps_the_last_finite_checkpoint_and_says_what_to_do(tmp_path):
    trainer, _, run_dir = trainer_with(
        tmp_path, lambda model: PoisonAt(model, at=5), checkpoint_every=4, eval_every=4, steps=12
    )
    with pytest.raises(TrainingDiverged) as caught:
        trainer.run()
    message = str(caught.value)
    assert (
        "training diverged at step 6" in message
        and "keeps checkpoints/last.pt of step 4" in message
        and "train.lr" in message
    )
    for which in ("last", "best"):
        state = load_checkpoint(RunFolder(run_dir).checkpoint(which))
        assert state["step"] == 4
        assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_a_huge_learning_rate_ends_in_one_line_and_strict_json(tmp_path):
    # Every step logged, scored and saved: the files a diverging run writes are there to check
    train = {"lr": 1e6, "warmup_steps": 1, "steps": 40, "grad_clip": None, "eval_every": 1, "checkpoint_every": 1}
    data = tiny_data(train=train, log={"every": 1})
    result = invoke("train", write_config(tmp_path, data), "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 2 and "Traceback" not in result.output
    last_line = result.stderr.strip().splitlines()[-1]  # after the progress bar
    assert last_line.startswith("error: training diverged at step") and "try a lower train.lr" in last_line
    (run_dir,) = (tmp_path / "runs").iterdir()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert lines
    for line in lines:
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in metrics.jsonl"))
    for which in ("last", "best"):
        weights = load_checkpoint(RunFolder(run_dir).checkpoint(which))["model"]
        assert all(torch.isfinite(t).all() for t in weights.values())


class InfiniteGradientAt(NullLogger):
    """Before step `at`'s update, one gradient turns infinite (hooked on a weight)."""

    def __init__(self, model, at):
        self.steps = 0

        def poison(grad):
            self.steps += 1
            return grad * float("inf") if self.steps == at else grad

        next(model.parameters()).register_hook(poison)


def test_a_non_finite_gradient_without_clipping_never_reaches_the_weights(tmp_path):
    trainer, model, _ = trainer_with(
        tmp_path,
        lambda model: InfiniteGradientAt(model, at=3),
        grad_clip=None,
        checkpoint_every=2,
        eval_every=2,
        steps=12,
    )
    with pytest.raises(TrainingDiverged, match="training diverged at step 3"):
        trainer.run()
    assert all(torch.isfinite(p).all() for p in model.parameters())


@contextlib.contextmanager
def small_disk(folder, size):
    """A tmpfs of `size` mounted at `folder` for the block: a real full disk (needs root)."""
    folder.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        unavailable("mounting a small tmpfs needs root", "sudo .venv/bin/python -m pytest -k full_disk (CI is root)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        refusal = mounted.stderr.decode().strip()
        unavailable(f"cannot mount a tmpfs here ({refusal})", "the right to mount (a container run with --privileged)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("size", ["40k", "80k", "120k", "240k"])
def test_a_full_disk_is_one_line_naming_the_file_and_what_the_run_keeps(tmp_path, size, capfd):
    # Sizes at which a checkpoint, the TensorBoard events or metrics.jsonl meet the full disk first.
    data = tiny_data(train={"steps": 40, "checkpoint_every": 4}, log={"every": 1, "attention_every": 4})
    config = write_config(tmp_path, data)
    with small_disk(tmp_path / "disk", size) as disk:
        result = invoke("train", config, "--runs-dir", disk / "runs")
        (run_dir,) = (disk / "runs").iterdir()
        assert result.exit_code == 2 and "Traceback" not in result.stderr
        (error,) = [line for line in result.stderr.split("\n") if "error" in line]  # (after the progress bar)
        assert (
            error.startswith(f"error: {run_dir}/") and "No space left on device" in error
        )  # the file it could not write
        kept = re.findall(r"checkpoints/(last|best)\.pt of step (\d+)", error)
        assert kept or error.endswith("the run has no checkpoint yet")
        for which, step in kept:  # what it says the run keeps is there, whole
            assert load_checkpoint(RunFolder(run_dir).checkpoint(which))["step"] == int(step)
        for path in (run_dir / "checkpoints").glob("*.pt"):  # and no checkpoint is damaged
            load_checkpoint(path)
    assert "Traceback" not in capfd.readouterr().err  # not from TensorBoard's writer thread either


def test_metrics_file_writes_null_for_a_number_that_is_not_finite(tmp_path):
    MetricsFileLogger(tmp_path / "m.jsonl").metrics(3, "train", {"loss": float("nan"), "lr": 0.1})
    assert json.loads((tmp_path / "m.jsonl").read_text()) == {"step": 3, "split": "train", "loss": None, "lr": 0.1}


def test_attention_every_null_draws_no_maps_and_scores_no_heads(tmp_path):
    recorder = RecordingLogger()
    result = train(tiny_config(log={"attention_every": None}), runs_dir=tmp_path, loggers=[recorder])
    assert result.step == 12 and recorder.of("metrics")
    assert recorder.of("attention") == [] and recorder.of("heads") == []


def drawn_bar(stop_at):
    """What the progress bar draws for a 10,000-step run at step 50."""
    out = io.StringIO()
    bar = ProgressBarLogger(10_000, stop_at=stop_at, file=out)
    bar.start(Path("runs/grokking"), 0)
    bar.step(50)
    bar.metrics(50, "val", {"seq_acc": 0.25})
    bar.finish(50, {})
    return out.getvalue().split("\r")[-1]


def test_a_run_that_stops_at_an_accuracy_shows_its_steps_as_a_budget_without_a_time_left():
    drawn = drawn_bar(stop_at=0.99)
    assert drawn.startswith("grokking, stops at held-out seq_acc 0.99:") and "50/10000 at most [" in drawn
    assert "<" not in drawn and "val_seq_acc=0.250" in drawn  # no time left to a step it may never reach
    assert "50/10000 [" in drawn_bar(stop_at=None) and "<" in drawn_bar(stop_at=None)  # a fixed budget: the time left
