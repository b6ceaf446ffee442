"""Checkpoints: written atomically, loaded without running code, refused in one line when
damaged, foreign, unreadable or tampered with (a right checksum over contents that are not a
training state)."""

import errno
import os
import pickle

import numpy as np
import pytest
import torch
from conftest import assert_user_error, copy_run, deny_entry, invoke, snapshot, tiny_config, train_tiny_run

from tinytf.config import TaskConfig
from tinytf.errors import first_line
from tinytf.run.checkpoint import (
    FORMAT,
    CheckpointError,
    config_mismatch,
    describe,
    kind_mismatch,
    load_checkpoint,
    save_checkpoint,
    tensor_checksum,
    trained_with,
    training_state_problem,
    weights_mismatch,
)
from tinytf.run.folder import RunFolder
from tinytf.training.optim import learning_rate


def test_checkpoint_writes_are_atomic(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint({"step": 1, "config": {}, "model": {"w": torch.ones(3)}}, path)

    def crash_midway(descriptor):  # the new file's bytes are written, not yet on disk
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", crash_midway)
    with pytest.raises(OSError, match="Input/output error") as raised:
        save_checkpoint({"step": 2, "config": {}, "model": {"w": torch.zeros(3)}}, path)
    assert raised.value.filename == str(path)  # named, though the write itself names no file
    monkeypatch.undo()
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
        pickle.dump({"format": FORMAT, "model": Payload(marker)}, file)
    with pytest.raises(CheckpointError) as raised:
        load_checkpoint(path)
    assert str(raised.value) == (
        f"{path}: not a tinytf checkpoint: it holds Python objects, not just tensors and plain data; "
        "not loaded, and nothing in it was run"
    )
    assert not marker.exists()
    # ...and the same through torch's own zip format
    torch.save({"format": FORMAT, "model": Payload(marker)}, path)
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
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="not a tinytf checkpoint"):
        load_checkpoint(tmp_path / "list.pt")


