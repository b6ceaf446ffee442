"""`--resume`: a resumed run ends as the uninterrupted one would (weights, metrics, optimizer
settings), after Ctrl-C or a kill; a refused resume changes nothing."""

import shutil
import signal
import subprocess
import sys
import threading

import pytest
import yaml
from conftest import (
    SUBPROCESS_ENV,
    TINY,
    CtrlCAt,
    CtrlCWhileSettingUp,
    assert_same_weights,
    assert_user_error,
    copy_run,
    final_weights,
    invoke,
    read_metrics,
    snapshot,
    tiny_config,
    write_config,
)

from tinytf.errors import ConfigError, UserError
from tinytf.run.checkpoint import load_checkpoint, save_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.training.loggers import NullLogger, RecordingLogger, resume_line
from tinytf.training.trainer import train


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_ctrl_c_then_resume_ends_with_the_same_weights(optimizer, tmp_path):
    config = tiny_config(train={"optimizer": optimizer})
    uninterrupted = train(config, runs_dir=tmp_path / "a")

    stopped = train(config, runs_dir=tmp_path / "b", loggers=[CtrlCAt(5)])
    assert stopped.interrupted and stopped.step == 5
    assert load_checkpoint(RunFolder(stopped.run_dir).checkpoint("last"))["step"] == 5
    resumed = train(config, resume=stopped.run_dir)
    assert resumed.run_dir == stopped.run_dir and resumed.step == 12 and not resumed.interrupted

    assert_same_weights(final_weights(uninterrupted.run_dir), final_weights(resumed.run_dir))


def test_a_ctrl_c_while_the_run_is_set_up_saves_it_at_its_first_step_boundary(tmp_path):
    # A run folder always gets its checkpoint: the run resumes from step 0 to the same weights.
    config = tiny_config()
    uninterrupted = train(config, runs_dir=tmp_path / "a")
    stopped = train(config, runs_dir=tmp_path / "b", loggers=[CtrlCWhileSettingUp()])
    assert stopped.interrupted and stopped.step == 0
    assert load_checkpoint(RunFolder(stopped.run_dir).checkpoint("last"))["step"] == 0
    resumed = train(config, resume=stopped.run_dir)
    assert resumed.step == 12 and not resumed.interrupted
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
    groups = load_checkpoint(RunFolder(resumed.run_dir).checkpoint("last"))["optimizer"]["param_groups"]
    assert [g["betas"] for g in groups] == [(0.8, 0.9)] * 2 and groups[0]["weight_decay"] == 0.5


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


def test_a_folder_without_the_training_lock_file_is_refused_and_left_as_it_was(run, tmp_path):
    copy = copy_run(run, tmp_path)
    (copy / "train.lock").unlink()
    before = snapshot(copy)
    refused = invoke("train", "--resume", copy)
    assert_user_error(refused, "not a run folder of this tinytf version (it has no train.lock)")
    assert snapshot(copy) == before
    with pytest.raises(UserError, match="not a run folder"):
        train(tiny_config(), resume=tmp_path / "typo")
    assert not (tmp_path / "typo").exists()


