"""Activation patching: the definitions hold exactly (patching what does not differ restores
nothing, patching the one differing input restores all), a head's patch is the same
replacement written by hand with run_with_hooks, and bad pairs are one-line errors."""

import copy
import html
import re
from dataclasses import replace

import pytest
import torch

from tinytf.config import config_from_dict
from tinytf.data.batch import single_pair
from tinytf.data.framing import get_framing
from tinytf.errors import UserError
from tinytf.inspect.notebook import notebook_heatmap
from tinytf.inspect.patching import (
    MIN_LD_GAP,
    Attribution,
    Contribution,
    Patched,
    PatchReport,
    attribute,
    logit_difference,
    patch,
    prompt_ids,
    prompts_of,
)
from tinytf.run.setup import build_model
from tinytf.tasks import get_task
from tinytf.tasks.sentences import MinimalPair, minimal_pairs


@pytest.fixture(scope="module")
def model_and_vocab():
    config = config_from_dict(
        {
            "task": {"name": "sentences", "min_len": 3, "max_len": 12},
            "model": {"d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64, "dropout": 0.0},
        }
    )
    torch.manual_seed(0)
    task = get_task(config.task)
    return build_model(config, len(task.vocab)).eval(), get_framing(task, "decoder")


def test_patching_restores_all_at_the_differing_word_and_nothing_elsewhere(model_and_vocab):
    # The residual stream entering layer 0 is each token's embedding: the clean and corrupted
    # prompts' differ only at the word that decides. Patched there the corrupted run becomes
    # the clean one (restored 1); patched anywhere else it does not change (restored 0).
    model, framing = model_and_vocab
    pairs = minimal_pairs("subject", 20, seed=0)  # "the cat near the dogs": they differ at word 1 (position 2)
    report = patch(model, prompts_of(framing, pairs, 64), by="layer-position")
    entering = {r.position: r.restored for r in report.results if (r.component, r.layer) == ("resid_pre", 0)}
    assert entering[2] == pytest.approx(1.0, abs=1e-5)
    assert all(restored == pytest.approx(0.0, abs=1e-5) for position, restored in entering.items() if position != 2)
    assert report.pairs == 20
    assert report.clean_correct == sum(pair.ld_clean > 0 for pair in report.per_pair) / 20


def test_a_heads_patch_is_the_replacement_written_by_hand(model_and_vocab):
    # Every head, at every position: a head of the last layer patched at the last position
    # alone gives the same answer, one of layer 0 does not.
    model, framing = model_and_vocab
    (prompts,) = prompts_of(framing, minimal_pairs("semantic", 8, seed=3), 64)  # one length: one group
    report = patch(model, [prompts], by="head")
    ld = lambda logits: float(logit_difference(logits, prompts.answer, prompts.wrong).mean())  # noqa: E731
    with torch.no_grad():
        clean, corrupt = ld(model(prompts.clean)), ld(model(prompts.corrupt))
        for layer, head in [(layer, head) for layer in (0, 1) for head in (0, 1)]:
            name = f"decoder.{layer}.self.z"
            _, cache = model.run_with_cache(prompts.clean, names=[name])

            def head_from_clean(z, head=head, clean_z=cache[name]):  # (B, H, T, D_h)
                z = z.clone()
                z[:, head] = clean_z[:, head]
                return z

            patched = model.run_with_hooks(prompts.corrupt, hooks={name: head_from_clean})
            (result,) = [r for r in report.results if (r.layer, r.head) == (layer, head)]
            assert result.component == "z" and result.position is None
            assert result.restored == pytest.approx((ld(patched) - corrupt) / (clean - corrupt), abs=1e-5)
    assert report.ld_clean == pytest.approx(clean, abs=1e-5) and report.ld_corrupt == pytest.approx(corrupt, abs=1e-5)
    assert len(report.results) == 2 * 2  # layers x heads


def test_a_head_patched_at_the_last_position_or_the_deciding_word_is_that_position_s_patch(model_and_vocab):
    # One length, one deciding position (the subject's noun, position 2): at="last" and
    # at="deciding" are by="head-position"'s values at those positions.
    model, framing = model_and_vocab
    groups = prompts_of(framing, minimal_pairs("subject", 20, seed=0), 64)
    (prompts,) = groups
    deciding = (prompts.clean != prompts.corrupt).nonzero()[:, 1].unique().tolist()
    assert deciding == [2]
    by_position = {(r.layer, r.head, r.position): r.restored for r in patch(model, groups, "head-position").results}
    last = prompts.clean.size(1) - 1
    for at, position in (("last", last), ("deciding", 2)):
        report = patch(model, groups, "head", at=at)
        assert report.at == at and report.to_dict()["at"] == at
        for result in report.results:
            assert result.position is None
            assert result.restored == pytest.approx(by_position[(result.layer, result.head, position)], abs=1e-6)


def test_at_names_where_each_head_is_patched_and_only_by_head(model_and_vocab):
    model, framing = model_and_vocab
    groups = prompts_of(framing, minimal_pairs("subject", 4, seed=0), 64)
    with pytest.raises(ValueError, match="at='first': one of all, last, deciding"):
        patch(model, groups, "head", at="first")
    with pytest.raises(ValueError, match="only 'all' unless by='head'"):
        patch(model, groups, "head-position", at="last")


def test_pairs_of_different_lengths_are_grouped_and_every_pair_counts(model_and_vocab):
    model, framing = model_and_vocab
    pairs = minimal_pairs("subject", 10, seed=0) + minimal_pairs("semantic", 20, seed=0)  # 5 words, and 6
    groups = prompts_of(framing, pairs, 64)
    assert len(groups) == 2 and sum(len(group.answer) for group in groups) == 30
    assert patch(model, groups, by="head").pairs == 30
    for by in ("head-position", "layer-position"):  # positions of prompts of two lengths do not line up
        with pytest.raises(UserError) as raised:
            patch(model, groups, by=by)
        assert str(raised.value) == (
            f"{by} compares positions, which do not line up across prompts of 6 and 7 tokens: patch by head"
        )


def test_each_pairs_own_values_are_those_of_patching_it_alone(model_and_vocab):
    # Pairs of two lengths, patched together: each pair's prompts, LDs and shares restored
    # are those of the same pair patched by itself; the report's LDs are their means.
    model, framing = model_and_vocab
    pairs = minimal_pairs("subject", 3, seed=5) + minimal_pairs("semantic", 2, seed=5)  # LDs MIN_LD_GAP apart
    report = patch(model, prompts_of(framing, pairs, 64), by="head")
    texts = lambda pairs: sorted((p.clean, p.corrupt, p.answer, p.wrong) for p in pairs)  # noqa: E731
    assert texts(report.per_pair) == texts(pairs)
    assert report.ld_clean == pytest.approx(sum(p.ld_clean for p in report.per_pair) / 5, abs=1e-5)
    assert report.ld_corrupt == pytest.approx(sum(p.ld_corrupt for p in report.per_pair) / 5, abs=1e-5)
    for own in report.per_pair:
        alone = patch(model, prompts_of(framing, [MinimalPair(own.clean, own.corrupt, own.answer, own.wrong)], 64))
        assert (own.ld_clean, own.ld_corrupt) == pytest.approx((alone.ld_clean, alone.ld_corrupt), abs=1e-5)
        assert own.restored == pytest.approx([r.restored for r in alone.results], abs=1e-4)
        by_hand = [(ld - own.ld_corrupt) / (own.ld_clean - own.ld_corrupt) for ld in own.ld_patched]
        assert own.restored == pytest.approx(by_hand)


@pytest.mark.parametrize("times", [0.5, 2.0])
def test_a_gap_too_small_to_normalise_by_is_refused_naming_the_threshold(model_and_vocab, times):
    # Scaling the final LayerNorm's gain and bias scales every logit, so every LD, by the same
    # factor: the same prompts, with clean and corrupted LDs `times` MIN_LD_GAP apart.
    model, framing = model_and_vocab
    groups = prompts_of(framing, minimal_pairs("subject", 4, seed=1), 64)
    gap = abs(patch(model, groups).ld_clean - patch(model, groups).ld_corrupt)
    scaled = copy.deepcopy(model)
    with torch.no_grad():
        for value in (scaled.decoder.final_norm.weight, scaled.decoder.final_norm.bias):
            value.mul_(times * MIN_LD_GAP / gap)
    if times < 1:
        with pytest.raises(
            UserError, match=rf"are 0.005 apart, under {MIN_LD_GAP}: too close to normalise by"
        ) as raised:
            patch(scaled, groups)
        assert str(raised.value).endswith("; is the model trained, and do the prompts differ where it reads?")
    else:
        report = patch(scaled, groups)
        assert abs(report.ld_clean - report.ld_corrupt) == pytest.approx(2 * MIN_LD_GAP, rel=1e-4)
        # A pair too close to normalise by has no shares of its own; the others have theirs
        close = [abs(pair.ld_clean - pair.ld_corrupt) < MIN_LD_GAP for pair in report.per_pair]
        assert 0 < sum(close) < len(close)
        assert all((None in pair.restored) == is_close for pair, is_close in zip(report.per_pair, close, strict=True))


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        (
            MinimalPair("the cat", "the cats near", "sleeps", "sleep"),
            "the clean prompt has 2 tokens, the corrupted one 3: a minimal pair differs in words, not in length",
        ),
        (
            MinimalPair("the cat", "the cats", "sleeps sleeps", "sleep"),
            "'sleeps sleeps' and 'sleep' must each be one token",
        ),
        (
            MinimalPair("the cat", "the cats", "sleep", "sleep"),
            "the answer and the wrong answer are both 'sleep': their logit difference is 0 "
            "whatever the model does; give two different tokens",
        ),
    ],
)
def test_a_pair_that_is_not_minimal_is_one_line(model_and_vocab, pair, message):
    _, framing = model_and_vocab
    with pytest.raises(UserError) as raised:
        prompts_of(framing, [pair], 64)
    assert str(raised.value) == message


