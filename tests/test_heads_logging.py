"""Head-pattern scores logged during training (log.head_scores): what the loggers get,
what TensorBoard holds, the score grid's picture, and that scoring never changes the run."""

import io

import numpy as np
import pytest
import torch
from conftest import tiny_config

from tinytf.config import config_from_dict
from tinytf.data.framing import get_framing
from tinytf.data.heldout import TaskData
from tinytf.errors import ConfigError
from tinytf.inspect.heads import GENERIC_PATTERNS, HeadReport, HeadScore, head_scores
from tinytf.inspect.viz import HeadScoreImages, head_column_name, head_scores_figure
from tinytf.run.checkpoint import load_checkpoint
from tinytf.run.folder import RunFolder
from tinytf.run.setup import build_model
from tinytf.tasks import get_task
from tinytf.training.constants import N_HEAD_SCORE_INPUTS
from tinytf.training.loggers import MetricsFileLogger, NullLogger, ProgressBarLogger, RecordingLogger, TensorBoardLogger
from tinytf.training.trainer import Trainer, train

MAPS = {"attention_every": 6}  # the tiny config draws no maps unless asked


def trained_parts(config, loggers):
    """Train `config` with a Trainer and no run folder; returns (trainer, result)."""
    torch.manual_seed(config.seed)
    task = get_task(config.task)
    model = build_model(config, vocab_size=len(task.vocab))
    data = TaskData(task, config.seed, config.task.eval_size)
    trainer = Trainer(model, get_framing(task, config.model.arch), data, config.train, config.log, loggers)
    return trainer, trainer.run()


