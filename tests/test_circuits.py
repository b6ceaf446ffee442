"""Circuits from the weights: composition scores and OV copying hold their definitions on
heads built by hand, every later pair is scored against a seeded baseline, and
`tinytf circuits` prints, writes JSON and CSV. (tests/test_transformer_lens.py checks the
numbers against TransformerLens's own.)"""

import csv
import io
import json

import pytest
import torch
from conftest import assert_user_error, invoke, train_tiny_run
from test_interop import perturbed_model

from tinytf.inspect.circuits import MODES, circuit_report, composition_score, copying_score, random_baseline

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
    rows = list(csv.DictReader(io.StringIO(invoke("circuits", "--run", run, "--format", "csv").stdout)))
    assert [(row["mode"], row["from"], row["to"]) for row in rows] == [
        (c["mode"], c["early"], c["late"]) for c in report["compositions"]
    ]
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
