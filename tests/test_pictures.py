"""What conv's defaults show on real photos (sample_images): edges, not a frame; photos."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import ok, read
from PIL import Image

SAMPLES = Path(__file__).resolve().parent.parent / "sample_images"
PHOTOS = sorted(p for p in SAMPLES.iterdir() if p.suffix == ".png")
EDGE_KERNELS = ("vertical", "horizontal", "edge", "sobel-x")


@pytest.fixture(scope="module")
def edge_maps(tmp_path_factory):
    out = tmp_path_factory.mktemp("edges")
    args = [a for k in EDGE_KERNELS for a in ("-k", k)]
    ok("conv", *args, *PHOTOS, "-o", out, "-q", "-j", 1)
    return out


@pytest.mark.parametrize("kernel", EDGE_KERNELS)
@pytest.mark.parametrize("photo", [p.stem for p in PHOTOS])
def test_edge_maps_of_photos_show_edges_and_not_a_frame(edge_maps, photo, kernel):
    levels = read(edge_maps / f"{photo}_conv-{kernel}-sum.png").astype(int)
    inside = np.zeros(levels.shape, bool)
    inside[2:-2, 2:-2] = True
    # The frame (the outer 2 pixels) is not the brightest part of the map ...
    assert levels[inside].max() >= levels[~inside].max()
    assert levels[~inside].mean() <= 2 * levels[inside].mean() + 1
    # ... and edges inside are well above black, not a few bright pixels on a black map.
    assert np.percentile(levels[inside], 99) >= 64


def test_blur_and_sharpen_of_a_photo_look_like_the_photo(tmp_path):
    photo = SAMPLES / "chelsea.png"
    ok("conv", "-k", "gaussian-5x5", "-k", "sharpen", photo, "-o", tmp_path, "-q")
    with Image.open(photo) as im:
        rgb = np.asarray(im.convert("RGB"), dtype=float)
        luminance = np.asarray(im.convert("L"), dtype=float)
    mean = rgb.mean(axis=2)  # a sum over R, G, B is shown as their mean
    for kernel in ("gaussian-5x5", "sharpen"):
        levels = read(tmp_path / f"chelsea_conv-{kernel}-sum.png").astype(float)
        assert abs(levels.mean() - mean.mean()) <= 2, kernel
        assert abs(levels.mean() - luminance.mean()) <= 6, kernel
        assert np.abs(levels - mean).mean() <= 12, kernel  # the picture, not a grey wash


def test_blurred_photo_in_colour(tmp_path):
    photo = SAMPLES / "coffee.png"
    ok("conv", "-k", "gaussian-3x3", "--channels", "each", photo, "-o", tmp_path, "-q")
    with Image.open(tmp_path / "coffee_conv-gaussian-3x3-each.png") as im:
        assert im.mode == "RGB"
        colour = np.asarray(im)
    with Image.open(photo) as im:
        original = np.asarray(im.convert("RGB"), dtype=float)
    assert np.abs(colour - original).mean() <= 6
