"""Head-pattern scores, entropy and ablation (tinytf/inspect/heads.py, `tinytf heads`)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import assert_user_error, invoke, tiny_config, train_tiny_run

import tinytf.inspect.heads
from tinytf.config import config_from_dict
from tinytf.data.framing import get_framing
from tinytf.errors import UserError
from tinytf.inspect.attend import attention_report
from tinytf.inspect.evaluate import evaluate
from tinytf.inspect.heads import (
    GENERIC_PATTERNS,
    HeadReport,
    HeadScore,
    head_scores,
    pattern_mass,
    render_text,
    row_entropy,
    token_patterns,
)
from tinytf.inspect.notebook import notebook_text
from tinytf.model.names import attention_sides
from tinytf.run.setup import build_model
from tinytf.tasks import get_task
from tinytf.tasks.vocab import PAD_ID


def shifted(length: int, by: int) -> torch.Tensor:
    """(1, T, T) weights: query i puts all its weight on key i - by (row i < by on key 0)."""
    weights = torch.zeros(1, length, length)
    for i in range(length):
        weights[0, i, max(i - by, 0)] = 1
    return weights


def score(weights: torch.Tensor, pattern: str, ids: list[int], causal: bool = False) -> float | None:
    ids_tensor = torch.tensor(ids)
    found = pattern_mass(weights, token_patterns(ids_tensor, ids_tensor, same_sequence=True, causal=causal)[pattern])
    return None if found is None else float(found[0])


def test_each_attention_reads_the_sequences_its_name_says():
    # an encoder-decoder: the encoder reads the source, the decoder its tokens, cross-attention both
    assert attention_sides("encoder.0.self", "tokens", "source") == ("source", "source")
    assert attention_sides("decoder.1.self", "tokens", "source") == ("tokens", "tokens")
    assert attention_sides("decoder.1.cross", "tokens", "source") == ("tokens", "source")
    # an encoder alone, or a decoder alone: the tokens on both sides
    assert attention_sides("encoder.0.self", "tokens", None) == ("tokens", "tokens")
    assert attention_sides("decoder.0.self", "tokens", None) == ("tokens", "tokens")


def test_a_pure_diagonal_scores_self_1_and_previous_0():
    ids = [5, 6, 7, 8, 9]
    assert score(shifted(5, 0), "self", ids) == 1
    assert score(shifted(5, 0), "previous", ids) == 0


def test_a_shifted_map_scores_previous_1():
    ids = [5, 6, 7, 8, 9]
    assert score(shifted(5, 1), "previous", ids) == 1  # row 0 has no previous token: it does not count
    assert score(shifted(5, 1), "self", ids) == pytest.approx(1 / 5)  # only row 0 looks at itself


def test_first_token_and_a_uniform_head():
    ids = [4, 5, 6, 7]
    assert score(shifted(4, 10), "first", ids) == 1  # everything on key 0
    uniform = torch.full((1, 4, 4), 1 / 4)
    assert score(uniform, "first", ids) == pytest.approx(1 / 4)
    assert float(row_entropy(uniform)[0]) == pytest.approx(math.log(4))
    assert float(row_entropy(shifted(4, 1))[0]) == pytest.approx(0, abs=1e-6)


def test_a_causal_maps_first_query_scores_no_pattern_it_cannot_miss():
    # Query 0 of a causal map sees only key 0, which is itself and the first token: any head
    # puts all its weight there, so that row says nothing about `self` or `first`.
    ids = [5, 6, 7, 8, 9]
    one_back = shifted(5, 1)  # a previous-token head; query 0 on key 0, as it must
    assert score(one_back, "self", ids, causal=True) == 0  # not 1/5: row 0 is left out
    assert score(one_back, "first", ids, causal=True) == pytest.approx(1 / 4)  # rows 1..4: only row 1 on key 0
    assert score(one_back, "previous", ids, causal=True) == 1
    assert score(one_back, "self", ids) == pytest.approx(1 / 5)  # an encoder's query 0 could have looked elsewhere
    patterns = token_patterns(torch.tensor(ids), torch.tensor(ids), same_sequence=True, causal=True)
    assert not patterns["self"][0].any() and not patterns["first"][0].any()
    assert patterns["self"][1:].diagonal(offset=1).all() and patterns["first"][1:, 0].all()
    only = torch.tensor([4])  # one token, in any map: it sees only itself, the first token
    assert not token_patterns(only, only, same_sequence=True)["self"].any()


def test_a_causal_head_through_the_model_is_scored_without_its_first_query():
    """A decoder whose every head spreads evenly over the keys it sees: query i puts
    1 / (i + 1) on itself and on the first token; query 0 (1 on both) is left out."""
    model, framing, _ = tiny_model("decoder")
    names = [name for name in model.hook_names() if name.endswith("self.pattern")]

    def causal_uniform(weights):  # (B, H, T, T)
        seen = torch.ones(weights.shape[-2:]).tril()
        return (seen / seen.sum(dim=1, keepdim=True)).expand_as(weights).contiguous()

    report = head_scores(model, framing, text="3 1 4 1", hooks=dict.fromkeys(names, causal_uniform))
    (length,) = {len(m.query_tokens) for m in attention_report(model, framing, "3 1 4 1").maps}
    expected = sum(1 / (i + 1) for i in range(1, length)) / (length - 1)
    for head in report.heads:
        assert head.scores["self"] == pytest.approx(expected) and head.scores["first"] == pytest.approx(expected)


def test_duplicate_and_induction_patterns_on_a_repeated_sequence():
    ids = [1, 7, 8, 9, 7, 8, 9]  # <bos>-like 1, then a b c a b c
    patterns = token_patterns(torch.tensor(ids), torch.tensor(ids), same_sequence=True)
    # duplicate: the second a (4) looks at the first a (1), and so on
    assert patterns["duplicate"].nonzero().tolist() == [[4, 1], [5, 2], [6, 3]]
    # induction: the second a (4) looks at the token after the first a: b (2); the second
    # c (6) at what followed the first c: the second a (4)
    assert patterns["induction"].nonzero().tolist() == [[4, 2], [5, 3], [6, 4]]
    perfect = torch.zeros(1, 7, 7)
    perfect[0, :4, 0] = 1  # rows with nothing to look at rest on the first token
    perfect[0, 4, 2] = perfect[0, 5, 3] = perfect[0, 6, 4] = 1
    assert score(perfect, "induction", ids) == 1
    # TransformerLens's unrestricted measure averages over every row: 3 of 7 here
    unrestricted = float((perfect[0] * patterns["induction"]).sum(1).mean())
    assert unrestricted == pytest.approx(3 / 7)


def test_a_pattern_without_rows_has_no_score():
    ids = [3, 4, 5]  # no repeated token: neither duplicate nor induction has a row
    assert score(shifted(3, 0), "duplicate", ids) is None
    assert score(shifted(3, 0), "induction", ids) is None


def test_across_two_sequences_only_first_applies():
    patterns = token_patterns(torch.tensor([1, 2]), torch.tensor([3, 4, 5]), same_sequence=False)
    assert list(patterns) == ["first"]
    assert patterns["first"].shape == (2, 3)


def test_label_is_the_best_pattern_from_one_half_on():
    head = HeadScore("decoder", 0, "self", 0, {"self": 0.2, "previous": 0.7, "first": None}, entropy=0.3)
    assert head.label == "previous"
    head.scores["previous"] = 0.49
    assert head.label == "mixed"


def tiny_model(arch: str, task_name: str = "reverse", seed: int = 0):
    config = tiny_config(
        task={"name": task_name, "vocab_size": 6, "min_len": 3, "max_len": 6},
        model={"arch": arch, "n_layers": 2, "n_heads": 2, "dropout": 0.0},
    )
    torch.manual_seed(seed)
    task = get_task(config.task)
    return build_model(config).eval(), get_framing(task, arch), task


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder-decoder"])
def test_scores_average_the_inputs_each_without_its_padding(arch):
    """Two inputs of different lengths scored together (so padded) give the mean of their
    scores alone, pattern by pattern, where both have rows."""
    model, framing, task = tiny_model(arch)
    pairs = task.sample(2, torch.Generator().manual_seed(3))
    while int(pairs.source_len[0]) == int(pairs.source_len[1]):
        pairs = task.sample(2, torch.Generator().manual_seed(int(pairs.source_len.sum())))
    together = head_scores(model, framing, pairs)
    alone = [head_scores(model, framing, pairs[i : i + 1]) for i in (0, 1)]
    assert together.inputs == 2 and together.patterns == [*GENERIC_PATTERNS, "reverse"]
    for h, (a, b) in zip(together.heads, zip(alone[0].heads, alone[1].heads, strict=True), strict=True):
        assert h.name == a.name == b.name
        assert h.entropy == pytest.approx((a.entropy + b.entropy) / 2, abs=1e-5)
        for pattern in together.patterns:
            values = [s for s in (a.scores[pattern], b.scores[pattern]) if s is not None]
            expected = sum(values) / len(values) if values else None
            assert h.scores[pattern] == pytest.approx(expected, abs=1e-5), (h.name, pattern)


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder-decoder"])
def test_a_typed_input_scores_what_attend_shows(arch):
    """--text scores the maps `attend` reports for the same input, by the documented formula."""
    model, framing, _ = tiny_model(arch)
    report = head_scores(model, framing, text="3 1 4 1")
    maps = {m.name: m for m in attention_report(model, framing, "3 1 4 1").maps}
    assert {h.name.rsplit(".", 1)[0] for h in report.heads} == set(maps)
    for head in report.heads:
        shown = maps[head.name.rsplit(".", 1)[0]]
        weights = torch.tensor(shown.weights[head.head : head.head + 1])  # (1, T_q, T_k)
        ids = framing.vocab.encode(shown.query_tokens), framing.vocab.encode(shown.key_tokens)
        same = shown.query_tokens is shown.key_tokens or head.stack == "encoder" or head.kind == "self"
        causal = head.stack == "decoder" and head.kind == "self"  # query i sees keys 0..i
        patterns = token_patterns(torch.tensor(ids[0]), torch.tensor(ids[1]), same_sequence=same, causal=causal)
        for pattern in GENERIC_PATTERNS:
            expected = pattern_mass(weights, patterns[pattern]) if pattern in patterns else None
            assert head.scores[pattern] == pytest.approx(None if expected is None else float(expected[0]), abs=1e-6)
        assert head.entropy == pytest.approx(float(row_entropy(weights)[0]), abs=1e-6)
        if head.kind == "cross":
            assert head.scores["self"] is None and head.scores["first"] is not None


def test_the_task_alignment_is_scored_where_the_framing_places_it():
    model, framing, task = tiny_model("encoder-decoder")
    report = head_scores(model, framing, task.sample(8, torch.Generator().manual_seed(0)))
    for head in report.heads:
        applies = head.kind == "cross"
        assert (head.scores["reverse"] is not None) == applies, head.name


@pytest.mark.parametrize("how", ["zero", "mean"])
def test_ablating_a_head_whose_w_o_is_zero_changes_nothing(how):
    model, framing, task = tiny_model("decoder")
    head_dim = model.config.head_dim
    with torch.no_grad():
        model.decoder.layers[1].self_attn.out_proj.weight[:, head_dim : 2 * head_dim] = 0  # head 1 of layer 1
    pairs = task.sample(30, torch.Generator().manual_seed(1))
    report = head_scores(model, framing, pairs, ablate=how)
    assert report.ablate == how and set(report.intact) == {"loss", "token_acc", "seq_acc"}
    silent = next(h for h in report.heads if h.name == "decoder.1.self.1")
    assert silent.ablation["loss_change"] == pytest.approx(0, abs=1e-6)
    assert silent.ablation["seq_acc_change"] == 0
    others = [h for h in report.heads if h is not silent]
    assert max(abs(h.ablation["loss_change"]) for h in others) > 1e-4  # an untrained head still matters a little
    changes = [h.ablation["loss_change"] for h in report.heads]
    assert changes == sorted(changes, reverse=True)  # the heads that matter on top


def test_zero_ablation_is_the_hook_on_z():
    """The ablated loss is the loss of run_with_hooks with that head's z zeroed."""
    from tinytf.inspect.evaluate import scored_loss

    model, framing, task = tiny_model("decoder")
    pairs = task.sample(16, torch.Generator().manual_seed(2))
    report = head_scores(model, framing, pairs, ablate="zero")
    head = report.heads[0]
    batch = framing.frame(pairs)

    def zero(z):
        z = z.clone()
        z[:, head.head] = 0
        return z

    with torch.no_grad():
        logits = model.run_with_hooks(**batch.model_inputs(), hooks={f"{head.stack}.{head.layer}.{head.kind}.z": zero})
    assert head.ablation["loss"] == pytest.approx(float(scored_loss(logits, batch.labels)), abs=1e-5)


