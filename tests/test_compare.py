"""`tinytf compare`: each head's score and shares restored are exactly those `heads` and
`patch` give, the rank correlation is Spearman's, its interval a seeded bootstrap, and the
heads that look without causing (or the reverse) are named by the rule."""

import csv
import io
import json

import numpy as np
import pytest
from conftest import assert_user_error, invoke, train_sentences_run

from tinytf.inspect.compare import CAUSES, LOOKS, Comparison, Correlation, HeadComparison, spearman

PAIRS = 24


@pytest.fixture(scope="module")
def sentences_run(tmp_path_factory):
    return train_sentences_run(tmp_path_factory.mktemp("compare"), eval_size=30)


def output(*args):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def coreference(sentences_run):
    args = ["compare", "--run", sentences_run, "--construction", "coreference", "--pairs", PAIRS]
    return json.loads(output(*args, "--format", "json"))


def test_each_heads_score_is_the_one_heads_reports_on_the_same_inputs(sentences_run, coreference):
    heads = json.loads(output("heads", "--run", sentences_run, "--format", "json"))
    expected = {
        f"{h['stack']}.{h['layer']}.{h['kind']}.{h['head']}": h["scores"]["coreference"] for h in heads["heads"]
    }
    assert coreference["inputs"] == 30  # the run's whole held-out set: fewer than heads' 200
    for head in coreference["heads"]:
        assert head["score"]["held_out"] == pytest.approx(expected[head["head"]], abs=1e-6)


def test_each_heads_share_restored_is_patch_s_at_each_place(sentences_run, coreference):
    for at in ("all", "last", "deciding"):
        patched = json.loads(
            output(
                "patch",
                "--run",
                sentences_run,
                "--pairs",
                PAIRS,
                "--construction",
                "coreference",
                "--at",
                at,
                "--format",
                "json",
            )
        )
        expected = {f"decoder.{r['layer']}.self.{r['head']}": r["restored"] for r in patched["results"]}
        assert {h["head"]: h["restored"][at] for h in coreference["heads"]} == pytest.approx(expected, abs=1e-6)


def test_the_score_on_the_pairs_is_heads_on_each_prompt_and_its_answer(sentences_run, coreference):
    from tinytf.inspect.heads import head_scores
    from tinytf.run.load import load_run

    run = load_run(sentences_run)
    pairs = run.task.held_out_pairs("coreference", PAIRS, seed=run.config.seed)  # those `patch --pairs` draws
    scores = {}
    for pair in pairs:
        for head in head_scores(run.model, run.framing, text=f"{pair.clean} {pair.answer}").heads:
            if head.scores["coreference"] is not None:
                scores.setdefault(head.name, []).append(head.scores["coreference"])
    for head in coreference["heads"]:
        assert head["score"]["prompts"] == pytest.approx(np.mean(scores[head["head"]]), abs=1e-6)


def test_the_correlations_are_spearman_s_with_a_seeded_interval(sentences_run, coreference):
    again = json.loads(
        output("compare", "--run", sentences_run, "--construction", "coreference", "--pairs", PAIRS, "--format", "json")
    )
    assert again["spearman"] == coreference["spearman"]  # the bootstrap is seeded
    for on in ("held_out", "prompts"):
        for at in ("all", "last", "deciding"):
            found = coreference["spearman"][on][at]
            x = np.array([h["score"][on] for h in coreference["heads"]], dtype=float)
            y = np.array([h["restored"][at] for h in coreference["heads"]])
            assert found["rho"] == pytest.approx(by_formula(x, y))
            assert found["low"] <= found["high"]


