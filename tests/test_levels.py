"""Result values to image levels, and colour to grey."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from convcli.levels import MAPPINGS, luminance, to_levels


def test_luminance_matches_pillow_convert_l():
    rgb = np.random.default_rng(1).integers(0, 256, size=(5, 6, 3), dtype=np.uint8)
    ours = luminance(rgb.astype(np.float32))
    pillow = np.asarray(Image.fromarray(rgb).convert("L")).astype(np.float32)
    assert ours.shape == (5, 6, 1)
    assert np.abs(ours[:, :, 0] - pillow).max() <= 1.0


def test_to_levels_methods():
    x = np.array([[-510.0, 0.0, 255.0]])
    assert to_levels(x, "abs", white=255, depth=8).tolist() == [[255, 0, 128]]
    assert to_levels(x, "minmax", white=255, depth=8).tolist() == [[0, 170, 255]]
    assert to_levels(x, "clip", white=255, depth=8).tolist() == [[0, 0, 255]]
    assert to_levels(x, "offset", white=255, depth=8).tolist() == [[0, 128, 191]]
    sixteen = to_levels(x, "abs", white=65535, depth=16)
    assert sixteen.dtype == np.uint16 and sixteen.tolist() == [[65535, 0, 32768]]


def test_to_levels_constant_and_nan_input():
    zeros = np.zeros((2, 2))
    for method in MAPPINGS:
        levels = to_levels(zeros, method, white=255, depth=8)
        assert levels.dtype == np.uint8
    assert to_levels(zeros, "offset", white=255, depth=8)[0, 0] == 128
    assert to_levels(np.array([np.nan, 10.0]), "clip", white=255, depth=8).tolist() == [0, 10]
    with pytest.raises(ValueError, match="method"):
        to_levels(zeros, "gamma", white=255, depth=8)