def test_a_language_model_scores_its_alignment_on_the_sequence():
    config = config_from_dict(
        {
            "task": {"name": "sentences", "min_len": 3, "max_len": 8},
            "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 0},
        }
    )
    torch.manual_seed(0)
    task = get_task(config.task)
    model = build_model(config).eval()
    framing = get_framing(task, "decoder")
    report = head_scores(model, framing, text="the cat that sees the dogs slept . it is big , not small")
    assert list(report.patterns[-3:]) == ["subject", "coreference", "semantic"]
    assert all(h.scores[pattern] is not None for h in report.heads for pattern in report.patterns[-3:])
    no_pronoun = head_scores(model, framing, text="the cat sleeps")  # an alignment without pairs scores nothing
    assert all(h.scores["subject"] is not None and h.scores["coreference"] is None for h in no_pronoun.heads)


# ---- the command


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("heads"), model={"n_layers": 2})


def test_heads_prints_a_table_of_every_head(run_dir):
    result = invoke("heads", "--run", run_dir, "--n", 20)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "20 held-out inputs" in lines[0]
    assert lines[1].split() == ["head", *GENERIC_PATTERNS, "sort", "entropy", "label"]
    assert [line.split()[0] for line in lines[2:]] == [f"decoder.{layer}.self.{h}" for layer in (0, 1) for h in (0, 1)]


