"""Attention and patching pictures: the fast repeated rendering used for TensorBoard must
look like a full drawing of the same figure, and every map says what it shows (a colour
bar with its scale, the values of a small grid, its axes)."""

import numpy as np
import pytest

from tinytf.inspect.attend import AttentionMap, AttentionReport
from tinytf.inspect.heatmaps import patch_figure
from tinytf.inspect.patching import Patched, PatchReport
from tinytf.inspect.viz import LayerImages, layer_figure, report_figure


def random_map(rng, tokens):
    weights = rng.random((4, len(tokens), len(tokens)))
    return AttentionMap("decoder", 0, "self", tokens, tokens, weights / weights.sum(-1, keepdims=True))


def full_drawing(attention):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(layer_figure(attention))
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[:, :, :3].astype(int)


def test_repeated_renderings_match_a_full_drawing():
    rng = np.random.default_rng(0)
    tokens = [f"t{i}" for i in range(12)]
    images = LayerImages()
    for attention in (random_map(rng, tokens), random_map(rng, tokens)):  # the second reuses the first's frame
        rendered = images.render(attention).astype(int)
        difference = np.abs(rendered - full_drawing(attention))
        assert difference.mean() < 0.5 and difference.max() <= 40  # anti-aliasing on the frame's edge only
    assert np.abs(full_drawing(attention) - full_drawing(random_map(rng, tokens))).mean() > 1.0  # weights show


def test_new_tokens_draw_their_own_labels():
    rng = np.random.default_rng(1)
    images = LayerImages()
    images.render(random_map(rng, ["a", "b", "c"]))
    longer = random_map(rng, ["a", "b", "c", "d", "e"])
    rendered = images.render(longer).astype(int)
    assert rendered.shape == full_drawing(longer).shape
    assert np.abs(rendered - full_drawing(longer)).mean() < 0.5


def test_layers_with_the_same_tokens_share_a_frame_and_keep_their_own_titles():
    rng = np.random.default_rng(2)
    tokens = ["<bos>", *(f"t{i}" for i in range(8))]
    images = LayerImages()
    for layer in range(3):  # layers 1 and 2 reuse layer 0's frame: only heatmaps and titles are drawn
        attention = random_map(rng, tokens)
        attention = AttentionMap("encoder", layer, "self", tokens, tokens, attention.weights)
        difference = np.abs(images.render(attention).astype(int) - full_drawing(attention))
        assert difference.mean() < 0.5 and difference.max() <= 40
    assert len(images._frames) == 1
    other_layer = AttentionMap("encoder", 1, "self", tokens, tokens, attention.weights)
    assert np.abs(full_drawing(attention) - full_drawing(other_layer)).mean() > 0.01  # the titles differ


def test_only_the_most_recently_used_frames_are_kept():
    rng = np.random.default_rng(3)
    images = LayerImages()
    images.MAX_KEPT = 2
    first, second, third = (random_map(rng, list(tokens)) for tokens in ("ab", "abc", "abcd"))
    for attention in (first, second, first, third):  # `second` is the least recently used when `third` comes
        images.render(attention)
    assert [labels[2] for labels in images._frames] == [("a", "b"), ("a", "b", "c", "d")]  # query tokens


def test_query_tokens_and_their_ticks_are_drawn_on_the_first_head_only():
    rng = np.random.default_rng(4)
    tokens = ["a", "b", "c"]
    first, *others, _colour_bar = layer_figure(random_map(rng, tokens)).axes
    assert [label.get_text() for label in first.get_yticklabels()] == tokens
    assert all(len(ax.get_yticks()) == 0 for ax in others)
    assert all([label.get_text() for label in ax.get_xticklabels()] == tokens for ax in (first, *others))


def colour_bar_of(figure):
    """The one colour bar of a figure: every map of it shares its scale."""
    (bar,) = [image.colorbar for ax in figure.axes for image in ax.images if image.colorbar is not None]
    return bar


def cell_values(ax):
    """{(row, column): the number printed in that cell}."""
    return {(round(t.get_position()[1]), round(t.get_position()[0])): float(t.get_text()) for t in ax.texts}


