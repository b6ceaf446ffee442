"""Circuits from the weights: composition scores, OV copying and the QK positional share
hold their definitions on heads built by hand, every pair whose output reaches the other's
input is scored against a seeded baseline (an encoder-decoder's cross heads included), and
`tinytf circuits` prints, writes JSON and CSV. (tests/test_transformer_lens.py checks the
numbers against TransformerLens's own.)"""

import csv
import io
import json

import pytest
import torch
from conftest import assert_user_error, invoke, train_tiny_run
from test_interop import perturbed_model

from tinytf.inspect.circuits import (
    MODES,
    circuit_report,
    composition_score,
    copying_score,
    positional_share,
    random_baseline,
)
from tinytf.run.setup import build_model

D, D_H = 24, 6


def projection_head(first: int, sign: float = 1.0):
    """A head whose query, key and value read, and whose output writes, the coordinates
    first..first+D_H-1 of the stream, each through the identity."""
    reads = torch.zeros(D, D_H, dtype=torch.float64)
    reads[first : first + D_H] = torch.eye(D_H, dtype=torch.float64)
    return reads, reads, reads, sign * reads.T


def test_a_head_that_reads_what_another_writes_composes_and_one_that_reads_elsewhere_does_not():
    writer, same, elsewhere = projection_head(0), projection_head(0), projection_head(D_H)
    for mode in MODES:  # the products are one projection: |P|_F / |P|_F^2 = 1 / sqrt(rank)
        assert composition_score(writer, same, mode) == pytest.approx(D_H**-0.5)
        assert composition_score(writer, elsewhere, mode) == 0.0


def test_a_composition_score_is_the_definition_and_ignores_scale():
    generator = torch.Generator().manual_seed(1)
    early, late = (
        [torch.randn(*shape, generator=generator, dtype=torch.float64) for shape in [(D, D_H)] * 3 + [(D_H, D)]]
        for _ in range(2)
    )
    ov, qk = early[2] @ early[3], late[0] @ late[1].T
    by_hand = torch.linalg.norm(ov @ qk.T) / (torch.linalg.norm(ov) * torch.linalg.norm(qk))
    assert composition_score(early, late, "K") == pytest.approx(float(by_hand))
    louder = (early[0], early[1], 5 * early[2], early[3])
    assert composition_score(louder, late, "K") == pytest.approx(composition_score(early, late, "K"))


def test_a_head_that_writes_the_token_it_reads_copies_and_its_negation_anti_copies():
    _, model = perturbed_model("decoder", "none", "none", tied=True)
    with torch.no_grad():
        model.lm_head.weight.copy_(model.token_embedding.weight)  # W_U = W_E^T: W_E P W_E^T is positive
    width = model.config.head_dim
    reads = torch.zeros(model.config.d_model, width, dtype=torch.float64)
    reads[:width] = torch.eye(width, dtype=torch.float64)
    assert copying_score(model, (reads, reads, reads, reads.T)) == pytest.approx(1.0)
    assert copying_score(model, (reads, reads, reads, -reads.T)) == pytest.approx(-1.0)


def test_the_baseline_is_seeded_and_every_later_head_pair_is_scored_in_each_mode():
    assert random_baseline(D, D_H) == random_baseline(D, D_H)
    assert all(0 < b["mean"] < b["p95"] < 1 for b in random_baseline(D, D_H).values())
    _, model = perturbed_model("decoder", "pre", "learned", tied=False)
    report = circuit_report(model)
    heads = model.config.n_heads
    assert len(report.compositions) == len(MODES) * heads * heads  # 2 layers: layer 0 -> layer 1
    assert all(c.early.startswith("decoder.0.") and c.late.startswith("decoder.1.") for c in report.compositions)
    ratios = [c.ratio for c in report.compositions]
    assert ratios == sorted(ratios, reverse=True)
    assert all(c.ratio == pytest.approx(c.score / report.baseline[c.mode]["mean"]) for c in report.compositions)
    assert sorted(report.copying) == [f"decoder.{layer}.self.{head}" for layer in (0, 1) for head in range(heads)]


def module_head(attention, head: int) -> tuple[torch.Tensor, ...]:
    """W_Q, W_K, W_V (D, D_h) and W_O (D_h, D) of one head, read off the module's weights by hand:
    qkv_proj's rows are [W_Q; W_K; W_V], head h's the h-th D_h rows of each; out_proj's columns."""
    width = attention.head_dim
    d_model = attention.n_heads * width
    rows = slice(head * width, (head + 1) * width)
    qkv = attention.qkv_proj.weight.detach().double()
    w_q, w_k, w_v = (qkv[block * d_model :][rows].T for block in range(3))
    return w_q, w_k, w_v, attention.out_proj.weight.detach().double()[:, rows].T