def test_heads_json_has_the_documented_shape(run_dir, tmp_path):
    out = tmp_path / "scores.json"
    result = invoke("heads", "--run", run_dir, "--n", 10, "--format", "json", "--ablate", "mean", "--out", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["inputs"] == 10 and data["patterns"] == [*GENERIC_PATTERNS, "sort"] and data["ablate"] == "mean"
    head = data["heads"][0]
    assert set(head) == {"stack", "layer", "kind", "head", "scores", "entropy", "label", "ablation"}
    assert set(head["ablation"]) == {
        "loss",
        "token_acc",
        "seq_acc",
        "loss_change",
        "token_acc_change",
        "seq_acc_change",
    }
    from tinytf.cli.commands import first_held_out
    from tinytf.run.load import load_run

    run = load_run(run_dir)  # the library, on the same 10 held-out inputs, gives the same numbers
    expected = head_scores(run.model, run.framing, first_held_out(run, 10), ablate="mean")
    assert [h["scores"] for h in data["heads"]] == [pytest.approx(e.scores, abs=1e-6) for e in expected.heads]
    assert [h["ablation"] for h in data["heads"]] == [pytest.approx(e.ablation, abs=1e-6) for e in expected.heads]
    for h in data["heads"]:  # each change is against the intact model
        for metric in ("loss", "token_acc", "seq_acc"):
            change = h["ablation"][metric] - data["intact"][metric]
            assert h["ablation"][f"{metric}_change"] == pytest.approx(change, abs=1e-9)


def test_heads_on_one_typed_input(run_dir):
    result = invoke("heads", "--run", run_dir, "--text", "3 1 2", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["inputs"] == 1 and data["text"] == "3 1 2" and data["heads"][0]["ablation"] is None


def test_heads_notes_a_typed_input_of_a_length_never_trained_on(run_dir):
    short = invoke("heads", "--run", run_dir, "--text", "3 1")
    assert short.exit_code == 0, short.output
    assert short.stderr.startswith("note: the input has 2 tokens") and short.stderr.count("\n") == 1, short.stderr
    assert "the input '3 1'" in short.stdout.splitlines()[0]
    in_range = invoke("heads", "--run", run_dir, "--text", "3 1 2")
    assert in_range.exit_code == 0 and in_range.stderr == ""


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--n", 1000], "--n 1000: the run's held-out set has"),
        (["--text", "3 1", "--ablate", "zero"], "drop --text to ablate"),
        (["--text", "3 x"], "unknown token 'x'"),
        (["--ablate", "half"], "'half' is not one of"),
    ],
)
def test_heads_user_errors_are_one_line(run_dir, args, fragment):
    assert_user_error(invoke("heads", "--run", run_dir, *args), fragment)


