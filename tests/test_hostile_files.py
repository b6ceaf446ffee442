"""Hostile files and outputs are one `error: ` line, never a traceback (issue 12): a
config, a run or its checkpoints in a folder the user cannot enter, checkpoints tampered
with but well formed (their checksum is right, their contents are not a training state),
and an output encoding that cannot show the heatmap's shading characters."""

import builtins
import hashlib
import io
import os
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, SUBPROCESS_ENV, assert_user_error, invoke, tiny_data, train_tiny_run, write_config

from tinytf.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tinytf.runs import checkpoint_path
from tinytf.viz import ASCII_SHADES, SHADES, terminal_shades

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny finished run (12 steps), trained once; tests tamper with copies of it."""
    return train_tiny_run(tmp_path_factory.mktemp("hostile"))


def snapshot(run_dir):
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


# ---- a config inside a folder the user cannot enter

# Tests run as root here, and root enters every folder: the denial is simulated where the
# OS reports it. In a folder without x permission, stat() and open() of anything inside it
# fail with EACCES (and so do Path.is_file(), is_dir() and exists(), which do not catch it);
# listing the folder fails too.


def deny_entry(monkeypatch, folder):
    """Make `folder` one the user cannot enter, as far as this process can tell."""
    inside = str(folder) + os.sep

    def guard(real, listing=False):
        def denied(path, *args, **kwargs):
            name = os.fspath(path) if isinstance(path, str | os.PathLike) else ""
            if name.startswith(inside) or (listing and name.rstrip(os.sep) == str(folder)):
                raise PermissionError(13, "Permission denied", name)
            return real(path, *args, **kwargs)

        return denied

    for module, name, listing in [
        (os, "stat", False),
        (os, "open", False),
        (builtins, "open", False),
        (os, "listdir", True),
        (os, "scandir", True),
    ]:
        monkeypatch.setattr(module, name, guard(getattr(module, name), listing))


@pytest.fixture
def locked(tmp_path, monkeypatch):
    """A config inside `locked/`, a folder the user cannot enter."""
    folder = tmp_path / "locked"
    folder.mkdir()
    config = write_config(folder, tiny_data())
    deny_entry(monkeypatch, folder)
    return config


@pytest.mark.parametrize("command", [["config", "show"], ["train"]])
def test_a_config_in_a_folder_the_user_cannot_enter_is_one_line(locked, command, tmp_path):
    extra = ["--runs-dir", tmp_path / "runs"] if command == ["train"] else []
    result = invoke(*command, locked, *extra)
    assert_user_error(result, f"{locked}: cannot read config file")
    assert "Permission denied" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_config_the_user_cannot_open_is_one_line(tmp_path, monkeypatch):
    config = write_config(tmp_path, tiny_data())
    real_open = os.open

    def open_(path, *args, **kwargs):  # stat() works (the folder is open), reading does not
        if str(path) == str(config):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    assert_user_error(invoke("config", "show", config), f"{config}: cannot read config file")


# ---- a run, or its checkpoints, in a folder the user cannot enter


def test_a_checkpoint_the_user_cannot_read_is_a_checkpoint_error(run, tmp_path, monkeypatch):
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    deny_entry(monkeypatch, copy / "checkpoints")
    with pytest.raises(CheckpointError, match=r"last\.pt: cannot read checkpoint: Permission denied"):
        load_checkpoint(checkpoint_path(copy, "last"))
    assert_user_error(invoke("train", "--resume", copy), "last.pt: cannot read checkpoint: Permission denied")


# BUG (found by this test; the fix is outside this file: tinytf/runs.py, or one catch in
# cli.py): finding and loading a run probes it with Path.is_dir(), is_file() and exists(),
# which raise PermissionError in a folder the user cannot enter: a traceback, not one line.
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
    copy = parent / run.name
    shutil.copytree(run, copy)
    deny_entry(monkeypatch, parent if denied == "parent" else copy / "checkpoints")
    result = invoke(*[arg.format(run=copy, parent=parent) for arg in args])
    assert_user_error(result, "Permission denied")


# ---- checkpoints tampered with but well formed (written by save_checkpoint: the checksum is right)


def without(*keys):
    return lambda state: {key: value for key, value in state.items() if key not in keys}


def replaced(**values):
    return lambda state: {**state, **values}


def optimizer_groups(**values):
    return lambda state: {
        **state,
        "optimizer": {
            **state["optimizer"],
            "param_groups": [{**group, **values} for group in state["optimizer"]["param_groups"]],
        },
    }


def optimizer_parts_groups(**values):
    """`optimizer_groups` for a CombinedOptimizer's state: every part's groups."""
    return lambda state: {
        **state,
        "optimizer": {
            "parts": [
                {**part, "param_groups": [{**group, **values} for group in part["param_groups"]]}
                for part in state["optimizer"]["parts"]
            ]
        },
    }


TAMPERINGS = {
    "model is a tensor": (replaced(model=torch.zeros(3)), "'model' is a tensor of shape (3,), not a mapping"),
    "step is a string": (replaced(step="abc"), "'step' is 'abc', not a whole number >= 0"),
    "step is negative": (replaced(step=-1), "'step' is -1, not a whole number >= 0"),
    "step is a boolean": (replaced(step=True), "'step' is True"),
    "no step": (without("step"), "it has no 'step'"),
    "no model": (without("model"), "'model'"),
    "model maps to strings": (lambda s: {**s, "model": dict.fromkeys(s["model"], "x")}, "'model' maps"),
    "optimizer is a list": (replaced(optimizer=[1, 2]), "'optimizer' is a list of 2, not a mapping"),
    "scheduler is None": (replaced(scheduler=None), "'scheduler' is None, not a mapping"),
}
RESUME_ONLY = {  # what only a resumed run reads: attend, eval and predict do not need it
    "no rng": (without("rng", "optimizer"), "it has no 'optimizer', 'rng': not a whole training state"),
    "rng is not tensors": (lambda s: {**s, "rng": {"torch": "x", "data": 1}}, "'rng' should hold the tensors"),
    "learning rate is a string": (optimizer_groups(lr="abc"), "'optimizer'.param_groups.0.lr is 'abc', not a number"),
    "schedule step is a string": (
        lambda s: {**s, "scheduler": {**s["scheduler"], "last_epoch": "x"}},
        "'scheduler'.last_epoch is 'x', not a number",
    ),
    "moments of the wrong shape": (
        lambda s: {
            **s,
            "optimizer": {
                **s["optimizer"],
                "state": {
                    index: {**moments, "exp_avg": torch.zeros(2)} for index, moments in s["optimizer"]["state"].items()
                },
            },
        },
        "exp_avg is a tensor of shape (2,), not a tensor of shape",
    ),
    "best score is text": (replaced(best_score=["a", "b"]), "'best' and 'best_score' should hold numbers"),
    "best lacks its metrics": (replaced(best={"step": 3}), "'best' should be empty or have step"),
}


def tampered_copy(run, tmp_path, tamper):
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    for which in ("best", "last"):
        state = load_checkpoint(checkpoint_path(copy, which))
        state.pop("format")
        save_checkpoint(tamper(state), checkpoint_path(copy, which))
    return copy


@pytest.mark.parametrize("case", TAMPERINGS)
def test_a_tampered_checkpoint_is_one_line_for_every_command(run, tmp_path, case):
    tamper, fragment = TAMPERINGS[case]
    copy = tampered_copy(run, tmp_path, tamper)
    before = snapshot(copy)
    for args in (["attend", "0 1 2"], ["eval"], ["predict", "0 1 2"], ["train", "--resume"]):
        run_option = [] if args[0] == "train" else ["--run"]
        assert_user_error(invoke(*args, *run_option, copy), fragment)
    assert snapshot(copy) == before  # a refused resume changes nothing


@pytest.mark.parametrize("case", RESUME_ONLY)
def test_a_checkpoint_that_cannot_be_resumed_is_one_line(run, tmp_path, case):
    tamper, fragment = RESUME_ONLY[case]
    copy = tampered_copy(run, tmp_path, tamper)
    before = snapshot(copy)
    for extra in ([], ["--set", "train.steps=14"]):
        assert_user_error(invoke("train", "--resume", copy, *extra), fragment)
    assert snapshot(copy) == before
    result = invoke("predict", "0 1 2", "--run", copy)  # the weights themselves are fine
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def muon_run(tmp_path_factory):
    """A tiny finished run trained with train.optimizer: muon."""
    return train_tiny_run(tmp_path_factory.mktemp("hostile-muon"), train={"optimizer": "muon"})


def muon_moments(buffer):
    """Replaces the momentum of every weight Muon steps (the first of the optimizer's parts)."""

    def tamper(state):
        muon, adamw = state["optimizer"]["parts"]
        muon = {**muon, "state": {index: {"momentum_buffer": buffer} for index in muon["state"]}}
        return {**state, "optimizer": {"parts": [muon, adamw]}}

    return tamper


@pytest.mark.parametrize("case", ["moments", "settings", "another optimizer"])
def test_a_muon_checkpoint_that_cannot_be_resumed_is_one_line(muon_run, run, tmp_path, case):
    if case == "another optimizer":  # an AdamW run whose config.yaml was edited by hand
        copy = tampered_copy(run, tmp_path, lambda state: state)
        config = copy / "config.yaml"
        config.write_text(config.read_text().replace("optimizer: adamw", "optimizer: muon"))
        assert "optimizer: muon" in config.read_text()
        fragment = "its 'optimizer' is the state of another optimizer than train.optimizer=muon"
    elif case == "moments":
        copy = tampered_copy(muon_run, tmp_path, muon_moments(torch.zeros(3)))
        fragment = "momentum_buffer is a tensor of shape (3,), not a tensor of shape"
    else:  # settings are the config's, whatever the file says (a momentum of 5 diverges)
        copy = tampered_copy(muon_run, tmp_path, optimizer_parts_groups(ns_steps=200, momentum=5.0, nesterov=False))
        result = invoke("train", "--resume", copy, "--set", "train.steps=14")
        assert result.exit_code == 0, result.output
        (muon_settings,) = load_checkpoint(checkpoint_path(copy, "last"))["optimizer"]["parts"][0]["param_groups"]
        assert muon_settings["ns_steps"] == 5 and muon_settings["momentum"] == 0.95 and "nesterov" not in muon_settings
        adamw_groups = load_checkpoint(checkpoint_path(copy, "last"))["optimizer"]["parts"][1]["param_groups"]
        assert all("momentum" not in group and "ns_steps" not in group for group in adamw_groups)
        return
    before = snapshot(copy)
    assert_user_error(invoke("train", "--resume", copy, "--set", "train.steps=14"), fragment)
    assert snapshot(copy) == before


@pytest.mark.parametrize(
    "tamper",
    [optimizer_groups(betas=(0.9,)), lambda s: {**s, "scheduler": {**s["scheduler"], "base_lrs": [1.0, 2.0]}}],
    ids=["one beta", "two peak rates"],
)
def test_a_resume_takes_the_optimizer_settings_from_the_config_not_the_file(run, tmp_path, tamper):
    """Settings in a checkpoint that torch would trip over mid-training are replaced by the
    config's (the checkpoint only gives the optimizer's state)."""
    copy = tampered_copy(run, tmp_path, tamper)
    result = invoke("train", "--resume", copy, "--set", "train.steps=14")
    assert result.exit_code == 0, result.output
    state = load_checkpoint(checkpoint_path(copy, "last"))
    assert state["step"] == 14 and [g["betas"] for g in state["optimizer"]["param_groups"]] == [(0.9, 0.999)] * 2
    assert state["scheduler"]["base_lrs"] == [1e-3, 1e-3]  # the tiny config's train.lr (the default)


def test_load_checkpoint_refuses_the_wrong_kinds_of_data(tmp_path):
    path = tmp_path / "x.pt"
    save_checkpoint({"step": 0, "weights": torch.ones(2)}, path)  # other keys: any data
    assert load_checkpoint(path)["step"] == 0
    for state, fragment in [
        ({"step": "abc"}, "'step' is 'abc'"),
        ({"step": 1.0}, "'step' is 1.0"),
        ({"weights": torch.ones(2)}, "it has no 'step'"),
        ({"step": 1, "model": torch.ones(2)}, "'model' is a tensor of shape (2,)"),
        ({"step": 1, "model": {"w": [1.0]}}, "'model' maps 'w' to a list of 1"),
        ({"step": 1, "best": "x" * 100}, "'best' is 'xxxx"),
    ]:
        save_checkpoint(state, path)
        with pytest.raises(CheckpointError, match="not a usable tinytf checkpoint") as raised:
            load_checkpoint(path)
        assert fragment in str(raised.value) and "\n" not in str(raised.value)


# ---- an output encoding that cannot show the shading characters


def test_shades_fall_back_to_ascii_where_the_output_cannot_show_them():
    def stream(encoding):
        return io.TextIOWrapper(io.BytesIO(), encoding=encoding)

    assert terminal_shades(stream("utf-8")) == SHADES
    for encoding in ("cp1252", "ascii", "latin-1"):
        assert terminal_shades(stream(encoding)) == ASCII_SHADES
    assert len(ASCII_SHADES) == len(SHADES) and ASCII_SHADES.isascii()


def test_attend_under_cp1252_prints_ascii_shades(run):
    env = {**SUBPROCESS_ENV, "PYTHONIOENCODING": "cp1252"}
    result = subprocess.run(
        [sys.executable, "-m", "tinytf", "attend", "0 1 2", "--run", str(run)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    stdout, stderr = result.stdout.decode("cp1252"), result.stderr.decode("cp1252", "replace")
    assert result.returncode == 0, stderr
    assert "Traceback" not in stderr and "UnicodeEncodeError" not in stderr
    assert "head 0" in stdout and "-> " in stdout
    assert not set(SHADES[1:]) & set(stdout)
    rows = [line for line in stdout.splitlines() if " -> " in line]
    assert rows and ASCII_SHADES[-1] * 2 in rows[0]  # a decoder's first token attends to itself alone