def test_the_library_refuses_a_changed_resume_too(run):
    with pytest.raises(ConfigError, match=r"model\.n_heads: a resumed run keeps"):
        train(tiny_config(model={"n_heads": 4}), resume=run)


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
    assert load_checkpoint(RunFolder(run_dir).checkpoint("last"))["step"] == 8
    assert read_metrics(run_dir)[-1]["step"] == 10
    metrics = run_dir / "metrics.jsonl"
    rows = metrics.read_bytes().splitlines(keepends=True)
    rows[3:3] = [b"\xff\xfe not UTF-8\n", b"not JSON\n", b'{"no": "step"}\n']  # damage, whoever did it
    metrics.write_bytes(b"".join(rows) + b'{"step": 11, "spl')  # and the kill tore the last line
    temporary = run_dir / "checkpoints" / ".best.pt.99999.tmp"
    temporary.write_bytes(b"x" * 1000)  # ... and a checkpoint write

    result = invoke("train", "--resume", run_dir)

    assert result.exit_code == 0, result.output
    # where it goes on from, and the steps whose rows it drops (to 10: the torn row of 11 is no metric)
    assert result.stdout.startswith("resumed from step 8 (last.pt); steps 9–10 will be redone\n"), result.stdout
    assert (
        f"note: {metrics}: dropped 4 line(s) that are not metrics (line 4, 5, 6, {len(rows) + 1}: torn, not UTF-8 "
        "or not a JSON object with a step); the other rows are kept\n"
    ) in result.stderr
    assert not temporary.exists()
    resumed = read_metrics(run_dir)  # every line parses
    points = [(row["step"], row["split"]) for row in resumed]
    assert len(points) == len(set(points))
    assert [(r["step"], r["split"], r["loss"]) for r in resumed] == [
        (r["step"], r["split"], r["loss"]) for r in read_metrics(whole.run_dir)
    ]
    assert_same_weights(final_weights(whole.run_dir), final_weights(run_dir))  # and the same weights, bit for bit


def test_the_steps_a_resume_says_it_redoes_end_where_its_budget_does(tmp_path):
    # Killed after step 10 with last.pt at step 8: resumed with train.steps=9, only step 9 is redone.
    config = tiny_config(train={"checkpoint_every": 4})
    with pytest.raises(RuntimeError):
        train(config, runs_dir=tmp_path, loggers=[CrashAt(10)])
    (run_dir,) = tmp_path.iterdir()
    for steps, said in (
        (9, "resumed from step 8 (last.pt); step 9 will be redone"),
        (8, "resumed from step 8 (last.pt)"),
    ):
        log = RecordingLogger()
        shutil.copytree(run_dir, tmp_path / f"copy-{steps}")
        train(
            tiny_config(train={"checkpoint_every": 4, "steps": steps}), resume=tmp_path / f"copy-{steps}", loggers=[log]
        )
        ((step, redone),) = log.of("resumed")
        assert resume_line(step, redone) == said


def test_a_resumed_run_logs_the_same_training_averages_as_an_uninterrupted_one(tmp_path):
    # Logging every 4 steps, Ctrl-C after step 5: the averaging window 5..8 spans the interruption.
    config = tiny_config(log={"every": 4})
    whole = train(config, runs_dir=tmp_path / "whole")
    stopped = train(config, runs_dir=tmp_path / "cut", loggers=[CtrlCAt(5)])
    assert stopped.interrupted and stopped.step == 5
    train(config, resume=stopped.run_dir)
    rows = [(r["step"], r["split"], r["loss"]) for r in read_metrics(stopped.run_dir)]
    assert rows == [(r["step"], r["split"], r["loss"]) for r in read_metrics(whole.run_dir)]


def test_a_hand_edited_best_score_is_one_line_on_resume(run, tmp_path):
    copy = copy_run(run, tmp_path)
    state = load_checkpoint(RunFolder(copy).checkpoint("last"))
    state.pop("format")
    save_checkpoint({**state, "best_score": 5}, RunFolder(copy).checkpoint("last"))  # a valid checksum
    assert_user_error(invoke("train", "--resume", copy, "--set", "train.steps=14"), "best_score")


# `tinytf train` as a user runs it, plus a logger that prints a line once each evaluation is
# logged: the Ctrl-C test waits for that line (a blocking read), never for time to pass.
ANNOUNCING_TINYTF = """
import sys
import tinytf.training.trainer
from tinytf.cli.app import main
from tinytf.training.loggers import NullLogger

class AnnounceEvaluations(NullLogger):
    def metrics(self, step, split, values):
        if split == "val":
            print(f"evaluated step {step}", flush=True)

real_train = tinytf.training.trainer.train

def train(config, **kwargs):
    return real_train(config, **{**kwargs, "loggers": [*kwargs["loggers"], AnnounceEvaluations()]})

tinytf.training.trainer.train = train
sys.argv[0] = "tinytf"
main()
"""