def test_attention_maps_have_a_colour_bar_and_small_ones_print_their_weights():
    rng = np.random.default_rng(5)
    small, large = random_map(rng, list("abc")), random_map(rng, [f"t{i}" for i in range(13)])
    tokens = list("abc")
    layer_1 = AttentionMap("decoder", 1, "self", tokens, tokens, small.weights)
    report = AttentionReport(tokens, None, None, [small, layer_1])
    for figure in (layer_figure(small), report_figure(report)):
        bar = colour_bar_of(figure)
        assert bar.ax.get_ylim() == (0.0, 1.0) and "attention weight" in bar.ax.get_ylabel()
    maps = [ax for ax in report_figure(report).axes if ax.images]
    assert len(maps) == 8
    for ax, weights in zip(maps, [*small.weights, *small.weights], strict=True):
        expected = {(i, j): weights[i, j] for i in range(3) for j in range(3)}
        assert cell_values(ax) == pytest.approx(expected, abs=0.005)
    large_report = AttentionReport(large.query_tokens, None, None, [large])
    assert all(not ax.texts for ax in report_figure(large_report).axes)  # 13 x 13: the colours alone
    # TensorBoard's maps, drawn at every logging step, keep to colours: text would slow training
    assert all(not ax.texts for ax in layer_figure(small).axes)


def patch_report(by_position, pairs=20, spread=0.8):
    """A report of 2 layers x 2 heads, at 3 positions if `by_position`; restored from -spread on."""
    positions = [0, 1, 2] if by_position else [None]
    keys = [(layer, head, position) for layer in range(2) for head in range(2) for position in positions]
    results = [Patched("z", *key, -spread + 0.1 * i) for i, key in enumerate(keys)]
    return PatchReport(pairs, 2.0, -1.0, 1.0, results)


def test_a_patch_map_is_centred_on_zero_and_prints_each_value():
    report = patch_report(by_position=False)
    figure = patch_figure(report, None)
    (ax,) = [ax for ax in figure.axes if ax.images]
    bar = colour_bar_of(figure)
    low, high = bar.ax.get_ylim()
    assert (low, high) == (-1.0, 1.0) and 0.0 in bar.get_ticks()  # symmetric: white is "no change"
    assert [line.get_ydata()[0] for line in bar.ax.lines] == [0.0]  # and 0 is marked on it
    assert cell_values(ax) == pytest.approx({(r.layer, r.head): r.restored for r in report.results}, abs=0.005)
    assert ax.get_xlabel() == "head" and ax.get_ylabel() == "layer"
    assert ax.get_title() == "each head's output (z) patched at every position at once, over 20 pairs"
    wide = patch_figure(patch_report(by_position=False, spread=2.5), None)  # values past -1 widen the scale
    assert colour_bar_of(wide).ax.get_ylim() == (-2.5, 2.5)


def test_drawn_pairs_number_positions_from_the_prompts_end_and_one_pair_shows_its_words():
    drawn = patch_figure(patch_report(by_position=True), None)
    (ax,) = [ax for ax in drawn.axes if ax.images]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["-3", "-2", "-1"]
    assert ax.get_xlabel().startswith("position from the prompt's end (-1: the last token")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0.0", "0.1", "1.0", "1.1"]
    one = patch_figure(patch_report(by_position=True, pairs=1), ["<bos>", "cat/cats", "sleeps"])
    (ax,) = [ax for ax in one.axes if ax.images]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["<bos>", "cat/cats", "sleeps"]
    assert ax.get_title().endswith("over 1 pair")


def test_a_large_patch_grid_shows_colours_only():
    keys = [(layer, None, position) for layer in range(2) for position in range(13)]
    report = PatchReport(5, 1.0, 0.0, 1.0, [Patched("resid_pre", *key, 0.5) for key in keys])
    (ax,) = [ax for ax in patch_figure(report, None).axes if ax.images]
    assert len(ax.texts) == 0 and ax.get_title().startswith("the residual stream entering the layer (resid_pre)")
