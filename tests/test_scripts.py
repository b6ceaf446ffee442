"""The measuring scripts run, and measure what they say they measure. (Their speed
figures are not checked here: timings belong in the benchmark, not in tests.)"""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, SUBPROCESS_ENV
from torch.utils.flop_counter import FlopCounterMode

from tinytf.model.attention import MultiHeadAttention

sys.path.insert(0, str(ROOT / "scripts"))

import bench
import contenders
import step_times
import train_configs

# Two small shapes with different widths, depths, head counts and lengths (B x T tokens).
SMALL_SHAPES = [
    bench.Shape(vocab=20, seq=12, batch=3, d_model=32, heads=2, layers=1, d_ff=64),
    bench.Shape(vocab=37, seq=9, batch=2, d_model=48, heads=3, layers=2, d_ff=80),
]


def run_script(*args: str) -> None:
    subprocess.run([sys.executable, *args], cwd=ROOT, env=SUBPROCESS_ENV, check=True, capture_output=True, timeout=300)


@pytest.mark.parametrize("shape", ["tiny", "default"])
def test_matmuls_only_does_the_products_the_flop_formula_counts(shape, monkeypatch):
    # Count the FLOPs of every matmul the floor performs; they must be the model FLOPs of
    # a step (6 N tokens + 12 L T D tokens), with N counting weight matrices only.
    shape = bench.Shape(**bench.SHAPES[shape])
    counted = []
    real_matmul = bench.torch.Tensor.__matmul__

    def counting_matmul(a, b):
        counted.append(2 * a.shape[:-1].numel() * a.shape[-1] * b.shape[-1])
        return real_matmul(a, b)

    step = bench.matmuls_only(shape)
    monkeypatch.setattr(bench.torch.Tensor, "__matmul__", counting_matmul)
    step()
    d, f, tokens = shape.d_model, shape.d_ff, shape.batch * shape.seq
    weights = shape.layers * (4 * d * d + 2 * d * f) + d * shape.vocab
    assert sum(counted) == 6 * weights * tokens + 12 * shape.layers * shape.seq * d * tokens


@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=["1-layer", "2-layer"])
def test_flop_counter_counts_exactly_the_formula(shape):
    # What MFU is computed from: FlopCounterMode over one forward and backward of the
    # tinytf model as trained (the fused attention kernel), against 6 N tokens + 12 L T D tokens.
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq))
    counted = bench.counted_flops_per_step(contenders.tinytf_model(shape), tokens)
    assert counted == bench.model_flops_per_step(shape)


@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=["1-layer", "2-layer"])
def test_explicit_attention_counts_the_same_flops_without_our_kernel_formula(shape):
    # With return_attention=True tinytf computes Q K^T and P V as plain matmuls, which
    # PyTorch's own formulas count: a check on the formula bench.py adds for the CPU kernel.
    model = contenders.tinytf_model(shape)
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq))
    with FlopCounterMode(display=False) as counter:
        logits, _ = model(tokens, return_attention=True)
        F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    assert counter.get_total_flops() == bench.model_flops_per_step(shape)


def test_the_tinytf_variants_change_only_the_attention_path_or_the_design(monkeypatch):
    shape = SMALL_SHAPES[1]
    fused, explicit = contenders.CONTENDERS["tinytf fused"](shape), contenders.CONTENDERS["tinytf explicit"](shape)
    explicit.load_state_dict(fused.state_dict())
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq))
    torch.testing.assert_close(explicit(tokens), fused(tokens), rtol=1e-5, atol=1e-5)
    paths = []
    attention_module = sys.modules["tinytf.model.attention"]
    real_attention = attention_module.attention
    monkeypatch.setattr(attention_module, "attention", lambda *a, **k: paths.append(1) or real_attention(*a, **k))
    fused(tokens)
    assert paths == []
    explicit(tokens)
    assert len(paths) == shape.layers
    textbook_design = contenders.tinytf_textbook_design(shape)
    assert (textbook_design.config.norm, textbook_design.config.activation) == ("post", "relu")
    assert (fused.config.norm, fused.config.activation) == ("pre", "gelu")


