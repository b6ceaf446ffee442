"""Nothing a user does, and no fault, loses or corrupts a run (issue 10, data loss first):
a refused resume changes nothing, one trainer per run, divergence stops cleanly,
damaged weights are refused, a resumed run's metrics hold each point once."""

import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import (
    SUBPROCESS_ENV,
    CtrlCAt,
    assert_user_error,
    invoke,
    read_metrics,
    tiny_config,
    tiny_data,
    write_config,
)

from tinytf.checkpoint import load_checkpoint
from tinytf.data import TaskData
from tinytf.errors import ConfigError
from tinytf.experiment import load_config
from tinytf.framing import get_framing
from tinytf.loggers import MetricsFileLogger, NullLogger
from tinytf.model import build_model
from tinytf.runs import checkpoint_path, exclusive_training
from tinytf.tasks import get_task
from tinytf.training import Trainer, TrainingDiverged, train


def snapshot(run_dir):
    """Every file of a run folder with a hash of its bytes: equal snapshots, unchanged run."""
    return {
        str(path.relative_to(run_dir)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(run_dir.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny finished run (12 steps), trained once for the tests that only read or refuse."""
    folder = tmp_path_factory.mktemp("run")
    return train(tiny_config(), runs_dir=folder).run_dir


# ---- 1. a refused resume changes nothing


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("task.vocab_size=7", "task.vocab_size: a resumed run keeps its task, model, seed and optimizer"),
        ("task.name=reverse", "task.name: a resumed run keeps"),
        ("model.d_model=32", "model.d_model: a resumed run keeps"),
        ("model.arch=encoder", "model.arch: a resumed run keeps"),
        ("seed=1", "seed: a resumed run keeps"),
        ("train.optimizer=muon", "train.optimizer: a resumed run keeps"),  # its moments are AdamW's
        ("train.steps=5", "train.steps=5: this run has trained 12 steps already"),
        ("train.lr=.inf", "train.lr"),
    ],
)
def test_a_refused_resume_changes_nothing(run, override, fragment):
    before = snapshot(run)
    result = invoke("train", "--resume", run, "--set", override)
    assert_user_error(result, fragment)
    assert snapshot(run) == before


def test_resume_with_more_steps_and_new_logging_is_allowed(run, tmp_path):
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    result = invoke("train", "--resume", copy, "--set", "train.steps=14", "--set", "log.every=1")
    assert result.exit_code == 0, result.output
    assert load_checkpoint(checkpoint_path(copy, "last"))["step"] == 14


def test_the_library_refuses_a_changed_resume_too(run):
    with pytest.raises(ConfigError, match=r"model\.n_heads: a resumed run keeps"):
        train(tiny_config(model={"n_heads": 4}), resume=run)


# ---- 2. one writer per run folder


def test_a_second_trainer_is_refused_with_the_first_one_s_pid(run):
    before = snapshot(run)
    (run / "train.pid").write_text("4242\n")
    with exclusive_training(run):
        assert_user_error(invoke("train", "--resume", run), f"{run} is being trained by process 4242")
    (run / "train.pid").unlink()
    assert snapshot(run) == {k: v for k, v in before.items() if k != "train.pid"}


def test_a_killed_trainer_leaves_no_lock_behind(run, tmp_path):
    holder = (
        "import sys, time\n"
        "from tinytf.runs import exclusive_training\n"
        f"with exclusive_training({str(run)!r}):\n"
        "    print('locked', flush=True)\n"
        "    time.sleep(600)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, env=SUBPROCESS_ENV)
    try:
        assert process.stdout.readline().strip() == "locked"  # blocks until the lock is held
        with pytest.raises(Exception, match="is being trained by process"), exclusive_training(run):
            pass
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    with exclusive_training(run):  # the system released the dead process's lock
        pass


# ---- 3. divergence is an error, not a success


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
    assert "training diverged at step 6" in message and "last.pt keeps step 4" in message and "train.lr" in message
    for which in ("last", "best"):
        state = load_checkpoint(checkpoint_path(run_dir, which))
        assert state["step"] == 4
        assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_a_huge_learning_rate_ends_in_one_line_and_strict_json(tmp_path):
    data = tiny_data(train={"lr": 1e6, "warmup_steps": 1, "steps": 40, "grad_clip": None})
    result = invoke("train", write_config(tmp_path, data), "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 2 and "Traceback" not in result.output
    last_line = result.stderr.strip().splitlines()[-1]  # after the progress bar
    assert last_line.startswith("error: training diverged at step") and "try a lower train.lr" in last_line
    (run_dir,) = (tmp_path / "runs").iterdir()
    metrics = run_dir / "metrics.jsonl"
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in metrics.jsonl"))
    for which in ("last", "best"):
        path = checkpoint_path(run_dir, which)
        if path.exists():
            assert all(torch.isfinite(t).all() for t in load_checkpoint(path)["model"].values())


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e309"])
def test_non_finite_numbers_are_config_errors(tmp_path, value):
    path = tmp_path / "c.yaml"
    path.write_text(f"train:\n  lr: {value}\n")
    with pytest.raises(ConfigError, match=r"train\.lr"):
        load_config(path)


def test_metrics_file_writes_null_for_a_number_that_is_not_finite(tmp_path):
    MetricsFileLogger(tmp_path / "m.jsonl").metrics(3, "train", {"loss": float("nan"), "lr": 0.1})
    assert json.loads((tmp_path / "m.jsonl").read_text()) == {"step": 3, "split": "train", "loss": None, "lr": 0.1}


# ---- 4. silent weight corruption is detected


def test_flipped_bytes_inside_a_tensor_are_refused(run, tmp_path):
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    best = checkpoint_path(copy, "best")
    weights = load_checkpoint(best)["model"]["token_embedding.weight"]
    content = bytearray(best.read_bytes())
    start = bytes(content).find(weights.numpy().tobytes())  # torch.save stores tensors uncompressed
    assert start > 0
    content[start + 41] ^= 0x40  # one bit of one float of the embedding
    best.write_bytes(bytes(content))
    torch.load(best, weights_only=True)  # torch itself notices nothing
    assert_user_error(invoke("attend", "1 2 3", "--run", copy), "damaged")
    assert_user_error(invoke("eval", "--run", copy), f"{best}: damaged")


# ---- 5 and 6. a resumed run's metrics hold each point once; stale temporary files go


class CrashAt(NullLogger):
    """Crashes training once step `at` is done, as a kill would: no checkpoint saved for it."""

    def __init__(self, at):
        self.at = at

    def step(self, step):
        if step == self.at:
            raise RuntimeError("killed")


def test_resume_after_a_kill_drops_metrics_past_the_checkpoint_and_stale_temporary_files(tmp_path):
    config = tiny_config(train={"checkpoint_every": 4})
    whole = train(config, runs_dir=tmp_path / "whole")
    with pytest.raises(RuntimeError, match="killed"):
        train(config, runs_dir=tmp_path / "killed", loggers=[CrashAt(10)])  # last.pt: step 8; metrics: to 10
    (run_dir,) = (tmp_path / "killed").iterdir()
    assert load_checkpoint(checkpoint_path(run_dir, "last"))["step"] == 8
    assert read_metrics(run_dir)[-1]["step"] == 10
    with open(run_dir / "metrics.jsonl", "a") as file:
        file.write('{"step": 11, "spl')  # the kill tore the last line
    temporary = run_dir / "checkpoints" / ".best.pt.99999.tmp"
    temporary.write_bytes(b"x" * 1000)  # ... and a checkpoint write

    train(config, resume=run_dir)

    assert not temporary.exists()
    resumed = read_metrics(run_dir)  # every line parses
    points = [(row["step"], row["split"]) for row in resumed]
    assert len(points) == len(set(points))
    assert [(r["step"], r["split"], r["loss"]) for r in resumed] == [
        (r["step"], r["split"], r["loss"]) for r in read_metrics(whole.run_dir)
    ]


# ---- the items that follow data loss: full disk, foreign checkpoints, newest run, run names, task files


def test_a_full_disk_mid_training_is_one_line_naming_the_last_good_checkpoint(tmp_path, monkeypatch):
    import errno

    import tinytf.training

    real_save = tinytf.training.save_checkpoint

    def save_until_full(state, path):
        if state["step"] > 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(state, path)

    monkeypatch.setattr(tinytf.training, "save_checkpoint", save_until_full)
    data = tiny_data(train={"checkpoint_every": 4})
    result = invoke("train", write_config(tmp_path, data), "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 2 and "Traceback" not in result.output
    last_line = result.stderr.strip().splitlines()[-1]
    assert "No space left on device" in last_line and "checkpoints/last.pt still holds step 4" in last_line
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert load_checkpoint(checkpoint_path(run_dir, "last"))["step"] == 4


def test_a_checkpoint_that_is_not_ours_is_refused_without_torch_s_advice(tmp_path):
    path = tmp_path / "foreign.pt"
    torch.save({"model": torch.nn.Linear(2, 2)}, path)  # a pickled module, as other tools save
    with pytest.raises(Exception) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert "not a tinytf checkpoint" in message and "not loaded" in message and "weights_only" not in message


def test_the_default_run_is_the_newest_with_a_checkpoint(run, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    good = runs / "good"
    subprocess.run(["cp", "-r", str(run), str(good)], check=True)
    crashed = train(tiny_config(), runs_dir=runs, name="crashed").run_dir  # newer, then its checkpoints lost
    for checkpoint in (crashed / "checkpoints").iterdir():
        checkpoint.unlink()
    from tinytf.runs import newest_run, skipped_runs

    assert newest_run(runs) == good and skipped_runs(runs) == [crashed]
    result = invoke("eval", "--runs-dir", runs)
    assert result.exit_code == 0 and f"run {good}" in result.stdout
    assert f"note: skipping {crashed} (no checkpoint yet)" in result.stderr


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".hidden"])
def test_a_run_name_cannot_leave_the_runs_folder(tmp_path, name):
    result = invoke("train", write_config(tmp_path, tiny_data()), "--runs-dir", tmp_path / "runs", "--name", name)
    assert_user_error(result, "run name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


def test_a_text_task_refuses_a_file_that_never_ends(tmp_path):

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        config = write_config(tmp_path, {"task": {"name": "text", "path": str(path)}})
        assert_user_error(invoke("config", "show", config), "is not a regular file")


def test_a_text_run_keeps_its_file_s_absolute_path_and_refuses_a_changed_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    data = tiny_data(task={"name": "text", "path": "corpus.txt", "max_len": 8, "eval_size": 20})
    data["task"] = {key: data["task"][key] for key in ("name", "path", "max_len", "eval_size")}
    result = invoke("train", write_config(tmp_path, data), "--runs-dir", "runs")
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["task"]["path"] == str(tmp_path / "corpus.txt")

    with open(tmp_path / "corpus.txt", "a") as file:
        file.write("a new line changes the held-out windows.")
    before = snapshot(run_dir)
    assert_user_error(invoke("eval", "--run", run_dir), "has changed since")
    assert_user_error(invoke("train", "--resume", run_dir, "--set", "train.steps=20"), "has changed since")
    assert snapshot(run_dir) == before
    assert invoke("attend", "the", "--run", run_dir).exit_code == 0  # looking inside needs only the saved vocabulary


def test_a_text_run_can_be_looked_at_after_its_file_is_gone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    data = tiny_data(task={"name": "text", "path": "corpus.txt", "max_len": 8, "eval_size": 20})
    data["task"] = {key: data["task"][key] for key in ("name", "path", "max_len", "eval_size")}
    assert invoke("train", write_config(tmp_path, data), "--runs-dir", "runs").exit_code == 0
    (tmp_path / "corpus.txt").unlink()
    assert invoke("attend", "the", "--runs-dir", "runs").exit_code == 0
    assert invoke("predict", "the qu", "--runs-dir", "runs").exit_code == 0
    assert_user_error(invoke("eval", "--runs-dir", "runs"), "task.path")


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


def test_a_hand_edited_best_score_is_one_line_on_resume(run, tmp_path):
    from tinytf.checkpoint import save_checkpoint

    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    state = load_checkpoint(checkpoint_path(copy, "last"))
    state.pop("format")
    save_checkpoint({**state, "best_score": 5}, checkpoint_path(copy, "last"))  # a valid checksum
    assert_user_error(invoke("train", "--resume", copy, "--set", "train.steps=14"), "best_score")


def test_a_resumed_run_logs_the_same_training_averages_as_an_uninterrupted_one(tmp_path):
    # Logging every 4 steps, Ctrl-C after step 5: the averaging window 5..8 spans the interruption.
    config = tiny_config(log={"every": 4})
    whole = train(config, runs_dir=tmp_path / "whole")
    stopped = train(config, runs_dir=tmp_path / "cut", loggers=[CtrlCAt(5)])
    assert stopped.interrupted and stopped.step == 5
    train(config, resume=stopped.run_dir)
    rows = [(r["step"], r["split"], r["loss"]) for r in read_metrics(stopped.run_dir)]
    assert rows == [(r["step"], r["split"], r["loss"]) for r in read_metrics(whole.run_dir)]
