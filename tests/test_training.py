"""The training loop, run folders and checkpoints, through the library API."""

import itertools
import json
import os
import pickle
import signal

import pytest
import torch

from tinytf.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tinytf.config import config_from_dict
from tinytf.errors import UserError
from tinytf.loggers import Logger
from tinytf.model import build_model
from tinytf.runs import checkpoint_path, create_run_dir, load_run, newest_run
from tinytf.training import learning_rate_factor, make_optimizer, select_device, train


def tiny_config(seed=0, **sections):
    base = {
        "seed": seed,
        "task": {"name": "sort", "vocab_size": 5, "min_len": 3, "max_len": 5, "eval_size": 40},
        "model": {"arch": "decoder", "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.1},
        "train": {"steps": 12, "batch_size": 8, "eval_every": 4, "checkpoint_every": 100, "warmup_steps": 3,
                  "device": "cpu"},
        "log": {"every": 2, "attention_every": 6},
    }  # fmt: skip
    for section, keys in sections.items():
        base[section] = base.get(section, {}) | keys
    return config_from_dict(base)


class SigintAt(Logger):
    """Sends this process a real Ctrl-C when training finishes step `at`."""

    def __init__(self, at):
        self.at = at

    def step(self, step):
        if step == self.at:
            os.kill(os.getpid(), signal.SIGINT)


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_folder_holds_everything(tmp_path):
    result = train(tiny_config(), runs_dir=tmp_path, name="sort")
    run_dir = result.run_dir
    assert run_dir.parent == tmp_path and run_dir.name.startswith("sort-")
    assert result.step == 12 and not result.interrupted
    for name in ("config.yaml", "vocab.json", "checkpoints/last.pt", "checkpoints/best.pt", "metrics.jsonl"):
        assert (run_dir / name).is_file(), name
    assert list(run_dir.glob("events.out.tfevents.*"))
    records = read_metrics(run_dir)
    assert {r["split"] for r in records} == {"train", "val"}
    for record in records:
        assert {"step", "split", "loss", "token_acc", "seq_acc", "lr", "tokens_per_s"} <= set(record)
    assert [r["step"] for r in records if r["split"] == "val"] == [4, 8, 12]
    assert load_checkpoint(checkpoint_path(run_dir, "last"))["step"] == 12
    assert load_run(run_dir, "best").step == result.best["step"]


def test_tensorboard_events_hold_scalars_and_attention_images(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = train(tiny_config(train={"betas": [0.9, 0.98]}), runs_dir=tmp_path).run_dir
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    from tensorboard.plugins.hparams import plugin_data_pb2

    hparams = {}
    for content in events.PluginTagToContent("hparams").values():
        session = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
        hparams.update({key: value.string_value or value.number_value for key, value in session.hparams.items()})
    assert hparams["train.betas"] == "[0.9, 0.98]" and hparams["model.d_model"] == 16
    scalars = set(events.Tags()["scalars"])
    for tag in ("train/loss", "train/token_acc", "train/lr", "train/grad_norm", "train/tokens_per_s",
                "val/loss", "val/token_acc", "val/seq_acc"):  # fmt: skip
        assert tag in scalars, tag
    images = [tag for tag in events.Tags()["images"] if "attention" in tag]
    assert "attention/sample0/decoder.0.self" in images
    assert [event.step for event in events.Images("attention/sample0/decoder.0.self")] == [6, 12]


def test_encoder_decoder_runs_log_cross_attention(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = tiny_config(model={"arch": "encoder-decoder"}, train={"steps": 6})
    run_dir = train(config, runs_dir=tmp_path).run_dir
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    events.Reload()
    assert {"attention/sample0/encoder.0.self", "attention/sample0/decoder.0.self",
            "attention/sample0/decoder.0.cross"} <= set(events.Tags()["images"])  # fmt: skip


def test_training_is_deterministic_on_cpu(tmp_path):
    first = train(tiny_config(), runs_dir=tmp_path / "a").run_dir
    second = train(tiny_config(), runs_dir=tmp_path / "b").run_dir
    losses = [[r["loss"] for r in read_metrics(run)] for run in (first, second)]
    assert losses[0] == losses[1]
    other_seed = train(tiny_config(seed=1), runs_dir=tmp_path / "c").run_dir
    assert [r["loss"] for r in read_metrics(other_seed)] != losses[0]


def test_ctrl_c_then_resume_ends_with_the_same_weights(tmp_path):
    config = tiny_config()
    uninterrupted = train(config, runs_dir=tmp_path / "a")

    stopped = train(config, runs_dir=tmp_path / "b", loggers=[SigintAt(5)])
    assert stopped.interrupted and stopped.step == 5
    assert load_checkpoint(checkpoint_path(stopped.run_dir, "last"))["step"] == 5
    resumed = train(config, resume=stopped.run_dir)
    assert resumed.run_dir == stopped.run_dir and resumed.step == 12 and not resumed.interrupted

    expected = load_checkpoint(checkpoint_path(uninterrupted.run_dir, "last"))["model"]
    actual = load_checkpoint(checkpoint_path(resumed.run_dir, "last"))["model"]
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


def test_stop_at_accuracy_ends_training_early(tmp_path):
    result = train(tiny_config(train={"stop_at_accuracy": 0.0001, "steps": 40}), runs_dir=tmp_path)
    # seq_acc >= 0.0001 means at least one held-out example right; a random start may need a few evals
    assert result.step < 40 or result.final["seq_acc"] < 0.0001
    assert not result.interrupted


def test_runs_never_share_a_folder(tmp_path):
    folders = {create_run_dir(tmp_path, "same") for _ in range(5)}
    assert len(folders) == 5 and all(folder.is_dir() for folder in folders)


def test_newest_run_and_missing_runs(tmp_path):
    with pytest.raises(UserError, match="no runs in"):
        newest_run(tmp_path)
    result = train(tiny_config(train={"steps": 2}), runs_dir=tmp_path)
    assert newest_run(tmp_path) == result.run_dir


def test_checkpoint_writes_are_atomic(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint({"step": 1, "weights": torch.ones(3)}, path)

    def crash_midway(obj, file, *args, **kwargs):
        file.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash_midway)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"step": 2, "weights": torch.zeros(3)}, path)
    assert load_checkpoint(path)["step"] == 1  # the previous checkpoint survives whole
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # and no temporary file is left


class Payload:
    """Unpickling this runs a command: what a tampered checkpoint would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_tampered_checkpoint_is_refused_without_running_its_code(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    with open(path, "wb") as file:
        pickle.dump({"format": "tinytf-checkpoint-1", "model": Payload(marker)}, file)
    with pytest.raises(CheckpointError, match="not a loadable tinytf checkpoint"):
        load_checkpoint(path)
    assert not marker.exists()
    # ...and the same through torch's own zip format
    torch.save({"format": "tinytf-checkpoint-1", "model": Payload(marker)}, path)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)
    assert not marker.exists()


def test_other_files_are_not_checkpoints(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"\x00not torch")
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"step": 3}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a tinytf checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_learning_rate_warms_up_then_decays():
    factors = [learning_rate_factor(step, 10, 100) for step in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(factors[10:]))
    assert factors[-1] == pytest.approx(0.1, abs=1e-3)


def test_unavailable_device_is_a_user_error():
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no cuda device"):
            select_device("cuda")
    assert select_device("cpu").type == "cpu"


def test_compiled_and_eager_training_give_the_same_losses(tmp_path):
    """train.compile: true runs the step through torch.compile; the numbers must not change.
    (Without dropout: compiled code draws its dropout masks from a different random stream.)"""
    no_dropout = {"dropout": 0.0}
    eager = train(tiny_config(model=no_dropout, train={"steps": 6, "eval_every": 100}, log={"every": 1}),
                  runs_dir=tmp_path / "a")  # fmt: skip
    compiled = train(tiny_config(model=no_dropout, train={"steps": 6, "eval_every": 100, "compile": True},
                                 log={"every": 1}), runs_dir=tmp_path / "b")  # fmt: skip
    losses = [[r["loss"] for r in read_metrics(run.run_dir) if r["split"] == "train"] for run in (eager, compiled)]
    assert len(losses[0]) == 6
    assert losses[1] == pytest.approx(losses[0], abs=1e-4)


def test_optimizer_takes_the_configs_betas_and_decays_only_matrices():
    config = config_from_dict({"train": {"betas": [0.8, 0.98], "weight_decay": 0.1}})
    optimizer = make_optimizer(build_model(config), config.train, torch.device("cpu"))
    decayed, not_decayed = optimizer.param_groups
    assert decayed["betas"] == not_decayed["betas"] == (0.8, 0.98)
    assert decayed["weight_decay"] == 0.1 and not_decayed["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() == 1 for p in not_decayed["params"])