def test_a_pair_with_an_unknown_word_names_it_then_the_vocabulary_on_one_line(model_and_vocab):
    _, framing = model_and_vocab
    with pytest.raises(UserError) as raised:
        prompts_of(framing, [MinimalPair("the unicorn", "the cats", "sleeps", "sleep")], 64)
    assert str(raised.value).startswith("unknown token 'unicorn'; the vocabulary has ")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(("d_ff", "norm"), [(64, "pre"), (0, "pre"), (64, "none")])
def test_the_contributions_add_up_to_the_logit_difference(d_ff, norm):
    model_keys = {"d_model": 32, "n_heads": 4, "n_layers": 3, "d_ff": d_ff, "norm": norm}
    config = config_from_dict({"task": {"name": "sentences"}, "model": model_keys})
    torch.manual_seed(1)
    task = get_task(config.task)
    model = build_model(config, len(task.vocab)).eval()
    vocab = task.vocab
    tokens = torch.tensor([[vocab.bos_id, *vocab.encode("the cats that see the dog are happy , so")]])
    report = attribute(model, tokens, vocab.ids["glad"], vocab.ids["large"])
    with torch.no_grad():
        logits = model(tokens)[0, -1]
    assert report.ld == pytest.approx(float(logits[vocab.ids["glad"]] - logits[vocab.ids["large"]]), abs=1e-5)
    assert sum(part.contribution for part in report.components) == pytest.approx(report.ld, abs=1e-4)
    heads = [(part.layer, part.head) for part in report.components if part.component == "z"]
    assert heads == [(layer, head) for layer in range(3) for head in range(4)]
    assert [part.component for part in report.components].count("mlp_out") == (3 if d_ff else 0)


