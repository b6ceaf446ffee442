"""The scripts of scripts/, run as a user runs them (a process each), print and write what
they promise. Their figures' pixels are not checked: timings belong in the benchmarks, not in
tests. A run that trains or times for more than a few seconds is marked slow."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, invoke, run_script, tiny_data, write_config

import tinytf
from tinytf.data.heldout import TaskData
from tinytf.inspect.attend import attention_report

# Copying one of four symbols: the encoder gets every held-out input right at its first
# evaluation (step 5); the decoder gets none right in its 10 steps.
QUICK_TASK = {"name": "copy", "vocab_size": 4, "min_len": 1, "max_len": 1, "eval_size": 2}
QUICK_TRAIN = {"steps": 30, "eval_every": 5, "warmup_steps": 1, "lr": 1e-2, "stop_at_accuracy": 0.99}
QUICK_MODEL = {"arch": "encoder", "dropout": 0.0}


def table(stdout, header):
    """The rows of the markdown table printed under `header`, as lists of cells."""
    lines = stdout.splitlines()
    start = lines.index(header) + 2  # the header, then its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def assert_one_line_error(done, fragment):
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert fragment in done.stderr, done.stderr


# ---- train_configs.py


TRAIN_CONFIGS_HEADER = (
    "| config | task | arch | steps | time to target | wall time | val seq_acc | val token_acc | val loss |"
)


def test_train_configs_prints_a_row_per_config_and_writes_the_same_rows(tmp_path):
    reached = write_config(
        tmp_path, tiny_data(task=QUICK_TASK, model=QUICK_MODEL, train=QUICK_TRAIN), name="reached.yaml"
    )
    missed = write_config(
        tmp_path,
        tiny_data(task=QUICK_TASK, model={**QUICK_MODEL, "arch": "decoder"}, train={**QUICK_TRAIN, "steps": 10}),
        name="missed.yaml",
    )
    out = tmp_path / "results.json"
    done = run_script(
        "scripts/train_configs.py", reached, missed, "--threads", "1", "--json", out, "--check", returncode=1
    )
    result = json.loads(out.read_text())
    assert result["tinytf"] == str(ROOT / "tinytf") and result["threads"] == 1
    rows = result["rows"]
    assert [row["config"] for row in rows] == ["reached.yaml", "missed.yaml"]
    assert [(row["task"], row["arch"], row["target"]) for row in rows] == [
        ("copy", "encoder", 0.99),
        ("copy", "decoder", 0.99),
    ]
    first, second = rows
    assert first["steps"] == first["best_step"] == 5 and first["seq_acc"] == 1.0  # stopped at its target
    assert 0 < first["seconds_to_target"] <= first["seconds"]
    assert second["steps"] == 10 and second["seconds_to_target"] is None and second["seq_acc"] < 0.99
    # The printed table holds the same rows.
    assert table(done.stdout, TRAIN_CONFIGS_HEADER) == [
        [
            f"`{row['config']}`",
            row["task"],
            row["arch"],
            str(row["steps"]),
            "not reached" if row["seconds_to_target"] is None else f"{row['seconds_to_target']:.1f} s",
            f"{row['seconds']:.0f} s",
            f"{row['seq_acc']:.3f}",
            f"{row['token_acc']:.3f}",
            f"{row['loss']:.3f}",
        ]
        for row in rows
    ]
    # Then the total (of the configs that reached their target) and what missed (--check: status 1).
    assert result["total_seconds_to_target"] == first["seconds_to_target"]
    assert f"total time to target: {first['seconds_to_target']:.0f} s" in done.stdout
    assert result["missed"] == ["missed.yaml: never reached 99% (best 0.0%)"]
    assert done.stdout.rstrip().endswith("MISSED:\n- missed.yaml: never reached 99% (best 0.0%)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.yaml"], "no such config: nope.yaml"),
        (["--set", "model.nope=1", "configs/copy-encoder.yaml"], "model.nope: unknown key"),
        (["--against", "no-such-ref"], "--against no-such-ref: no such commit"),
        (["--against", "HEAD", "nope.yaml"], "no such config in either tree's configs/: nope.yaml"),
    ],
    ids=["config", "override", "ref", "config-against"],
)
def test_train_configs_refuses_an_unknown_config_or_ref_in_one_line(args, message):
    assert_one_line_error(run_script("scripts/train_configs.py", *args, returncode=2), message)


@pytest.mark.slow
def test_train_configs_against_a_commit_trains_both_trees_side_by_side(tmp_path):
    """Against HEAD, the committed code: a row with both trees' results, both totals and their ratio."""
    out = tmp_path / "side.json"
    options = ["--threads", "1", "--set", "train.eval_every=5", "--json", out]
    done = run_script("scripts/train_configs.py", "--against", "HEAD", "copy-encoder.yaml", *options)
    result = json.loads(out.read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result["against"] == "HEAD" and result["commit"] == head.stdout.strip()
    (row,) = result["rows"]
    assert row["config"] == "copy-encoder.yaml"
    for tree in ("against", "this"):
        assert row[tree]["config"] == "copy-encoder.yaml" and row[tree]["target"] == 0.99
        assert 0 < row[tree]["seconds_to_target"] <= row[tree]["seconds"]
        assert result["totals"][tree] == row[tree]["seconds_to_target"] and result["reached"][tree] == 1
    assert result["ratio"] == pytest.approx(result["totals"]["this"] / result["totals"]["against"])
    header = "| config | HEAD steps | HEAD to target | this tree steps | this tree to target |"
    cells = [[str(row[tree]["steps"]), f"{row[tree]['seconds_to_target']:.1f} s"] for tree in ("against", "this")]
    assert table(done.stdout, header) == [["`copy-encoder.yaml`", *cells[0], *cells[1]]]
    assert done.stdout.rstrip().endswith(f": {result['ratio']:.3f}x")


# ---- rasp_table.py


def test_rasp_table_refuses_an_unknown_name_in_one_line():
    done = run_script("scripts/rasp_table.py", "--only", "nope", returncode=2)
    assert_one_line_error(done, "--only nope: no such config (choose from reverse, histogram-bos,")


@pytest.mark.slow
def test_rasp_table_prints_a_row_per_config_and_lists_what_missed(tmp_path):
    out = tmp_path / "rasp.json"
    args = ["--only", "sort", "--set", "train.steps=4", "--set", "train.eval_every=2", "--json", out]
    done = run_script("scripts/rasp_table.py", *args, returncode=1)  # 4 steps: short of the target
    (row,) = json.loads(out.read_text())
    assert (row["config"], row["task"], row["layers"], row["heads"], row["bos"]) == ("sort.yaml", "sort", 2, 1, True)
    assert row["budget_problem"] is None and row["steps"] == 4 and row["target"] == 0.995
    header = "| config | task | layers x heads | `<bos>` | token_acc | seq_acc | steps | time |"
    assert table(done.stdout, header) == [
        [
            "`rasp/sort.yaml`",
            "sort",
            "2 x 1",
            "yes",
            f"{100 * row['token_acc']:.2f}%",
            f"{100 * row['seq_acc']:.2f}%",
            "4",
            f"{row['seconds']:.0f} s",
        ]
    ]
    assert f"MISSED:\n- sort: token_acc {100 * row['token_acc']:.2f}% < target 99.5%" in done.stdout


# ---- bench.py


@pytest.mark.slow
def test_bench_prints_a_row_per_contender_and_checks_its_flop_count(tmp_path):
    out = tmp_path / "bench.json"
    shape = {"vocab": 20, "seq": 12, "batch": 3, "d-model": 48, "heads": 3, "layers": 2, "d-ff": 80}
    args = [arg for key, value in shape.items() for arg in (f"--{key}", str(value))]
    options = ["--rounds", "1", "--repeat", "1", "--threads", "1", "--no-compile", "--json", out]
    done = run_script("scripts/bench.py", *args, *options)
    result = json.loads(out.read_text())
    (measured,) = result["shapes"]
    contenders = ["tinytf", "tinytf post/relu", "torch-encoder", "textbook"]
    if importlib.util.find_spec("x_transformers"):
        contenders.append("x-transformers")
    assert list(measured["train"]) == [*contenders, "matmuls only"]
    # The PaLM count, 6 N tokens + 12 L T D tokens, and FlopCounterMode's two counts agree.
    d, f, tokens = 48, 80, 3 * 12
    weights = 2 * (4 * d * d + 2 * d * f) + d * 20
    flops = 6 * weights * tokens + 12 * 2 * 12 * d * tokens
    assert measured["model_flops"] == measured["model_flops_counted"] == measured["matmul_floor_flops"] == flops
    assert "counted by FlopCounterMode in tinytf's step: equal; the matmul floor: equal" in done.stdout
    # A row per contender, as the JSON has it: step time, tokens/s, MFU, and against tinytf.
    rows = table(done.stdout, "| contender | step (ms) | tokens/s | MFU | tinytf is |")
    assert [row[0] for row in rows] == list(measured["train"])
    for name, step_ms, tokens_per_s, mfu, against in rows:
        row = measured["train"][name]
        assert step_ms == f"{row['step_ms']:.1f}" and tokens_per_s == f"{row['tokens_per_s']:,.0f}"
        assert row["tokens_per_s"] == pytest.approx(tokens / (row["step_ms"] / 1e3))
        assert row["mfu"] == pytest.approx(flops / (row["step_ms"] / 1e3) / result["gemm_peak_flops"])
        assert mfu == f"{row['mfu']:.0%}" and against == f"{1 / row['speed_vs_tinytf']:.2f}x"
    assert rows[0][-1] == "1.00x"
    assert set(measured["forward_ms"]) == {"plain", "return_attention", "torch-encoder"}
    assert result["fixed_step_ms"] > 0 and f"{result['fixed_step_ms']:.2f} ms" in done.stdout


def test_bench_muon_steps_both_optimizers_and_refuses_a_config_without_muon():
    done = run_script("scripts/bench_muon.py", "configs/double-histogram-decoder.yaml", "--steps", "2")
    (row,) = [line.split() for line in done.stdout.splitlines() if line.startswith("double-histogram-decoder")]
    assert row[-2].endswith("x") and float(row[-1].rstrip("%")) < 3  # torch's steps within the tests' 3%
    refused = run_script("scripts/bench_muon.py", "configs/sort-encoder.yaml", returncode=2)
    assert_one_line_error(refused, "configs/sort-encoder.yaml: trains with AdamW")


# ---- induction_story.py and viewer_screenshot.py


@pytest.mark.slow
def test_induction_story_prints_both_models_and_draws_the_figure(tmp_path):
    out = tmp_path / "induction.png"
    done = run_script("scripts/induction_story.py", "--steps", "10", "--every", "5", "--out", out)
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["model", "steps", "time", "repeat"]
    assert [line.split()[:3] for line in lines[1:3]] == [["2", "layers", "10"], ["1", "layer", "10"]]
    assert lines[3] == f"wrote {out}" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_phase_change_prints_a_row_per_seed_and_draws_the_figure(tmp_path):
    out = tmp_path / "phase.png"
    done = run_script("scripts/phase_change.py", "--seeds", "0", "--steps", "150", "--every", "100", "--out", out)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("| seed | last step | induction >= 0.5 at step (head) |")
    assert lines[2].startswith("| 0 | 150 | ") and lines[2].endswith(" | 3, 0.5 MB |")  # snapshots 0, 100, 150
    assert lines[3] == f"wrote {out}" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_looking_causing_prints_a_row_per_construction():
    done = run_script("scripts/looking_causing.py", "--seeds", "0", "--steps", "300", "--pairs", "20")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("| construction | seeds 0, patched at every position |")
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| subject", "| coreference", "| semantic"]


@pytest.mark.slow
def test_viewer_screenshot_sizes_prints_a_line_per_config():
    configs = ["configs/quickstart.yaml", "configs/rasp/sort.yaml"]
    done = run_script("scripts/viewer_screenshot.py", "--sizes", *configs)
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == configs
    assert lines[1].startswith("configs/rasp/sort.yaml: 2 layers x 1 heads, 2 attentions, input of ")
    assert all(" bytes in " in line for line in lines)


# ---- grokking.py


def fake_run(folder, seed, train_set, held_out):
    """A run folder whose metrics.jsonl holds these accuracies, every 100 steps from step 100."""
    folder.mkdir()
    (folder / "config.yaml").write_text(f"task:\n  name: modular-add\nseed: {seed}\n")
    records = []
    for i, (on_train, on_held_out) in enumerate(zip(train_set, held_out, strict=True)):
        step = 100 * (i + 1)
        records += [
            {"step": step, "split": "train", "loss": 1.0, "weight_norm": 30.0 - i},
            {"step": step, "split": "val", "seq_acc": on_held_out},
            {"step": step, "split": "train_set", "seq_acc": on_train},
            {"step": step, "split": "fourier", "norms": [1.0, 0.5, 0.2, 0.1, 0.1, 0.1, 2.0 + i]},
        ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_grokking_finds_when_each_run_memorised_and_generalised(tmp_path):
    # s1 = 200 with 10% held out; s2 = 1000 = 5 x s1: groks. The early run generalises by 400: 2 x s1.
    groks = fake_run(tmp_path / "groks", 3, [0.5, 0.995] + [1.0] * 8, [0.02, 0.1, 0.1] + [0.2] * 6 + [0.99])
    early = fake_run(tmp_path / "early", 4, [0.5, 0.995, 1.0, 1.0], [0.1, 0.2, 0.5, 1.0])
    control = fake_run(tmp_path / "control", 0, [0.99, 1.0, 1.0], [0.01, 0.02, 0.02])
    out = tmp_path / "grokking.png"
    header = "| run | seed | s1 (train 99%) | held-out at s1 | s2 (held-out 99%) | s2 / s1 | groks |"
    done = run_script("scripts/grokking.py", groks, early, "--control", control, "--out", out, "--check", returncode=1)
    assert table(done.stdout, header) == [
        ["groks", "3", "200", "10.0%", "1000", "5.0", "yes"],
        ["early", "4", "200", "20.0%", "400", "2.0", "no"],
        ["control (control)", "0", "100", "1.0%", "not by 300 (2.0%)", "-", "no"],
    ]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    run_script("scripts/grokking.py", groks, "--check")  # every run groks: exit 0
    assert_one_line_error(run_script("scripts/grokking.py", tmp_path, returncode=2), "not a run folder")
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "split": "val", "seq_acc": 0.5}\n'
    )  # a task without a training set
    assert_one_line_error(run_script("scripts/grokking.py", tmp_path, returncode=2), "no train_set metrics")