def test_ctrl_c_saves_and_prints_the_resume_command(tmp_path):
    data = {**TINY, "train": {**TINY["train"], "steps": 100000, "checkpoint_every": 100000}}
    command = [
        sys.executable,
        "-c",
        ANNOUNCING_TINYTF,
        "train",
        str(write_config(tmp_path, data)),
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    with open(tmp_path / "stderr.txt", "w+") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=SUBPROCESS_ENV)
        safety_net = threading.Timer(300, process.kill)  # only if the process hangs: the test waits on events
        safety_net.start()
        try:
            first = process.stdout.readline()  # blocks until the first evaluation is logged
            process.send_signal(signal.SIGINT)
            rest, _ = process.communicate()
        finally:
            safety_net.cancel()
            process.kill()
        stderr.seek(0)
        errors = stderr.read()
    assert first == "evaluated step 10\n", (first, errors)
    assert process.returncode == 130, errors
    assert "Traceback" not in errors
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert f"resume with: tinytf train --resume {run_dir}" in errors
    step = load_checkpoint(RunFolder(run_dir).checkpoint("last"))["step"]
    assert step >= 10 and f"interrupted at step {step}; checkpoint saved in {run_dir}" in errors
    evaluated = [f"evaluated step {r['step']}" for r in read_metrics(run_dir) if r["split"] == "val"]
    assert (first + rest).splitlines() == evaluated
    assert max(r["step"] for r in read_metrics(run_dir)) <= step  # nothing logged past the saved step


@pytest.mark.parametrize("trained", ["decoder"], indirect=True)
def test_resuming_a_finished_run_trains_on_only_when_asked(trained, tmp_path):
    run_dir = copy_run(trained[1], tmp_path)
    steps_before = load_checkpoint(RunFolder(run_dir).checkpoint("last"))["step"]
    kept = {
        name: digest
        for name, digest in snapshot(run_dir).items()
        if name.startswith("checkpoints/") or name == "metrics.jsonl"
    }
    again = invoke("train", "--resume", run_dir)
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith(f"resumed from step {steps_before} (last.pt)\nrun {run_dir}\n")  # nothing redone
    after = snapshot(run_dir)
    assert {name: after.get(name) for name in kept} == kept  # no weight retrained, no metric rewritten


@pytest.mark.parametrize("trained", ["decoder"], indirect=True)
def test_resume_with_more_steps_continues_from_the_saved_step(trained, tmp_path):
    run_dir = copy_run(trained[1], tmp_path)
    before = read_metrics(run_dir)
    assert load_checkpoint(RunFolder(run_dir).checkpoint("last"))["step"] == 20

    result = invoke("train", "--resume", run_dir, "--set", "train.steps=30", "--set", "log.attention_every=5")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"resumed from step 20 (last.pt)\nrun {run_dir}\n")
    assert load_checkpoint(RunFolder(run_dir).checkpoint("last"))["step"] == 30
    after = read_metrics(run_dir)
    assert after[: len(before)] == before  # the first 20 steps are not trained or logged again
    assert [r["step"] for r in after if r["split"] == "train"] == [5, 10, 15, 20, 25, 30]
    assert [r["step"] for r in after if r["split"] == "val"] == [10, 20, 30]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["steps"] == 30


def test_the_resume_line_names_the_steps_redone():
    assert resume_line(1000, 1417) == "resumed from step 1000 (last.pt); steps 1001–1417 will be redone"
    assert resume_line(1000, 1001) == "resumed from step 1000 (last.pt); step 1001 will be redone"
    assert resume_line(1000, None) == "resumed from step 1000 (last.pt)"


def test_the_library_reports_a_resume_to_its_loggers_before_it_starts(tmp_path):
    config = tiny_config(train={"checkpoint_every": 4})
    with pytest.raises(RuntimeError, match="killed"):
        train(config, runs_dir=tmp_path, loggers=[CrashAt(10)])  # last.pt: step 8; metrics: to 10
    (run_dir,) = tmp_path.iterdir()
    recording = RecordingLogger()
    train(config, resume=run_dir, loggers=[recording])
    assert recording.records[:2] == [("resumed", (8, 10)), ("start", (run_dir, 8))]
