"""`--over-training`: `heads` and `circuits` on every snapshot, each row what the command
gives for that snapshot alone, beside the snapshot's training loss and held-out metrics,
and the first step at which each score reached its level."""

import csv
import io
import json

import pytest
from conftest import assert_user_error, invoke, train_tiny_run

from tinytf.cli.commands import first_held_out
from tinytf.cli.commands.heads import scores_of
from tinytf.cli.commands.over_training import COMPOSED, LEVEL
from tinytf.inspect.evaluate import evaluate
from tinytf.run.checkpoint import load_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.run.load import load_run

STEPS = [0, 4, 8, 10]


@pytest.fixture(scope="module")
def snapshot_run(tmp_path_factory):
    return train_tiny_run(
        tmp_path_factory.mktemp("over-training"),
        model={"n_layers": 2},
        train={"steps": 10, "snapshot_every": 4, "checkpoint_every": 100},
    )


def rows_of(text):
    header, *rows = list(csv.reader(io.StringIO(text)))
    return header, rows


def output(*args):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("command", ["heads", "circuits"])
def test_each_snapshot_s_rows_are_the_command_s_rows_for_that_snapshot(snapshot_run, command):
    header, rows = rows_of(output(command, "--run", snapshot_run, "--over-training", "--format", "csv"))
    assert header[:5] == ["step", "train_loss", "held_out_loss", "held_out_token_acc", "held_out_seq_acc"]
    assert sorted({int(row[0]) for row in rows}) == STEPS
    for step in STEPS:
        alone_header, alone = rows_of(
            output(command, "--run", snapshot_run, "--checkpoint", f"step-{step}", "--format", "csv")
        )
        assert header[5:] == alone_header
        assert [row[5:] for row in rows if int(row[0]) == step] == alone


def test_the_columns_of_a_snapshot_are_its_training_loss_and_what_eval_gives(snapshot_run):
    _, rows = rows_of(output("heads", "--run", snapshot_run, "--over-training", "--format", "csv"))
    for step in STEPS:
        at = load_run(snapshot_run, f"step-{step}")
        held_out = evaluate(at.model, at.framing, first_held_out(at, None))
        saved = load_checkpoint(RunFolder(snapshot_run).snapshot(step))["train_loss"]
        for row in (row for row in rows if int(row[0]) == step):
            assert row[1] == ("" if saved is None else repr(saved))
            assert [float(value) for value in row[2:5]] == [held_out[k] for k in ("loss", "token_acc", "seq_acc")]


def test_the_first_steps_named_are_where_the_rows_first_reach_the_level(snapshot_run):
    report = json.loads(output("heads", "--run", snapshot_run, "--over-training", "--format", "json"))
    snapshots = report["snapshots"]
    assert [s["step"] for s in snapshots] == STEPS
    for pattern, found in report["first_step"]["patterns"].items():
        reached = [
            (s["step"], head["scores"][pattern])
            for s in snapshots
            for head in s["heads"]
            if head["scores"][pattern] is not None and head["scores"][pattern] >= LEVEL
        ]
        assert found == (None if not reached else {"step": reached[0][0], "head": found["head"]})
        if found is not None:
            (first,) = [s for s in snapshots if s["step"] == found["step"]]
            best = max(first["heads"], key=lambda head: head["scores"][pattern] or -1)
            assert found["head"] == f"{best['stack']}.{best['layer']}.{best['kind']}.{best['head']}"
    accurate = [s["step"] for s in snapshots if s["held_out"]["seq_acc"] >= LEVEL]
    assert report["first_step"]["held_out_seq_acc"] == (accurate[0] if accurate else None)


def test_circuits_over_training_names_when_each_final_composition_first_stood_out(snapshot_run):
    report = json.loads(output("circuits", "--run", snapshot_run, "--over-training", "--format", "json"))
    snapshots = report["snapshots"]

    def ratios(snapshot):
        return {f"{c['early']} → {c['late']} {c['mode']}": c["ratio"] for c in snapshot["compositions"]}

    final = [name for name, ratio in ratios(snapshots[-1]).items() if ratio >= COMPOSED][:6]
    expected = {name: next((s["step"] for s in snapshots if ratios(s)[name] >= COMPOSED), None) for name in final}
    assert report["first_step"]["compositions"] == expected
    assert report["first_step"]["held_out_seq_acc"] == next(
        (s["step"] for s in snapshots if s["held_out"]["seq_acc"] >= LEVEL), None
    )