def by_formula(x, y):
    """Spearman's rho as the Pearson correlation of mean ranks, counted one by one."""
    rank = lambda v: np.array([1 + (v < a).sum() + ((v == a).sum() - 1) / 2 for a in v])  # noqa: E731
    rx, ry = rank(x), rank(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    return float((dx * dy).sum() / np.sqrt((dx**2).sum() * (dy**2).sum()))


def test_spearman_ranks_ties_by_their_mean_and_says_none_without_spread():
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    # ties: x ranks (1, 2.5, 2.5, 4); y ranks (1, 3, 2, 4): Pearson of the ranks by hand
    rx, ry = np.array([1, 2.5, 2.5, 4]), np.array([1, 3, 2, 4])
    by_hand = ((rx - rx.mean()) * (ry - ry.mean())).sum() / np.sqrt(
        ((rx - rx.mean()) ** 2).sum() * ((ry - ry.mean()) ** 2).sum()
    )
    assert spearman(np.array([0.1, 0.5, 0.5, 0.9]), np.array([1.0, 7.0, 3.0, 9.0])) == pytest.approx(by_hand)
    assert spearman(np.array([0.5, 0.5, 0.5]), np.array([1.0, 2.0, 3.0])) is None
    assert spearman(np.array([0.1, np.nan, 0.3, 0.2]), np.array([1.0, 5.0, 3.0, 2.0])) == pytest.approx(1.0)


def test_heads_that_look_without_causing_and_cause_without_looking_are_named_by_the_rule():
    def head(name, score, restored):
        return HeadComparison(
            name, {"held_out": score, "prompts": score}, dict(zip(("all", "last", "deciding"), restored, strict=True))
        )

    none = Correlation(None, None, None)
    comparison = Comparison(
        "coreference",
        "coreference",
        10,
        10,
        [
            head("looker", LOOKS, [CAUSES - 0.01, 0.0, -0.1]),
            head("both", 0.9, [0.0, CAUSES, 0.0]),
            head("causer", LOOKS - 0.01, [0.0, 0.0, CAUSES]),
            head("neither", 0.1, [0.05, 0.0, 0.1]),
            head("no row", None, [0.6, 0.6, 0.6]),
        ],
        {on: dict.fromkeys(("all", "last", "deciding"), none) for on in ("held_out", "prompts")},
    )
    assert comparison.looks_without_causing() == ["looker"]
    assert comparison.causes_without_looking() == ["causer", "no row"]


def test_the_table_csv_and_png_show_the_same_comparison(sentences_run, coreference, tmp_path):
    args = ["compare", "--run", sentences_run, "--construction", "coreference", "--pairs", PAIRS]
    table = output(*args).splitlines()
    assert table[0].endswith(
        f": {PAIRS} coreference pairs; the coreference score on 30 held-out inputs and on the pairs' prompts"
    )
    assert table[-2] == f"looks without causing: {', '.join(coreference['looks_without_causing']) or 'none'}"
    rows = list(csv.DictReader(io.StringIO(output(*args, "--format", "csv"))))
    assert [row["head"] for row in rows] == [h["head"] for h in coreference["heads"]]
    assert [float(row["restored_last"]) for row in rows] == [h["restored"]["last"] for h in coreference["heads"]]
    assert output(*args, "--format", "png", "--out", tmp_path / "c.png") == f"wrote {tmp_path / 'c.png'}\n"
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--construction", "metaphor"],
            "--construction metaphor: one of subject, coreference, semantic for sentences",
        ),
        (["--construction", "subject", "--format", "png", "--out", "x.svg"], "name the file *.png"),
    ],
)
def test_what_cannot_be_compared_is_one_line(sentences_run, args, message):
    assert_user_error(invoke("compare", "--run", sentences_run, *args), message)


def test_a_task_without_pairs_is_one_line(run):
    assert_user_error(invoke("compare", "--run", run, "--construction", "subject"), "--pairs draws minimal pairs of")


def test_at_the_last_position_and_the_deciding_word_it_is_patch_by_head_position(sentences_run, coreference):
    args = ["--run", sentences_run, "--pairs", PAIRS, "--construction", "coreference", "--format", "json"]
    by_position = json.loads(output("patch", *args, "--by", "head-position"))  # coreference prompts: one length
    (deciding,) = {
        next(i for i, (a, b) in enumerate(zip(p["clean"].split(), p["corrupt"].split(), strict=True)) if a != b)
        for p in by_position["per_pair"]
    }  # the antecedent: a word index, after <bos>
    last = max(r["position"] for r in by_position["results"])
    for at, position in (("last", last), ("deciding", deciding + 1)):
        expected = {
            f"decoder.{r['layer']}.self.{r['head']}": r["restored"]
            for r in by_position["results"]
            if r["position"] == position
        }
        assert {h["head"]: h["restored"][at] for h in coreference["heads"]} == pytest.approx(expected, abs=1e-6)
