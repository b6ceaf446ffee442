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
        rendered = images.render("attention/sample0/decoder.0.self", attention).astype(int)
        difference = np.abs(rendered - full_drawing(attention))
        assert difference.mean() < 0.5 and difference.max() <= 40  # anti-aliasing on the frame's edge only
    assert np.abs(full_drawing(attention) - full_drawing(random_map(rng, tokens))).mean() > 1.0  # weights show


def test_new_tokens_under_the_same_key_redraw_the_labels():
    rng = np.random.default_rng(1)
    images = LayerImages()
    images.render("key", random_map(rng, ["a", "b", "c"]))
    longer = random_map(rng, ["a", "b", "c", "d", "e"])
    rendered = images.render("key", longer).astype(int)
    assert rendered.shape == full_drawing(longer).shape
    assert np.abs(rendered - full_drawing(longer)).mean() < 0.5