def test_matmul_floor_names_each_product_by_its_place_and_pass():
    shape = SMALL_SHAPES[1]
    products = bench.matmul_floor(shape)
    names = [product.name for product in products]
    assert len(set(names)) == len(names) == shape.layers * (4 * 3 + 6) + 3  # 4 linears + attention, + lm_head
    assert names[:3] == [
        "layer 0 qkv_proj forward: X W^T",
        "layer 0 attention forward: scores Q K^T",
        "layer 0 attention forward: output P V",
    ]
    assert names[-1] == "layer 0 qkv_proj grad wrt weight: dY^T X"  # backward ends where forward began

    def flops(selected):
        with FlopCounterMode(display=False) as counter:
            for product in selected:
                product()
        return counter.get_total_flops()

    # Forward is a third of a step; attention is the 12 L T D tokens term.
    tokens = shape.batch * shape.seq
    assert 3 * flops(p for p in products if "forward" in p.name) == bench.model_flops_per_step(shape)
    assert flops(p for p in products if "attention" in p.name) == 12 * shape.layers * shape.seq * shape.d_model * tokens


def test_bench_runs_a_custom_shape_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    shape = ["--d-model", "32", "--layers", "1", "--heads", "2", "--d-ff", "64", "--seq", "16", "--batch", "4"]
    run_script("scripts/bench.py", *shape, "--rounds", "1", "--repeat", "1", "--no-compile", "--json", str(out))
    result = json.loads(out.read_text())
    rows = result["shapes"][0]["train"]
    variants = {"tinytf fused", "tinytf explicit", "tinytf post/relu"}
    assert {"tinytf", *variants, "torch-encoder", "textbook", bench.FLOOR} <= set(rows)
    assert all(row["step_ms"] > 0 for row in rows.values())
    assert result["shapes"][0]["ceiling_vs_torch_encoder"] > 0 and result["fixed_step_ms"] > 0
    assert result["shapes"][0]["model_flops"] == result["shapes"][0]["model_flops_formula"]


@pytest.mark.parametrize("padded", [False, True])
def test_bench_paths_times_both_attention_paths_and_names_the_rules_choice(tmp_path, padded):
    out = tmp_path / "paths.json"
    options = ["--keys", "16", "20", "--rounds", "1", "--repeat", "1", "--json", str(out)]
    run_script("scripts/bench.py", "--paths", *options, *(["--padded"] if padded else []))
    rows = json.loads(out.read_text())["paths"]
    assert [(row["head_dim"], row["keys"]) for row in rows] == [(w, k) for w in (16, 32, 64) for k in (16, 20)]
    assert all(row["padded"] == padded for row in rows)
    # attention.explicit_keys: 1-48 keys but 16 at head width 16, 1-48 from 32
    assert [row["rule"] for row in rows] == ["fused", "explicit"] + ["explicit"] * 4
    assert all(row["explicit_ms"] > 0 and row["fused_ms"] > 0 for row in rows)


@pytest.mark.parametrize("padded", [False, True])
def test_the_padded_path_sweep_runs_every_attention_under_a_padding_bias(padded, monkeypatch):
    biased, real_forward = [], MultiHeadAttention.forward

    def recording_forward(self, x, context=None, **kwargs):
        biased.append(kwargs.get("attn_bias") is not None)
        return real_forward(self, x, context, **kwargs)

    monkeypatch.setattr(MultiHeadAttention, "forward", recording_forward)
    (row,) = bench.path_sweep((8,), (16,), rounds=1, repeat=1, padded=padded)
    assert row["padded"] == padded and biased and set(biased) == {padded}


def test_bench_tasks_measures_the_tasks_asked_for(tmp_path):
    out = tmp_path / "tasks.json"
    tasks = ["copy", "text"]  # a symbol task, and the one that reads a file
    run_script("scripts/bench_tasks.py", "--tasks", *tasks, "--rounds", "1", "--repeat", "1", "--json", str(out))
    rows = json.loads(out.read_text())
    assert [row["task"] for row in rows] == tasks
    assert all(row["batch_ms"] > 0 and row["step_ms"] > 0 and row["share"] > 0 for row in rows)


def test_train_configs_reports_time_to_target(tmp_path):
    out = tmp_path / "results.json"
    run_script("scripts/train_configs.py", "configs/copy-encoder.yaml", "--threads", "1", "--json", str(out))
    (row,) = json.loads(out.read_text())
    assert row["config"] == "copy-encoder.yaml" and row["seq_acc"] >= 0.99
    assert 0 < row["seconds_to_target"] <= row["seconds"]


