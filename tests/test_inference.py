"""Inference at scale (issue 14, part 4): many inputs are answered shortest first, in
batches, and come back in their own order, exactly as if each were answered alone; held-out
scoring sorts by length without changing a metric; long jobs show a progress bar on
stderr, never on stdout (which holds the answers)."""

import json

import pytest
import torch
from conftest import invoke, tiny_data, train_tiny_run

from tinytf import cli
from tinytf.config import config_from_dict
from tinytf.evaluate import evaluate, predict
from tinytf.framing import get_framing
from tinytf.model import build_model
from tinytf.tasks import get_task

ARCHS = ["encoder", "decoder", "encoder-decoder"]


def model_and_framing(arch, task=None):
    torch.manual_seed(0)
    data = tiny_data(model={"arch": arch})
    if task is not None:
        data["task"] = task
    config = config_from_dict(data)
    return build_model(config).eval(), get_framing(get_task(config.task), arch)


def mixed_sources(framing, n=23):
    """n typed inputs of every trained length, in a shuffled order."""
    pairs = framing.task.sample(n, torch.Generator().manual_seed(1))
    column = 0 if framing.answers_questions else 1
    texts = [framing.task.render(pairs.example(i)[column]) for i in range(n)]
    assert len({len(text.split()) for text in texts}) > 1
    return [framing.typed_input(text, 64) for text in texts]


@pytest.mark.parametrize("arch", [*ARCHS, "language-model"])
def test_batched_answers_come_back_in_order_equal_to_answering_each_alone(arch):
    if arch == "language-model":
        sentences = {"name": "sentences", "min_len": 2, "max_len": 6, "eval_size": 20}
        model, framing = model_and_framing("decoder", task=sentences)
    else:
        model, framing = model_and_framing(arch)
    sources = mixed_sources(framing)
    alone = [framing.answer_typed(model, [source])[0] for source in sources]
    done = []
    batched = framing.answer_typed(model, sources, batch_size=4, progress=done.append)
    assert batched == alone
    assert sum(done) == len(sources) and max(done) <= 4 and len(done) == -(-len(sources) // 4)


@pytest.mark.parametrize("arch", ARCHS)
def test_evaluate_scores_the_same_in_any_order(arch):
    model, framing = model_and_framing(arch)
    pairs = framing.task.sample(37, torch.Generator().manual_seed(2))
    shuffled = pairs[torch.randperm(len(pairs), generator=torch.Generator().manual_seed(3))]
    done = []
    metrics = evaluate(model, framing, pairs, batch_size=5, progress=done.append)
    assert metrics == pytest.approx(evaluate(model, framing, shuffled, batch_size=5), rel=1e-5)
    # ... and the same as one batch of all of them, unsorted
    assert metrics == pytest.approx(evaluate(model, framing, shuffled, batch_size=len(pairs)), rel=1e-5)
    assert sum(done) == len(pairs) and max(done) <= 5


def test_predict_passes_progress_through():
    model, framing = model_and_framing("decoder")
    done = []
    answered = predict(model, framing, ["1 2 3", "4 0 1 2", "3 3 1"], progress=done.append)
    assert len(answered) == 3 and sum(done) == 3


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("inference"))


def test_a_long_predict_file_shows_a_bar_on_stderr_and_only_answers_on_stdout(run_dir, tmp_path, monkeypatch):
    lines = ["3 1 2", "", "0 0 4 1", "2 2 2", "4 3 2 1 0", "1 1 1"] * 4  # blank lines keep their place
    (tmp_path / "inputs.txt").write_text("\n".join(lines) + "\n")
    expected = [invoke("predict", line, "--run", run_dir).stdout.strip() if line else "" for line in lines[:6]] * 4

    monkeypatch.setattr(cli, "PROGRESS_FROM", 10)
    long = invoke("predict", "--file", tmp_path / "inputs.txt", "--run", run_dir)
    assert long.exit_code == 0, long.output
    assert long.stdout.split("\n")[:-1] == expected  # one line per input line, in the file's order
    assert "/20 [" in long.stderr and "input/s" in long.stderr  # a bar for the 20 non-blank lines

    as_json = invoke("predict", "--file", tmp_path / "inputs.txt", "--run", run_dir, "--format", "json")
    assert [" ".join(json.loads(line)["output"]) for line in as_json.stdout.splitlines()] == expected

    monkeypatch.setattr(cli, "PROGRESS_FROM", 21)
    short = invoke("predict", "--file", tmp_path / "inputs.txt", "--run", run_dir)
    assert short.stdout == long.stdout and short.stderr == ""


def test_a_long_eval_shows_a_bar_on_stderr(run_dir, monkeypatch):
    quiet = invoke("eval", "--run", run_dir)
    assert quiet.exit_code == 0 and quiet.stderr == ""
    monkeypatch.setattr(cli, "PROGRESS_FROM", 10)
    shown = invoke("eval", "--run", run_dir)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == quiet.stdout and "example" in shown.stderr
