"""Run folders: what one holds, never shared or reused, one trainer at a time, found by default
(the newest with a checkpoint), named only inside --runs-dir, and one `error: ` line where
they cannot be read or written."""

import shlex
import signal
import subprocess
import sys

import pytest
import yaml
from conftest import (
    SUBPROCESS_ENV,
    TINY,
    CtrlCWhileSettingUp,
    assert_user_error,
    copy_run,
    deny_entry,
    files_under,
    invoke,
    read_metrics,
    snapshot,
    tiny_config,
    tiny_data,
    write_config,
)

from tinytf.errors import UserError
from tinytf.files import check_run_name
from tinytf.run.checkpoint import load_checkpoint
from tinytf.run.folder import RunFolder, newest_run, skipped_runs
from tinytf.run.load import load_run
from tinytf.training.trainer import train


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
    assert load_checkpoint(RunFolder(run_dir).checkpoint("last"))["step"] == 12
    assert load_run(run_dir, "best").step == result.best["step"]
    assert (run_dir / "train.lock").is_file() and not (run_dir / "train.pid").exists()  # the lock stays, unheld


def test_runs_never_share_a_folder(tmp_path):
    folders = {RunFolder.create(tmp_path, "same").path for _ in range(5)}
    assert len(folders) == 5 and all(folder.is_dir() for folder in folders)


def test_newest_run_and_missing_runs(tmp_path):
    with pytest.raises(UserError, match="no runs in"):
        newest_run(tmp_path)
    result = train(tiny_config(train={"steps": 2}), runs_dir=tmp_path)
    assert newest_run(tmp_path) == result.run_dir


def test_the_default_run_is_the_newest_with_a_checkpoint(run, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    good = runs / "good"
    subprocess.run(["cp", "-r", str(run), str(good)], check=True)
    crashed = train(tiny_config(), runs_dir=runs, name="crashed").run_dir  # newer, then its checkpoints lost
    for checkpoint in (crashed / "checkpoints").iterdir():
        checkpoint.unlink()
    assert newest_run(runs) == good and skipped_runs(runs) == [crashed]
    result = invoke("eval", "--runs-dir", runs)
    assert result.exit_code == 0 and f"run {good}" in result.stdout
    assert f"note: skipping {crashed} (no best checkpoint yet)" in result.stderr


def test_a_run_stopped_before_its_first_evaluation_is_passed_over_for_its_best_checkpoint(run, tmp_path):
    # Ctrl-C while a run is set up saves last.pt at step 0 and no best.pt: a command asking for the
    # best checkpoint takes the older trained run; one asking for the last takes the new one.
    runs = tmp_path / "runs"
    good = copy_run(run, runs)
    stopped = train(tiny_config(), runs_dir=runs, name="stopped", loggers=[CtrlCWhileSettingUp()]).run_dir
    assert RunFolder(stopped).checkpoint("last").is_file() and not RunFolder(stopped).checkpoint("best").is_file()
    best = invoke("eval", "--runs-dir", runs)
    assert best.exit_code == 0 and best.stdout.startswith(f"run {good} (best checkpoint"), best.output
    assert f"note: skipping {stopped} (no best checkpoint yet)" in best.stderr
    last = invoke("eval", "--runs-dir", runs, "--checkpoint", "last")
    assert last.exit_code == 0 and last.stdout.startswith(f"run {stopped} (last checkpoint, step 0)"), last.output


def test_a_run_picked_by_default_is_named_first_and_in_errors_about_its_model(run, runs):
    heading = f"run {run} (best checkpoint, step "
    table = invoke("attend", "1 2 3", "--runs-dir", runs)
    assert table.stdout.startswith(heading) and table.stderr == ""  # the table's heading names it
    for command in (["attend", "1 2 3", "--format", "json"], ["predict", "1 2 3"], ["heads", "--format", "json"]):
        picked = invoke(*command, "--runs-dir", runs)  # stdout holds data: the line goes to stderr
        assert picked.exit_code == 0, picked.output
        assert picked.stderr.startswith(heading) and picked.stderr.count("\n") == 1, picked.stderr
        named = invoke(*command, "--run", run)
        assert named.stdout == picked.stdout and named.stderr == ""
    assert_user_error(invoke("attend", "1 9", "--runs-dir", runs), f"error: {run}: unknown token '9'")
    assert_user_error(invoke("eval", "--n", 999, "--runs-dir", runs), f"error: {run}: --n 999: the run's held-out")
    assert_user_error(invoke("attend", "1 9", "--run", run), "error: unknown token '9'")


def test_a_run_still_training_is_used_with_a_note_that_says_so(run, tmp_path):
    runs = tmp_path / "runs"
    training = copy_run(run, runs)
    (training / "train.pid").write_text("4242\n")
    with RunFolder(training).locked():
        assert RunFolder(training).training_process() == "4242"
        picked = invoke("eval", "--runs-dir", runs)
        named = invoke("eval", "--run", training)
    assert picked.exit_code == 0 and picked.stdout.startswith(f"run {training} (best checkpoint"), picked.output
    note = "is still training (process 4242); using its best checkpoint so far\n"
    assert picked.stderr == f"note: the newest run, {training}, {note}"
    assert named.stdout == picked.stdout and named.stderr == f"note: {training} {note}"
    assert RunFolder(training).training_process() is None  # a train.pid left behind by a killed trainer: no lock held
    assert invoke("eval", "--runs-dir", runs).stderr == ""


def test_a_second_trainer_is_refused_with_the_first_one_s_pid(run, tmp_path):
    run = copy_run(run, tmp_path)
    before = snapshot(run)
    (run / "train.pid").write_text("4242\n")
    with RunFolder(run).locked():
        assert_user_error(invoke("train", "--resume", run), f"{run} is being trained by process 4242")
    (run / "train.pid").unlink()
    assert snapshot(run) == {k: v for k, v in before.items() if k != "train.pid"}


def test_a_killed_trainer_leaves_no_lock_behind(run, tmp_path):
    run = copy_run(run, tmp_path)
    holder = (
        "import sys, time\n"
        "from tinytf.run.folder import RunFolder\n"
        f"with RunFolder({str(run)!r}).locked():\n"
        "    print('locked', flush=True)\n"
        "    time.sleep(600)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, env=SUBPROCESS_ENV)
    try:
        assert process.stdout.readline().strip() == "locked"  # blocks until the lock is held
        with pytest.raises(UserError, match="is being trained by process"), RunFolder(run).locked():
            pass
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    with RunFolder(run).locked():  # the system released the dead process's lock
        pass


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


@pytest.mark.parametrize(
    "name", ["../escape", "a/b", "..", ".hidden", "x\\y", "", "nul\0", "   ", "two\nlines", "red\x1b[31m", "tab\tbed"]
)
def test_a_run_name_is_one_plain_folder_name(name, tmp_path):
    with pytest.raises(UserError, match="a run name is one folder name"):
        check_run_name(name, tmp_path)
    with pytest.raises(UserError, match="a run name is one folder name"):
        RunFolder.create(tmp_path / "runs", name)
    assert not (tmp_path / "runs").exists()
    check_run_name("sort-v2", tmp_path)  # a plain name passes


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".hidden", "x\\y", "", " ", "new\nline", "\x1b[2J"])
def test_train_name_must_stay_inside_runs_dir(name, tmp_path):
    config = write_config(tmp_path, tiny_data(train={"steps": 2, "eval_every": 2}))
    result = invoke("train", config, "--runs-dir", tmp_path / "runs", "--name", name)
    assert_user_error(result, f"--name {name!r}: a run name is one folder name")
    assert files_under(tmp_path) == ["tiny.yaml"]  # no run anywhere: not beside --runs-dir, not in it