def test_heads_out_must_be_a_file(run_dir, tmp_path):
    assert_user_error(invoke("heads", "--run", run_dir, "--out", tmp_path), "is a folder")
    assert_user_error(invoke("heads", "--run", tmp_path / "missing"), "missing")


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_hand_made_maps_through_the_model_score_exactly(arch):
    """Every self-attention pattern replaced (by a hook) by the diagonal, then by the map one
    step below it: head_scores reports self = 1, previous = 0, then previous = 1."""
    model, framing, task = tiny_model(arch)
    pairs = task.sample(12, torch.Generator().manual_seed(4))
    names = [name for name in model.hook_names() if name.endswith("self.pattern")]

    def diagonal(weights):  # (B, H, T, T)
        return torch.eye(weights.size(-1)).expand_as(weights).contiguous()

    def below_diagonal(weights):  # query i on key i - 1; query 0 on itself
        length = weights.size(-1)
        shifted = torch.zeros(length, length)
        shifted[torch.arange(length), (torch.arange(length) - 1).clamp(min=0)] = 1
        return shifted.expand_as(weights).contiguous()

    on_diagonal = head_scores(model, framing, pairs, hooks=dict.fromkeys(names, diagonal))
    assert all(h.scores["self"] == pytest.approx(1) and h.scores["previous"] == 0 for h in on_diagonal.heads)
    assert all(h.entropy == pytest.approx(0, abs=1e-6) and h.label == "self" for h in on_diagonal.heads)
    one_back = head_scores(model, framing, pairs, hooks=dict.fromkeys(names, below_diagonal), ablate="zero")
    assert all(h.scores["previous"] == pytest.approx(1) and h.label == "previous" for h in one_back.heads)
    assert all(h.scores["self"] < 0.5 for h in one_back.heads)  # only each input's first query looks at itself


