"""`tinytf patch`: what it prints and writes for drawn pairs and for one pair, and every
input that cannot be patched as one `error:` line."""

import json

import pytest
from conftest import assert_user_error, invoke, tiny_data, train_sentences_run, train_tiny_run, write_config

from tinytf.cli.commands import first_held_out
from tinytf.inspect.patching import patch, prompts_of
from tinytf.run.load import load_run
from tinytf.tasks.base import MinimalPair

ONE_PAIR = ["--clean", "the cat", "--corrupt", "the cats", "--answer", "sleeps", "--wrong", "sleep"]


@pytest.fixture(scope="module")
def sentences_run(tmp_path_factory):
    return train_sentences_run(tmp_path_factory.mktemp("patch"), eval_size=20)


def test_drawn_pairs_give_every_heads_share_of_the_answer_as_json(sentences_run):
    result = invoke("patch", "--run", sentences_run, "--pairs", 20, "--construction", "subject", "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["pairs"] == 20
    assert report["clean_correct"] == sum(pair["ld_clean"] > 0 for pair in report["per_pair"]) / 20
    run = load_run(sentences_run)  # the library's patch of the same pairs: the same shares restored
    drawn = run.task.held_out_pairs("subject", 20, seed=run.config.seed)
    assert sorted((p.clean, p.corrupt) for p in drawn) == sorted((p["clean"], p["corrupt"]) for p in report["per_pair"])
    expected = patch(run.model, prompts_of(run.framing, drawn, 64), "head")
    assert [r["restored"] for r in report["results"]] == pytest.approx([r.restored for r in expected.results], abs=1e-6)
    assert {"ld_clean", "ld_corrupt"} <= report.keys()
    heads = {(r["layer"], r["head"]) for r in report["results"]}
    assert heads == {(layer, head) for layer in range(2) for head in range(2)}
    assert all(r["component"] == "z" and r["position"] is None for r in report["results"])
    # Every pair with its own values: patched alone, it gives them again
    assert len(report["per_pair"]) == 20
    assert report["ld_clean"] == pytest.approx(sum(p["ld_clean"] for p in report["per_pair"]) / 20, abs=1e-5)
    pair = next(pair for pair in report["per_pair"] if None not in pair["restored"])
    assert len(pair["restored"]) == len(pair["ld_patched"]) == len(report["results"])
    one = ["--clean", pair["clean"], "--corrupt", pair["corrupt"], "--answer", pair["answer"], "--wrong", pair["wrong"]]
    alone = json.loads(invoke("patch", "--run", sentences_run, *one, "--format", "json").stdout)
    assert (alone["ld_clean"], alone["ld_corrupt"]) == pytest.approx((pair["ld_clean"], pair["ld_corrupt"]), abs=1e-5)
    assert [r["restored"] for r in alone["results"]] == pytest.approx(pair["restored"], abs=1e-4)


@pytest.mark.parametrize("at", ["last", "deciding"])
def test_drawn_pairs_patched_at_one_position_each_are_the_library_s_patch(sentences_run, at):
    args = ["--run", sentences_run, "--pairs", 20, "--construction", "subject", "--at", at, "--format", "json"]
    report = json.loads(invoke("patch", *args).stdout)
    assert report["at"] == at
    run = load_run(sentences_run)
    pairs = [MinimalPair(p["clean"], p["corrupt"], p["answer"], p["wrong"]) for p in report["per_pair"]]
    expected = patch(run.model, prompts_of(run.framing, pairs, 64), "head", at=at)
    assert [r["restored"] for r in report["results"]] == pytest.approx([r.restored for r in expected.results], abs=1e-6)
    result = invoke("patch", *args[:-2])
    assert result.exit_code == 0, result.output
    table = result.stdout.splitlines()
    assert all(line.split()[3] == at for line in table[3:])


def test_one_pair_by_layer_and_position_restores_all_where_the_prompts_differ(sentences_run):
    one_pair = ["--clean", "the cat near the dogs", "--corrupt", "the cats near the dogs"]
    result = invoke(
        "patch", "--run", sentences_run, *one_pair, "--answer", "sleeps", "--wrong", "sleep", "--by", "layer-position"
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].endswith(", 1 pair") and lines[2].split() == ["component", "layer", "head", "position", "restored"]
    rows = [line.split() for line in lines[3:]]
    assert ["resid_pre", "0", "-", "2", "1.000"] in rows  # word 1 after <bos>: the subject
    assert all(float(row[4]) == 0 for row in rows if row[:2] == ["resid_pre", "0"] and row[3] != "2")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pairs", 5], "--pairs 5 needs --construction (subject, coreference, semantic)"),
        (["--pairs", 5, "--construction", "subject", "--clean", "the cat"], "--pairs draws its pairs: drop --clean"),
        (["--clean", "the cat"], "give --clean, --corrupt, --answer and --wrong (one pair)"),
        (
            [*ONE_PAIR, "--construction", "subject"],
            "--construction chooses the pairs --pairs draws",
        ),
        (
            ["--clean", "the cat", "--corrupt", "the cats near", "--answer", "sleeps", "--wrong", "sleep"],
            "the clean prompt has 2 tokens, the corrupted one 3",
        ),
        (
            ["--clean", "the cat", "--corrupt", "the cats", "--answer", "purrs", "--wrong", "sleep"],
            "unknown token 'purrs'",
        ),
        (
            ["--pairs", 5, "--construction", "metaphor"],
            "--construction metaphor: one of subject, coreference, semantic for sentences",
        ),
        (
            ["--pairs", 5, "--construction", "subjct"],
            "--construction subjct: one of subject, coreference, semantic for sentences; did you mean 'subject'?",
        ),
        (
            [*ONE_PAIR, "--by", "layer-position", "--at", "last"],
            "--at last picks where each head is patched: it goes with --by head, not --by layer-position",
        ),
    ],
)
def test_what_cannot_be_patched_is_one_line(sentences_run, args, message):
    assert_user_error(invoke("patch", "--run", sentences_run, *args), message)


