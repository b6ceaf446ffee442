"""What the user can get wrong on the command line ends in one `error: ` line and exit
code 2: usage errors, --out that is not a plain file of the format asked for, --file
that never ends, run names that leave --runs-dir. And predict --file answers line by line."""

import contextlib
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import SUBPROCESS_ENV, assert_user_error, invoke, tiny_data, write_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny trained decoder run (sort, 5 symbols); returns its runs folder."""
    folder = tmp_path_factory.mktemp("trained")
    data = tiny_data(train={"steps": 4, "eval_every": 4, "checkpoint_every": 4}, log={"attention_every": 100})
    result = invoke("train", write_config(folder, data), "--runs-dir", folder / "runs")
    assert result.exit_code == 0, result.output
    return folder / "runs"


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


def drain(fifo):
    """Open `fifo` for reading and read it to the end (a writer blocked on it goes on)."""
    with open(fifo, "rb") as reader:
        while reader.read(65536):
            pass


def close_writer(fifo):
    """Open `fifo` for writing and close it (a reader blocked on it reads end of file)."""
    with open(fifo, "wb"):
        pass


def files_under(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


# --------------------------------------------------------------------------- 13: usage errors

USAGE_ERRORS = [
    (["attend", "1 2", "--format", "bogus"], "error: --format: 'bogus' is not one of table, json, npz, png, html\n"),
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


# --------------------------------------------------------------------------- 11 and 8: attend --out


def test_attend_out_with_another_format_s_suffix_is_refused(runs, tmp_path):
    for output_format, name in [("png", "fig.txt"), ("npz", "weights.json"), ("json", "weights.npz"), ("png", "f.npz")]:
        result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", output_format, "--out", tmp_path / name)
        assert_user_error(result, f"--format {output_format}")
        assert name.rpartition(".")[2] in result.stderr
    table = invoke("attend", "1 2 3", "--runs-dir", runs, "--out", tmp_path / "table.txt")
    assert_user_error(table, "--out is for html, json, npz or png")
    assert files_under(tmp_path) == []


def test_attend_out_without_a_suffix_writes_exactly_that_file(runs, tmp_path):
    for output_format in ("png", "npz", "json"):
        path = tmp_path / f"exactly-{output_format}"
        result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", output_format, "--out", path)
        assert result.exit_code == 0, result.output
        assert result.stdout == f"wrote {path}\n"
    assert files_under(tmp_path) == ["exactly-json", "exactly-npz", "exactly-png"]
    assert (tmp_path / "exactly-png").read_bytes()[:8] == PNG_MAGIC
    assert "tokens" in np.load(tmp_path / "exactly-npz").files
    assert json.loads((tmp_path / "exactly-json").read_text())["tokens"]


def test_attend_out_png_upper_case_suffix_is_png(runs, tmp_path):
    result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "png", "--out", tmp_path / "FIG.PNG")
    assert result.exit_code == 0, result.output
    assert files_under(tmp_path) == ["FIG.PNG"] and (tmp_path / "FIG.PNG").read_bytes()[:8] == PNG_MAGIC


def test_attend_out_a_folder_is_refused(runs, tmp_path):
    folder = tmp_path / "figs"
    folder.mkdir()
    for output_format in ("png", "npz", "json"):
        result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", output_format, "--out", folder)
        assert_user_error(result, f"--out {folder}: is a folder")
    assert files_under(tmp_path) == ["figs"]  # nothing beside it (no figs.png) and nothing in it


def test_attend_out_a_fifo_or_device_is_refused(runs, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for output_format in ("json", "npz", "png"):
        with unblocked_after(20, lambda: drain(fifo)):
            result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", output_format, "--out", fifo)
        assert_user_error(result, f"--out {fifo}: not a regular file")
    if os.path.exists("/dev/null"):
        result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "json", "--out", "/dev/null")
        assert_user_error(result, "--out /dev/null: not a regular file")


# --------------------------------------------------------------------------- 8: predict --file


def test_predict_file_must_be_a_regular_file(runs, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with unblocked_after(20, lambda: close_writer(fifo)):
        result = invoke("predict", "--file", fifo, "--runs-dir", runs)
    assert_user_error(result, f"{fifo}: cannot read: not a regular file")
    assert_user_error(invoke("predict", "--file", tmp_path, "--runs-dir", runs), "is a folder")
    if os.path.exists("/dev/zero"):  # only reached once a FIFO is refused: reading it would never end
        assert_user_error(invoke("predict", "--file", "/dev/zero", "--runs-dir", runs), "not a regular file")


def test_predict_file_size_is_bounded(runs, tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as file:
        file.truncate(10_000_001)  # sparse: no time or disk to make
    assert_user_error(invoke("predict", "--file", big, "--runs-dir", runs), "--file takes at most 10,000,000 bytes")


# --------------------------------------------------------------------------- 19: predict --file, line by line


def test_predict_file_gives_one_output_per_line(runs, tmp_path):
    inputs = tmp_path / "inputs.txt"
    inputs.write_bytes(b"3 1 2\n\n0 0 4 1\r\n   \n2 2 2\n")
    as_json = invoke("predict", "--file", inputs, "--runs-dir", runs, "--format", "json")
    assert as_json.exit_code == 0, as_json.output
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [row["input"] for row in rows] == [["3", "1", "2"], [], ["0", "0", "4", "1"], [], ["2", "2", "2"]]
    assert rows[1] == rows[3] == {"input": [], "output": []}
    assert all(row["output"] for row in rows if row["input"])  # a sort model answers every input

    as_text = invoke("predict", "--file", inputs, "--runs-dir", runs)
    assert as_text.exit_code == 0, as_text.output
    lines = as_text.stdout.split("\n")
    assert len(lines) == 6 and lines[-1] == ""  # five lines, each ended by a newline
    assert lines[1] == lines[3] == ""
    assert [line.split() for line in lines[:5]] == [row["output"] for row in rows]


def test_predict_file_splits_at_newlines_only(runs, tmp_path):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("1 2\x0b3\n4\u20283 0\x1c1", encoding="utf-8")  # no newline at the end either
    result = invoke("predict", "--file", inputs, "--runs-dir", runs, "--format", "json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["input"] for row in rows] == [["1", "2", "3"], ["4", "3", "0", "1"]]


def test_predict_file_errors_name_the_file_s_line(runs, tmp_path):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("1 2\n\n\n1 9 2\n3 3\n")
    result = invoke("predict", "--file", inputs, "--runs-dir", runs)
    assert_user_error(result, f"{inputs}: line 4: unknown token '9'")
    assert result.stdout == ""
    inputs.write_text("\n\n" + " ".join(["1"] * 300) + "\n")  # the only input: still its line named
    assert_user_error(invoke("predict", "--file", inputs, "--runs-dir", runs), f"{inputs}: line 3: the input makes")
    inputs.write_bytes(b"1 2\n3 \xff\n")
    assert_user_error(invoke("predict", "--file", inputs, "--runs-dir", runs), f"{inputs}: line 2: not UTF-8")
    inputs.write_text("\n  \n")
    assert_user_error(invoke("predict", "--file", inputs, "--runs-dir", runs), "no inputs")


# --------------------------------------------------------------------------- 16: train --name


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".hidden", "x\\y", ""])
def test_train_name_must_stay_inside_runs_dir(name, tmp_path):
    config = write_config(tmp_path, tiny_data(train={"steps": 2, "eval_every": 2}))
    result = invoke("train", config, "--runs-dir", tmp_path / "runs", "--name", name)
    assert_user_error(result, f"--name {name!r}: a run name is one folder name")
    assert files_under(tmp_path) == ["tiny.yaml"]  # no run anywhere: not beside --runs-dir, not in it