def test_train_configs_says_which_configs_miss_their_target():
    def row(config, seconds, target=0.99):
        return {"config": config, "seconds_to_target": seconds, "target": target, "seq_acc": 0.95}

    missed = train_configs.missed_target
    assert missed(row("sort-decoder.yaml", 59.0)) is None
    assert "over its 60 s limit" in missed(row("sort-decoder.yaml", 61.0))
    assert "never reached 99% (best 95.0%)" in missed(row("sort-decoder.yaml", None))
    assert "over its 15 s limit" in missed(row("sort-decoder-len20.yaml", 16.0))
    assert missed(row("reverse-decoder-len20.yaml", 4.0)) is None
    assert missed(row("induction-decoder-1layer.yaml", None)) is None  # the control must not reach it...
    assert "a control" in missed(row("induction-decoder-1layer.yaml", 9.0))  # ...and is reported if it does
    assert missed(row("text-decoder.yaml", None, target=None)) is None  # language models have no target


def test_bench_logging_times_runs_with_and_without_head_scores(tmp_path):
    out = tmp_path / "logging.json"
    run_script("scripts/bench_logging.py", "--quick", "--json", str(out))
    rows = json.loads(out.read_text())
    assert [row["config"] for row in rows] == ["quickstart.yaml", "sort-encoder-decoder.yaml"]
    for row in rows:
        assert row["steps"] == 6 and row["attention_every"] == 3 and row["scoring_points"] == 2  # steps 3 and 6
        assert len(row["off_runs_s"]) == len(row["on_runs_s"]) == 1
        assert row["off_s"] > 0 and row["on_s"] > 0 and row["ratio"] > 0
        assert row["first_ms"] > 0 and row["later_ms"] > 0 and 0 < row["share"] < 1


def test_bench_distributed_measures_a_torchrun_job(tmp_path):
    out = tmp_path / "distributed.json"
    tiny = ["--shape", '{"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}', "--sequence", "4", "--batch", "8"]
    run_script(
        "scripts/bench_distributed.py",
        "--only",
        "torchrun",
        "--rounds",
        "1",
        "--steps",
        "6",
        "--log-every",
        "2",
        "--quiet-wait",
        "0",
        *tiny,
        "--json",
        str(out),
    )
    (row,) = json.loads(out.read_text())
    assert row["contender"] == "torchrun 2 x 1 thread" and (row["processes"], row["threads"]) == (2, 1)
    assert row["tokens_per_s"] > 0 and len(row["runs"]) == 1


def test_bench_inference_measures_predict_and_eval(tmp_path):
    out = tmp_path / "inference.json"
    run_script(
        "scripts/bench_inference.py",
        "--steps",
        "20",
        "--inputs",
        "600",
        "--rounds",
        "1",
        "--threads",
        "1",
        "--json",
        str(out),
    )
    result = json.loads(out.read_text())
    assert result["inputs"] == 600 and result["threads"] == 1
    assert set(result["seconds"]) == {
        "predict, one at a time",
        "predict, in file order",
        "predict, shortest first",
        "eval, in order",
        "eval, shortest first",
        "predict --file (CLI)",
    }
    assert all(value > 0 for value in result["seconds"].values())
    assert result["gflops"] > 0 and result["matmul_gflops"] > 0


def test_muon_step_times_three_optimizers_of_one_config(tmp_path):
    out = tmp_path / "muon.json"
    run_script(
        "scripts/muon_step.py",
        "configs/copy-encoder.yaml",
        "--precision",
        "fp32",
        "--threads",
        "1",
        "--warmup",
        "1",
        "--rounds",
        "3",
        "--repeat",
        "2",
        "--json",
        str(out),
    )
    (row,) = json.loads(out.read_text())
    assert row["config"] == "copy-encoder.yaml" and row["precision"] == "fp32"
    assert all(row[f"{name} ms"] > 0 for name in ("adamw", "tinytf muon", "torch muon"))
    assert row["torch muon ratio"] == pytest.approx(row["torch muon ms"] / row["adamw ms"])
    assert row["tinytf muon class"] == "tinytf.optim.Muon" and row["torch muon class"].startswith("torch.optim.")