def test_without_run_an_error_about_a_construction_names_the_run_picked(sentences_run):
    picked = invoke("patch", "--runs-dir", sentences_run.parent, "--pairs", 5, "--construction", "subjct")
    assert_user_error(picked, f"error: {sentences_run}: --construction subjct: one of subject")


def test_a_decoder_that_answers_questions_is_patched_one_pair_at_a_time(run, tmp_path):
    one_pair = ["--clean", "1 2 3", "--corrupt", "4 2 3", "--answer", "1", "--wrong", "2"]
    result = invoke("patch", "--run", run, *one_pair, "--by", "layer-position")  # sort: the answer's first token
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()[3:]]
    assert ["resid_pre", "0", "-", "0", "1.000"] in rows  # where the prompts differ
    assert result.stderr == ""
    short = invoke("attribute", "1 2", "--answer", "1", "--wrong", "2", "--run", run)  # sort trained on 3 to 5
    assert short.exit_code == 0 and "note: the input has 2 tokens; the model was trained on inputs of 3" in short.stderr
    assert_user_error(
        invoke("patch", "--run", run, "--pairs", 5, "--construction", "subject"),
        "--pairs draws minimal pairs of sentences and modular-add, not of sort: give one pair",
    )
    encoder = train_tiny_run(tmp_path, model={"arch": "encoder"}, train={"steps": 2, "eval_every": 2})
    drawn = ["patch", "--pairs", 5, "--construction", "subject"]  # refused before any pair is drawn
    for command in (["patch", *one_pair], drawn, ["attribute", "1 2", "--answer", "1", "--wrong", "2"]):
        assert_user_error(
            invoke(*command, "--run", encoder),
            "patching and attribution read decoder-only models (the next token after a prompt); this run is an encoder",
        )


def test_attribute_splits_the_logit_difference_into_parts_that_add_up(sentences_run):
    args = ["attribute", "the cat near the dogs", "--answer", "sleeps", "--wrong", "sleep", "--run", sentences_run]
    report = json.loads(invoke(*args, "--format", "json").stdout)
    assert sum(part["contribution"] for part in report["components"]) == pytest.approx(report["ld"], abs=1e-4)
    assert {part["component"] for part in report["components"]} == {"embed", "z", "mlp_out", "biases"}
    table = invoke(*args)
    assert table.exit_code == 0 and f"logit difference {report['ld']:.3f} = the sum" in table.stdout
    assert_user_error(invoke(*args[:3], "sleeps sleeps", *args[4:]), "must each be one token")
    same = ["attribute", "the cat near the dogs", "--answer", "sleeps", "--wrong", "sleeps", "--run", sentences_run]
    assert_user_error(invoke(*same), "the answer and the wrong answer are both 'sleeps'")


def test_positions_are_labelled_with_one_pairs_words_and_drawn_pairs_counted_from_the_end(sentences_run):
    from tinytf.cli.commands.patch import PairDraw, patched
    from tinytf.run.load import load_run

    loaded = load_run(sentences_run)
    one = PairDraw("the cat near the dogs", "the cats near the dogs", "sleeps", "sleep")
    assert patched(loaded, one, "layer-position", "best").tokens == ["<bos>", "the", "cat/cats", "near", "the", "dogs"]
    drawn = PairDraw(n=5, construction="subject")  # one length, other words
    assert (
        patched(loaded, drawn, "layer-position", "best").tokens is None
    )  # the figure numbers positions -5..-1 instead


def test_png_draws_the_heatmaps_to_the_file_named(sentences_run, tmp_path):
    out = tmp_path / "patch.png"
    args = ["patch", "--run", sentences_run, "--pairs", 10, "--construction", "subject", "--by", "layer-position"]
    result = invoke(*args, "--format", "png", "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {out}\n" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_user_error(invoke(*args, "--out", tmp_path / "t.txt"), "--out is for --format png")


def test_a_modular_addition_decoder_is_patched_on_pairs_of_its_held_out_sums(tmp_path):
    data = tiny_data(train={"steps": 4, "eval_every": 4, "batch_size": "all"})
    data["task"] = {"name": "modular-add", "modulus": 11, "train_fraction": 0.4}
    assert invoke("train", write_config(tmp_path, data), "--runs-dir", tmp_path / "runs").exit_code == 0
    (run,) = (tmp_path / "runs").iterdir()
    result = invoke("patch", "--run", run, "--pairs", 30, "--construction", "b", "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["pairs"] == 30 and {(r["layer"], r["head"]) for r in report["results"]} == {(0, 0), (0, 1)}
    loaded = load_run(run)
    held_out = {tuple(loaded.vocab.decode(source[:2])) for source in first_held_out(loaded, None).source.tolist()}
    for pair in report["per_pair"]:  # both prompts held-out sums, which training never saw; b alone changed
        clean, corrupt = tuple(pair["clean"].split()), tuple(pair["corrupt"].split())
        assert clean in held_out and corrupt in held_out
        assert clean[0] == corrupt[0] and clean[1] != corrupt[1]
        assert (pair["answer"], pair["wrong"]) == tuple(str((int(a) + int(b)) % 11) for a, b in (clean, corrupt))
    assert_user_error(invoke("patch", "--run", run, "--pairs", 5), "--pairs 5 needs --construction (a, b)")
    assert_user_error(
        invoke("patch", "--run", run, "--pairs", 5, "--construction", "subject"),
        "--construction subject: one of a, b for modular-add",
    )