def test_a_post_norm_model_cannot_be_decomposed():
    config = config_from_dict({"task": {"name": "sentences"}, "model": {"d_model": 16, "n_heads": 2, "norm": "post"}})
    model = build_model(config, len(get_task(config.task).vocab)).eval()
    with pytest.raises(UserError, match=r"needs model\.norm=pre or none: with post-norm a LayerNorm follows"):
        attribute(model, torch.tensor([[1, 2, 3]]), 4, 5)


@pytest.mark.parametrize("task_keys", [{"name": "modular-add", "modulus": 11}, {"name": "sort", "bos": True}])
def test_a_question_is_patched_at_its_sep_as_the_decoder_was_trained(task_keys):
    # The prompt is the training sequence up to <sep>, whose prediction is the answer's first token:
    # its LD is the one the framed training batch gives there, and patching the differing operand restores all.
    model_keys = {"d_model": 32, "n_heads": 2, "n_layers": 2}
    config = config_from_dict({"task": task_keys, "model": model_keys, "train": {"batch_size": 8}})
    torch.manual_seed(2)
    task = get_task(config.task)
    model, framing = build_model(config, len(task.vocab)).eval(), get_framing(task, "decoder")
    numbers = ("5 7", "5 8", "1", "2") if task.name == "modular-add" else ("3 1 2", "3 0 2", "1", "0")
    (prompts,) = prompts_of(framing, [MinimalPair(*numbers)], 64)
    vocab = task.vocab
    bos = [vocab.bos_id] if framing.bos else []
    assert prompts.clean.tolist() == [[*bos, *vocab.encode(numbers[0]), vocab.sep_id]]
    with torch.no_grad():
        trained = framing.frame(single_pair(vocab.encode(numbers[0]), vocab.encode(numbers[2])))
        at_sep = model(trained.tokens)[:, prompts.clean.size(1) - 1]  # (1, V)
    report = patch(model, [prompts], by="layer-position")
    assert trained.labels[0, prompts.clean.size(1) - 1] == vocab.ids[numbers[2]]  # <sep> is scored on it
    assert report.ld_clean == pytest.approx(float(at_sep[0, prompts.answer] - at_sep[0, prompts.wrong]), abs=1e-5)
    entering = {r.position: r.restored for r in report.results if (r.component, r.layer) == ("resid_pre", 0)}
    differing = len(bos) + 1
    assert entering[differing] == pytest.approx(1.0, abs=1e-5)
    assert all(restored == pytest.approx(0.0, abs=1e-5) for p, restored in entering.items() if p != differing)
    attributed = attribute(model, prompts.clean, int(prompts.answer[0]), int(prompts.wrong[0]))
    assert attributed.ld == pytest.approx(report.ld_clean, abs=1e-5)
    assert sum(part.contribution for part in attributed.components) == pytest.approx(attributed.ld, abs=1e-4)


