"""Tasks with a fixed training set (modular-add): the seeded split of the table, full-batch
training on all of it, the training set's own metrics, and the config checks around them."""

import pytest
import torch
from conftest import CtrlCAt, assert_same_weights, assert_user_error, final_weights, invoke, read_metrics, write_config

from tinytf.config import TaskConfig, config_from_dict
from tinytf.data.heldout import TaskData
from tinytf.errors import ConfigError, UserError
from tinytf.inspect import viz
from tinytf.inspect.evaluate import evaluate
from tinytf.run.setup import Setup, check_config
from tinytf.tasks import get_task
from tinytf.training.distributed import Launch, OneProcess
from tinytf.training.loggers import RecordingLogger
from tinytf.training.trainer import _assemble, train


def modular_data(**sections):
    """A one-layer decoder on modular addition modulo 11, full batch, as plain config data."""
    base = {
        "task": {"name": "modular-add", "modulus": 11, "train_fraction": 0.4},
        "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "norm": "none", "activation": "relu"},
        "train": {"steps": 6, "batch_size": "all", "eval_every": 3, "warmup_steps": 2, "device": "cpu"},
        "log": {"every": 3, "attention_every": None},
    }
    for section, keys in sections.items():
        base[section] = base.get(section, {}) | keys
    return base


def modular_config(**sections):
    return config_from_dict(modular_data(**sections), check=check_config)


def as_set(pairs):
    """Pairs of one-token numbers -> the set of (a, b, c) they hold."""
    return {(*s, *t) for s, t in (pairs.example(i) for i in range(len(pairs)))}


def test_the_split_is_disjoint_covers_the_table_and_is_fixed_by_the_seed():
    task = get_task(TaskConfig(name="modular-add", modulus=11, train_fraction=0.3))
    data = TaskData(task, seed=0)
    train, held_out = as_set(data.train_set), as_set(data.held_out)
    assert len(train) == len(data.train_set) == round(0.3 * 121) and not train & held_out
    assert train | held_out == as_set(task.table())  # the whole rest is held out
    again = TaskData(task, seed=0)
    assert as_set(again.train_set) == train and torch.equal(again.held_out.source, data.held_out.source)
    assert as_set(TaskData(task, seed=1).train_set) != train


def test_the_held_out_set_is_in_random_order_so_its_first_examples_are_a_fair_sample():
    data = TaskData(get_task(TaskConfig(name="modular-add", modulus=59, train_fraction=0.4)), seed=0)
    first_numbers = {data.held_out.example(i)[0][0] for i in range(64)}  # the first number of the first 64
    assert len(first_numbers) > 20  # in table order they would all be 0 or 1


def test_eval_size_holds_out_part_of_the_rest():
    task = get_task(TaskConfig(name="modular-add", modulus=11, train_fraction=0.3, eval_size=20))
    data = TaskData(task, seed=3)
    everything = TaskData(get_task(TaskConfig(name="modular-add", modulus=11, train_fraction=0.3)), seed=3)
    assert len(data.held_out) == 20 and as_set(data.held_out) <= as_set(everything.held_out)
    assert as_set(data.train_set) == as_set(everything.train_set)  # eval_size never changes what trains


def test_full_batch_training_reads_every_training_example_at_each_step():
    trainer = _assemble(Setup.of(modular_config()), [], OneProcess())
    read = []  # the token ids the embedding reads at each training step (eval mode: evaluations)
    embedding = trainer.model.token_embedding
    embedding.register_forward_pre_hook(lambda module, args: read.append(args[0].clone()) if module.training else None)
    trainer.run()
    expected = sorted(map(tuple, trainer.data.train_set.source.tolist()))  # every training pair "a b"
    assert len(read) == 6 and len(expected) == 48
    for tokens in read:  # (B, T): a b <sep> c, one row per example
        assert sorted(map(tuple, tokens[:, :2].tolist())) == expected


def test_a_smaller_batch_draws_distinct_training_examples():
    data = TaskData(get_task(TaskConfig(name="modular-add", modulus=11, train_fraction=0.4)), seed=0)
    batch = as_set(data.train_pairs(20))
    assert len(batch) == 20 and batch <= as_set(data.train_set)


def test_train_set_metrics_are_the_whole_training_sets_at_each_evaluation():
    recorder = RecordingLogger()
    trainer = _assemble(Setup.of(modular_config()), [recorder], OneProcess())
    trainer.run()
    on_train_set = [(step, values) for step, split, values in recorder.of("metrics") if split == "train_set"]
    assert [step for step, _ in on_train_set] == [3, 6]
    assert on_train_set[-1][1] == pytest.approx(evaluate(trainer.model, trainer.framing, trainer.data.train_set))


def test_metrics_file_has_train_set_and_held_out_records_and_the_weight_norm(tmp_path):
    run_dir = train(modular_config(), runs_dir=tmp_path).run_dir
    records = read_metrics(run_dir)
    splits = [(r["step"], r["split"]) for r in records if r["split"] in ("val", "train_set")]
    assert splits == [(3, "val"), (3, "train_set"), (6, "val"), (6, "train_set")]
    assert all(r["weight_norm"] > 0 for r in records if r["split"] == "train")


SORT = {"name": "sort", "vocab_size": 5, "min_len": 2, "max_len": 4}  # a task that draws a fresh stream