def test_printed_commands_paste_as_they_are_with_spaces_in_the_paths(tmp_path):
    # A runs folder and a config name with spaces and a quote: what the CLI prints to paste is
    # shell-quoted, and after --resume `next:` names the folder that holds the run.
    runs = tmp_path / "my runs" / "it's here"
    config = write_config(tmp_path, tiny_data(), name="my config.yaml")
    first = invoke("train", config, "--runs-dir", runs, "--set", "train.steps=4")
    assert first.exit_code == 0, first.output
    (run_dir,) = runs.iterdir()
    run, logdir = shlex.quote(str(run_dir)), shlex.quote(str(runs))
    next_line = f'next: tinytf attend "..." --run {run}   |   tensorboard --logdir {logdir}'
    assert next_line in first.stdout
    assert shlex.split(next_line.split("|")[0].removeprefix("next: "))[-1] == str(run_dir)  # pastes as one argument
    resumed = invoke("train", "--resume", run_dir, "--set", "train.steps=6")  # --runs-dir left at its default
    assert resumed.exit_code == 0, resumed.output
    assert next_line in resumed.stdout


def test_unwritable_places_are_one_line_errors(trained, tmp_path):
    runs, _ = trained
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_user_error(
        invoke("attend", "1 2", "--runs-dir", runs, "--format", "npz", "--out", blocker / "x.npz"), "cannot write"
    )
    assert_user_error(
        invoke("train", write_config(tmp_path, TINY), "--runs-dir", blocker / "runs"), "cannot create a run folder"
    )


# Finding and loading a run probes it with Path.is_dir(), is_file() and exists(), which
# raise PermissionError in a folder the user cannot enter: one line, not a traceback.
@pytest.mark.parametrize(
    "denied, args",
    [
        ("parent", ["attend", "0 1 2", "--run", "{run}"]),
        ("parent", ["train", "--resume", "{run}"]),
        ("parent", ["eval", "--runs-dir", "{parent}"]),
        ("checkpoints", ["attend", "0 1 2", "--run", "{run}"]),
        ("checkpoints", ["predict", "0 1 2", "--runs-dir", "{parent}"]),
    ],
)
def test_a_run_in_a_folder_the_user_cannot_enter_is_one_line(run, tmp_path, monkeypatch, denied, args):
    parent = tmp_path / "runs"
    copy = copy_run(run, parent)
    deny_entry(monkeypatch, parent if denied == "parent" else copy / "checkpoints")
    result = invoke(*[arg.format(run=copy, parent=parent) for arg in args])
    assert_user_error(result, "Permission denied")