def tensorboard_events(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    return events


def report_of(scores, patterns=("self", "first", "copy")):
    """A HeadReport of decoder layer-0 heads; `scores`: one {pattern: score or None} per head."""
    heads = [HeadScore("decoder", 0, "self", h, {p: s.get(p) for p in patterns}, 1.0) for h, s in enumerate(scores)]
    return HeadReport(16, list(patterns), heads)


# ---- what the loggers get


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_loggers_get_a_head_report_with_every_attention_map(arch):
    recorder = RecordingLogger()
    trainer, _ = trained_parts(tiny_config(model={"arch": arch}, log=MAPS), [recorder])
    reports = recorder.of("heads")
    assert [step for step, _ in reports] == [6, 12]  # with the attention maps: every 6 steps, and at the end
    attentions = {
        "decoder": ["decoder.0.self"],
        "encoder-decoder": ["encoder.0.self", "decoder.0.self", "decoder.0.cross"],
    }[arch]
    expected_names = [f"{attention}.{h}" for attention in attentions for h in range(2)]
    for _, report in reports:
        assert report.patterns == [*GENERIC_PATTERNS, "sort"]
        assert [head.name for head in report.heads] == expected_names
        assert report.inputs == min(N_HEAD_SCORE_INPUTS, len(trainer.data.held_out))
        for head in report.heads:
            assert all(score is None or 0.0 <= score <= 1.0 for score in head.scores.values())
    # Scored on the first held-out examples: the last report is the trained model's score on them.
    expected = head_scores(trainer.model, trainer.framing, trainer.data.held_out[:N_HEAD_SCORE_INPUTS])
    assert reports[-1][1].to_dict() == expected.to_dict()


def test_head_scores_off_logs_none():
    recorder = RecordingLogger()
    trained_parts(tiny_config(log={**MAPS, "head_scores": False}), [recorder])
    assert recorder.of("heads") == []
    assert [step for step, *_ in recorder.of("attention")] == [6, 6, 12, 12]  # the maps are still logged


def test_head_scores_is_a_strict_boolean_config_key():
    assert config_from_dict({}).log.head_scores is True
    assert config_from_dict({"log": {"head_scores": False}}).log.head_scores is False
    with pytest.raises(ConfigError, match="head_scores"):
        config_from_dict({"log": {"head_scores": "yes"}})


def test_loggers_that_do_not_want_head_scores_ignore_them(tmp_path):
    report = report_of([{"self": 0.5, "first": 0.2}])
    metrics, shown = MetricsFileLogger(tmp_path / "metrics.jsonl"), io.StringIO()
    bar = ProgressBarLogger(10, file=shown)
    bar.start(None, 0)
    for logger in (metrics, bar):
        logger.metrics(3, "train", {"loss": 1.5, "token_acc": 0.5, "seq_acc": 0.25, "tokens_per_s": 100.0})
    written, drawn, postfix = (tmp_path / "metrics.jsonl").read_bytes(), shown.getvalue(), bar.bar.postfix
    for logger in (NullLogger(), metrics, bar):
        logger.heads(3, report)
    assert (tmp_path / "metrics.jsonl").read_bytes() == written  # no row for the scores
    assert (shown.getvalue(), bar.bar.postfix) == (drawn, postfix)  # nor a word on the bar


# ---- TensorBoard


def test_tensorboard_holds_the_score_grid_and_each_patterns_best_score(tmp_path):
    recorder = RecordingLogger()
    config = tiny_config(model={"arch": "encoder-decoder"}, log=MAPS)
    run_dir = train(config, runs_dir=tmp_path, loggers=[recorder]).run_dir
    events = tensorboard_events(run_dir)
    images = events.Images("heads/scores")
    assert [image.step for image in images] == [6, 12]
    assert all(image.width > image.height > 100 for image in images)  # a row per pattern, a column per head
    reports = dict(recorder.of("heads"))
    scalars = {tag for tag in events.Tags()["scalars"] if tag.startswith("heads/")}
    assert scalars == {f"heads/best/{p}" for p in reports[12].patterns if reports[12].best(p) is not None}
    assert {"heads/best/first", "heads/best/sort"} <= scalars  # "sort": the cross-attention's alignment
    for tag in scalars:
        pattern = tag.removeprefix("heads/best/")
        logged = [(event.step, event.value) for event in events.Scalars(tag)]
        assert logged == [(step, pytest.approx(reports[step].best(pattern).scores[pattern])) for step in (6, 12)]


def test_tensorboard_skips_a_pattern_no_head_is_scored_on(tmp_path):
    logger = TensorBoardLogger(tmp_path, tiny_config())
    logger.start(tmp_path, 0)
    logger.heads(5, report_of([{"self": 0.25, "first": 0.75}, {"self": 0.5, "first": 0.125}]))
    logger.writer.flush()
    events = tensorboard_events(tmp_path)
    assert set(events.Tags()["scalars"]) == {"heads/best/self", "heads/best/first"}  # not "heads/best/copy"
    assert [event.value for event in events.Scalars("heads/best/self")] == [0.5]
    assert [event.value for event in events.Scalars("heads/best/first")] == [0.75]
    assert events.Tags()["images"] == ["heads/scores"]
    logger.writer.close()


def test_with_head_scores_off_tensorboard_has_none(tmp_path):
    run_dir = train(tiny_config(log={**MAPS, "head_scores": False}), runs_dir=tmp_path).run_dir
    events = tensorboard_events(run_dir)
    assert not [tag for kind in ("images", "scalars") for tag in events.Tags()[kind] if tag.startswith("heads/")]
    assert "attention/sample0/decoder.0.self" in events.Tags()["images"]


# ---- logging never changes training


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_scoring_heads_never_changes_the_training_run(arch, tmp_path):
    """Scored in eval mode without gradients and without a random draw: with dropout on and
    scores every other step, the metrics and the weights are those of a run without them."""
    assert tiny_config().model.dropout > 0  # dropout draws from the random stream scoring must not touch
    runs = {}
    for scored in (True, False):
        recorder = RecordingLogger()
        config = tiny_config(
            model={"arch": arch}, train={"steps": 6}, log={"attention_every": 2, "head_scores": scored}
        )
        result = train(config, runs_dir=tmp_path / str(scored), loggers=[recorder])
        runs[scored] = result, recorder
    (scored, scored_log), (plain, plain_log) = runs[True], runs[False]
    assert len(scored_log.of("heads")) == 3 and plain_log.of("heads") == []
    assert scored.final == plain.final and scored.best == plain.best
    untimed = [
        [
            (step, split, {k: v for k, v in values.items() if k != "tokens_per_s"})
            for step, split, values in log.of("metrics")
        ]
        for log in (scored_log, plain_log)
    ]
    assert untimed[0] == untimed[1]
    weights = [load_checkpoint(RunFolder(run.run_dir).checkpoint("last"))["model"] for run in (scored, plain)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])


