"""What several test files share: the repository's paths, the tiny config every training
test starts from, the helpers that run the CLI and read or copy runs, and the trained runs
that read-only tests share for the whole session.

Test files import the helpers by name (`from conftest import tiny_config`): pytest puts
this folder on sys.path, since tests/ is not a package.
"""

import builtins
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tinytf.cli.app import app
from tinytf.config import config_from_dict
from tinytf.run.checkpoint import load_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.training.loggers import NullLogger

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))  # configs/rasp/ too

# A subprocess that trains gets one thread: the test process waiting on it holds the other core.
SUBPROCESS_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_runner = CliRunner()


# Tests run in parallel, a process per core (pytest-xdist's -n auto), so each takes one thread;
# tiny models run as fast on one as on several.
torch.set_num_threads(1)


class CtrlCAt(NullLogger):
    """Presses Ctrl-C (a real SIGINT to this process; or sends `signal_number`) when training
    finishes step `at`."""

    def __init__(self, at, signal_number=signal.SIGINT):
        self.at, self.signal_number = at, signal_number

    def step(self, step):
        if step == self.at:
            os.kill(os.getpid(), self.signal_number)


class CtrlCWhileSettingUp(NullLogger):
    """Presses Ctrl-C when the run folder exists but training has not begun (the loggers' start)."""

    def start(self, run_dir, start_step):
        os.kill(os.getpid(), signal.SIGINT)


def tiny_data(seed=0, **sections):
    """The tiny config as plain data: sort on 5 symbols, a 1-layer d_model=16 decoder,
    12 steps on the CPU, no attention maps. Each keyword is a section whose keys replace the base's, e.g.
    tiny_data(model={"arch": "encoder"}, train={"steps": 4})."""
    base = {
        "seed": seed,
        "task": {"name": "sort", "vocab_size": 5, "min_len": 3, "max_len": 5, "eval_size": 40},
        "model": {"arch": "decoder", "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.1},
        "train": {
            "steps": 12,
            "batch_size": 8,
            "eval_every": 4,
            "checkpoint_every": 100,
            "warmup_steps": 3,
            "device": "cpu",
            "precision": "fp32",
        },  # the same arithmetic on every CI machine
        "log": {"every": 2, "attention_every": None},  # drawing maps costs more than training: asked for where tested
    }
    for section, keys in sections.items():
        base[section] = base.get(section, {}) | keys
    return base


def tiny_config(seed=0, **sections):
    """`tiny_data` as a `Config`."""
    return config_from_dict(tiny_data(seed, **sections))


def write_config(folder, data, name="tiny.yaml"):
    """`data` as a YAML config file in `folder`; returns its path."""
    path = Path(folder) / name
    path.write_text(yaml.safe_dump(data))
    return path


def train_tiny_run(folder, **sections):
    """Train `tiny_data(**sections)` through the CLI into `folder`/runs; returns the run folder."""
    result = invoke("train", write_config(folder, tiny_data(**sections)), "--runs-dir", Path(folder) / "runs")
    assert result.exit_code == 0, result.output
    (run_dir,) = (Path(folder) / "runs").iterdir()
    return run_dir


def train_sentences_run(folder, eval_size):
    """A 2-layer language model of the sentences, trained through the CLI for a few seconds:
    long enough to learn agreement (every clean prompt's answer right), so that patching
    reads logit differences, not noise. Returns the run folder."""
    task = {"name": "sentences", "min_len": 3, "max_len": 10, "eval_size": eval_size}
    model = {"n_layers": 2, "max_len": 16, "dropout": 0.0}
    train = {"steps": 400, "eval_every": 400, "batch_size": 32, "lr": 1e-2}
    data = {**tiny_data(model=model, train=train), "task": task}
    assert invoke("train", write_config(folder, data), "--runs-dir", Path(folder) / "runs").exit_code == 0
    (run_dir,) = (Path(folder) / "runs").iterdir()
    return run_dir


def run_script(*args, returncode=0):
    """Run `python ARGS...` (a script and its arguments) in the repository root; the finished process, which must have
    exited with `returncode`."""
    done = subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=ROOT,
        env=SUBPROCESS_ENV,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == returncode, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def read_metrics(run_dir):
    """A run's metrics.jsonl as a list of dicts, in the order they were logged."""
    return RunFolder(run_dir).read_metrics()


def invoke(*args):
    """Run the `tinytf` CLI in this process; arguments may be paths or numbers."""
    return _runner.invoke(app, [str(arg) for arg in args])


def assert_user_error(result, fragment):
    """The CLI failed the way a user error must: exit code 2, one `error: ` line on stderr."""
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert fragment in result.stderr, result.stderr


def snapshot(run_dir):
    """Every file of a run folder with a hash of its bytes: equal snapshots, unchanged run."""
    return {
        str(path.relative_to(run_dir)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(Path(run_dir).rglob("*"))
        if path.is_file()
    }


def copy_run(run_dir, folder):
    """A copy of `run_dir` inside `folder`, for a test that changes a run others read."""
    return Path(shutil.copytree(run_dir, Path(folder) / Path(run_dir).name))


def files_under(folder):
    return sorted(str(path.relative_to(folder)) for path in Path(folder).rglob("*"))


def final_weights(run_dir):
    return load_checkpoint(RunFolder(run_dir).checkpoint("last"))["model"]


def assert_same_weights(expected, actual):
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


@contextlib.contextmanager
def unblocked_after(seconds, action):
    """Run `action` in a thread after `seconds` unless the block is done by then: the
    safety net that turns a hang on a FIFO (the bug) into a failed assertion."""
    timer = threading.Timer(seconds, action)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


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


# ---- trained runs shared by the tests that read them (a test that changes one copies it first)

# Two layers (for --layer 1), 20 steps, a checkpoint every 10.
TINY = tiny_data(
    model={"n_layers": 2},
    train={"steps": 20, "batch_size": 16, "eval_every": 10, "checkpoint_every": 10},
    log={"every": 5},
)


@pytest.fixture(scope="session")
def run(tmp_path_factory):
    """A tiny finished run (`tiny_data()`, 12 steps), alone in its runs folder."""
    return train_tiny_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="session")
def runs(run):
    """The runs folder that holds `run` alone."""
    return run.parent


@pytest.fixture(scope="session", params=["decoder", "encoder", "encoder-decoder"])
def trained(request, tmp_path_factory):
    """`TINY` trained through the CLI per architecture: (runs folder, run folder)."""
    folder = tmp_path_factory.mktemp(request.param)
    data = {**TINY, "model": {**TINY["model"], "arch": request.param}}
    result = invoke("train", write_config(folder, data), "--runs-dir", folder / "runs")
    assert result.exit_code == 0, result.output
    (run_dir,) = (folder / "runs").iterdir()
    assert result.stdout.startswith(f"run {run_dir}\n")
    return folder / "runs", run_dir


@pytest.fixture(scope="session")
def after_quickstart(tmp_path_factory):
    """A folder holding configs/ (a link to the repository's) and runs/ with a 2-step
    quickstart run: what the docs' examples expect to find in the repository root."""
    folder = tmp_path_factory.mktemp("after-quickstart")
    (folder / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    settings = ["train.steps=2", "train.device=cpu", "log.attention_every=null"]  # drawing maps costs seconds
    result = invoke("train", folder / "configs/quickstart.yaml", "--runs-dir", folder / "runs", *_sets(settings))
    assert result.exit_code == 0, result.output
    return folder


def _sets(settings: list[str]) -> list[str]:
    return [part for setting in settings for part in ("--set", setting)]
