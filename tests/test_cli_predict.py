"""`tinytf predict` and `tinytf eval`: answers one input or a file of them, line by line, in
the file's order and exactly as if each were answered alone; held-out scores in any order; a
progress bar on stderr only for long jobs."""

import json
import os

import pytest
import torch
from conftest import TINY, assert_user_error, invoke, tiny_data, unblocked_after, write_config

from tinytf.cli import output
from tinytf.cli.commands import first_held_out
from tinytf.config import config_from_dict
from tinytf.data.framing import get_framing
from tinytf.data.language_model import LM_CONTINUATION
from tinytf.inspect.evaluate import evaluate, predict
from tinytf.run.load import load_run
from tinytf.run.setup import build_model
from tinytf.tasks import get_task


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
    loaded = load_run(run_dir)
    alone = [
        predict(loaded.model, loaded.framing, [text])[0][1] if text else []
        for text in ("3 1 2", "", "0 0 4 1", "2 2 2")
    ]
    assert [line["output"] for line in lines] == alone  # each answered as if alone, the blank line empty
    assert single.stdout.split() == alone[0]

    scored = invoke("eval", "--runs-dir", runs, "--n", "25")
    assert scored.exit_code == 0, scored.output
    assert scored.stdout.splitlines()[0].endswith(", 25 held-out examples")
    printed = dict(line.strip().split(": ") for line in scored.stdout.splitlines()[1:])
    expected = evaluate(loaded.model, loaded.framing, first_held_out(loaded, 25))  # the library, the same 25
    assert printed == {key: f"{value:.4f}" for key, value in expected.items()}


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


def test_predict_on_a_character_model_prints_text_not_spaced_characters(tmp_path):
    (tmp_path / "corpus.txt").write_text("abcdefgh" * 200)  # no spaces: any space printed is a separator
    data = {
        **tiny_data(train={"steps": 4, "eval_every": 4}),
        "task": {"name": "text", "path": str(tmp_path / "corpus.txt"), "tokenizer": "char", "max_len": 8},
    }
    trained = invoke("train", write_config(tmp_path, data), "--runs-dir", tmp_path / "runs")
    assert trained.exit_code == 0, trained.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    tokens = json.loads(invoke("predict", "abc", "--run", run_dir, "--format", "json").stdout)["output"]
    assert len(tokens) > 1
    assert invoke("predict", "abc", "--run", run_dir).stdout == "".join(tokens) + "\n"


def close_writer(fifo):
    """Open `fifo` for writing and close it (a reader blocked on it reads end of file)."""
    with open(fifo, "wb"):
        pass


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


def test_a_long_predict_file_shows_a_bar_on_stderr_and_only_answers_on_stdout(run, tmp_path, monkeypatch):
    lines = ["3 1 2", "", "0 0 4 1", "2 2 2", "4 3 2 1 0", "1 1 1"] * 4  # blank lines keep their place
    (tmp_path / "inputs.txt").write_text("\n".join(lines) + "\n")
    expected = [invoke("predict", line, "--run", run).stdout.strip() if line else "" for line in lines[:6]] * 4

    monkeypatch.setattr(output, "PROGRESS_FROM", 10)
    long = invoke("predict", "--file", tmp_path / "inputs.txt", "--run", run)
    assert long.exit_code == 0, long.output
    assert long.stdout.split("\n")[:-1] == expected  # one line per input line, in the file's order
    assert "/20 [" in long.stderr and "input/s" in long.stderr  # a bar for the 20 non-blank lines

    as_json = invoke("predict", "--file", tmp_path / "inputs.txt", "--run", run, "--format", "json")
    assert [" ".join(json.loads(line)["output"]) for line in as_json.stdout.splitlines()] == expected

    monkeypatch.setattr(output, "PROGRESS_FROM", 21)
    short = invoke("predict", "--file", tmp_path / "inputs.txt", "--run", run)
    assert short.stdout == long.stdout and short.stderr == ""


def test_a_long_eval_shows_a_bar_on_stderr(run, monkeypatch):
    quiet = invoke("eval", "--run", run)
    assert quiet.exit_code == 0 and quiet.stderr == ""
    monkeypatch.setattr(output, "PROGRESS_FROM", 10)
    shown = invoke("eval", "--run", run)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == quiet.stdout and "example" in shown.stderr