# ---- against references written out by hand


def test_induction_and_self_patterns_at_the_edges():
    ids = torch.tensor([3, 4, 3, 4])
    patterns = token_patterns(ids, ids, same_sequence=True)  # an encoder's: every query sees every key
    # the second 3 (2) looks at what followed the first 3, key 1: the earliest key with a token before it
    assert patterns["induction"].nonzero().tolist() == [[2, 1], [3, 2]]
    assert patterns["first"][0].any() and patterns["self"][0].any()  # query 0 could have looked elsewhere
    across = token_patterns(torch.tensor([1, 2]), torch.tensor([3, 4, 5]), same_sequence=False, causal=True)
    assert across["first"].tolist() == [[False, False, False], [True, False, False]]  # row 0 sees only key 0


def test_best_is_the_highest_scoring_head_of_the_layer_asked_for_among_those_the_pattern_applies_to():
    heads = [
        HeadScore("decoder", 0, "self", 0, {"self": 0.9, "previous": None}, entropy=0.1),
        HeadScore("decoder", 1, "self", 0, {"self": 0.2, "previous": 0.6}, entropy=0.1),
        HeadScore("decoder", 1, "self", 1, {"self": 0.4, "previous": 0.3}, entropy=0.1),
    ]
    report = HeadReport(inputs=1, patterns=["self", "previous"], heads=heads)
    assert report.best("self") is heads[0] and report.best("self", layer=1) is heads[2]
    assert report.best("previous") is heads[1] and report.best("previous", layer=0) is None
    assert report.best("induction") is None and report.best("self", layer=2) is None


def ablated_report() -> HeadReport:
    def ablation(loss, seq_acc):
        return {"loss": loss, "loss_change": loss - 1.25, "seq_acc": seq_acc, "seq_acc_change": seq_acc - 0.625}

    heads = [
        HeadScore("decoder", 0, "self", 1, {"self": 0.9, "previous": None}, 0.25, ablation(1.5, 0.5)),
        HeadScore("encoder", 1, "self", 0, {"self": 0.125, "previous": 0.3}, 1.5, ablation(1.0, 0.75)),
    ]
    intact = {"loss": 1.25, "token_acc": 0.75, "seq_acc": 0.625}
    return HeadReport(2, ["self", "previous"], heads, ablate="mean", intact=intact, meta={"text": "ça va"})


def test_an_ablated_report_prints_the_intact_metrics_then_a_row_per_head():
    report = ablated_report()
    assert render_text(report).splitlines() == [
        "intact: loss 1.250, token_acc 0.750, seq_acc 0.625; each head mean-ablated in turn, the most harmful first",
        "head              self  previous  entropy  label   loss   Δloss  seq_acc  Δseq_acc",
        "decoder.0.self.1  0.90         -     0.25   self  1.500  +0.250    0.500    -0.125",
        "encoder.1.self.0  0.12      0.30     1.50  mixed  1.000  -0.250    0.750    +0.125",
    ]
    report.ablate = report.intact = None
    for head in report.heads:
        head.ablation = None
    assert render_text(report).splitlines() == [
        "head              self  previous  entropy  label",
        "decoder.0.self.1  0.90         -     0.25   self",
        "encoder.1.self.0  0.12      0.30     1.50  mixed",
    ]


def test_a_report_is_the_printed_table_in_a_notebook_and_unescaped_json_on_disk():
    report = ablated_report()
    assert report._repr_html_() == notebook_text(render_text(report))
    text = report.to_json()
    assert json.loads(text) == report.to_dict() and '\n "text": "ça va",' in text  # one-space indent, as typed
    assert report.to_dict()["heads"][1]["label"] == "mixed"