ENCODER_DECODER_READS = {  # (writing attention, reading attention): the reader's inputs that read it
    ("encoder.0.self", "encoder.1.self"): "QKV",
    ("encoder.0.self", "decoder.0.cross"): "KV",  # a cross head's keys and values read the encoder
    ("encoder.0.self", "decoder.1.cross"): "KV",
    ("encoder.1.self", "decoder.0.cross"): "KV",
    ("encoder.1.self", "decoder.1.cross"): "KV",
    ("decoder.0.self", "decoder.0.cross"): "Q",  # its queries read the decoder: self runs first
    ("decoder.0.self", "decoder.1.self"): "QKV",
    ("decoder.0.self", "decoder.1.cross"): "Q",
    ("decoder.0.cross", "decoder.1.self"): "QKV",  # cross-attention writes into the decoder
    ("decoder.0.cross", "decoder.1.cross"): "Q",
    ("decoder.1.self", "decoder.1.cross"): "Q",
}


def test_an_encoder_decoder_scores_each_pair_through_exactly_the_inputs_that_read_the_writer():
    _, model = perturbed_model("encoder-decoder", "pre", "learned", tied=False)
    report = circuit_report(model)
    heads = range(model.config.n_heads)
    expected = {
        (f"{early}.{h}", f"{late}.{g}", mode)
        for (early, late), modes in ENCODER_DECODER_READS.items()
        for h in heads
        for g in heads
        for mode in modes
    }
    scored = [(c.early, c.late, c.mode) for c in report.compositions]
    assert len(scored) == len(set(scored)) and set(scored) == expected
    attentions = [
        "encoder.0.self",
        "encoder.1.self",
        *(f"decoder.{i}.{kind}" for i in (0, 1) for kind in ("self", "cross")),
    ]
    assert list(report.copying) == list(report.positional) == [f"{a}.{h}" for a in attentions for h in heads]
    assert all(isinstance(share, float) and 0 <= share <= 1 for share in report.positional.values())


def test_a_cross_head_never_reads_a_decoder_head_through_its_keys_or_values():
    data, _ = perturbed_model("encoder-decoder", "post", "sinusoidal", tied=True)
    model = build_model({**data, "model": {**data["model"], "n_encoder_layers": 1, "n_decoder_layers": 3}})
    compositions = circuit_report(model).compositions
    into_cross = [c for c in compositions if ".cross." in c.late]
    assert {c.mode for c in into_cross if c.early.startswith("decoder.")} == {"Q"}
    assert {c.mode for c in into_cross if c.early.startswith("encoder.")} == {"K", "V"}
    assert not [
        c for c in compositions if c.early.startswith("encoder.") and ".self." in c.late and "decoder" in c.late
    ]
    # 2 x 2 head pairs: the encoder's layer into 3 cross attentions in K and V; and in Q the
    # attentions that run before decoder.0.cross, .1.cross and .2.cross: 1, 3 and 5
    assert len(into_cross) == 2 * 2 * (3 * 2 + 1 + 3 + 5)


def test_a_cross_head_s_k_composition_with_an_encoder_head_is_the_formula_on_the_module_weights():
    _, model = perturbed_model("encoder-decoder", "pre", "rope", tied=False, seed=2)
    report = circuit_report(model)
    _, _, w_v, w_o = module_head(model.encoder.layers[0].self_attn, 1)
    w_q, w_k, _, _ = module_head(model.decoder.layers[1].cross_attn, 0)
    ov, qk = w_v @ w_o, w_q @ w_k.T  # (D, D) each
    by_hand = torch.linalg.norm(ov @ qk.T) / (torch.linalg.norm(ov) * torch.linalg.norm(qk))
    (score,) = [
        c.score
        for c in report.compositions
        if (c.early, c.late, c.mode) == ("encoder.0.self.1", "decoder.1.cross.0", "K")
    ]
    assert score == pytest.approx(float(by_hand), rel=1e-9)


def test_a_head_that_reads_positions_alone_scores_1_and_one_that_reads_tokens_alone_0():
    _, model = perturbed_model("decoder", "none", "learned", tied=False)
    half, width = model.config.d_model // 2, model.config.head_dim
    with torch.no_grad():  # tokens in the first half of the stream, positions in the second
        model.token_embedding.weight[:, half:] = 0.0
        model.positions.table[:, :half] = 0.0
        qkv = model.decoder.layers[0].self_attn.qkv_proj.weight  # (3D, D): [W_Q; W_K; W_V]
        for block in (0, 2 * half):  # head 0's and head 1's W_Q and W_K: each row reads one coordinate
            qkv[block : block + width] = torch.eye(2 * half)[half : half + width]  # head 0: positions'
            qkv[block + width : block + 2 * width] = torch.eye(2 * half)[:width]  # head 1: tokens'
    positional = circuit_report(model).positional
    assert positional["decoder.0.self.0"] == pytest.approx(1.0) and positional["decoder.0.self.1"] == 0.0


