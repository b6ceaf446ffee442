"""The Fourier spectrum of an embedding of Z_p (fourier.py), and how training logs it for
a task whose numbers are Z_p's elements (modular-add)."""

import math

import numpy as np
import pytest
import torch
from conftest import read_metrics
from test_fixed_split import modular_config

from tinytf.inspect.fourier import fourier_basis, frequency_norms, top_share
from tinytf.inspect.viz import figure_pixels, spectrum_figure
from tinytf.run.checkpoint import load_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.tasks import get_task
from tinytf.training import trainer
from tinytf.training.loggers import RecordingLogger
from tinytf.training.observers import fourier_spectrum, train_set_metrics
from tinytf.training.trainer import train


@pytest.mark.parametrize("p", [2, 7, 8, 113])
def test_the_basis_is_orthonormal(p):
    basis = fourier_basis(p)
    assert torch.allclose(basis @ basis.T, torch.eye(p, dtype=basis.dtype), atol=1e-12)


@pytest.mark.parametrize("p, k", [(11, 3), (113, 14), (12, 6), (12, 1)])
def test_an_embedding_of_one_frequency_puts_all_its_norm_there(p, k):
    x = torch.arange(p, dtype=torch.float64)
    directions = torch.randn(2, 24, dtype=torch.float64)
    # number x -> cos(2πkx/p) u + sin(2πkx/p) v: one frequency, any phase, any directions
    angle = 2 * math.pi * k * x / p
    embedding = torch.cos(angle)[:, None] * directions[0] + torch.sin(angle)[:, None] * directions[1]
    norms = frequency_norms(embedding)
    assert norms.shape == (p // 2 + 1,)
    assert norms[k] == pytest.approx(float(embedding.norm()), rel=1e-5)
    assert float(norms.pow(2).sum() - norms[k] ** 2) < 1e-8 * float(embedding.norm() ** 2)
    assert top_share(norms, k=1) == pytest.approx(1.0)


def test_the_norms_keep_the_embeddings_whole_norm_and_a_constant_is_frequency_zero():
    embedding = torch.randn(13, 8)
    assert float(frequency_norms(embedding).pow(2).sum()) == pytest.approx(float(embedding.pow(2).sum()), rel=1e-5)
    constant = frequency_norms(torch.ones(13, 8))
    assert constant[0] == pytest.approx(math.sqrt(13 * 8), rel=1e-5) and float(constant[1:].abs().max()) < 1e-5


def test_training_logs_the_spectrum_of_the_number_embedding_at_each_evaluation(tmp_path):
    recorder = RecordingLogger()
    result = train(modular_config(), runs_dir=tmp_path, loggers=[recorder])
    logged = recorder.of("fourier")
    assert [step for step, _ in logged] == [3, 6] and all(len(norms) == 11 // 2 + 1 for _, norms in logged)
    weights = load_checkpoint(RunFolder(result.run_dir).checkpoint("last"))["model"]["token_embedding.weight"]
    numbers = weights[get_task(modular_config().task).residue_ids()]  # the embeddings of "0" .. "10"
    assert logged[-1][1] == pytest.approx(frequency_norms(numbers).tolist())
    assert [r["norms"] for r in read_metrics(result.run_dir) if r["split"] == "fourier"] == [n for _, n in logged]


def test_tensorboard_gets_the_spectrum_image_and_the_strongest_frequencies(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.util import tensor_util

    run_dir = train(modular_config(train={"steps": 7}, log={"attention_every": 3}), runs_dir=tmp_path).run_dir
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    events.Reload()
    assert [event.step for event in events.Images("fourier/spectrum")] == [3, 6, 7]  # with the maps, and the end
    assert [event.step for event in events.Scalars("fourier/top_share")] == [3, 6, 7]
    scalars = events.Tags()["scalars"]
    assert "fourier/top_share" in scalars and len([t for t in scalars if t.startswith("fourier/k")]) >= 5
    assert {"train_set/seq_acc", "val/seq_acc", "train/weight_norm"} <= set(scalars)
    # CUSTOM SCALARS: the training set's accuracy and loss charted with the held-out set's
    (config,) = events.Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout.FromString(tensor_util.make_ndarray(config.tensor_proto).item())
    charts = {chart.title: list(chart.multiline.tag) for chart in layout.category[0].chart}
    assert charts == {
        "exact-answer accuracy": ["train_set/seq_acc", "val/seq_acc"],
        "loss": ["train_set/loss", "val/loss"],
    }


def test_measuring_the_training_set_and_the_spectrum_never_changes_the_run(monkeypatch, tmp_path):
    config = modular_config(model={"dropout": 0.1})  # dropout draws from the stream measuring must not touch
    measured = train(config, runs_dir=tmp_path / "a").run_dir
    looking = trainer.observers_for

    def without_them(settings, log):
        return [o for o in looking(settings, log) if o.look not in (train_set_metrics, fourier_spectrum)]

    monkeypatch.setattr(trainer, "observers_for", without_them)
    plain = train(config, runs_dir=tmp_path / "b").run_dir
    weights = [load_checkpoint(RunFolder(run).checkpoint("last"))["model"] for run in (measured, plain)]
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])


def test_the_spectrum_figure_draws_to_rgb_pixels():
    spectra = {100: [0.1, 5.0, 0.2], 200: [0.1, 0.2, 3.0]}
    pixels = figure_pixels(spectrum_figure(spectra))
    assert pixels.dtype == np.uint8 and pixels.ndim == 3 and pixels.shape[2] == 3
