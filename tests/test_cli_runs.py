"""The product as users meet it: train, attend, predict and eval through the real CLI."""

import json
import shutil
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
import yaml
from conftest import ROOT, SUBPROCESS_ENV, assert_user_error, invoke, read_metrics, tiny_data, write_config

from tinytf.attend import attention_report
from tinytf.checkpoint import load_checkpoint, save_checkpoint
from tinytf.framing import LM_CONTINUATION
from tinytf.runs import checkpoint_path, load_run

# Two layers (for --layer 1), 20 steps, a checkpoint every 10.
TINY = tiny_data(
    model={"n_layers": 2},
    train={"steps": 20, "batch_size": 16, "eval_every": 10, "checkpoint_every": 10},
    log={"every": 5, "attention_every": 10},
)


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
    # one output per line of the file, an empty one for the blank line
    assert [line["input"] for line in lines] == [["3", "1", "2"], [], ["0", "0", "4", "1"], ["2", "2", "2"]]
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


# `tinytf train` as a user runs it, plus a logger that prints a line once each evaluation is
# logged: the Ctrl-C test waits for that line (a blocking read), never for time to pass.
ANNOUNCING_TINYTF = """
import sys
import tinytf.training
from tinytf.cli import main
from tinytf.loggers import NullLogger

class AnnounceEvaluations(NullLogger):
    def metrics(self, step, split, values):
        if split == "val":
            print(f"evaluated step {step}", flush=True)

real_train = tinytf.training.train

def train(config, **kwargs):
    return real_train(config, **{**kwargs, "loggers": [*kwargs["loggers"], AnnounceEvaluations()]})

tinytf.training.train = train
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
    step = load_checkpoint(checkpoint_path(run_dir, "last"))["step"]
    assert step >= 10 and f"interrupted at step {step}; checkpoint saved in {run_dir}" in errors
    evaluated = [f"evaluated step {r['step']}" for r in read_metrics(run_dir) if r["split"] == "val"]
    assert (first + rest).splitlines() == evaluated
    assert max(r["step"] for r in read_metrics(run_dir)) <= step  # nothing logged past the saved step


def test_resume_with_a_changed_model_is_refused_and_changes_nothing(trained):
    _, run_dir = trained
    config_before = (run_dir / "config.yaml").read_text()
    result = invoke("train", "--resume", run_dir, "--set", "model.d_model=32")
    assert_user_error(result, "--set model.d_model=32: model.d_model: a resumed run keeps its task, model, seed")
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
    assert_user_error(
        invoke("attend", "1 2", "--runs-dir", runs, "--format", "npz", "--out", blocker / "x.npz"), "cannot write"
    )
    assert_user_error(
        invoke("train", write_config(tmp_path, TINY), "--runs-dir", blocker / "runs"), "cannot create a run folder"
    )


# ---- attend --target, attend --checkpoint, predict on a language model, resume with more steps


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
    _, original = trained
    run_dir = tmp_path / original.name
    shutil.copytree(original, run_dir)
    # A last.pt unlike best.pt: another step, and sharper attention (queries and keys scaled up).
    state = load_checkpoint(checkpoint_path(run_dir, "last"))
    state["step"] = 999
    state["model"] = {key: value * 1.5 if value.is_floating_point() else value for key, value in state["model"].items()}
    save_checkpoint(state, checkpoint_path(run_dir, "last"))

    best_step = load_checkpoint(checkpoint_path(run_dir, "best"))["step"]
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


def greedy_continuation(loaded, prompt):
    """A language model's continuation of `prompt` the slow way: one full forward pass per
    new word, no cache, until <eos> or LM_CONTINUATION words."""
    vocab = loaded.vocab
    ids = [vocab.bos_id, *vocab.encode(prompt)]  # sentences begin with <bos>
    words = []
    with torch.no_grad():
        while len(words) < LM_CONTINUATION:
            next_id = int(loaded.model(torch.tensor([ids]))[0, -1].argmax())
            if next_id == vocab.eos_id:
                break
            ids.append(next_id)
            words.append(vocab.decode([next_id])[0])
    return words


def test_predict_on_a_language_model_prints_the_continuation(tmp_path):
    data = {
        **TINY,
        "task": {"name": "sentences", "min_len": 3, "max_len": 8, "eval_size": 20},
        "train": {**TINY["train"], "steps": 100, "eval_every": 50, "checkpoint_every": 50, "lr": 0.01},
    }
    trained = invoke("train", write_config(tmp_path, data), "--runs-dir", tmp_path / "runs")
    assert trained.exit_code == 0, trained.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    loaded = load_run(run_dir)

    single = invoke("predict", "the", "--run", run_dir)
    assert single.exit_code == 0, single.output
    expected = greedy_continuation(loaded, "the")
    assert expected and set(expected) <= set(loaded.vocab.tokens)  # it has learnt that "the" goes on
    assert single.stdout == " ".join(expected) + "\n"

    prompts = ["the", "some cats that sleep", "the dog"]  # different lengths, answered in one call
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n")
    many = invoke("predict", "--file", tmp_path / "prompts.txt", "--run", run_dir, "--format", "json")
    assert many.exit_code == 0, many.output
    lines = [json.loads(line) for line in many.stdout.splitlines()]
    assert [line["input"] for line in lines] == [["<bos>", *prompt.split()] for prompt in prompts]
    assert [line["output"] for line in lines] == [greedy_continuation(loaded, prompt) for prompt in prompts]

    # a language model has no answer to impose: attend reads the text as it is
    assert_user_error(invoke("attend", "the cat", "--run", run_dir, "--target", "sat"), "a language model")
    report = json.loads(invoke("attend", "the cat", "--run", run_dir, "--format", "json").stdout)
    assert report["tokens"] == ["<bos>", "the", "cat"] and report["answer"] is None


@pytest.mark.parametrize("trained", ["decoder"], indirect=True)
def test_resume_with_more_steps_continues_from_the_saved_step(trained, tmp_path):
    _, original = trained
    run_dir = tmp_path / original.name
    shutil.copytree(original, run_dir)
    before = read_metrics(run_dir)
    assert load_checkpoint(checkpoint_path(run_dir, "last"))["step"] == 20

    result = invoke("train", "--resume", run_dir, "--set", "train.steps=30")
    assert result.exit_code == 0, result.output
    assert f"run: {run_dir}" in result.stdout
    assert load_checkpoint(checkpoint_path(run_dir, "last"))["step"] == 30
    after = read_metrics(run_dir)
    assert after[: len(before)] == before  # the first 20 steps are not trained or logged again
    assert [r["step"] for r in after if r["split"] == "train"] == [5, 10, 15, 20, 25, 30]
    assert [r["step"] for r in after if r["split"] == "val"] == [10, 20, 30]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["steps"] == 30