def test_a_truncated_checkpoint_is_refused_quoting_the_start_of_torch_s_reason(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint({"step": 1, "config": {}, "model": {"w": torch.ones(100)}}, path)
    path.write_bytes(path.read_bytes()[:-30])  # a copy cut short
    with pytest.raises(RuntimeError) as torch_s:
        torch.load(path, weights_only=True)
    reason = f"RuntimeError: {first_line(torch_s.value)[:80]}"  # torch's runs over 80 characters: its start
    with pytest.raises(CheckpointError) as raised:
        load_checkpoint(path)
    assert (
        str(raised.value) == f"{path}: not a readable checkpoint, damaged or of another format; not loaded ({reason})"
    )


def test_a_checkpoint_of_another_tinytf_version_says_so(tmp_path):
    path = tmp_path / "old.pt"
    torch.save({"format": "tinytf-checkpoint-1", "step": 3}, path)
    expected = f"written by another version of tinytf .tinytf-checkpoint-1; this one reads {FORMAT}"
    with pytest.raises(CheckpointError, match=expected):
        load_checkpoint(path)


def test_a_checkpoint_that_is_not_ours_is_refused_without_torch_s_advice(tmp_path):
    path = tmp_path / "foreign.pt"
    torch.save({"model": torch.nn.Linear(2, 2)}, path)  # a pickled module, as other tools save
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert "not a tinytf checkpoint" in message and "not loaded" in message and "weights_only" not in message


def test_flipped_bytes_inside_a_tensor_are_refused(run, tmp_path):
    copy = copy_run(run, tmp_path)
    best = RunFolder(copy).checkpoint("best")
    weights = load_checkpoint(best)["model"]["token_embedding.weight"]
    content = bytearray(best.read_bytes())
    start = bytes(content).find(weights.numpy().tobytes())  # torch.save stores tensors uncompressed
    assert start > 0
    content[start + 41] ^= 0x40  # one bit of one float of the embedding
    best.write_bytes(bytes(content))
    torch.load(best, weights_only=True)  # torch itself notices nothing
    assert_user_error(invoke("attend", "1 2 3", "--run", copy), "damaged")
    assert_user_error(invoke("eval", "--run", copy), f"{best}: damaged")


def test_a_checkpoint_without_its_checksum_is_refused_and_changes_nothing(run, tmp_path):
    copy = copy_run(run, tmp_path)
    for which in ("best", "last"):
        state = load_checkpoint(RunFolder(copy).checkpoint(which))
        state["model"]["token_embedding.weight"] += 1  # an edit the checksum would have caught...
        torch.save({"format": FORMAT, **state}, RunFolder(copy).checkpoint(which))  # ...had it not been dropped
    before = snapshot(copy)
    for args in (["attend", "0 1 2", "--run"], ["eval", "--run"], ["predict", "0 1 2", "--run"], ["train", "--resume"]):
        assert_user_error(invoke(*args, copy), "damaged: its content does not match the checksum")
    assert snapshot(copy) == before


def test_load_checkpoint_refuses_the_wrong_kinds_of_data(tmp_path):
    path = tmp_path / "x.pt"
    save_checkpoint({"step": 0, "config": {}, "model": {}, "weights": torch.ones(2)}, path)  # other keys: any data
    assert load_checkpoint(path)["step"] == 0
    usable = {"step": 1, "config": {}, "model": {}}
    for state, problem in [
        ({"step": "abc"}, "'step' is 'abc', not a whole number >= 0"),
        ({"step": 1.0}, "'step' is 1.0, not a whole number >= 0"),
        ({"weights": torch.ones(2)}, "it has no 'step'"),
        ({"step": 1, "model": {}}, "'config' is None, not the model and task settings it was trained with"),
        (
            {"step": 1, "config": ["model.n_heads"], "model": {}},
            "'config' is a list of 1, not the model and task settings it was trained with",
        ),
        ({"step": 1, "config": {}}, "it has no 'model'"),
        (
            {"step": 1, "config": {}, "model": torch.ones(2)},
            "'model' is a tensor of shape (2,), not a mapping of parameter names to tensors",
        ),
        (
            {"step": 1, "config": {}, "model": {"w": [1.0]}},
            "'model' maps 'w' to a list of 1, not a parameter name to a tensor",
        ),
        ({**usable, "best": "x" * 100}, "'best' is 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..., not a mapping"),
        *(({**usable, key: [1]}, f"{key!r} is a list of 1, not a mapping") for key in ("optimizer", "rng", "window")),
    ]:
        save_checkpoint(state, path)
        with pytest.raises(CheckpointError) as raised:
            load_checkpoint(path)
        assert str(raised.value) == f"{path}: not a usable tinytf checkpoint: {problem}; not loaded"


def test_load_checkpoint_reads_tensors_where_map_location_says(tmp_path):
    path = tmp_path / "x.pt"
    save_checkpoint({"step": 1, "config": {}, "model": {"w": torch.ones(2)}}, path)
    places = []
    state = load_checkpoint(path, map_location=lambda storage, place: places.append(place) or storage)
    assert places == ["cpu"] and torch.equal(state["model"]["w"], torch.ones(2))


def test_a_checkpoint_the_user_cannot_read_is_a_checkpoint_error(run, tmp_path, monkeypatch):
    copy = copy_run(run, tmp_path)
    deny_entry(monkeypatch, copy / "checkpoints")
    with pytest.raises(CheckpointError, match=r"last\.pt: cannot read checkpoint: Permission denied"):
        load_checkpoint(RunFolder(copy).checkpoint("last"))
    assert_user_error(invoke("train", "--resume", copy), "last.pt: cannot read checkpoint: Permission denied")


def without(*keys):
    return lambda state: {key: value for key, value in state.items() if key not in keys}


def replaced(**values):
    return lambda state: {**state, **values}


def optimizer_groups(**values):
    return lambda state: {
        **state,
        "optimizer": {
            **state["optimizer"],
            "param_groups": [{**group, **values} for group in state["optimizer"]["param_groups"]],
        },
    }


def optimizer_parts_groups(**values):
    """`optimizer_groups` for a CombinedOptimizer's state: every part's groups."""
    return lambda state: {
        **state,
        "optimizer": {
            "parts": [
                {**part, "param_groups": [{**group, **values} for group in part["param_groups"]]}
                for part in state["optimizer"]["parts"]
            ]
        },
    }


TAMPERINGS = {
    "model is a tensor": (replaced(model=torch.zeros(3)), "'model' is a tensor of shape (3,), not a mapping"),
    "step is a string": (replaced(step="abc"), "'step' is 'abc', not a whole number >= 0"),
    "step is negative": (replaced(step=-1), "'step' is -1, not a whole number >= 0"),
    "step is a boolean": (replaced(step=True), "'step' is True"),
    "no step": (without("step"), "it has no 'step'"),
    "no model": (without("model"), "it has no 'model'"),
    "model maps to strings": (lambda s: {**s, "model": dict.fromkeys(s["model"], "x")}, "'model' maps"),
    "optimizer is a list": (replaced(optimizer=[1, 2]), "'optimizer' is a list of 2, not a mapping"),
    "window is None": (replaced(window=None), "'window' is None, not a mapping"),
    "a weight is NaN": (
        lambda s: {**s, "model": {**s["model"], "token_embedding.weight": s["model"]["token_embedding.weight"] / 0}},
        "its weight 'token_embedding.weight' holds NaN or infinity; not loaded",
    ),
    "a weight of another shape": (
        lambda s: {**s, "model": {**s["model"], "decoder.final_norm.bias": torch.zeros(3)}},
        "its weight 'decoder.final_norm.bias' has shape (3,), the config's model (16,)",
    ),
    "no config": (without("config"), "'config' is None, not the model and task settings it was trained with"),
}


RESUME_ONLY = {  # what only a resumed run reads: attend, eval and predict do not need it
    "no rng": (without("rng", "optimizer"), "it has no 'optimizer', 'rng': not a whole training state"),
    "rng is not tensors": (lambda s: {**s, "rng": {"torch": "x", "data": 1}}, "'rng' should hold the tensors"),
    "learning rate is a string": (optimizer_groups(lr="abc"), "'optimizer'.param_groups.0.lr is 'abc', not a number"),
    "no window": (without("window"), "it has no 'window': not a whole training state"),
    "window steps is a string": (
        lambda s: {**s, "window": {**s["window"], "steps": "x"}},
        "'window' should hold the numbers 'loss_sum' and 'snapshot_loss_sum' and the whole numbers 'steps'",
    ),
    "moments of the wrong shape": (
        lambda s: {
            **s,
            "optimizer": {
                **s["optimizer"],
                "state": {
                    index: {**moments, "exp_avg": torch.zeros(2)} for index, moments in s["optimizer"]["state"].items()
                },
            },
        },
        "exp_avg is a tensor of shape (2,), not a tensor of shape",
    ),
    "best score is text": (replaced(best_score=["a", "b"]), "'best' and 'best_score' should hold numbers"),
    "best lacks its metrics": (replaced(best={"step": 3}), "'best' should be empty or have step"),
}


def tampered_copy(run, tmp_path, tamper):
    copy = copy_run(run, tmp_path)
    for which in ("best", "last"):
        state = load_checkpoint(RunFolder(copy).checkpoint(which))
        state.pop("format")
        save_checkpoint(tamper(state), RunFolder(copy).checkpoint(which))
    return copy


@pytest.mark.parametrize("case", TAMPERINGS)
def test_a_tampered_checkpoint_is_one_line_for_every_command(run, tmp_path, case):
    tamper, fragment = TAMPERINGS[case]
    copy = tampered_copy(run, tmp_path, tamper)
    before = snapshot(copy)
    commands = (["attend", "0 1 2"], ["heads"], ["eval"], ["predict", "0 1 2"], ["train", "--resume"])
    for args in commands:
        run_option = [] if args[0] == "train" else ["--run"]
        assert_user_error(invoke(*args, *run_option, copy), fragment)
    assert snapshot(copy) == before  # a refused resume changes nothing


# Edits of a run's config.yaml that the weights' shapes do not show: each would load and answer differently.
CONFIG_EDITS = {
    "n_heads": ("n_heads: 2", "n_heads: 4", "model.n_heads=2, the config says 4"),
    "positional": (
        "positional: sinusoidal",
        "positional: learned",
        "model.positional='sinusoidal', the config says 'learned'",
    ),
    "task": ("name: sort", "name: reverse", "task.name='sort', the config says 'reverse'"),
    "vocab_size": ("vocab_size: 5", "vocab_size: 6", "task.vocab_size=5, the config says 6"),
    "emptied": (None, "", "model."),  # every setting its default: the first that differs is named
}


@pytest.mark.parametrize("edit", CONFIG_EDITS)
def test_a_run_whose_config_was_edited_is_refused_naming_the_setting(run, tmp_path, edit):
    before, after, fragment = CONFIG_EDITS[edit]
    copy = copy_run(run, tmp_path)
    config = copy / "config.yaml"
    assert before is None or before in config.read_text()
    config.write_text(after if before is None else config.read_text().replace(before, after))
    snapshot_before = snapshot(copy)
    for args in (
        ["attend", "0 1 2", "--format", "html"],
        ["heads"],
        ["eval"],
        ["predict", "0 1 2"],
        ["train", "--resume"],
    ):
        run_option = [] if args[0] == "train" else ["--run"]
        result = invoke(*args, *run_option, copy)
        assert_user_error(result, f"does not belong with {config}: it was trained with {fragment}")
    assert snapshot(copy) == snapshot_before


def test_a_state_loaded_by_hand_and_saved_again_gets_a_fresh_checksum(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint({"step": 1, "config": {}, "model": {"w": torch.ones(3)}}, path)
    state = torch.load(path, weights_only=True)  # with its format and checksum
    state["step"] = 2
    save_checkpoint(state, path)
    assert load_checkpoint(path)["step"] == 2


def test_the_checksum_covers_every_value_and_where_it_lies():
    state = {"a": [[1, 2], [3]], "w": torch.zeros(4), "b": {"c": 1}}
    for changed in [
        {"a": [[1, 2], [4]]},  # a value inside nested lists
        {"a": [[1], [2, 3]]},  # a value moved from one list to another
        {"w": torch.zeros(2, 2)},  # the same bytes in another shape
        {"w": torch.zeros(4, dtype=torch.int32)},  # or of another type
        {"b": {"d": 1}},  # a value under another name
    ]:
        assert tensor_checksum({**state, **changed}) != tensor_checksum(state), changed
    assert tensor_checksum({"x": [1]}) != tensor_checksum({"y": [1]})
    assert tensor_checksum({"a": [[1, 2], [3]], "w": torch.zeros(4), "b": {"c": 1}}) == tensor_checksum(state)


def test_weights_mismatch_names_the_first_missing_extra_or_reshaped_weight():
    weights = {"a": torch.zeros(2), "b": torch.zeros(3)}
    assert weights_mismatch(weights, dict(weights)) is None
    assert weights_mismatch(weights, {"a": weights["a"]}) == "it has no weight 'b', which the config's model has"
    assert weights_mismatch({"a": weights["a"]}, weights) == "its weight 'b' is not in the config's model"
    found = weights_mismatch(weights, {**weights, "a": torch.zeros(2, 1)})
    assert found == "its weight 'a' has shape (2, 1), the config's model (2,)"


def test_what_the_weights_were_trained_with_leaves_out_where_the_text_file_lies():
    model = tiny_config().model
    saved = trained_with(model, TaskConfig(name="text", path="/somewhere/corpus.txt"))
    assert saved["task.name"] == "text" and not any(key.startswith("task.path") for key in saved)
    assert saved == trained_with(model, TaskConfig(name="text", path="/elsewhere/corpus.txt"))


def test_a_setting_the_config_no_longer_has_is_a_mismatch_whatever_its_value():
    config = tiny_config()
    saved = trained_with(config.model, config.task)
    for value in (None, 3, "nothing"):
        found = config_mismatch({"config": saved | {"model.gone": value}}, config.model, config.task)
        assert found == f"it was trained with model.gone={value!r}, a setting this version of tinytf does not have"


def test_a_checkpoint_older_than_a_config_key_was_trained_with_its_default():
    config = tiny_config()
    saved = trained_with(config.model, config.task)
    older = {key: value for key, value in saved.items() if key not in ("task.modulus", "task.train_fraction")}
    assert config_mismatch({"config": older}, config.model, config.task) is None
    other_modulus = config.task.model_copy(update={"modulus": 7})
    assert "task.modulus=113, the config says 7" in config_mismatch({"config": older}, config.model, other_modulus)
    assert "task.vocab_size=6" in config_mismatch({"config": older | {"task.vocab_size": 6}}, config.model, config.task)


@pytest.mark.parametrize("case", RESUME_ONLY)
def test_a_checkpoint_that_cannot_be_resumed_is_one_line(run, tmp_path, case):
    tamper, fragment = RESUME_ONLY[case]
    copy = tampered_copy(run, tmp_path, tamper)
    before = snapshot(copy)
    for extra in ([], ["--set", "train.steps=14"]):
        assert_user_error(invoke("train", "--resume", copy, *extra), fragment)
    assert snapshot(copy) == before
    result = invoke("predict", "0 1 2", "--run", copy)  # the weights themselves are fine
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def muon_run(tmp_path_factory):
    """A tiny finished run trained with train.optimizer: muon."""
    return train_tiny_run(tmp_path_factory.mktemp("hostile-muon"), train={"optimizer": "muon"})


def muon_moments(buffer):
    """Replaces the momentum of every weight Muon steps (the first of the optimizer's parts)."""

    def tamper(state):
        muon, adamw = state["optimizer"]["parts"]
        muon = {**muon, "state": {index: {"momentum_buffer": buffer} for index in muon["state"]}}
        return {**state, "optimizer": {"parts": [muon, adamw]}}

    return tamper


@pytest.mark.parametrize("case", ["moments", "settings", "another optimizer"])
def test_a_muon_checkpoint_that_cannot_be_resumed_is_one_line(muon_run, run, tmp_path, case):
    if case == "another optimizer":  # an AdamW run whose config.yaml was edited by hand
        copy = tampered_copy(run, tmp_path, lambda state: state)
        config = copy / "config.yaml"
        config.write_text(config.read_text().replace("optimizer: adamw", "optimizer: muon"))
        assert "optimizer: muon" in config.read_text()
        fragment = "its 'optimizer' is the state of another optimizer than train.optimizer=muon"
    elif case == "moments":
        copy = tampered_copy(muon_run, tmp_path, muon_moments(torch.zeros(3)))
        fragment = "momentum_buffer is a tensor of shape (3,), not a tensor of shape"
    else:  # settings are the config's, whatever the file says (a momentum of 5 diverges)
        copy = tampered_copy(muon_run, tmp_path, optimizer_parts_groups(ns_steps=200, momentum=5.0, nesterov=False))
        result = invoke("train", "--resume", copy, "--set", "train.steps=14")
        assert result.exit_code == 0, result.output
        (muon_settings,) = load_checkpoint(RunFolder(copy).checkpoint("last"))["optimizer"]["parts"][0]["param_groups"]
        assert muon_settings["ns_steps"] == 5 and muon_settings["momentum"] == 0.95 and "nesterov" not in muon_settings
        adamw_groups = load_checkpoint(RunFolder(copy).checkpoint("last"))["optimizer"]["parts"][1]["param_groups"]
        assert all("momentum" not in group and "ns_steps" not in group for group in adamw_groups)
        return
    before = snapshot(copy)
    assert_user_error(invoke("train", "--resume", copy, "--set", "train.steps=14"), fragment)
    assert snapshot(copy) == before


@pytest.mark.parametrize(
    "tamper",
    [optimizer_groups(betas=(0.9,)), optimizer_groups(lr=5.0, foreign_setting=5.0)],
    ids=["one beta", "another learning rate"],
)
def test_a_resume_takes_the_optimizer_settings_from_the_config_not_the_file(run, tmp_path, tamper):
    """Settings in a checkpoint that torch would trip over mid-training are replaced by the
    config's (the checkpoint only gives the optimizer's state)."""
    copy = tampered_copy(run, tmp_path, tamper)
    result = invoke("train", "--resume", copy, "--set", "train.steps=14")
    assert result.exit_code == 0, result.output
    state = load_checkpoint(RunFolder(copy).checkpoint("last"))
    assert state["step"] == 14 and [g["betas"] for g in state["optimizer"]["param_groups"]] == [(0.9, 0.999)] * 2
    last_step_lr = learning_rate(13, tiny_config(train={"steps": 14}).train)  # the config's schedule, not the file's
    assert [g["lr"] for g in state["optimizer"]["param_groups"]] == pytest.approx([last_step_lr] * 2)


def test_describe_names_a_value_in_a_few_words_on_one_line():
    assert describe(torch.zeros(2, 3)) == "a tensor of shape (2, 3)"
    assert describe({"a": 1}) == "a dict of 1" and describe((1, 2)) == "a tuple of 2" and describe([]) == "a list of 0"
    assert describe(np.zeros((2, 2))) == "array([[0., 0.], [0., 0.]])"  # its repr's lines joined
    assert describe("a" * 38) == repr("a" * 38)  # a repr of 40 characters is kept whole
    assert describe("a" * 39) == "'" + "a" * 36 + "..."
    assert describe("word  " * 8) == "'word word word word word word..."  # its first 37 characters, spaces collapsed


def test_kind_mismatch_names_the_first_place_holding_another_kind_of_value():
    expected = {"lr": 0.1, "name": "adamw", "moment": torch.zeros(2), "groups": [{"betas": (0.9, 0.99)}]}
    assert kind_mismatch(expected, {**expected, "lr": 1, "extra": "x"}, "'o'") is None  # 1 and 0.1 are both numbers
    for key, value, kind in [
        ("lr", "abc", "a number"),
        ("name", 3, "a string"),
        ("moment", [0.0, 0.0], "a tensor"),
        ("groups", {"betas": 1}, "a list"),
    ]:
        assert kind_mismatch(expected, {**expected, key: value}, "'o'") == f"'o'.{key} is {describe(value)}, not {kind}"
    found = kind_mismatch(expected, {**expected, "groups": [{"betas": (0.9, {})}]}, "'o'")
    assert found == "'o'.groups.0.betas.1 is a dict of 0, not a number"
    assert kind_mismatch([None, True, object()], [1, 2, 3], "x") == "x.0 is 1, not None"
    assert kind_mismatch([True], [1], "x") == "x.0 is 1, not a boolean"
    assert kind_mismatch(object(), 1, "x") == "x is 1, not object"  # a kind without a word: its type's name
    assert kind_mismatch({"a": {}}, {"a": []}, "x") == "x.a is a list of 0, not a mapping"
    assert kind_mismatch({"betas": (0.9, 0.99)}, {"betas": 0.9}, "x") == "x.betas is 0.9, not a list"


def resumable_state() -> tuple[dict, dict]:
    """A whole training state as the trainer saves it, and a fresh AdamW's state dict."""
    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([weight])
    weight.grad = torch.ones(2)
    optimizer.step()
    state = {
        "step": 3,
        "config": {},
        "model": {"w": weight.detach()},
        "optimizer": optimizer.state_dict(),
        "rng": {"torch": torch.zeros(4), "data": torch.zeros(4), "torch_by_rank": [torch.zeros(4)]},
        "best_score": [0.5, -1.0],
        "best": {"step": 2, "seq_acc": 0.5, "token_acc": 0.5, "loss": 1.0},
        "window": {"loss_sum": 1.0, "steps": 2, "snapshot_loss_sum": 0.5, "snapshot_steps": 1},
    }
    return state, torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]).state_dict()


