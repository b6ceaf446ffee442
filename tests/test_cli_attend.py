"""`tinytf attend`: the weights it prints and writes are the model's own, for every
architecture, format, layer, head, checkpoint and imposed answer; `--out` writes only a
plain file of the format asked for."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import (
    ROOT,
    SUBPROCESS_ENV,
    TINY,
    assert_user_error,
    copy_run,
    files_under,
    invoke,
    unblocked_after,
    write_config,
)

from tinytf.inspect.attend import attention_report
from tinytf.inspect.viz import ASCII_SHADES, SHADES, terminal_shades
from tinytf.run.checkpoint import load_checkpoint, save_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.run.load import load_run


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


def test_attend_out_help_says_what_each_format_does_without_it(run, tmp_path, monkeypatch):
    from typer.main import get_command

    from tinytf.cli.app import app

    (out,) = [param for param in get_command(app).commands["attend"].params if param.name == "out"]
    assert "json prints to the terminal" in out.help and "a new attention.npz, .png or .html" in out.help
    monkeypatch.chdir(tmp_path)  # and so they do
    shown = invoke("attend", "1 2 3", "--run", run, "--format", "json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["tokens"] and not list(tmp_path.iterdir())
    for output_format in ("npz", "png", "html"):
        written = invoke("attend", "1 2 3", "--run", run, "--format", output_format)
        assert written.exit_code == 0 and written.stdout.startswith(f"wrote attention.{output_format}\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["attention.html", "attention.npz", "attention.png"]


def test_attend_one_layer_and_head(trained):
    runs, _ = trained
    result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "json", "--layer", "1", "--head", "1")
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)["attention"]
    whole = json.loads(invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "json").stdout)["attention"]
    assert [entry["heads"] for entry in whole] == [list(range(len(entry["weights"]))) for entry in whole]
    layer_1 = [entry for entry in whole if entry["layer"] == 1]
    assert entries and [(e["stack"], e["kind"]) for e in entries] == [(e["stack"], e["kind"]) for e in layer_1]
    for one, all_heads in zip(entries, layer_1, strict=True):  # head 1 itself: its weights in the full report
        assert one["layer"] == 1 and one["heads"] == [1]
        assert one["weights"] == [all_heads["weights"][1]]


@pytest.mark.parametrize("trained", ["decoder", "encoder-decoder"], indirect=True)
def test_attend_with_a_target_reads_that_answer(trained):
    runs, _ = trained
    own = json.loads(invoke("attend", "3 1 2", "--runs-dir", runs, "--format", "json").stdout)["answer"]
    target = ["4", "0", "4", "0"] if own != ["4", "0", "4", "0"] else ["0", "4"]  # never the model's own answer
    result = invoke("attend", "3 1 2", "--runs-dir", runs, "--target", " ".join(target), "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["answer"] == target
    if report["source_tokens"] is None:  # decoder: question and answer in one sequence
        assert report["tokens"] == ["3", "1", "2", "<sep>", *target]
    else:  # encoder-decoder: the encoder reads the question, the decoder the answer
        assert report["source_tokens"] == ["3", "1", "2"] and report["tokens"] == ["<bos>", *target]
    for entry in report["attention"]:
        if entry["stack"] == "decoder":
            assert entry["query_tokens"] == report["tokens"]
            assert entry["key_tokens"] == (report["tokens"] if entry["kind"] == "self" else ["3", "1", "2"])
    table = invoke("attend", "3 1 2", "--runs-dir", runs, "--target", " ".join(target))
    assert table.exit_code == 0, table.output
    assert f"answer: {' '.join(target)}\n" in table.stdout and f"answer: {' '.join(own)}\n" not in table.stdout


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_a_run_with_bos_shows_it_before_the_question_and_answers(arch, tmp_path):
    data = {**TINY, "task": {**TINY["task"], "bos": True}, "model": {**TINY["model"], "arch": arch}}
    runs = tmp_path / "runs"
    assert invoke("train", write_config(tmp_path, data), "--runs-dir", runs).exit_code == 0
    result = invoke("attend", "3 1 2", "--runs-dir", runs, "--target", "1 2 3", "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    if arch == "decoder":
        assert report["tokens"] == ["<bos>", "3", "1", "2", "<sep>", "1", "2", "3"]
    else:
        assert report["source_tokens"] == ["<bos>", "3", "1", "2"] and report["tokens"] == ["<bos>", "1", "2", "3"]
    predicted = invoke("predict", "3 1 2", "--runs-dir", runs, "--format", "json")
    assert predicted.exit_code == 0, predicted.output
    assert json.loads(predicted.stdout)["input"] == ["3", "1", "2"]  # <bos> is the framing's, not the input's


@pytest.mark.parametrize("trained", ["encoder"], indirect=True)
def test_attend_with_a_target_on_an_encoder_is_an_error(trained):
    runs, _ = trained
    result = invoke("attend", "3 1 2", "--runs-dir", runs, "--target", "1 2 3")
    assert_user_error(result, "an encoder answers every position at once")
    assert result.stdout == ""


@pytest.mark.parametrize("trained", ["decoder"], indirect=True)
def test_attend_checkpoint_last_reads_last_pt(trained, tmp_path):
    run_dir = copy_run(trained[1], tmp_path)
    # A last.pt unlike best.pt: another step, and sharper attention (queries and keys scaled up).
    state = load_checkpoint(RunFolder(run_dir).checkpoint("last"))
    state["step"] = 999
    state["model"] = {key: value * 1.5 if value.is_floating_point() else value for key, value in state["model"].items()}
    save_checkpoint(state, RunFolder(run_dir).checkpoint("last"))

    best_step = load_checkpoint(RunFolder(run_dir).checkpoint("best"))["step"]
    last = invoke("attend", "3 1 2", "--run", run_dir, "--checkpoint", "last")
    best = invoke("attend", "3 1 2", "--run", run_dir)
    assert last.exit_code == best.exit_code == 0, last.output + best.output
    assert last.stdout.startswith(f"run {run_dir} (last checkpoint, step 999)\n")
    assert best.stdout.startswith(f"run {run_dir} (best checkpoint, step {best_step})\n")

    report = json.loads(invoke("attend", "3 1 2", "--run", run_dir, "--checkpoint", "last", "--format", "json").stdout)
    loaded = load_run(run_dir, "last")
    expected = attention_report(loaded.model, loaded.framing, "3 1 2")
    best_report = attention_report(load_run(run_dir, "best").model, loaded.framing, "3 1 2")
    for entry, from_last, from_best in zip(report["attention"], expected.maps, best_report.maps, strict=True):
        np.testing.assert_allclose(np.array(entry["weights"]), from_last.weights, atol=1e-6)
        assert not np.allclose(np.array(entry["weights"]), from_best.weights, atol=1e-4)


def test_user_errors_after_training(trained, tmp_path):
    runs, run_dir = trained
    assert_user_error(invoke("attend", "1 9 2", "--runs-dir", runs), "unknown token '9'")
    assert_user_error(invoke("attend", " ".join(["1"] * 300), "--runs-dir", runs), "model.max_len")
    assert_user_error(invoke("attend", "1 2", "--runs-dir", runs, "--layer", "7"), "--layer 7 is out of range")
    assert_user_error(invoke("attend", "1 2", "--runs-dir", runs, "--head", "2"), "--head 2 is out of range")
    assert_user_error(invoke("eval", "--run", run_dir, "--n", "100000"), "held-out set has")
    assert_user_error(invoke("predict", "--runs-dir", runs), "either TEXT or --file")
    assert_user_error(invoke("predict", "--file", tmp_path / "none.txt", "--runs-dir", runs), "cannot read")


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def drain(fifo):
    """Open `fifo` for reading and read it to the end (a writer blocked on it goes on)."""
    with open(fifo, "rb") as reader:
        while reader.read(65536):
            pass


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


OUT_FORMATS = {"json": b"{", "npz": b"PK", "png": PNG_MAGIC, "html": b"<!DOCTYPE html>"}  # each file's first bytes


def test_out_replaces_a_file_and_writes_through_a_link_alike_for_every_format(runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for output_format, first_bytes in OUT_FORMATS.items():
        existing, target, link = (tmp_path / f"{name}.{output_format}" for name in ("existing", "target", "link"))
        existing.write_text("old")
        target.write_text("old")
        link.symlink_to(target)
        for out in (existing, link):
            result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", output_format, "--out", out)
            assert result.exit_code == 0, result.output
        assert existing.read_bytes().startswith(first_bytes)
        assert link.is_symlink() and target.read_bytes().startswith(first_bytes)  # written through, as `>` does
    existing = tmp_path / "heads.txt"
    existing.write_text("old")
    assert invoke("heads", "--runs-dir", runs, "--out", existing).exit_code == 0
    assert "old" not in existing.read_text()
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob("attention*"))


def test_out_in_a_missing_folder_is_refused_before_the_model_runs(runs, tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the model ran")

    monkeypatch.setattr("tinytf.cli.runs.load_chosen_run", never)
    missing = tmp_path / "missing"
    for output_format in OUT_FORMATS:
        result = invoke("attend", "1 2 3", "--runs-dir", runs, "--format", output_format, "--out", missing / "a")
        assert_user_error(result, f"--out {missing / 'a'}: no folder {missing}; create it first")
    assert_user_error(invoke("heads", "--runs-dir", runs, "--out", missing / "h.txt"), f"no folder {missing}")
    assert files_under(tmp_path) == []


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
