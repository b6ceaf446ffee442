"""The product as users meet it: train, attend, predict and eval through the real CLI."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from tinytf.attend import attention_report
from tinytf.checkpoint import load_checkpoint
from tinytf.cli import app
from tinytf.runs import checkpoint_path, load_run

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

TINY = {
    "task": {"name": "sort", "vocab_size": 5, "min_len": 3, "max_len": 5, "eval_size": 40},
    "model": {"arch": "decoder", "d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32},
    "train": {"steps": 20, "batch_size": 16, "eval_every": 10, "checkpoint_every": 10, "device": "cpu"},
    "log": {"every": 5, "attention_every": 10},
}


def write_config(folder, data):
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def invoke(*args):
    return runner.invoke(app, [str(arg) for arg in args])


def assert_user_error(result, fragment):
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert fragment in result.stderr, result.stderr


@pytest.fixture(scope="module", params=["decoder", "encoder", "encoder-decoder"])
def trained(request, tmp_path_factory):
    """A tiny trained run per architecture: (runs folder, run folder)."""
    folder = tmp_path_factory.mktemp(request.param)
    data = {**TINY, "model": {**TINY["model"], "arch": request.param}}
    result = invoke("train", write_config(folder, data), "--runs-dir", folder / "runs")
    assert result.exit_code == 0, result.output
    (run_dir,) = (folder / "runs").iterdir()
    assert f"run: {run_dir}" in result.stdout
    return folder / "runs", run_dir


def test_attend_json_holds_the_model_s_own_weights(trained):
    runs, run_dir = trained
    result = invoke("attend", "3 1 2 0", "--runs-dir", runs, "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    loaded = load_run(run_dir)
    expected = attention_report(loaded.model, loaded.framing, "3 1 2 0")
    assert [entry["stack"] + str(entry["layer"]) + entry["kind"] for entry in report["attention"]] == [
        m.stack + str(m.layer) + m.kind for m in expected.maps
    ]
    for entry, attention_map in zip(report["attention"], expected.maps, strict=True):
        weights = np.array(entry["weights"])
        assert weights.shape == (2, len(entry["query_tokens"]), len(entry["key_tokens"]))
        np.testing.assert_allclose(weights, attention_map.weights, atol=1e-6)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        if entry["stack"] == "decoder" and entry["kind"] == "self":
            assert np.abs(np.triu(weights, k=1)).max() == 0.0  # causal: nothing above the diagonal


def test_attend_weights_equal_a_direct_forward_pass(trained):
    _, run_dir = trained
    loaded = load_run(run_dir)
    report = attention_report(loaded.model, loaded.framing, "4 4 1")
    vocab = loaded.vocab
    tokens = torch.tensor([vocab.encode(report.tokens)])
    source = torch.tensor([vocab.encode(report.source_tokens)]) if report.source_tokens else None
    _, weights = loaded.model(tokens, source=source, return_attention=True)
    for attention_map in report.maps:
        np.testing.assert_array_equal(attention_map.weights, weights[attention_map.name][0].detach().numpy())


def test_attend_table_npz_and_png(trained, tmp_path, monkeypatch):
    runs, _ = trained
    runs = runs.resolve()
    table = invoke("attend", "1 2 3", "--runs-dir", runs)
    assert table.exit_code == 0, table.output
    assert "head 0" in table.stdout and "head 1" in table.stdout and "keys:" in table.stdout

    monkeypatch.chdir(tmp_path)
    first = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "npz")
    second = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "npz")
    assert first.exit_code == second.exit_code == 0
    assert (tmp_path / "attention.npz").exists() and (tmp_path / "attention-2.npz").exists()  # never overwritten
    arrays = np.load(tmp_path / "attention.npz")
    names = [name for name in arrays.files if "." in name]
    assert names and all(arrays[name].ndim == 3 for name in names)
    assert "tokens" in arrays.files

    png = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "png", "--out", tmp_path / "grid.png")
    assert png.exit_code == 0, png.output
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_attend_one_layer_and_head(trained):
    runs, _ = trained
    result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "json", "--layer", "1", "--head", "1")
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)["attention"]
    assert entries and all(entry["layer"] == 1 and len(entry["weights"]) == 1 for entry in entries)


def test_predict_and_eval(trained, tmp_path):
    runs, run_dir = trained
    single = invoke("predict", "3 1 2", "--runs-dir", runs)
    assert single.exit_code == 0 and len(single.stdout.splitlines()) == 1
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("3 1 2\n\n0 0 4 1\n2 2 2\n")
    many = invoke("predict", "--file", inputs, "--run", run_dir, "--format", "json")
    assert many.exit_code == 0, many.output
    lines = [json.loads(line) for line in many.stdout.splitlines()]
    assert [line["input"] for line in lines] == [["3", "1", "2"], ["0", "0", "4", "1"], ["2", "2", "2"]]
    assert all(isinstance(line["output"], list) for line in lines)

    scored = invoke("eval", "--runs-dir", runs, "--n", "25")
    assert scored.exit_code == 0, scored.output
    assert "25 held-out examples" in scored.stdout
    for metric in ("loss", "token_acc", "seq_acc"):
        assert metric in scored.stdout


def test_user_errors_after_training(trained, tmp_path):
    runs, run_dir = trained
    assert_user_error(invoke("attend", "1 9 2", "--runs-dir", runs), "unknown token '9'")
    assert_user_error(invoke("attend", " ".join(["1"] * 300), "--runs-dir", runs), "model.max_len")
    assert_user_error(invoke("attend", "1 2", "--runs-dir", runs, "--layer", "7"), "--layer 7 is out of range")
    assert_user_error(invoke("attend", "1 2", "--runs-dir", runs, "--head", "2"), "--head 2 is out of range")
    assert_user_error(invoke("eval", "--run", run_dir, "--n", "100000"), "held-out set has")
    assert_user_error(invoke("predict", "--runs-dir", runs), "either TEXT or --file")
    assert_user_error(invoke("predict", "--file", tmp_path / "none.txt", "--runs-dir", runs), "cannot read")


def test_errors_without_a_trained_run(tmp_path):
    assert_user_error(invoke("attend", "1 2", "--runs-dir", tmp_path / "empty"), "no runs in")
    assert_user_error(invoke("predict", "1 2", "--run", tmp_path / "nope"), "run folder not found")
    half = tmp_path / "runs" / "half"
    (half / "checkpoints").mkdir(parents=True)
    (half / "config.yaml").write_text(yaml.safe_dump(TINY))
    (half / "vocab.json").write_text(json.dumps({"split": "word", "tokens": ["<pad>", "<bos>", "<sep>", "<eos>"]}))
    assert_user_error(invoke("eval", "--run", half), "no best checkpoint yet")
    assert_user_error(invoke("train", "--resume", half), "checkpoint not found")
    assert_user_error(invoke("train", write_config(tmp_path, TINY), "--resume", half), "drop CONFIG")


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


def test_ctrl_c_saves_and_prints_the_resume_command(tmp_path):
    data = {**TINY, "train": {**TINY["train"], "steps": 100000, "checkpoint_every": 100000}}
    config = write_config(tmp_path, data)
    process = subprocess.Popen(
        [sys.executable, "-m", "tinytf", "train", str(config), "--runs-dir", str(tmp_path / "runs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list((tmp_path / "runs").glob("*/checkpoints/best.pt")):
            time.sleep(0.2)  # wait until training is under way (the first evaluation is done)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert f"resume with: tinytf train --resume {run_dir}" in stderr
    assert load_checkpoint(checkpoint_path(run_dir, "last"))["step"] >= 10


def test_resume_with_a_changed_model_is_refused_and_changes_nothing(trained):
    _, run_dir = trained
    config_before = (run_dir / "config.yaml").read_text()
    result = invoke("train", "--resume", run_dir, "--set", "model.d_model=32")
    assert_user_error(result, "does not fit this config")
    assert (run_dir / "config.yaml").read_text() == config_before


def test_resuming_a_finished_run_trains_on_only_when_asked(trained):
    _, run_dir = trained
    steps_before = load_checkpoint(checkpoint_path(run_dir, "last"))["step"]
    again = invoke("train", "--resume", run_dir)
    assert again.exit_code == 0, again.output
    assert load_checkpoint(checkpoint_path(run_dir, "last"))["step"] == steps_before


def test_board_needs_a_runs_folder(tmp_path):
    assert_user_error(invoke("board", "--runs-dir", tmp_path / "nothing"), "no such folder")


def test_unwritable_places_are_one_line_errors(trained, tmp_path):
    runs, _ = trained
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_user_error(invoke("attend", "1 2", "--runs-dir", runs, "--format", "npz", "--out", blocker / "x.npz"),
                      "cannot write")  # fmt: skip
    assert_user_error(invoke("train", write_config(tmp_path, TINY), "--runs-dir", blocker / "runs"),
                      "cannot create a run folder")  # fmt: skip