def test_an_encoder_is_not_patched():
    task = get_task(config_from_dict({"task": {"name": "modular-add"}}).task)
    with pytest.raises(UserError, match=r"read decoder-only models .* this run is an encoder: train it with"):
        prompts_of(get_framing(task, "encoder"), [MinimalPair("5 7", "5 8", "12", "13")], 64)


def test_a_patch_report_shows_its_maps_in_a_notebook_as_coloured_grids(model_and_vocab):
    model, framing = model_and_vocab
    report = patch(model, prompts_of(framing, minimal_pairs("subject", 3, seed=5), 64), by="head")
    shown = report._repr_html_()
    cells = re.findall(r'<td style="background: rgb\((\d+), (\d+), (\d+)\)">([-\d.]+)</td>', shown)
    by_cell = {(r.layer, r.head): r.restored for r in report.results}
    assert [float(value) for *_, value in cells] == [round(by_cell[key], 2) for key in sorted(by_cell)]
    for (red, _, blue, _), restored in zip(cells, [by_cell[key] for key in sorted(by_cell)], strict=True):
        if abs(restored) > 0.01:  # blue where the clean answer came back, red where it went further away
            assert (int(blue) > int(red)) == (restored > 0)
    assert "<th>layer \\ head</th>" in shown and "http" not in shown


def test_an_attribution_shows_its_table_in_a_notebook(model_and_vocab):
    model, framing = model_and_vocab
    (group,) = prompts_of(framing, minimal_pairs("subject", 1, seed=5), 64)
    shares = attribute(model, group.clean[:1], int(group.answer[0]), int(group.wrong[0]))
    assert (
        shares._repr_html_()
        == f'<pre style="font-family: monospace; white-space: pre">{html.escape(shares.to_text())}</pre>'
    )
    assert shares.to_text().splitlines()[0] == f"logit difference {shares.ld:.3f} = the sum of the contributions below"


