"""Snapshots (train.snapshot_every): the weights at steps 0, N, 2N, ... and the last, kept
whole through kills and resumes, each a name for `--checkpoint step-K`, listed by
`tinytf checkpoints`."""

import json
import os

import pytest
import torch
from conftest import CtrlCAt, assert_user_error, invoke, read_metrics, tiny_config, train_tiny_run
from test_resume import CrashAt

from tinytf.cli.commands import first_held_out
from tinytf.inspect.attend import attention_report
from tinytf.inspect.evaluate import evaluate
from tinytf.run.checkpoint import load_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.run.load import load_run
from tinytf.run.setup import Setup
from tinytf.training.trainer import train

EVERY = 4  # snapshot_every of these tests' runs; 10 steps: snapshots at 0, 4, 8 and the last, 10


def snapshot_config(**train_keys):
    return tiny_config(train={"steps": 10, "snapshot_every": EVERY, **train_keys}, log={"every": 1})


def snapshot_states(run_dir):
    return {step: load_checkpoint(path) for step, path in RunFolder(run_dir).snapshots()}


def assert_same_snapshots(expected, actual):
    assert expected.keys() == actual.keys()
    for step in expected:
        assert expected[step]["train_loss"] == actual[step]["train_loss"], step
        for name, weight in expected[step]["model"].items():
            assert torch.equal(weight, actual[step]["model"][name]), (step, name)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """An uninterrupted run with snapshots: what every resumed run must end with."""
    return train(snapshot_config(), runs_dir=tmp_path_factory.mktemp("whole")).run_dir


def test_snapshots_hold_the_weights_at_every_interval_and_the_last_and_the_loss_since_the_one_before(whole):
    states = snapshot_states(whole)
    assert list(states) == [0, 4, 8, 10]
    for step, state in states.items():
        assert state["step"] == step
        assert "optimizer" not in state and "rng" not in state  # the weights alone: compact
    last = load_checkpoint(RunFolder(whole).checkpoint("last"))
    assert all(torch.equal(weight, states[10]["model"][name]) for name, weight in last["model"].items())
    config = snapshot_config()
    torch.manual_seed(config.seed)  # the weights training starts from
    initial = Setup.of(config).build_model().state_dict()
    assert all(torch.equal(weight, states[0]["model"][name]) for name, weight in initial.items())
    losses = {row["step"]: row["loss"] for row in read_metrics(whole) if row["split"] == "train"}  # log.every 1
    assert states[0]["train_loss"] is None
    for step, before in ((4, 0), (8, 4), (10, 8)):
        mean = sum(losses[s] for s in range(before + 1, step + 1)) / (step - before)
        assert states[step]["train_loss"] == pytest.approx(mean, rel=1e-6)


def test_a_run_keeps_no_snapshots_unless_asked(run):
    assert RunFolder(run).snapshots() == []
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["best.pt", "last.pt"]


def test_a_resume_after_a_kill_keeps_the_snapshots_written_and_writes_the_rest_as_the_whole_run_did(tmp_path, whole):
    config = snapshot_config(checkpoint_every=100)  # last.pt at the snapshot steps only
    with pytest.raises(RuntimeError, match="killed"):
        train(config, runs_dir=tmp_path, loggers=[CrashAt(7)])
    (run_dir,) = tmp_path.iterdir()
    folder = RunFolder(run_dir)
    assert [step for step, _ in folder.snapshots()] == [0, 4]
    written = {step: path.stat() for step, path in folder.snapshots()}
    (run_dir / "checkpoints" / ".step-8.pt.4242.tmp").write_bytes(b"torn")  # a write the kill cut

    train(config, resume=run_dir)

    assert not (run_dir / "checkpoints" / ".step-8.pt.4242.tmp").exists()
    for step, before in written.items():  # not written again
        after = folder.snapshot(step).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert_same_snapshots(snapshot_states(whole), snapshot_states(run_dir))