def test_scoring_heads_leaves_the_model_in_training_mode():
    class ModeSpy(NullLogger):
        def heads(self, step, report):
            self.training = trainer.model.training

    spy = ModeSpy()
    torch.manual_seed(0)
    config = tiny_config(train={"steps": 6}, log=MAPS)
    task = get_task(config.task)
    model = build_model(config, vocab_size=len(task.vocab))
    trainer = Trainer(model, get_framing(task, "decoder"), TaskData(task, 0, 40), config.train, config.log, [spy])
    trainer.run()
    assert spy.training is True and model.training


# ---- the picture


def full_drawing(report):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(head_scores_figure(report))
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[:, :, :3].astype(int)


def random_report(rng, n_heads=6):
    scores = [
        {"self": rng.random(), "first": rng.random(), "copy": None if h < 2 else rng.random() ** 0.2}
        for h in range(n_heads)
    ]
    return report_of(scores)


def test_the_score_grid_shows_every_score_and_frames_the_labels():
    report = report_of([{"self": 0.9, "first": 0.25, "copy": None}, {"self": 0.125, "first": 0.375, "copy": 0.0}])
    figure = head_scores_figure(report)
    ax, bar_ax = figure.axes
    assert ax.images[0].colorbar.ax is bar_ax and bar_ax.get_ylim() == (0.0, 1.0)  # the scores' scale
    assert bar_ax.get_ylabel().startswith("score")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["self", "first", "copy"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["d0.self.h0", "d0.self.h1"]
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
    # (row, column): the cell of pattern `row` and head `column`; none where a score is None
    assert texts == {(0, 0): "0.90", (1, 0): "0.25", (0, 1): "0.12", (1, 1): "0.38", (2, 1): "0.00"}
    frames = [p for p in ax.patches if p.get_visible()]
    assert [(p.get_x(), p.get_y()) for p in frames] == [(-0.5, -0.5)]  # head 0 is "self"; head 1 "mixed"
    assert head_column_name(HeadScore("encoder", 7, "cross", 3, {}, 0.0)) == "e7.cross.h3"


def test_repeated_score_grids_match_a_full_drawing():
    rng = np.random.default_rng(0)
    images = HeadScoreImages()
    for report in (random_report(rng), random_report(rng)):  # the second reuses the first's background
        difference = np.abs(images.render(report).astype(int) - full_drawing(report))
        assert difference.mean() < 0.5 and difference.max() <= 40  # anti-aliasing only
    assert np.abs(full_drawing(report) - full_drawing(random_report(rng))).mean() > 0.5  # the scores show


def test_a_score_grid_of_other_heads_is_drawn_afresh():
    rng = np.random.default_rng(1)
    images = HeadScoreImages()
    images.render(random_report(rng, n_heads=3))
    wider = random_report(rng, n_heads=8)
    rendered = images.render(wider).astype(int)
    assert rendered.shape == full_drawing(wider).shape
    assert np.abs(rendered - full_drawing(wider)).mean() < 0.5


def test_a_large_model_still_gets_a_readable_grid():
    rng = np.random.default_rng(2)
    heads = [
        HeadScore(stack, layer, kind, h, {p: rng.random() for p in GENERIC_PATTERNS}, 1.0)
        for stack, kind in (("decoder", "self"),)
        for layer in range(8)
        for h in range(8)
    ]
    image = HeadScoreImages().render(HeadReport(64, list(GENERIC_PATTERNS), heads))
    height, width, _ = image.shape
    assert width <= 2400 and height <= 400  # 64 columns of 0.32 in at 100 dpi