def test_the_positional_share_is_its_definition_and_none_without_added_positions():
    _, model = perturbed_model("decoder", "pre", "sinusoidal", tied=True, seed=1)
    report = circuit_report(model, lengths=(6, 0))
    tokens = model.token_embedding.weight.detach().double()[1:] * model.config.d_model**0.5  # (V - 1, D): no <pad>
    positions = model.positions.table.double()[:6]  # (6, D)
    queries = (tokens[:, None] + positions[None]).flatten(0, 1)  # (V - 1) x 6 queries e_t + p_i, (N, D)
    for name, head in [
        ("decoder.0.self.1", model.decoder.layers[0].self_attn),
        ("decoder.1.self.0", model.decoder.layers[1].self_attn),
    ]:
        w_q, w_k, _, _ = module_head(head, int(name[-1]))
        by_token, by_position = (queries @ w_q @ (keys @ w_k).T for keys in (tokens, positions))  # (N, V - 1), (N, 6)
        variances = by_token.var(1, unbiased=False), by_position.var(1, unbiased=False)
        assert report.positional[name] == pytest.approx(float((variances[1] / sum(variances)).mean()), rel=1e-9)
    for positional in ("rope", "none"):
        _, model = perturbed_model("encoder-decoder", "pre", positional, tied=True)
        assert set(circuit_report(model).positional.values()) == {None}


def test_a_cross_head_s_positional_share_asks_from_the_target_s_positions_into_the_source_s():
    _, model = perturbed_model("encoder-decoder", "pre", "learned", tied=False, seed=4)
    report = circuit_report(model, lengths=(3, 5))  # (tokens, source): the decoder's 3 positions, the encoder's 5
    tokens = model.token_embedding.weight.detach().double()[1:] * model.config.d_model**0.5  # (V - 1, D)
    table = model.positions.table.detach().double()  # (max_len, D)
    heads = {"encoder.1.self.0": (5, 5), "decoder.0.self.1": (3, 3), "decoder.1.cross.1": (3, 5)}
    for name, (query_len, key_len) in heads.items():
        stack, layer, kind, head = name.split(".")
        module = getattr(getattr(model, stack).layers[int(layer)], f"{kind}_attn")
        share = positional_share(tokens, table[:query_len], table[:key_len], module_head(module, int(head)))
        assert report.positional[name] == pytest.approx(share, rel=1e-12), name


def test_circuits_prints_the_strongest_first_and_writes_json_and_csv(tmp_path):
    run = train_tiny_run(tmp_path, model={"n_layers": 2}, train={"steps": 2, "eval_every": 2})
    table = invoke("circuits", "--run", run)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"run {run}") and lines[1].startswith("random baseline, mean (95th percentile): Q ")
    report = json.loads(invoke("circuits", "--run", run, "--format", "json").stdout)
    first = report["compositions"][0]
    assert (
        f"{first['early']:<18} {first['late']:<18} {first['mode'] + '-composition':>13} {first['score']:>6.3f}"
        in lines[3]
    )
    positional = report["positional"]  # sinusoidal positions: every head has a share
    assert list(positional) == list(report["copying"]) and all(0 <= share <= 1 for share in positional.values())
    for name, copying in report["copying"].items():
        assert f"{name:<18} {copying:>10.3f} {positional[name]:>13.3f}" in lines
    rows = list(csv.DictReader(io.StringIO(invoke("circuits", "--run", run, "--format", "csv").stdout)))
    assert [(row["mode"], row["from"], row["to"]) for row in rows] == [
        (c["mode"], c["early"], c["late"]) for c in report["compositions"]
    ]
    assert all(float(row["to_positional"]) == pytest.approx(positional[row["to"]], abs=1e-6) for row in rows)
    out = tmp_path / "circuits.json"
    assert invoke("circuits", "--run", run, "--format", "json", "--out", out).exit_code == 0
    assert json.loads(out.read_text())["copying"] == report["copying"]


def test_a_one_layer_model_has_nothing_to_compose_and_says_so(run):
    result = invoke("circuits", "--run", run)
    assert result.exit_code == 0, result.output
    assert "no composition: every head is in layer 0" in result.stdout
    assert "decoder.0.self.1" in result.stdout  # its heads' copying scores all the same


def test_circuits_png_draws_a_heatmap_per_composition_to_the_file_named(tmp_path, monkeypatch):
    run = train_tiny_run(tmp_path, model={"n_layers": 2}, train={"steps": 2, "eval_every": 2})
    out = tmp_path / "maps.png"
    result = invoke("circuits", "--run", run, "--format", "png", "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {out}\n" and out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert_user_error(invoke("circuits", "--run", run, "--format", "png", "--out", tmp_path / "maps.jpg"), "*.png")
    monkeypatch.chdir(tmp_path)  # without --out: a new circuits.png, never over an existing one
    assert invoke("circuits", "--run", run, "--format", "png").stdout == "wrote circuits.png\n"
    assert invoke("circuits", "--run", run, "--format", "png").stdout == "wrote circuits-2.png\n"
