"""Positional encodings against their closed forms."""

import math

import pytest
import torch

from tinytf.config import Positional
from tinytf.model.positional import POSITIONAL_ENCODINGS, RotaryPositions, sinusoidal_table


@pytest.mark.parametrize("d_model", [8, 7])
def test_sinusoidal_table_is_the_closed_form_of_vaswani_et_al(d_model):
    table = sinusoidal_table(50, d_model)
    for pos in range(50):
        for dim in range(d_model):
            i = dim // 2
            angle = pos / 10000 ** (2 * i / d_model)
            expected = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
            assert table[pos, dim].item() == pytest.approx(expected, abs=1e-6)


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    rope = RotaryPositions(max_len=64, d_model=32, head_dim=16)
    q, k = torch.randn(16), torch.randn(16)

    def rotated_at(vector, pos):
        """`vector` placed at position `pos` of a sequence, after rotation."""
        seq = torch.zeros(1, 1, 64, 16)
        seq[0, 0, pos] = vector
        return rope.rotate(seq)[0, 0, pos]

    def score(query_pos, key_pos):
        return (rotated_at(q, query_pos) @ rotated_at(k, key_pos)).item()

    for query_pos, key_pos, shift in [(5, 2, 10), (0, 7, 30), (20, 20, 13)]:
        assert score(query_pos, key_pos) == pytest.approx(score(query_pos + shift, key_pos + shift), abs=1e-4)
    # ...and it does depend on the relative position
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)


def test_rope_preserves_vector_norms_and_leaves_position_zero_alone():
    rope = RotaryPositions(max_len=16, d_model=8, head_dim=8)
    t = torch.randn(2, 3, 16, 8)
    rotated = rope.rotate(t)
    torch.testing.assert_close(rotated.norm(dim=-1), t.norm(dim=-1))
    torch.testing.assert_close(rotated[:, :, 0], t[:, :, 0])


def test_rope_rotates_each_pair_i_and_i_plus_half_by_position_times_theta_i():
    head_dim, half = 8, 4
    rope = RotaryPositions(max_len=16, d_model=16, head_dim=head_dim)
    t = torch.randn(2, 3, 10, head_dim, dtype=torch.float64)
    expected = torch.empty_like(t)
    for pos in range(10):
        for i in range(half):
            angle = pos * 10000.0 ** (-i / half)
            x, y = t[..., pos, i], t[..., pos, i + half]
            expected[..., pos, i] = x * math.cos(angle) - y * math.sin(angle)
            expected[..., pos, i + half] = y * math.cos(angle) + x * math.sin(angle)
    torch.testing.assert_close(rope.rotate(t.float()), expected.float(), atol=1e-6, rtol=1e-5)


def test_rope_keeps_bf16_inputs_in_bf16():
    rope = RotaryPositions(max_len=16, d_model=16, head_dim=8)
    t = torch.randn(2, 3, 10, 8)
    rotated = rope.rotate(t.bfloat16())
    assert rotated.dtype == torch.bfloat16
    torch.testing.assert_close(rotated.float(), rope.rotate(t), atol=0.05, rtol=0.02)


def test_rope_start_offset_matches_slicing():
    rope = RotaryPositions(max_len=16, d_model=8, head_dim=8)
    t = torch.randn(1, 2, 10, 8)
    torch.testing.assert_close(rope.rotate(t[:, :, 4:], start=4), rope.rotate(t)[:, :, 4:])


def test_config_names_and_registry_agree():
    assert set(Positional.__args__) == set(POSITIONAL_ENCODINGS)


@pytest.mark.parametrize("name", sorted(POSITIONAL_ENCODINGS))
def test_every_encoding_keeps_shapes_and_start_offsets(name):
    encoding = POSITIONAL_ENCODINGS[name](32, 8, 4)
    x = torch.randn(2, 10, 8)
    out = encoding(x)
    assert out.shape == x.shape
    torch.testing.assert_close(encoding(x[:, 3:], start=3), out[:, 3:])
