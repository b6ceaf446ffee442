"""Inputs the model cannot answer, said so in one line: an answer that would not fit
model.max_len is refused, never cut short; an input of a length the model never trained
on gets a note; wrong arguments to the Python API are a TypeError or ValueError naming
the argument, never a traceback from inside."""

import re
from pathlib import Path

import pytest
import torch
from conftest import assert_user_error, invoke, tiny_config, tiny_data, write_config

import tinytf
from tinytf.config import TaskConfig
from tinytf.data.framing import get_framing
from tinytf.errors import UserError
from tinytf.inspect.attend import attention_report
from tinytf.inspect.evaluate import evaluate, predict
from tinytf.run.setup import build_model
from tinytf.tasks import TASKS, Pairs, get_task
from tinytf.tasks.base import SymbolTask

ARCHS = ["encoder", "decoder", "encoder-decoder"]
VOCAB = 13


def untrained(arch="decoder", **model_keys):
    """An untrained model on the tiny config (sort, 5 symbols, lengths 3..5) and its framing."""
    torch.manual_seed(0)
    config = tiny_config(model={"arch": arch, **model_keys})
    task = get_task(config.task)
    return build_model(config).eval(), get_framing(task, arch)


def make_model(arch):
    """An untrained model in eval mode, as a user reads one."""
    torch.manual_seed(0)
    model = tinytf.build_model({"model": {"arch": arch, "d_model": 16, "n_heads": 4, "n_layers": 1}}, vocab_size=VOCAB)
    return model.eval()


def never_stops(model):
    """The model's every logit 0: it always writes id 0 (<pad>), never <eos>."""
    with torch.no_grad():
        model.lm_head.weight.zero_()
    return model


# --------------------------------------------------------------------------- 20: the answer must fit


def test_a_decoder_input_whose_answer_would_not_fit_is_refused_saying_how_long_it_may_be():
    model, framing = untrained("decoder", max_len=13)  # sort up to 5: source <sep> answer = 11 tokens
    message = (
        "the input has 8 tokens; with <sep> and its answer (up to 5 tokens) this model's max_len=13 "
        "leaves room for inputs of up to 7"
    )
    with pytest.raises(UserError, match=re.escape(message)):
        framing.typed_input("1 2 3 4 0 1 2 3", 13)  # fits alone (9 tokens with <sep>), not with its answer
    with pytest.raises(UserError, match="leaves room for inputs of up to 7"):
        attention_report(model, framing, "1 2 3 4 0 1 2 3")
    with pytest.raises(UserError, match="leaves room for inputs of up to 7"):
        predict(model, framing, ["1 2 3 4 0 1 2 3"])  # refused, not answered with a cut answer
    with pytest.raises(UserError, match="input 2: the input has 8 tokens"):
        predict(model, framing, ["1 2", "1 2 3 4 0 1 2 3"])
    assert framing.typed_input("1 2 3 4 0 1 2", 13) == framing.vocab.encode("1 2 3 4 0 1 2")  # 7: fits


def test_predict_answers_in_full_at_the_longest_input_that_fits():
    model, framing = untrained("decoder", max_len=13)
    never_stops(model)
    ((_, answer),) = predict(model, framing, ["1 2 3 4 0 1 2"])
    assert len(answer) == framing.task.max_target_len + 1  # the answer and the token in place of <eos>


@pytest.mark.parametrize("arch, max_len", [("decoder", 11), ("encoder-decoder", 6)])
def test_attend_at_the_longest_input_reads_what_a_model_that_never_stops_read(arch, max_len):
    """With no <eos>, the answer's last token was written but never read back: attend
    shows what the model read (max_len tokens), not an error about max_len + 1."""
    model, framing = untrained(arch, max_len=max_len)
    never_stops(model)
    report = attention_report(model, framing, "1 2 3 4 0")
    assert len(report.answer) == framing.task.max_target_len + 1
    assert len(report.tokens) == max_len
    assert report.maps[-1].weights.shape[-2] == max_len  # the decoder's queries


