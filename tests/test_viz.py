"""Attention pictures: the fast repeated rendering used for TensorBoard must look like
a full drawing of the same figure."""

import numpy as np

from tinytf.attend import AttentionMap
from tinytf.viz import LayerImages, layer_figure


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
    first, *others = layer_figure(random_map(rng, tokens)).axes
    assert [label.get_text() for label in first.get_yticklabels()] == tokens
    assert all(len(ax.get_yticks()) == 0 for ax in others)
    assert all([label.get_text() for label in ax.get_xticklabels()] == tokens for ax in (first, *others))