def mean_z_reference(model, framing, pairs, hooks):
    """Each attention's mean z over the real (non-PAD) query positions of all `pairs` in one
    batch, with `hooks` applied: {attention name: (H, D_h)}."""
    batch = framing.frame(pairs)
    with torch.no_grad():
        _, cache = model.run_with_cache(**batch.model_inputs(), names=lambda n: n.endswith(".z"), hooks=hooks)
    means = {}
    for name, z in cache.items():  # (B, H, T_q, D_h)
        queries = batch.source if name.startswith("encoder") and batch.source is not None else batch.tokens
        real = queries != PAD_ID  # (B, T_q)
        means[name] = z.permute(1, 0, 2, 3)[:, real].mean(dim=1)  # (H, D_h)
    return means


@pytest.mark.parametrize(
    ("arch", "lengths", "n"), [("decoder", (3, 6), 12), ("encoder-decoder", (3, 6), 12), ("encoder", (1, 1), 1)]
)
def test_mean_ablation_sets_the_head_to_its_mean_over_real_positions_after_the_callers_hooks(
    arch, lengths, n, monkeypatch
):
    """Against a reference on one batch, while head_scores reads 5 inputs a batch; the
    caller's hook on every z (scaling it) runs before the ablation, as it does in the
    intact model. One input of one token: an encoder head's mean is its one output."""
    config = tiny_config(
        task={"name": "reverse", "vocab_size": 6, "min_len": lengths[0], "max_len": lengths[1]},
        model={"arch": arch, "n_layers": 2, "n_heads": 2, "dropout": 0.0},
    )
    torch.manual_seed(0)
    task, model = get_task(config.task), build_model(config).eval()
    framing = get_framing(task, arch)
    pairs = task.sample(n, torch.Generator().manual_seed(5))
    monkeypatch.setattr(tinytf.inspect.heads, "BATCH_SIZE", 5)
    hooks = {name: (lambda z: 1.5 * z) for name in model.hook_names() if name.endswith(".z")}
    report = head_scores(model, framing, pairs, ablate="mean", hooks=hooks)
    assert report.intact == pytest.approx(evaluate(model, framing, pairs, hooks=hooks), abs=1e-6)
    means = mean_z_reference(model, framing, pairs, hooks)
    for head in report.heads:
        name = f"{head.stack}.{head.layer}.{head.kind}.z"

        def scaled_then_mean(z, head=head.head, mean=means[name][head.head]):
            z = 1.5 * z
            z[:, head] = mean
            return z

        expected = evaluate(model, framing, pairs, hooks={**hooks, name: scaled_then_mean})
        assert {key: head.ablation[key] for key in expected} == pytest.approx(expected, abs=1e-5), head.name


def test_zero_ablation_keeps_a_callers_hook_that_only_watches():
    model, framing, task = tiny_model("decoder")
    pairs = task.sample(10, torch.Generator().manual_seed(6))
    seen = []

    def watch(z):  # returns nothing: the value goes on unchanged
        seen.append(z.shape)

    watched = head_scores(model, framing, pairs, ablate="zero", hooks={"decoder.0.self.z": watch})
    plain = head_scores(model, framing, pairs, ablate="zero")
    assert seen and [h.ablation for h in watched.heads] == [h.ablation for h in plain.heads]


def test_head_scores_refuses_what_it_cannot_score_saying_why():
    model, framing, task = tiny_model("decoder")
    pairs = task.sample(4, torch.Generator().manual_seed(0))
    for arguments, error, message in [
        ({}, ValueError, "head_scores: pass either `pairs` or `text`"),
        ({"pairs": pairs, "text": "1 2"}, ValueError, "head_scores: pass either `pairs` or `text`"),
        (
            {"pairs": [1, 2]},
            TypeError,
            "pairs must be examples of the task (task.sample(...), TaskData(...).held_out), not list [1, 2]",
        ),
        ({"pairs": pairs, "ablate": "half"}, ValueError, "ablate must be 'zero', 'mean' or None, not 'half'"),
        (
            {"text": "1 2", "ablate": "zero"},
            UserError,
            "--ablate measures the loss on held-out examples with their answers; drop --text to ablate",
        ),
        ({"pairs": pairs[:0]}, ValueError, "head_scores: `pairs` holds no examples"),
    ]:
        with pytest.raises(error) as raised:
            head_scores(model, framing, **arguments)
        assert str(raised.value) == message