def test_attend_with_a_target_too_long_names_the_target():
    model, framing = untrained("decoder", max_len=11)
    with pytest.raises(UserError, match="the input with its --target makes 12 tokens"):
        framing.typed_batch(model, "1 2 3", target="1 2 3 4 0 1 2 3")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny trained decoder with model.max_len=13: inputs of up to 7 tokens fit with their answer."""
    folder = tmp_path_factory.mktemp("inputs")
    result = invoke("train", write_config(folder, tiny_data(model={"max_len": 13})), "--runs-dir", folder / "runs")
    assert result.exit_code == 0, result.output
    return folder / "runs"


def test_the_cli_refuses_an_input_whose_answer_would_not_fit(runs, tmp_path):
    too_long = "1 2 3 4 0 1 2 3"
    fragment = "with <sep> and its answer (up to 5 tokens) this model's max_len=13 leaves room for inputs of up to 7"
    assert_user_error(invoke("attend", too_long, "--runs-dir", runs), fragment)
    assert_user_error(invoke("predict", too_long, "--runs-dir", runs), fragment)
    inputs = tmp_path / "inputs.txt"
    inputs.write_text(f"1 2 3\n{too_long}\n")
    assert_user_error(invoke("predict", "--file", inputs, "--runs-dir", runs), f"{inputs}: line 2: the input has 8")


# --------------------------------------------------------------------------- 22: lengths never trained on


def test_symbol_tasks_were_trained_on_min_len_to_max_len():
    _, framing = untrained("decoder")
    assert framing.task.trained_lengths == (3, 5)
    assert framing.length_note(framing.typed_input("1 2 3", 256)) is None
    assert framing.length_note(framing.typed_input("1 2 3 4 0", 256)) is None
    short = framing.length_note(framing.typed_input("1 2", 256))
    assert short == (
        "the input has 2 tokens; the model was trained on inputs of 3 to 5 tokens only, so its output may be wrong"
    )
    assert "has 6 tokens" in framing.length_note(framing.typed_input("1 2 3 4 0 1", 256))


@pytest.mark.parametrize(("arch", "added"), [("encoder", 1), ("decoder", 2), ("encoder-decoder", 1)])
def test_a_bos_is_not_counted_as_input_but_must_fit(arch, added):
    framing = get_framing(get_task(tiny_config(task={"bos": True}).task), arch)
    assert framing.added_tokens() == added  # <bos> (and the decoder's <sep>)
    assert framing.length_note(framing.typed_input("1 2 3 4 0", 256)) is None
    if arch == "decoder":  # <bos> + 5 + <sep> + an answer of up to 5 (tiny_config's max_len): 12 tokens
        assert framing.typed_input("1 2 3 4 0", 12) == framing.vocab.encode("1 2 3 4 0")
        with pytest.raises(UserError, match="with <bos>, <sep> and its answer"):
            framing.typed_input("1 2 3 4 0", 11)


def test_a_language_model_was_trained_on_prompts_up_to_its_window(tmp_path):
    sentences = get_task(tiny_config(task={"name": "sentences", "min_len": 3, "max_len": 8}).task)
    framing = get_framing(sentences, "decoder")
    assert sentences.trained_lengths == (1, 8)  # any prefix of a sentence; <bos> is not typed
    assert framing.length_note(framing.typed_input("the", 256)) is None
    assert framing.length_note(framing.typed_input("the cat sat on the mat with a", 256)) is None  # 8 words
    note = framing.length_note(framing.typed_input("the cat sat on the mat with a dog", 256))
    assert note.startswith("the input has 9 tokens; the model was trained on inputs of up to 8 tokens only")
    path = tmp_path / "text.txt"
    path.write_text("word " * 50)
    text = get_task(tiny_config(task={"name": "text", "path": str(path), "max_len": 6, "tokenizer": "word"}).task)
    assert text.trained_lengths == (1, 6)  # the training window


@pytest.mark.parametrize("name", [name for name in TASKS if not TASKS[name].language_model])
def test_every_task_s_examples_lie_in_its_trained_lengths(name):
    task = get_task(TaskConfig(name=name))
    shortest, longest = task.trained_lengths
    lengths = task.sample(300, torch.Generator().manual_seed(0)).source_len
    assert 1 <= shortest <= int(lengths.min()) and int(lengths.max()) <= longest <= task.max_source_len
    if isinstance(task, SymbolTask):
        assert (int(lengths.min()), int(lengths.max())) == (shortest, longest)


def test_attention_report_carries_the_note():
    model, framing = untrained("decoder")
    assert attention_report(model, framing, "1 2 3").note is None
    report = attention_report(model, framing, "1 2 3 4 0 1 2")
    assert report.note.startswith("the input has 7 tokens")
    assert report.select(layer=0, head=1).note == report.note


def test_the_cli_notes_an_input_length_never_trained_on_on_stderr(run, tmp_path):
    """A note, not an error: exit 0, the answer on stdout, one `note: ` line on stderr."""
    for command in (["attend", "1 2"], ["attend", "1 2", "--format", "json"], ["predict", "1 2 3 4 0 1"]):
        result = invoke(*command, "--run", run)  # (without --run, a `run` line on stderr names the run)
        assert result.exit_code == 0, result.output
        assert result.stdout
        assert result.stderr.startswith("note: the input has ") and result.stderr.count("\n") == 1, result.stderr
        assert "trained on inputs of 3 to 5 tokens only" in result.stderr
    in_range = invoke("predict", "1 2 3", "--run", run)
    assert in_range.exit_code == 0 and in_range.stderr == ""
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("1 2 3\n1 2\n\n1 2 3 4 0 1\n")
    many = invoke("predict", "--file", inputs, "--run", run)
    assert many.exit_code == 0, many.output
    assert len(many.stdout.splitlines()) == 4
    assert many.stderr.count("\n") == 1, many.stderr  # one line, however many inputs
    assert many.stderr.startswith(f"note: {inputs}: line 2: the input has 2 tokens") and "1 more" in many.stderr


# --------------------------------------------------------------------------- 23 and 12: the Python API


@pytest.mark.parametrize("path", ["configs/quickstart.yaml", Path("configs/quickstart.yaml")])
def test_build_model_with_a_path_says_to_load_it_first(path):
    with pytest.raises(TypeError, match=r"build_model takes a config, not a file .*tinytf.load_config\(path\)"):
        tinytf.build_model(path)
    with pytest.raises(TypeError, match="config must be a Config or a dict"):
        tinytf.build_model(42)


def test_load_config_overrides_must_be_a_list_of_strings(tmp_path):
    path = write_config(tmp_path, tiny_data())
    for overrides in ("model.d_model=32", b"model.d_model=32", [("model.d_model", 32)], 7):
        with pytest.raises(TypeError, match="overrides must be a list of 'KEY=VALUE' strings"):
            tinytf.load_config(path, overrides=overrides)
    with pytest.raises(TypeError, match="path must be a YAML file's path"):
        tinytf.load_config(tiny_data())
    assert tinytf.load_config(path, overrides=("model.d_model=32",)).model.d_model == 32
    assert tinytf.load_config(str(path), overrides=iter(["model.d_model=32"])).model.d_model == 32


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("bad_id", [VOCAB, -1])
def test_token_ids_outside_the_vocabulary_name_the_argument_and_the_range(arch, bad_id):
    model = make_model(arch)
    tokens = torch.full((2, 5), 4)
    source = torch.randint(0, VOCAB, (2, 4)) if arch == "encoder-decoder" else None
    bad = tokens.clone()
    bad[1, 2] = bad_id
    low, high = sorted([4, bad_id])
    expected = rf"`tokens` holds ids from {low} to {high}; this model's vocabulary has ids 0 to 12 \(vocab_size=13\)"
    with pytest.raises(ValueError, match=expected):
        model(bad, source=source)
    if arch == "encoder-decoder":
        bad_source = source.clone()
        bad_source[0, 0] = bad_id
        with pytest.raises(ValueError, match="`source` holds ids from"):
            model(tokens, source=bad_source)
        with pytest.raises(ValueError, match="`source` holds ids from"):
            model.encode(bad_source)
        with pytest.raises(ValueError, match="`tokens` holds ids from"):
            model.decode(bad, context=model.encode(source)[0])
    elif arch == "decoder":
        with pytest.raises(ValueError, match="`tokens` holds ids from"):
            model.decode(bad)
        cache = model.new_cache()
        model.decode(tokens[:, :3], cache=cache)
        with pytest.raises(ValueError, match="`tokens` holds ids from"):
            model.decode(bad[:, 2:3], cache=cache)  # generation's path, one new token at a time


def test_a_training_forward_never_reads_the_ids_back(monkeypatch):
    model = make_model("encoder-decoder").train()
    tokens, source = torch.randint(0, VOCAB, (2, 5)), torch.randint(0, VOCAB, (2, 4))

    def read_back(*args, **kwargs):
        raise AssertionError("the ids were read back in a training step")

    monkeypatch.setattr(torch, "aminmax", read_back)
    model(tokens, source=source).sum().backward()
    with pytest.raises(TypeError, match="must be a tensor of integer token ids"):  # still checked: no read back
        model(tokens.float(), source=source)
    with pytest.raises(AssertionError, match="read back"):
        model.eval()(tokens, source=source)


def test_a_source_batch_that_does_not_match_the_tokens_names_both_shapes():
    model = make_model("encoder-decoder")
    tokens, source = torch.randint(0, VOCAB, (2, 7)), torch.randint(0, VOCAB, (3, 5))
    with pytest.raises(ValueError, match=r"the source \(3, 5\) and `tokens` \(2, 7\) must hold the same number"):
        model(tokens, source=source)
    with pytest.raises(ValueError, match=r"\(3, 5\) and `tokens` \(2, 7\)"):
        model.decode(tokens, context=model.encode(source)[0])


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("shape", [(0, 5), (2, 0), (5,), (1, 2, 3)])
def test_empty_or_misshapen_tokens_are_a_value_error(arch, shape):
    model = make_model(arch)
    source = torch.randint(0, VOCAB, (2, 4)) if arch == "encoder-decoder" else None
    message = f"`tokens` must hold token ids as (batch, length), neither of them 0; its shape is {tuple(shape)}"
    with pytest.raises(ValueError, match=re.escape(message)):
        model(torch.zeros(shape, dtype=torch.long), source=source)
    if source is not None:
        with pytest.raises(ValueError, match="`source` must hold token ids as"):
            model(torch.zeros(2, 3, dtype=torch.long), source=torch.zeros(shape, dtype=torch.long))


def test_tokens_that_are_not_integer_ids_are_a_type_error():
    model = make_model("decoder")
    with pytest.raises(TypeError, match=r"`tokens` must be a tensor of integer token ids \(torch.long\), not torch.fl"):
        model(torch.zeros(2, 3))
    with pytest.raises(TypeError, match="not list"):
        model([[1, 2, 3]])


def test_ids_at_both_ends_of_the_range_and_int32_ids_are_read():
    model = make_model("decoder")
    tokens = torch.randint(0, VOCAB, (3, 6))
    tokens[0, 0], tokens[1, 1] = 0, VOCAB - 1  # both ends of the range are ids
    assert model(tokens).shape == (3, 6, VOCAB)
    assert model(tokens.int()).shape == (3, 6, VOCAB)


@pytest.mark.parametrize("arch", ARCHS)
def test_answers_to_no_examples_are_an_empty_list_and_evaluate_refuses_them(arch):
    model, framing = untrained(arch)
    no_examples = framing.task.sample(0, torch.Generator().manual_seed(0))
    assert len(no_examples) == 0
    assert framing.answers(model, no_examples) == []
    assert framing.answer_typed(model, []) == []
    assert predict(model, framing, []) == []
    with pytest.raises(ValueError, match="evaluate: `pairs` holds no examples"):
        evaluate(model, framing, no_examples)
    empty = Pairs(
        torch.zeros(0, 0, dtype=torch.long),
        torch.zeros(0, dtype=torch.long),
        torch.zeros(0, 0, dtype=torch.long),
        torch.zeros(0, dtype=torch.long),
    )
    assert framing.answers(model, empty) == []