def test_prompts_of_ids_outside_the_vocabulary_are_named_by_where_they_came_from(model_and_vocab):
    model, framing = model_and_vocab
    (prompts,) = prompts_of(framing, minimal_pairs("subject", 2, seed=0), 64)
    beyond = replace(prompts, clean=prompts.clean.clone().fill_(model.vocab_size))
    with pytest.raises(ValueError, match=r"^`groups\[0\]\.clean` holds ids from"):
        patch(model, [beyond])
    vocab = f"0 to {model.vocab_size - 1}"
    for changes, message in [
        (
            {"corrupt": prompts.corrupt.clone().fill_(model.vocab_size)},
            f"`groups[0].corrupt` holds ids from {model.vocab_size} to {model.vocab_size}; "
            f"this model's vocabulary has ids {vocab} (vocab_size={model.vocab_size})",
        ),
        ({"corrupt": prompts.corrupt[:, :-1]}, "groups[0]: clean (2, 6) and corrupt (2, 5) differ in shape"),
        ({"answer": prompts.answer[:, None]}, "groups[0].answer must have 1 non-empty dimension(s), not shape (2, 1)"),
        ({"wrong": prompts.wrong[:1]}, "groups[0].wrong holds 1 ids for 2 prompts: one per prompt"),
        ({"wrong": prompts.wrong.clone().fill_(-1)}, f"groups[0].wrong must hold token ids from {vocab}"),
        (
            {"answer": prompts.answer.clone().fill_(model.vocab_size)},
            f"groups[0].answer must hold token ids from {vocab}",
        ),
    ]:
        with pytest.raises(ValueError) as raised:
            patch(model, [replace(prompts, **changes)])
        assert str(raised.value) == message


def test_answers_may_be_any_id_of_the_vocabulary(model_and_vocab):
    model, framing = model_and_vocab
    (prompts,) = prompts_of(framing, minimal_pairs("subject", 2, seed=0), 64)
    edges = replace(
        prompts, answer=torch.zeros_like(prompts.answer), wrong=torch.full_like(prompts.wrong, model.vocab_size - 1)
    )
    assert patch(model, [edges]).pairs == 2


def test_prompts_are_read_from_decoders_only_saying_what_is_wrong(model_and_vocab):
    _, framing = model_and_vocab
    pair = minimal_pairs("subject", 1, seed=0)
    for args, error, message in [
        (("run.framing", pair, 64), TypeError, "framing must be a run's framing (run.framing), not str 'run.framing'"),
        (
            (framing, "the cat", 64),
            TypeError,
            "pairs must be a list of MinimalPair (task.held_out_pairs(...)), not str 'the cat'",
        ),
        ((framing, pair, 0), ValueError, "max_len must be 1 or more, not 0"),
    ]:
        with pytest.raises(error) as raised:
            prompts_of(*args)
        assert str(raised.value) == message
    task = get_task(config_from_dict({"task": {"name": "modular-add"}}).task)
    with pytest.raises(UserError, match=r"^patching and attribution read decoder-only models"):
        prompt_ids(get_framing(task, "encoder-decoder"), "5 7", 64)


def test_a_clean_answer_tied_with_the_wrong_one_is_not_counted_correct(model_and_vocab):
    model, framing = model_and_vocab
    first, second = minimal_pairs("subject", 2, seed=0)  # "... sit" / "sits", then "... run" / "runs"
    assert {first.answer, first.wrong}.isdisjoint({second.answer, second.wrong})
    answer, wrong = (framing.task.vocab.encode(word)[0] for word in (first.answer, first.wrong))
    tied = copy.deepcopy(model)  # one embedding for the first pair's two answers: with tied weights, one logit
    with torch.no_grad():
        tied.token_embedding.weight[wrong] = tied.token_embedding.weight[answer]
    report = patch(tied, prompts_of(framing, [first, second], 64))
    assert report.per_pair[0].ld_clean == 0.0 and report.per_pair[1].ld_clean != 0.0
    assert report.clean_correct == (report.per_pair[1].ld_clean > 0) / 2


def hand_made_report(by: str) -> PatchReport:
    """Shares restored written out, for each way of patching: `by` head at every position,
    head by head at each position, or each layer's components at each position."""
    if by == "head":
        results = [Patched("z", layer, head, None, layer - 0.5 * head) for layer in (0, 1) for head in (0, 1)]
    elif by == "head-position":
        results = [Patched("z", 0, head, position, 0.5 * head + position) for head in (0, 1) for position in (0, 1, 2)]
    else:
        results = [
            Patched(component, layer, None, position, layer + position + (component == "attn_out"))
            for component in ("resid_pre", "attn_out")
            for layer in (0, 1)
            for position in (0, 1)
        ]
    return PatchReport(2 if by == "head" else 1, 2.0, -1.0, 1.0, results)