def test_grokking_inside_reads_norms_spectra_and_held_out_accuracy_at_the_steps_it_names(tmp_path):
    # 15 evaluations, every 100 steps: s1 = 200, s2 = 1500; the training set dips to 0.9 at step 300.
    run = fake_run(
        tmp_path / "run", 0, [0.5, 0.995, 0.9] + [1.0] * 12, [0.01, 0.02, 0.03, 0.04, 0.3] + [0.5] * 9 + [0.99]
    )
    done = run_script("scripts/grokking.py", run, "--inside")
    header = (
        "| run | held-out 1,000 steps before s2 | lowest training set after s1 | weight norm: first, s1, highest, "
        "last | top-5 share: first, s1, last | strongest frequencies, last | held-out, second half: median, best, "
        "evaluations under 95% |"
    )

    def share(i):  # the 5 strongest of the fake spectrum at evaluation i, of its squared norm
        squares = sorted((n * n for n in [1.0, 0.5, 0.2, 0.1, 0.1, 0.1, 2.0 + i]), reverse=True)
        return f"{sum(squares[:5]) / sum(squares):.1%}"

    (row,) = table(done.stdout, header)
    assert row == [
        "run",
        "30.0%",  # held-out at step 500
        "90.0%",
        "30.0, 29.0, 30.0, 16.0",  # weight_norm 30 - i: at steps 100, 200, the highest, 1500
        f"{share(0)}, {share(1)}, {share(14)}",
        "6, 0, 1, 2, 3",
        "50.0%, 99.0%, 7 of 8",  # steps 800-1500
    ]