def test_step_times_times_each_variant_against_the_first(tmp_path):
    out = tmp_path / "steps.json"
    run_script(
        "scripts/step_times.py",
        "configs/copy-encoder.yaml",
        "--variant",
        "model.d_ff=256",
        "--variant",
        "model.d_ff=32 model.n_layers=1",
        "--threads",
        "1",
        "--warmup",
        "1",
        "--rounds",
        "3",
        "--repeat",
        "2",
        "--json",
        str(out),
    )
    rows = json.loads(out.read_text())
    assert [row["variant"] for row in rows] == ["model.d_ff=256", "model.d_ff=32 model.n_layers=1"]
    assert rows[0]["ratio"] == 1.0 and all(row["step_ms"] > 0 for row in rows)
    assert rows[1]["ratio"] == pytest.approx(rows[1]["step_ms"] / rows[0]["step_ms"])
    assert rows[1]["parameters"] < rows[0]["parameters"]  # the overrides made the model smaller


def test_step_times_can_time_an_evaluation_in_steps(tmp_path):
    out = tmp_path / "steps.json"
    run_script(
        "scripts/step_times.py",
        "configs/copy-encoder.yaml",
        "--evaluation",
        "--threads",
        "1",
        "--warmup",
        "1",
        "--rounds",
        "2",
        "--repeat",
        "1",
        "--json",
        str(out),
    )
    (row,) = json.loads(out.read_text())
    assert row["evaluation_ms"] > 0
    assert row["evaluation_steps"] == pytest.approx(row["evaluation_ms"] / row["step_ms"])


def test_table_side_by_side_trains_each_config_in_both_trees(tmp_path):
    """Against HEAD, the committed code, with one quick config: a row per tree and the ratio."""
    out = tmp_path / "side.json"
    run_script(
        "scripts/table_side_by_side.py", "--against", "HEAD", "copy-encoder.yaml", "--threads", "1", "--json", str(out)
    )
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["config"] == "copy-encoder.yaml"
    for tree in ("other", "this"):
        assert row[tree]["steps"] > 0 and row[tree]["seconds_to_target"] > 0, row
        assert result["totals"][tree] == row[tree]["seconds_to_target"]
    assert result["ratio"] == pytest.approx(result["totals"]["this"] / result["totals"]["other"])


def test_table_side_by_side_refuses_an_unknown_commit_or_config():
    cases = [
        (["--against", "no-such-commit"], "cannot export 'no-such-commit'"),
        (["--against", "HEAD", "nope.yaml"], "no such config in either tree: nope.yaml"),
    ]
    for args, message in cases:
        done = subprocess.run(
            [sys.executable, "scripts/table_side_by_side.py", *args],
            cwd=ROOT,
            env=SUBPROCESS_ENV,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2 and message in done.stderr, done.stderr


def test_step_times_can_time_each_variant_on_the_fused_kernel_too(tmp_path):
    trainer = step_times.on_the_fused_kernel(step_times.trainer_for(ROOT / "configs/rasp/sort.yaml", []))
    attentions = [m for m in trainer.model.modules() if isinstance(m, MultiHeadAttention)]
    assert attentions and all(m.explicit_keys == range(0) for m in attentions)
    out = tmp_path / "steps.json"
    run_script(
        "scripts/step_times.py",
        "configs/copy-encoder.yaml",
        "--variant",
        "",
        "--fused-kernel",
        "--threads",
        "1",
        "--warmup",
        "1",
        "--rounds",
        "2",
        "--repeat",
        "1",
        "--json",
        str(out),
    )
    assert [row["variant"] for row in json.loads(out.read_text())] == ["", "[fused kernel]"]


def test_bench_images_times_the_three_cases_of_a_layer_image(tmp_path):
    out = tmp_path / "images.json"
    run_script("scripts/bench_images.py", "--tokens", "5", "--heads", "2", "--rounds", "1", "--json", str(out))
    result = json.loads(out.read_text())
    assert (result["tokens"], result["heads"]) == (5, 2)
    assert set(result["ms"]) == {"new tokens", "next layer", "same map"} and all(ms > 0 for ms in result["ms"].values())
