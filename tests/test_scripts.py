"""The measuring scripts run, and measure what they say they measure. (Their speed
figures are not checked here: timings belong in the benchmark, not in tests.)"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench  # noqa: E402


def run_script(*args: str) -> None:
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, timeout=300)


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


def test_bench_runs_a_custom_shape_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    shape = ["--d-model", "32", "--layers", "1", "--heads", "2", "--d-ff", "64", "--seq", "16", "--batch", "4"]
    run_script("scripts/bench.py", *shape, "--rounds", "1", "--repeat", "1", "--skip-tasks", "--json", str(out))
    result = json.loads(out.read_text())
    rows = result["shapes"][0]["train"]
    assert {"tinytf", "torch-encoder", "textbook", bench.FLOOR} <= set(rows)
    assert all(row["step_ms"] > 0 for row in rows.values())
    assert result["shapes"][0]["ceiling_vs_torch_encoder"] > 0 and result["fixed_step_ms"] > 0


def test_train_configs_reports_time_to_target(tmp_path):
    out = tmp_path / "results.json"
    run_script("scripts/train_configs.py", "configs/copy-encoder.yaml", "--json", str(out))
    (row,) = json.loads(out.read_text())
    assert row["config"] == "copy-encoder.yaml" and row["seq_acc"] >= 0.99
    assert 0 < row["seconds_to_target"] <= row["seconds"]