@pytest.mark.parametrize("command", ["heads", "circuits"])
def test_the_table_says_when_and_the_png_draws_the_curves(snapshot_run, command, tmp_path):
    table = output(command, "--run", snapshot_run, "--over-training")
    first = table.splitlines()[0]
    assert first.startswith(f"run {snapshot_run}, 4 snapshots")
    scored = scores_of(load_run(snapshot_run, "step-0"), None, None).inputs  # inputs where a pattern has a row
    assert (f", the best head's score on {scored} held-out inputs" in first) == (command == "heads")
    assert "first step at which (of the snapshots" in table
    assert "held-out exact match" in table
    written = output(command, "--run", snapshot_run, "--over-training", "--format", "png", "--out", tmp_path / "c.png")
    assert written == f"wrote {tmp_path / 'c.png'}\n"
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


def test_over_training_refuses_what_it_cannot_do(snapshot_run, run):
    assert_user_error(
        invoke("heads", "--run", run, "--over-training"),
        "keeps no snapshots to follow over training; train with train.snapshot_every: N",
    )
    assert_user_error(
        invoke("heads", "--run", snapshot_run, "--over-training", "--checkpoint", "last"),
        "--checkpoint last with --over-training, which reads every snapshot",
    )
    assert_user_error(invoke("heads", "--run", snapshot_run, "--over-training", "--ablate", "zero"), "--ablate with")
    assert_user_error(
        invoke("heads", "--run", snapshot_run, "--ablate", "zero", "--format", "csv"),
        "--ablate with --format csv: what ablation costs shows in the table and JSON",
    )
    assert_user_error(
        invoke("circuits", "--run", snapshot_run, "--over-training", "--format", "png", "--out", "x.svg"),
        "name the file *.png",
    )


def test_the_first_steps_are_found_on_reports_built_by_hand():
    from pathlib import Path

    from tinytf.cli.commands.over_training import CircuitsOverTraining, HeadsOverTraining, Snapshot, learned
    from tinytf.inspect.circuits import CircuitReport, Composition
    from tinytf.inspect.heads import HeadReport, HeadScore

    def snapshot(step, exact):
        return Snapshot(step, None, {"loss": 1.0, "token_acc": exact, "seq_acc": exact})

    def heads(induction, previous):
        scored = [
            HeadScore("decoder", 1, "self", h, {"induction": s, "previous": p}, 0.0)
            for h, (s, p) in enumerate(zip(induction, previous, strict=True))
        ]
        return HeadReport(10, ["induction", "previous"], scored)

    snapshots = [snapshot(0, 0.0), snapshot(100, 0.2), snapshot(200, LEVEL), snapshot(300, 0.9)]
    reports = [
        heads([0.1, 0.2], [0.0, 0.0]),
        heads([0.3, LEVEL], [0.0, 0.0]),
        heads([0.9, 0.4], [0.0, 0.0]),
        heads([0.9, 0.9], [0.0, 0.1]),
    ]
    over = HeadsOverTraining(Path("run"), "10 held-out inputs", snapshots, reports)
    assert learned(snapshots) == 200
    assert over.formed() == {"induction": (100, "decoder.1.self.1"), "previous": None}
    assert over.best("induction") == [0.2, LEVEL, 0.9, 0.9]

    def circuit(ratio):
        return CircuitReport({}, [Composition("K", "decoder.0.self.0", "decoder.1.self.0", 0.1, ratio)], {}, {})

    class Found:  # what CircuitsOverTraining reads of each snapshot's `circuits`
        def __init__(self, ratio):
            self.report = circuit(ratio)

    ratios = [1.0, COMPOSED, 1.5, COMPOSED + 1]
    over = CircuitsOverTraining(Path("run"), snapshots, [Found(ratio) for ratio in ratios])
    assert over.formed() == {"decoder.0.self.0 → decoder.1.self.0 K": 100}
    assert CircuitsOverTraining(Path("run"), snapshots, [Found(ratio) for ratio in [3, 3, 3, 1]]).formed() == {}


def test_an_encoder_decoder_is_followed_over_training_too(tmp_path):
    run_dir = train_tiny_run(
        tmp_path, model={"arch": "encoder-decoder"}, train={"steps": 6, "snapshot_every": 3, "checkpoint_every": 100}
    )
    for command in ("heads", "circuits"):
        _, rows = rows_of(output(command, "--run", run_dir, "--over-training", "--format", "csv"))
        assert sorted({int(row[0]) for row in rows}) == [0, 3, 6]
        for step in (0, 3, 6):
            alone = rows_of(output(command, "--run", run_dir, "--checkpoint", f"step-{step}", "--format", "csv"))[1]
            assert [row[5:] for row in rows if int(row[0]) == step] == alone
        if command == "heads":
            assert any(row[5].startswith("decoder.0.cross.") for row in rows)