def test_a_kill_between_last_pt_and_its_snapshot_leaves_the_snapshot_to_the_resumed_run(tmp_path, whole):
    config = snapshot_config(checkpoint_every=100)
    with pytest.raises(RuntimeError, match="killed"):
        train(config, runs_dir=tmp_path, loggers=[CrashAt(9)])
    (run_dir,) = tmp_path.iterdir()
    RunFolder(run_dir).snapshot(8).unlink()  # last.pt of step 8 was written, its snapshot not yet
    assert load_checkpoint(RunFolder(run_dir).checkpoint("last"))["step"] == 8

    train(config, resume=run_dir)

    assert_same_snapshots(snapshot_states(whole), snapshot_states(run_dir))


def test_ctrl_c_and_a_resume_end_with_the_same_snapshots(tmp_path, whole):
    config = snapshot_config()
    stopped = train(config, runs_dir=tmp_path, loggers=[CtrlCAt(6)])
    assert stopped.interrupted
    train(config, resume=stopped.run_dir)
    assert_same_snapshots(snapshot_states(whole), snapshot_states(stopped.run_dir))


# ---- the command line


@pytest.fixture(scope="module")
def snapshot_run(tmp_path_factory):
    """A 2-layer run with snapshots, through the CLI."""
    return train_tiny_run(
        tmp_path_factory.mktemp("snapshots"),
        model={"n_layers": 2},
        train={"steps": 10, "snapshot_every": EVERY, "checkpoint_every": 100},
    )


def heading_of(result):
    return result.stdout.splitlines()[0]


@pytest.mark.parametrize(
    "command",
    [
        ["attend", "3 1 2"],
        ["heads"],
        ["circuits"],
        ["patch", "--clean", "3 1 2", "--corrupt", "3 0 2", "--answer", "1", "--wrong", "0"],
        ["attribute", "3 1 2", "--answer", "1", "--wrong", "2"],
        ["eval"],
    ],
    ids=lambda command: command[0],
)
def test_every_inspection_command_reads_a_snapshot_and_says_which(snapshot_run, command):
    result = invoke(*command, "--run", snapshot_run, "--checkpoint", "step-4")
    assert result.exit_code == 0, result.output
    assert "(step-4 checkpoint, step 4)" in heading_of(result)


def test_attend_on_a_snapshot_shows_the_snapshot_s_weights(snapshot_run):
    result = invoke("attend", "3 1 2", "--run", snapshot_run, "--checkpoint", "step-4", "--format", "json")
    assert result.exit_code == 0, result.output
    at_4 = load_run(snapshot_run, "step-4")
    expected = json.loads(attention_report(at_4.model, at_4.framing, "3 1 2").to_json())
    assert json.loads(result.stdout)["attention"] == expected["attention"]
    last = load_run(snapshot_run, "last")
    assert json.loads(attention_report(last.model, last.framing, "3 1 2").to_json()) != expected


def test_eval_on_a_snapshot_scores_its_weights(snapshot_run):
    result = invoke("eval", "--run", snapshot_run, "--checkpoint", "step-0")
    assert result.exit_code == 0, result.output
    at_0 = load_run(snapshot_run, "step-0")
    expected = evaluate(at_0.model, at_0.framing, first_held_out(at_0, None))
    printed = dict(line.strip().split(": ") for line in result.stdout.splitlines()[1:])
    assert {key: float(value) for key, value in printed.items()} == pytest.approx(
        {key: round(value, 4) for key, value in expected.items()}, abs=1e-4
    )


def test_predict_and_export_take_a_snapshot(snapshot_run, tmp_path):
    answer = invoke("predict", "3 1 2", "--run", snapshot_run, "--checkpoint", "step-8")
    assert answer.exit_code == 0, answer.output
    exported = invoke(
        "export",
        "--to",
        "safetensors",
        "--out",
        tmp_path / "m.safetensors",
        "--run",
        snapshot_run,
        "--checkpoint",
        "step-8",
    )
    assert exported.exit_code == 0, exported.output
    from tinytf.interop.files import load_exported

    model = load_exported(tmp_path / "m.safetensors").model
    at_8 = load_checkpoint(RunFolder(snapshot_run).snapshot(8))["model"]
    assert all(torch.equal(weight, at_8[name]) for name, weight in model.state_dict().items())


