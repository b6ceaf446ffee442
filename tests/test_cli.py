"""The command line as a whole: help, `config show`, `tasks`, usage errors, and one `error: `
line with exit code 2 for every mistake, through the CLI and through `python -m tinytf`."""

import functools
import json
import os
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import CONFIGS, ROOT, SUBPROCESS_ENV, TINY, assert_user_error, invoke, tiny_data, write_config

from tinytf.config import TaskConfig
from tinytf.tasks import TASKS


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_show_prints_every_resolved_key(path):
    result = invoke("config", "show", path)
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.stdout)
    assert set(shown) == {"task", "model", "train", "log", "seed"}
    assert shown["model"]["d_model"] == yaml.safe_load(path.read_text())["model"]["d_model"]
    assert "d_ff" in shown["model"] and "warmup_steps" in shown["train"]  # defaults filled in


def test_config_show_applies_overrides():
    result = invoke("config", "show", ROOT / "configs/quickstart.yaml", "--set", "model.d_model=32", "--set", "seed=3")
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.stdout)
    assert shown["model"]["d_model"] == 32 and shown["seed"] == 3


@pytest.mark.parametrize(
    "file_text, args, fragment",
    [
        (None, [], "missing.yaml: cannot read: config file not found"),
        ("", ["--set", "model.d_modle=3"], "did you mean 'd_model'?"),
        # a section's key given at the top: its dotted path (both where two sections have it)
        ("", ["--set", "lr=0.1"], "--set lr=0.1: lr: unknown key (did you mean 'train.lr'?)"),
        ("", ["--set", "d_model=32"], "did you mean 'model.d_model'?"),
        ("", ["--set", "max_len=9"], "did you mean 'task.max_len' or 'model.max_len'?"),
        ("lr: 0.1\n", [], "line 1: lr: unknown key (did you mean 'train.lr'?)"),
        ("", ["--set", "zzz=1"], "zzz: unknown key (allowed: task, model, train, log, seed)"),
        ("model:\n  n_heads: four\n", [], "line 2: model.n_heads: Input should be a valid integer"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(file_text, args, fragment, tmp_path):
    path = tmp_path / "missing.yaml"
    if file_text is not None:
        path.write_text(file_text)
    result = invoke("config", "show", path, *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert fragment in result.stderr


def test_python_dash_m_reports_errors_without_traceback(tmp_path):
    """Through a real process: the installed entry point's exit code and stderr."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  d_model: 64\n   n_heads: 4\n")
    process = subprocess.run(
        [sys.executable, "-m", "tinytf", "config", "show", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env=SUBPROCESS_ENV,
    )
    assert process.returncode == 2
    assert "Traceback" not in process.stderr
    assert (
        process.stderr.strip() == f"error: {bad}: line 3, column 11: invalid YAML: mapping values are not allowed here"
    )


@functools.cache
def listed_tasks():
    """`tinytf tasks` parsed (once): task name -> the lines of its block."""
    result = invoke("tasks")
    assert result.exit_code == 0, result.output
    blocks = [block.splitlines() for block in result.stdout.strip().split("\n\n")]
    return {lines[0]: lines[1:] for lines in blocks}


def test_tasks_lists_every_task_with_its_architectures_and_keys():
    blocks = listed_tasks()
    assert list(blocks) == list(TASKS)
    for name, cls in TASKS.items():
        lines = blocks[name]
        assert lines[0] == f"  {cls.description}"
        assert f"  architectures: {', '.join(cls.archs)}" in lines
        assert any(line.startswith("  example: ") for line in lines)
    assert "  keys: task.name, task.digits, task.answer_order, task.eval_size" in blocks["add"]
    assert "  keys: task.name, task.vocab_size, task.min_len, task.max_len, task.bos, task.eval_size" in blocks["sort"]
    assert "  keys: task.name, task.path, task.tokenizer, task.max_len, task.eval_size" in blocks["text"]


@pytest.mark.parametrize("name", [name for name, cls in TASKS.items() if not cls.language_model])
def test_tasks_types_each_example_as_its_description_does(name):
    """`source -> target`, one space around the arrow, in the example as in the description;
    a task whose tokens are characters (add, dyck) writes them together in both, as predict does."""
    cls = TASKS[name]
    example = next(line for line in listed_tasks()[name] if line.startswith("  example: ")).removeprefix("  example: ")
    described = cls.description.rpartition(": ")[2]  # "... in the input: c a c b -> 2 1 2 1"
    together = cls(TaskConfig(name=name)).vocab.split == "char"
    for shown in (example, described):
        source, arrow, target = shown.partition(" -> ")
        assert arrow and "  " not in shown, shown
        assert (" " not in source + target) if together else source.split() == source.split(" "), shown


# A value for every key of the task section, one that a task using the key accepts.
TASK_KEY_VALUES = {
    "vocab_size": 3,
    "min_len": 3,
    "max_len": 6,
    "digits": 2,
    "answer_order": "lsd",
    "bos": True,
    "tokenizer": "word",
    "modulus": 23,
    "train_fraction": 0.5,
    "eval_size": 10,
}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_keys_tasks_lists_are_the_keys_config_show_accepts(name, tmp_path):
    """`tinytf tasks` and the config checks agree: each listed key loads, every other is refused."""
    (keys_line,) = [line for line in listed_tasks()[name] if line.startswith("  keys: ")]
    arch_of = {}  # listed key -> an architecture that reads it
    for entry in keys_line.removeprefix("  keys: task.").split(", task."):
        key, _, only = entry.partition(" (arch=")
        arch_of[key] = only.removesuffix(" only)") or TASKS[name].archs[0]
    assert arch_of.keys() <= TaskConfig.model_fields.keys()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one two three four five six seven eight nine ten " * 30)
    needed = {"path": str(corpus)} if name == "text" else {}
    for key in TaskConfig.model_fields.keys() - {"name"}:
        value = str(corpus) if key == "path" else TASK_KEY_VALUES[key]
        data = {"task": {"name": name, **needed, key: value}, "model": {"arch": arch_of.get(key, TASKS[name].archs[0])}}
        result = invoke("config", "show", write_config(tmp_path, data))
        if key in arch_of:
            assert result.exit_code == 0, (key, result.output)
        else:
            assert_user_error(result, f"task.{key}: {name} does not use it")


@pytest.mark.parametrize(
    "task, fragment",
    [
        ({"name": "text", "path": "/no/such.txt", "max_len": 8}, "/no/such.txt: cannot read: text file not found"),
        ({"name": "sort", "vocab_size": 5, "max_len": 5, "digits": 4}, "task.digits: sort does not use it"),
    ],
    ids=["missing task.path", "unused task key"],
)
def test_config_show_and_train_refuse_a_config_with_the_same_line(task, fragment, tmp_path):
    path = write_config(tmp_path, {**tiny_data(), "task": task})
    shown = invoke("config", "show", path)
    trained = invoke("train", path, "--runs-dir", tmp_path / "runs")
    assert_user_error(shown, fragment)
    assert_user_error(trained, fragment)
    assert trained.stderr == shown.stderr
    assert trained.stdout == shown.stdout == ""
    assert not (tmp_path / "runs").exists()  # refused before a run folder was made


USAGE_ERRORS = [
    (
        ["attend", "1 2", "--format", "bogus"],
        "error: --format: 'bogus' is not one of 'table', 'json', 'npz', 'png', 'html'\n",
    ),
    (["attend", "1 2", "--layer", "x"], "error: --layer: "),
    (["attend", "1 2", "--bogus"], "error: no such option: --bogus"),
    (["attend"], "error: missing argument 'text'\n"),
    (["attend", "1 2", "--format"], "error: option '--format' requires an argument\n"),
    (["bogus"], "error: no such command 'bogus'\n"),
    (["config", "show"], "error: missing argument 'config'\n"),
    (["eval", "--n", "0"], "error: --n: "),
    (["predict", "1 2", "3 4"], "error: got unexpected extra argument(s) (3 4)\n"),
]


@pytest.mark.parametrize(
    "args, start", USAGE_ERRORS, ids=lambda value: " ".join(value) if isinstance(value, list) else ""
)
def test_usage_errors_are_one_error_line(args, start):
    result = invoke(*args)
    assert_user_error(result, start.removeprefix("error: "))
    assert result.stderr.startswith(start) and result.stdout == ""


def test_usage_errors_through_python_dash_m():
    """`python -m tinytf` runs main(), the path a user takes (CliRunner calls the app)."""
    for args, start in USAGE_ERRORS:
        process = subprocess.run(
            [sys.executable, "-m", "tinytf", *args], capture_output=True, text=True, timeout=120, env=SUBPROCESS_ENV
        )
        assert process.returncode == 2, (args, process.stderr)
        assert process.stderr.startswith(start) and process.stderr.count("\n") == 1, (args, process.stderr)
        assert process.stdout == ""


def test_a_reader_that_leaves_early_ends_the_command_quietly():
    # `tinytf tasks | head -1`: the pipe's reader is gone before the command writes.
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb") as pipe:
        process = subprocess.run(
            [sys.executable, "-m", "tinytf", "tasks"],
            stdout=pipe,
            stderr=subprocess.PIPE,
            timeout=120,
            env=SUBPROCESS_ENV,
        )
    assert process.returncode == 141 and process.stderr == b""  # as a Unix tool stopped by SIGPIPE: no message


def test_help_still_works():
    for args in (["--help"], ["attend", "--help"], ["config", "--help"]):
        process = subprocess.run(
            [sys.executable, "-m", "tinytf", *args], capture_output=True, text=True, timeout=120, env=SUBPROCESS_ENV
        )
        assert process.returncode == 0, (args, process.stderr)
        assert "Usage: tinytf" in process.stdout and process.stderr == ""
    bare = subprocess.run(
        [sys.executable, "-m", "tinytf"], capture_output=True, text=True, timeout=120, env=SUBPROCESS_ENV
    )
    assert "Usage: tinytf" in bare.stdout and "train" in bare.stdout and "error" not in bare.stderr
    result = invoke("--help")
    assert result.exit_code == 0 and "Usage: " in result.stdout


def test_training_errors_are_one_line(tmp_path):
    bad = {**TINY, "model": {**TINY["model"], "n_heads": 3}}
    assert_user_error(invoke("train", write_config(tmp_path, bad)), "divisible by n_heads=3")
    assert_user_error(invoke("train", tmp_path / "missing.yaml"), "config file not found")
    if not torch.cuda.is_available():
        assert_user_error(invoke("train", write_config(tmp_path, TINY), "--device", "cuda"), "no cuda device")


def test_packaged_quickstart_is_the_shipped_one():
    packaged = ROOT / "tinytf" / "quickstart.yaml"
    assert packaged.read_text() == (ROOT / "configs" / "quickstart.yaml").read_text()


def test_train_without_config_uses_the_quickstart(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # works from any folder
    result = invoke("train", "--set", "train.steps=2", "--set", "train.eval_every=2", "--set", "task.eval_size=20")
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("quickstart-")
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["task"]["name"] == "sentences"


def test_board_needs_a_runs_folder(tmp_path):
    assert_user_error(invoke("board", "--runs-dir", tmp_path / "nothing"), "no such folder")


def test_errors_without_a_trained_run(tmp_path):
    assert_user_error(invoke("attend", "1 2", "--runs-dir", tmp_path / "empty"), "no runs in")
    assert_user_error(invoke("predict", "1 2", "--run", tmp_path / "nope"), "run folder not found")
    half = tmp_path / "runs" / "half"
    (half / "checkpoints").mkdir(parents=True)
    (half / "train.lock").touch()  # a run stopped before its first checkpoint
    (half / "config.yaml").write_text(yaml.safe_dump(TINY))
    (half / "vocab.json").write_text(json.dumps({"split": "word", "tokens": ["<pad>", "<bos>", "<sep>", "<eos>"]}))
    assert_user_error(invoke("eval", "--run", half), "no best checkpoint yet")
    assert_user_error(invoke("train", "--resume", half), "checkpoint not found")
    assert_user_error(invoke("train", write_config(tmp_path, TINY), "--resume", half), "drop CONFIG")