RNG = "'rng' should hold the tensors 'torch' and 'data'"
BY_RANK = "'rng'.'torch_by_rank' should be a list of tensors"
WINDOW = (
    "'window' should hold the numbers 'loss_sum' and 'snapshot_loss_sum' "
    "and the whole numbers 'steps' and 'snapshot_steps'"
)
BEST_SCORE = "'best_score' should be None or two numbers"
NUMBERS = "'best' and 'best_score' should hold numbers"
BEST = "'best' should be empty or have step, seq_acc, token_acc and loss"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({}, None),
        ({"best": {}, "best_score": None}, None),  # no evaluation yet
        ({"window": {"loss_sum": 1.0, "steps": 2}}, None),  # written before snapshots: nothing summed since one
        ({"rng": {"torch": torch.zeros(4), "data": torch.zeros(4)}}, None),  # one process
        ({"rng": {"torch": torch.zeros(4), "data": 1}}, RNG),
        ({"rng": {"torch": torch.zeros(4), "data": torch.zeros(4), "torch_by_rank": torch.zeros(4)}}, BY_RANK),
        ({"rng": {"torch": torch.zeros(4), "data": torch.zeros(4), "torch_by_rank": [1]}}, BY_RANK),
        ({"window": {"loss_sum": 1.0, "steps": 2, "snapshot_loss_sum": "x", "snapshot_steps": 1}}, WINDOW),
        ({"window": {"loss_sum": 1.0, "steps": 2, "snapshot_loss_sum": 0.5, "snapshot_steps": 1.0}}, WINDOW),
        ({"window": {"loss_sum": 1.0, "steps": True}}, WINDOW),
        ({"best_score": "ab"}, BEST_SCORE),
        ({"best_score": [0.5]}, BEST_SCORE),
        ({"best_score": [0.5, "a"]}, NUMBERS),
        ({"best": {"step": True, "seq_acc": 0.5, "token_acc": 0.5, "loss": 1.0}}, NUMBERS),
        ({"best": {"step": 2, "seq_acc": 0.5, "loss": 1.0}}, BEST),
        ({"step": -1}, "'step' is -1, not a whole number >= 0"),
    ],
)
def test_training_state_problem_names_what_a_resume_cannot_use_in_full(change, problem):
    state, fresh = resumable_state()
    assert training_state_problem({**state, **change}, fresh, "adamw") == problem