@pytest.mark.parametrize("name", ["step-07", "step-", "step--1", "step-1.5", "Step-4", "first"])
def test_a_checkpoint_name_that_is_none_is_a_usage_error(snapshot_run, name):
    assert_user_error(invoke("heads", "--run", snapshot_run, "--checkpoint", name), "--checkpoint: ")


def test_a_missing_snapshot_names_those_the_run_has(snapshot_run, run):
    assert_user_error(
        invoke("heads", "--run", snapshot_run, "--checkpoint", "step-5"),
        "no snapshot step-5; the run has step-0, step-4, step-8, step-10",
    )
    assert_user_error(
        invoke("heads", "--run", run, "--checkpoint", "step-5"),
        "no snapshot step-5: the run keeps none (train with train.snapshot_every: N to keep them)",
    )


def test_checkpoints_lists_what_a_run_holds_and_what_is_damaged(snapshot_run, tmp_path):
    import shutil

    copy = shutil.copytree(snapshot_run, tmp_path / "copy")
    damaged = RunFolder(copy).snapshot(8)
    damaged.write_bytes(damaged.read_bytes()[:-10])
    listed = json.loads(invoke("checkpoints", "--run", copy, "--format", "json").stdout)["checkpoints"]
    assert [(held["name"], held["step"]) for held in listed] == [
        ("best", listed[0]["step"]),
        ("last", 10),
        ("step-0", 0),
        ("step-4", 4),
        ("step-8", None),
        ("step-10", 10),
    ]
    assert "damaged" in listed[4]["problem"]
    assert [held["bytes"] for held in listed] == [RunFolder(copy).checkpoint(h["name"]).stat().st_size for h in listed]
    table = invoke("checkpoints", "--run", snapshot_run)
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[-1].startswith("4 snapshots, ")
    assert os.path.getsize(RunFolder(snapshot_run).snapshot(4)) < os.path.getsize(
        RunFolder(snapshot_run).checkpoint("last")
    )


def test_a_last_pt_written_before_snapshots_existed_resumes(tmp_path):
    from tinytf.run.checkpoint import save_checkpoint

    first = train(tiny_config(train={"steps": 6}, log={"every": 1}), runs_dir=tmp_path)
    path = RunFolder(first.run_dir).checkpoint("last")
    state = load_checkpoint(path)
    state["window"] = {key: state["window"][key] for key in ("loss_sum", "steps")}  # as tinytf wrote it then
    save_checkpoint(state, path)
    resumed = train(snapshot_config(), resume=first.run_dir)
    assert resumed.step == 10
    assert [step for step, _ in RunFolder(first.run_dir).snapshots()] == [8, 10]


def test_a_snapshot_asked_of_the_newest_run_is_looked_for_there(tmp_path):
    older = train(snapshot_config(), runs_dir=tmp_path).run_dir  # snapshots 0, 4, 8, 10
    newer = train(tiny_config(train={"steps": 10, "snapshot_every": 5}), runs_dir=tmp_path).run_dir
    os.utime(newer / "config.yaml", (older.stat().st_mtime + 10,) * 2)  # the newest, whatever the clock
    assert_user_error(
        invoke("heads", "--runs-dir", tmp_path, "--checkpoint", "step-4"),
        f"{newer}: no snapshot step-4; the run has step-0, step-5, step-10",
    )
    result = invoke("heads", "--runs-dir", tmp_path, "--checkpoint", "step-5")
    assert result.exit_code == 0, result.output
    assert heading_of(result).startswith(f"run {newer} (step-5 checkpoint, step 5)")