@pytest.mark.parametrize(
    "task, train, fragment",
    [
        (SORT | {"modulus": 11}, {"batch_size": 8}, "task.modulus: sort does not use it"),
        (SORT, {"batch_size": "all"}, "train.batch_size: all trains on a fixed training set, but task 'sort'"),
        ({"name": "modular-add", "modulus": 2, "train_fraction": 0.9}, {}, "leaves none to hold out"),
        ({"name": "modular-add", "modulus": 11, "eval_size": 100}, {}, "training leaves only 85"),
        ({}, {"batch_size": 49}, "train.batch_size=49 is more than the training set's 48 examples"),
        ({}, {"batch_size": "al"}, "train.batch_size: Input should be a valid integer, or all"),
    ],
)
def test_impossible_splits_and_batches_are_one_line_errors(tmp_path, task, train, fragment):
    data = modular_data(train=train)
    data["task"] = task or data["task"]
    result = invoke("train", write_config(tmp_path, data), "--runs-dir", tmp_path / "runs")
    assert_user_error(result, fragment)
    assert not (tmp_path / "runs").exists()


def test_a_full_batch_run_stopped_and_resumed_ends_with_the_same_weights(tmp_path):
    config = modular_config(train={"optimizer": "adamw", "steps": 8, "weight_decay": 1.0})
    uninterrupted = train(config, runs_dir=tmp_path / "a")
    stopped = train(config, runs_dir=tmp_path / "b", loggers=[CtrlCAt(5)])
    assert stopped.interrupted and stopped.step == 5
    resumed = train(config, resume=stopped.run_dir)
    assert_same_weights(final_weights(uninterrupted.run_dir), final_weights(resumed.run_dir))
    assert read_metrics(resumed.run_dir)[-2:] == read_metrics(uninterrupted.run_dir)[-2:]


def test_a_job_that_cannot_share_the_whole_training_set_says_what_to_change():
    launch = Launch(rank=0, world_size=5, local_rank=0, local_world_size=5)
    with pytest.raises(ConfigError) as caught:
        launch.check_batch_size(1392, whole_training_set=True)
    assert str(caught.value).startswith("train.batch_size: all, the training set's 1392 examples: ")
    assert str(caught.value).endswith(
        "5 processes of this torchrun job; change task.train_fraction or the number of processes"
    )
    launch.check_batch_size(1390, whole_training_set=True)  # 5 processes share 1390 equally


def test_a_resumed_runs_spectrum_image_starts_from_the_spectra_before(tmp_path, monkeypatch):
    config = modular_config(train={"steps": 8}, log={"attention_every": 8})
    stopped = train(config, runs_dir=tmp_path, loggers=[CtrlCAt(4)])
    with (stopped.run_dir / "metrics.jsonl").open("a") as metrics:  # spectra edited by hand: left out, no crash
        metrics.write(
            '{"step": 1, "split": "fourier", "norms": "none"}\n{"step": 2, "split": "fourier", "norms": [1]}\n'
        )
    drawn, draw = [], viz.spectrum_figure
    monkeypatch.setattr(viz, "spectrum_figure", lambda spectra: drawn.append(sorted(spectra)) or draw(spectra))
    train(config, resume=stopped.run_dir)
    assert drawn == [[3, 6, 8]]  # evaluated at 3 before the stop, at 6 and 8 after; drawn at 8


def test_an_encoder_answers_c_at_the_first_numbers_position_and_eos_after():
    from tinytf.data.framing import get_framing

    task = get_task(TaskConfig(name="modular-add", modulus=11, train_fraction=0.4))
    pairs = TaskData(task, seed=0).train_pairs(5)
    batch = get_framing(task, "encoder").frame(pairs)
    for i in range(len(pairs)):
        source, target = pairs.example(i)
        (a, b), (c,) = task.vocab.decode(source), task.vocab.decode(target)
        assert task.vocab.decode(batch.tokens[i].tolist()) == [a, b]
        assert task.vocab.decode(batch.labels[i].tolist()) == [c, "<eos>"]
        assert int(c) == (int(a) + int(b)) % 11


@pytest.mark.parametrize("construction", ["a", "b"])
def test_minimal_pairs_change_one_number_and_come_from_the_held_out_set(construction):
    task = get_task(TaskConfig(name="modular-add", modulus=11, train_fraction=0.4))
    held_out = TaskData(task, seed=3).held_out
    held = {tuple(task.vocab.decode(held_out.example(i)[0])) for i in range(len(held_out))}
    pairs = task.held_out_pairs(construction, 40, seed=1, held_out=held_out)
    assert len(pairs) == 40 and pairs == task.held_out_pairs(construction, 40, seed=1, held_out=held_out)
    changed = "ab".index(construction)
    for pair in pairs:
        clean, corrupt = pair.clean.split(), pair.corrupt.split()
        assert tuple(clean) in held and tuple(corrupt) in held
        assert clean[1 - changed] == corrupt[1 - changed] and clean[changed] != corrupt[changed]
        assert int(pair.answer) == (int(clean[0]) + int(clean[1])) % 11 != int(pair.wrong)
        assert int(pair.wrong) == (int(corrupt[0]) + int(corrupt[1])) % 11
    order = [" ".join(task.vocab.decode(held_out.example(i)[0])) for i in range(len(held_out))]
    positions = [order.index(pair.clean) for pair in pairs]
    assert positions == sorted(positions)  # in the held-out set's (random) order
    with pytest.raises(UserError, match=f"only \\d+ pairs that change {construction} among the run's 73 held-out"):
        task.held_out_pairs(construction, 1000, held_out=held_out)