def test_the_grokking_figure_names_its_seeds_in_the_singular_for_one_run(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("grokking", ROOT / "scripts" / "grokking.py")
    grokking = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "grokking", grokking)  # (its dataclasses look their module up)
    spec.loader.exec_module(grokking)
    runs = [grokking.Run.read(fake_run(tmp_path / f"run-{seed}", seed, [0.5, 1.0], [0.1, 0.2])) for seed in (0, 1)]
    titles = [grokking.grokking_figure(runs[:n], []).axes[0].get_title() for n in (1, 2)]
    assert titles == ["accuracy, seed 0", "accuracy, seeds 0, 1"]


def test_grokking_attention_splits_each_head_between_a_and_b_as_attend_shows_it(tmp_path, monkeypatch):
    # A briefly trained 2-head modular-add decoder: the script's shares, from the framed held-out
    # set, against `attention_report` of each sum typed as `tinytf attend` types it.
    data = tiny_data(model={"n_heads": 2}, train={"steps": 6})
    data["task"] = {"name": "modular-add", "modulus": 7, "train_fraction": 0.5}
    result = invoke("train", write_config(tmp_path, data), "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    spec = importlib.util.spec_from_file_location("grokking", ROOT / "scripts" / "grokking.py")
    grokking = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "grokking", grokking)
    spec.loader.exec_module(grokking)
    heading, _columns, *rows = grokking.operand_attention(run_dir).splitlines()
    run = tinytf.load_run(run_dir)
    held_out = TaskData(run.task, run.config.seed).held_out
    assert heading == f"{run_dir}: the query that predicts c, over {len(held_out):,} held-out sums" and len(rows) == 2
    on_a, on_b, larger = [], [], []
    for i in range(len(held_out)):
        source, _ = held_out.example(i)
        report = attention_report(run.model, run.framing, run.task.render(source))
        weights = report.maps[0].weights  # (H, T, T)
        query = report.tokens.index("<sep>")
        on_a.append(weights[:, query, query - 2])
        on_b.append(weights[:, query, query - 1])
        larger.append(np.maximum(on_a[-1], on_b[-1]))
    for head, row in enumerate(rows):
        name, a, b, median, _range = row.split()
        assert name == f"decoder.0.self.{head}"
        assert float(a) == pytest.approx(np.mean(on_a, axis=0)[head], abs=0.006)
        assert float(b) == pytest.approx(np.mean(on_b, axis=0)[head], abs=0.006)
        assert float(median) == pytest.approx(np.median(np.array(larger)[:, head]), abs=0.02)


def test_grokking_says_in_one_line_what_is_wrong_with_a_run_or_with_out(tmp_path):
    run = fake_run(tmp_path / "run", 0, [0.5, 0.995], [0.1, 0.2])
    for out, message in [(tmp_path, "is a folder; name a file"), (tmp_path / "no" / "g.png", "no folder")]:
        done = run_script("scripts/grokking.py", run, "--out", out, returncode=2)
        assert_one_line_error(done, message)
    metrics = run / "metrics.jsonl"
    whole = metrics.read_text()
    metrics.write_text(whole.replace('"seq_acc": 0.1}', '"seq_acc": "high"}'))
    done = run_script("scripts/grokking.py", run, returncode=2)
    assert_one_line_error(done, "the val record of step 100 has seq_acc 'high'")
    metrics.write_bytes(whole.encode() + b"\xff\xfe\n")
    assert_one_line_error(run_script("scripts/grokking.py", run, returncode=2), "line 9 is not a metrics record")
    metrics.write_text(whole)
    (run / "config.yaml").write_text("- a list\n")
    assert_one_line_error(run_script("scripts/grokking.py", run, returncode=2), "config.yaml")