def grid_layout(grid):
    return grid.component, grid.by_position, grid.rows, grid.columns, grid.values.tolist()


def test_a_patch_report_lays_out_each_component_as_a_grid():
    (by_head,) = hand_made_report("head").grids()
    assert grid_layout(by_head) == ("z", False, [(0, None), (1, None)], [0, 1], [[0.0, -0.5], [1.0, 0.5]])
    (by_position,) = hand_made_report("head-position").grids()
    assert grid_layout(by_position) == ("z", True, [(0, 0), (0, 1)], [0, 1, 2], [[0.0, 1.0, 2.0], [0.5, 1.5, 2.5]])
    resid, attn = hand_made_report("layer-position").grids()
    assert grid_layout(resid) == ("resid_pre", True, [(0, None), (1, None)], [0, 1], [[0.0, 1.0], [1.0, 2.0]])
    assert grid_layout(attn) == ("attn_out", True, [(0, None), (1, None)], [0, 1], [[1.0, 2.0], [2.0, 3.0]])
    one_head = PatchReport(1, 2.0, -1.0, 1.0, [Patched("z", 0, 0, None, 0.5)])  # a model of one head
    assert [grid_layout(grid) for grid in one_head.grids()] == [("z", False, [(0, None)], [0], [[0.5]])]


NOTEBOOK_LABELS = {  # rows, columns (positions counted back from the prompt's end, as in the png), axes
    "head": (["0", "1"], ["0", "1"], ("layer", "head")),
    "head-position": (["0.0", "0.1"], ["-3", "-2", "-1"], ("layer.head", "position")),
    "layer-position": (["0", "1"], ["-2", "-1"], ("layer", "position")),
}


@pytest.mark.parametrize("by", NOTEBOOK_LABELS)
def test_a_patch_report_in_a_notebook_is_its_summary_then_each_grid_labelled_as_the_png(by):
    report = hand_made_report(by)
    rows, columns, axes = NOTEBOOK_LABELS[by]
    limit = 3.0 if by == "layer-position" else 2.5 if by == "head-position" else 1.0
    maps = "".join(
        notebook_heatmap(f"restored: {grid.component} patched", rows, columns, grid.values, limit, axes)
        for grid in report.grids()
    )
    pairs = "2 pairs" if by == "head" else "1 pair"
    summary = f"{pairs}; logit difference clean 2.000, corrupted -1.000; restored: 0 no change, 1 the clean answer back"
    assert report._repr_html_() == f"<p>{summary}</p>{maps}"


def test_an_attribution_prints_the_largest_contributions_first_whatever_their_sign():
    shares = Attribution(
        1.5,
        [
            Contribution("embed", None, None, 0.25),
            Contribution("z", 1, 0, -2.0),
            Contribution("mlp_out", 0, None, 3.25),
        ],
    )
    assert shares.to_text().splitlines() == [
        "logit difference 1.500 = the sum of the contributions below",
        "component  layer head contribution",
        "mlp_out        0    -        3.250",
        "z              1    0       -2.000",
        "embed          -    -        0.250",
    ]


def test_patch_refuses_arguments_it_cannot_read_saying_what_it_needs(model_and_vocab):
    model, framing = model_and_vocab
    groups = prompts_of(framing, minimal_pairs("subject", 2, seed=0), 64)
    for args, error, message in [
        (("model.pt", groups), TypeError, "model must be a tinytf Transformer, not str 'model.pt'"),
        ((model, "x"), TypeError, "groups must be a list of Prompts (prompts_of(...)), not str 'x'"),
        ((model, groups, "neuron"), ValueError, "by='neuron': one of head, head-position, layer-position"),
    ]:
        with pytest.raises(error) as raised:
            patch(*args)
        assert str(raised.value) == message


def test_patch_refuses_an_encoder_model(model_and_vocab):
    _, framing = model_and_vocab
    config = config_from_dict({"task": {"name": "sort"}, "model": {"arch": "encoder", "d_model": 16}})
    encoder = build_model(config, len(framing.task.vocab)).eval()  # reads the sentences' token ids
    with pytest.raises(UserError) as raised:
        patch(encoder, prompts_of(framing, minimal_pairs("subject", 2, seed=0), 64))
    assert str(raised.value) == "activation patching reads decoder-only models (the next token after a prompt)"
