"""Frames as the batch axis m: multi-page TIFF, animated GIF, WebP and PNG in, stacks out."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import tifffile
from helpers import (
    assert_one_line_error,
    assert_same_file,
    digests,
    manifest_records,
    ok,
    run,
    run_without,
)
from PIL import Image

from convcli import conv_forward, pool_forward
from convcli.app.ops import ConvOp, GradConvOp, PoolOp
from convcli.app.plan import Task
from convcli.app.process import process_file
from convcli.app.stacks import FIGURE_FRAMES, stack_figure
from convcli.io.frames import parse_frames, select_frames
from convcli.io.images import Picture, read_image, read_stack
from convcli.io.png import write_apng
from convcli.kernels import get_kernel, load_kernel_file
from convcli.levels import stats as level_stats
from convcli.levels.mapping import map_frame_levels, map_levels

H, W = 12, 16
DURATIONS = [40, 70, 110, 30]


def _frames(count=4, size=(W, H), seed=0) -> list[np.ndarray]:
    gen = np.random.default_rng(seed)
    return [gen.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8) for _ in range(count)]


def _save(path, arrays, **options):
    ims = [Image.fromarray(a) for a in arrays]
    ims[0].save(path, save_all=True, append_images=ims[1:], **options)
    return path


def _read_frames(path, mode=None) -> tuple[list[np.ndarray], list, object]:
    """Every frame of `path` as Pillow composites it (in `mode`), their durations and the loop."""
    frames, durations = [], []
    with Image.open(path) as im:
        for k in range(getattr(im, "n_frames", 1)):
            im.seek(k)
            frames.append(np.asarray(im.convert(mode) if mode else im).copy())
            durations.append(im.info.get("duration"))
        return frames, durations, im.info.get("loop")


# --- the option -----------------------------------------------------------------------------


def test_frames_option_parses_and_selects():
    assert parse_frames("0,2-4,2") == (0, 2, 3, 4)
    assert select_frames(parse_frames(" FIRST "), 5) == (0,)
    assert select_frames("all", 3) == (0, 1, 2)
    with pytest.raises(ValueError, match="frame 5 is past the end: the file has 3 frames"):
        select_frames((1, 5), 3)
    for bad in ("", "1-", "a", "3-1", "-2"):
        with pytest.raises(ValueError):
            parse_frames(bad)


def test_a_bad_frames_option_is_a_usage_error(tmp_path):
    path = _save(tmp_path / "a.tiff", _frames(2))
    assert_one_line_error(
        run("pool", path, "-o", tmp_path / "o", "--frames", "2-1"), 2, "--frames", "backwards"
    )


def test_a_frame_past_the_end_is_a_usage_error_naming_the_file_and_its_frame_count(tmp_path):
    path = _save(tmp_path / "a.gif", _frames(3))
    result = run("pool", path, "-o", tmp_path / "o", "--frames", "1,3", "-q")
    assert_one_line_error(
        result, 2, "a.gif", "--frames: frame 3 is past the end", "the file has 3 frames (0-2)"
    )
    assert not (tmp_path / "o").exists()


def test_a_frame_past_the_end_of_one_file_leaves_the_others_processed(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _save(folder / "short.tiff", _frames(2))
    _save(folder / "long.tiff", _frames(4))
    result = run("pool", folder, "-o", tmp_path / "o", "--frames", "3", "--format", "npy")
    assert result.exit_code == 2
    assert "short.tiff: --frames: frame 3 is past the end: the file has 2 frames" in result.output
    expected, _ = pool_forward(np.stack(_frames(4))[3:].astype(np.float32), {"f": 2, "stride": 2})
    written = np.load(tmp_path / "o" / "long_pool-max-f2-s2-frames3.npy")
    np.testing.assert_array_equal(written, expected[0])  # one frame picked: one picture
    assert not list((tmp_path / "o").glob("short*"))


# --- values: one layer call per size, against the layer functions ----------------------------


def test_tiff_pages_are_m_of_pool_forward_and_conv_forward(tmp_path):
    arrays = _frames(3)
    path = _save(tmp_path / "z.tiff", arrays)
    out = tmp_path / "o"
    ok("pool", path, "-o", out, "--format", "npy")
    A = np.stack(arrays).astype(np.float32)
    expected, _ = pool_forward(A, {"f": 2, "stride": 2})
    np.testing.assert_array_equal(np.load(out / "z_pool-max-f2-s2.npy"), expected)
    ok(
        "conv",
        path,
        "-o",
        out,
        "--format",
        "npy",
        "-k",
        "sobel-x",
        "--pad",
        "1",
        "--border",
        "constant",
    )
    W_ = get_kernel("sobel-x").weights.astype(np.float32)[:, :, None, None]
    Z, _ = conv_forward(
        A.sum(axis=3, keepdims=True),
        W_,
        np.zeros((1, 1, 1, 1), np.float32),
        {"stride": 1, "pad": 1},
    )
    result = np.load(out / "z_conv-sobel-x-p1-Bconstant-sum.npy")
    assert result.shape == (3, H, W, 1)
    np.testing.assert_array_equal(result, Z)
    for k in range(3):  # each frame as on its own, to float32 rounding of the summation order
        alone, _ = conv_forward(
            A[k : k + 1].sum(axis=3, keepdims=True),
            W_,
            np.zeros((1, 1, 1, 1), np.float32),
            {"stride": 1, "pad": 1},
        )
        np.testing.assert_allclose(result[k], alone[0], rtol=1e-6, atol=1e-3)


@pytest.mark.parametrize(
    "name, options",
    [
        ("a.gif", {"duration": DURATIONS, "loop": 3}),
        ("a.png", {"duration": DURATIONS, "loop": 3}),
        ("a.webp", {"duration": DURATIONS, "loop": 3, "lossless": True}),
    ],
)
def test_animations_give_their_composited_frames_as_m(tmp_path, name, options):
    path = _save(tmp_path / name, _frames(4), **options)
    shown, _, _ = _read_frames(path, "RGB")
    out = tmp_path / "o"
    result = ok("pool", path, "-o", out, "--format", "npy", "--size", "1")
    assert f"{path}: 4 frames" in result.stderr
    stack = np.load(out / "a_pool-max-f1-s1.npy")
    np.testing.assert_array_equal(stack[..., :3], np.stack(shown).astype(np.float32))


def test_a_partial_gif_frame_is_drawn_over_the_canvas_as_a_viewer_shows_it(tmp_path):
    base = np.full((H, W, 3), 200, np.uint8)
    patch = base.copy()
    patch[2:5, 3:7] = (10, 20, 30)
    path = _save(tmp_path / "p.gif", [base, patch], duration=50)  # Pillow stores the changed box
    ok("pool", path, "-o", tmp_path / "o", "--format", "npy", "--size", "1")
    stack = np.load(tmp_path / "o" / "p_pool-max-f1-s1.npy")
    np.testing.assert_array_equal(stack[1], patch.astype(np.float32))


def test_an_apng_frame_blended_over_the_last_is_read_as_a_viewer_shows_it(tmp_path):
    red = np.zeros((H, W, 4), np.uint8)
    red[..., 0] = red[..., 3] = 255
    square = np.zeros((H, W, 4), np.uint8)  # transparent but for a blue square
    square[3:6, 4:9] = (0, 0, 255, 255)
    path = _save(tmp_path / "b.png", [red, square], duration=50, blend=[0, 1], disposal=0)
    ok("pool", path, "-o", tmp_path / "o", "--format", "npy", "--size", "1")
    stack = np.load(tmp_path / "o" / "b_pool-max-f1-s1.npy")
    expected = red.copy()
    expected[3:6, 4:9] = (0, 0, 255, 255)
    np.testing.assert_array_equal(stack, np.stack([red, expected]).astype(np.float32))


def _rgba(colour, box=None):
    """An (H, W, 4) RGBA frame: `colour` in `box` (rows, columns slices), transparent black
    elsewhere; all of it without a box."""
    frame = np.zeros((H, W, 4), np.uint8)
    frame[box or (slice(None), slice(None))] = colour
    return frame


def _npy_frames(path, tmp_path, *options) -> np.ndarray:
    out = tmp_path / f"o{len(list(tmp_path.iterdir()))}"
    ok("pool", path, "-o", out, "--format", "npy", "--size", "1", *options)
    return np.load(next(out.glob("*.npy")))


def test_an_apng_frame_disposed_to_the_previous_canvas_gives_the_next_its_canvas(tmp_path):
    """dispose_op "previous": the green frame's region is put back as it was before it (red)
    before the third frame is drawn over it, whether every frame is read or that one."""
    red, green = _rgba((255, 0, 0, 255)), _rgba((0, 255, 0, 255), (slice(0, 6), slice(None)))
    blue = _rgba((0, 0, 255, 255), (slice(0, 1), slice(0, 1)))
    path = _save(
        tmp_path / "p.png", [red, green, blue], duration=50, disposal=[0, 2, 0], blend=[0, 1, 1]
    )
    expected = red.copy()
    expected[0, 0] = (0, 0, 255, 255)
    every = _npy_frames(path, tmp_path)
    np.testing.assert_array_equal(every[2], expected)
    alone = _npy_frames(path, tmp_path, "--frames", "2")  # one frame: (H, W, C)
    np.testing.assert_array_equal(alone, expected)
    np.testing.assert_array_equal(every[1][:6], np.broadcast_to(green[0, 0], (6, W, 4)))


def test_apng_over_composites_half_transparent_pixels_as_the_specification_says(tmp_path):
    """blend_op "over": alpha 1 - (1 - a)(1 - b), colours weighted by their share of it
    (half-transparent blue over half-transparent red: 85, 0, 170, 192)."""
    red, blue = _rgba((255, 0, 0, 128)), _rgba((0, 0, 255, 128))
    path = _save(tmp_path / "h.png", [red, blue], duration=50, blend=[0, 1], disposal=0)
    stack = _npy_frames(path, tmp_path)
    np.testing.assert_array_equal(stack[1], np.broadcast_to([85, 0, 170, 192], (H, W, 4)))


def test_an_apngs_frames_are_read_in_any_order(tmp_path):
    frames = [_rgba((255, 255, 255, 255), (slice(k, k + 1), slice(k, k + 1))) for k in range(4)]
    path = _save(tmp_path / "s.png", [f[..., :3] for f in frames], duration=50)
    stack = _npy_frames(path, tmp_path, "--frames", "2,1")
    np.testing.assert_array_equal(stack, np.stack([frames[2], frames[1]])[..., :3])


def test_an_apng_cut_short_is_said_in_one_line_naming_its_frame(tmp_path):
    path = _save(tmp_path / "c.png", _frames(4), duration=50)
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b"fdAT") + 20])  # inside the last frame's data
    result = run("pool", path, "-o", tmp_path / "o", "-q")
    assert_one_line_error(result, 1, "c.png", "frame 3 of 4", "ends inside its fdAT chunk")
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*.png"))


@pytest.mark.parametrize(
    ("first", "later", "said"),
    [
        (
            "rgb",
            "rgba",
            "a frame's transparency not kept: every frame is read with the first "
            "frame's channels (R G B)",
        ),
        (
            "grey",
            "rgb",
            "a frame's colours read as grey: every frame is read with the first "
            "frame's channels (L)",
        ),
        ("rgb", "opaque", None),  # alpha of 255 everywhere: nothing to lose
    ],
)
def test_a_later_page_that_loses_alpha_or_colour_says_so(tmp_path, first, later, said):
    """Frames are read with the first page's channels: a later page's transparency or colour
    that they cannot hold is said (it was dropped without a word)."""
    colour = np.zeros((H, W, 4), np.uint8)
    colour[...] = (0, 200, 0, 0)
    colour[: H // 2] = (255, 0, 0, 255)
    pages = {
        "rgb": (colour[..., :3], {"photometric": "rgb"}),
        "grey": (colour[..., 1], {"photometric": "minisblack"}),
        "rgba": (colour, {"photometric": "rgb", "extrasamples": ["unassalpha"]}),
        "opaque": (
            colour + [0, 0, 0, 255] * (colour[..., 3:] == 0),
            {"photometric": "rgb", "extrasamples": ["unassalpha"]},
        ),
    }
    path = tmp_path / "pages.tif"
    with tifffile.TiffWriter(path) as tif:
        for name in (first, later):
            values, options = pages[name]
            tif.write(values.astype(np.uint8), **options)
    result = ok("pool", "--size", "1", "--format", "npy", path, "-o", tmp_path / "o")
    if said is not None:
        assert said in result.stderr
    else:
        assert "transparency not kept" not in result.stderr and "as grey" not in result.stderr


def _apng_chunks(path) -> list[tuple[bytes, bytes]]:
    data, at, chunks = path.read_bytes(), 8, []
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        chunks.append((kind, data[at + 8 : at + 8 + length]))
        at += 12 + length
    return chunks


def _apng_of(path, chunks) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"".join(_chunk(k, d) for k, d in chunks))


def test_an_apng_frame_larger_than_its_canvas_is_refused_before_it_is_decoded(tmp_path):
    """A frame's fcTL size is checked against the canvas (which the pixel limit checks)
    before its data is decoded: a 12x16 canvas claiming a 40000x40000 frame is one line."""
    path = _save(tmp_path / "a.png", _frames(2), duration=50)
    chunks = _apng_chunks(path)
    k = [i for i, (kind, _) in enumerate(chunks) if kind == b"fcTL"][1]
    body = chunks[k][1]
    chunks[k] = (b"fcTL", body[:4] + struct.pack(">II", 40000, 40000) + body[12:])
    _apng_of(path, chunks)
    result = run("pool", path, "-o", tmp_path / "o", "-q")
    assert_one_line_error(result, 1, "a.png", "frame 1 of 2", "a frame of 40000x40000 at (0, 0)")


def test_an_rgb_apngs_canvas_cleared_by_a_disposal_says_its_transparency_is_not_kept(tmp_path):
    """dispose_op "background" clears a frame's region to transparent black: an RGB APNG's
    next, smaller frame leaves the rest of its canvas transparent, which RGB cannot hold."""
    red, blue = np.full((H, W, 3), (255, 0, 0), np.uint8), np.full((5, 5, 3), (0, 0, 255), np.uint8)
    path = _save(tmp_path / "c.png", [red, red[::-1]], duration=50, disposal=[1, 0], blend=0)
    Image.fromarray(blue).save(tmp_path / "small.png")
    (data,) = [d for k, d in _apng_chunks(tmp_path / "small.png") if k == b"IDAT"]
    chunks, fctls = _apng_chunks(path), 0
    for i, (kind, body) in enumerate(chunks):
        if kind == b"fcTL" and (fctls := fctls + 1) == 2:  # the second frame: 5x5 at (0, 0)
            chunks[i] = (kind, body[:4] + struct.pack(">IIII", 5, 5, 0, 0) + body[20:])
            sequence = struct.unpack(">I", body[:4])[0] + 1
    chunks = [c for c in chunks if c[0] != b"fdAT" and c[0] != b"IEND"]
    _apng_of(path, [*chunks, (b"fdAT", struct.pack(">I", sequence) + data), (b"IEND", b"")])
    result = ok("pool", "--size", "1", "--format", "npy", path, "-o", tmp_path / "o")
    assert "a frame's transparency not kept: every frame is read with the first frame's" in (
        result.stderr
    )
    frames = np.load(tmp_path / "o" / "c_pool-max-f1-s1.npy")
    np.testing.assert_array_equal(frames[1, :5, :5], np.broadcast_to([0, 0, 255], (5, 5, 3)))


def test_an_apng_without_its_end_chunk_gives_its_whole_frames(tmp_path):
    path = _save(tmp_path / "a.png", _frames(3), duration=50)
    shown, _, _ = _read_frames(path, "RGB")
    _apng_of(path, _apng_chunks(path)[:-1])  # no IEND, as Pillow reads it too
    stack = _npy_frames(path, tmp_path)
    np.testing.assert_array_equal(stack, np.stack(shown).astype(np.float32))


def test_a_grey_gifs_later_frame_of_a_palette_of_its_own_is_not_said_to_lose_colour(tmp_path):
    """Pillow reads a grey GIF's first frame as L and a later frame of a palette of its own
    as P: its greys are no colours that reading it as grey loses."""
    ramp = np.arange(256, dtype=np.uint8).reshape(16, 16)
    later = Image.fromarray(ramp // 32 * 32)
    Image.fromarray(ramp).save(tmp_path / "g.gif", save_all=True, append_images=[later])
    with Image.open(tmp_path / "g.gif") as im:
        im.seek(1)
        im.load()
        assert im.mode == "P"
    assert "as grey" not in ok("pool", tmp_path / "g.gif", "-o", tmp_path / "o").stderr


# --- outputs keep the frames -------------------------------------------------------------------


def test_png_output_is_an_animation_with_the_durations_loop_and_one_mapping(tmp_path):
    arrays = _frames(4)
    path = _save(tmp_path / "a.gif", arrays, duration=DURATIONS, loop=3)
    out = tmp_path / "o"
    ok("conv", path, "-o", out, "-k", "sobel-x")
    frames, durations, loop = _read_frames(out / "a_conv-sobel-x-sum.png")
    assert (len(frames), durations, loop) == (4, DURATIONS, 4)  # the GIF's 3 repeats: 4 plays
    (record,) = manifest_records(out)
    assert record["frames"] == 4 and record["mapping"] == "robust"
    shown, _, _ = _read_frames(path, "RGB")
    A = np.stack(shown).astype(np.float32)
    A = np.pad(A.sum(axis=3, keepdims=True), ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")
    W_ = get_kernel("sobel-x").weights.astype(np.float32)[:, :, None, None]
    Z, _ = conv_forward(A, W_, np.zeros((1, 1, 1, 1), np.float32), {"stride": 1, "pad": 0})
    levels, scale = map_frame_levels(list(Z[..., 0]), "robust", white=255, depth=8, margin=4)
    assert record["scale"] == scale.scale
    for frame, expected in zip(frames, levels, strict=True):
        np.testing.assert_array_equal(frame, expected)
    # One scale for all: the frames' levels are |x| * scale, clipped and rounded.
    np.testing.assert_array_equal(
        np.stack(levels), np.rint(np.clip(np.abs(Z[..., 0]) * np.float32(scale.scale), 0, 255))
    )


def test_one_mapping_for_a_stack_is_that_of_its_frames_mapped_together():
    gen = np.random.default_rng(3)
    frames = [gen.standard_normal((20, 30)).astype(np.float32) * k for k in (1, 5, 2)]
    for method in ("robust", "minmax", "abs", "offset", "clip"):
        levels, scale = map_frame_levels(frames, method, white=255, depth=8, margin=2)
        together, expected = map_levels(
            np.stack(frames, axis=2), method, white=255, depth=8, margin=2
        )
        assert scale == expected
        for k, frame in enumerate(levels):
            np.testing.assert_array_equal(frame, together[:, :, k])


def test_tiff_output_is_multipage_and_jpg_one_file_per_frame(tmp_path):
    path = _save(tmp_path / "a.tiff", _frames(3))
    A = np.stack(_frames(3)).astype(np.float32)
    expected, _ = pool_forward(A, {"f": 2, "stride": 2})
    out = tmp_path / "o"
    ok("pool", path, "-o", out, "--separate")  # a TIFF stays a TIFF
    pages, _, _ = _read_frames(out / "a_pool-max-f2-s2.tiff")
    np.testing.assert_array_equal(np.stack(pages), expected.astype(np.uint8))
    red, _, _ = _read_frames(out / "a_pool-max-f2-s2-R.tiff")
    np.testing.assert_array_equal(np.stack(red), expected[..., 0].astype(np.uint8))
    ok("pool", path, "-o", out, "--format", "jpg", "--frames", "2,0", "--separate")
    names = sorted(p.name for p in out.glob("*.jpg"))
    assert names == sorted(
        f"a_pool-max-f2-s2{c}-frames2,0_f{k}.jpg" for c in ("", "-R", "-G", "-B") for k in (0, 2)
    )
    with Image.open(out / "a_pool-max-f2-s2-G-frames2,0_f2.jpg") as im:
        assert np.abs(np.asarray(im).astype(float) - expected[2, ..., 1]).mean() < 3
    records = [r for r in manifest_records(out) if r["output"].endswith(".jpg")]
    assert {r["frame"] for r in records} == {0, 2}


def test_zarr_output_is_one_store_per_frame(tmp_path):
    zarr = pytest.importorskip("zarr")
    path = _save(tmp_path / "a.tiff", _frames(2))
    out = tmp_path / "o"
    ok("conv", path, "-o", out, "-k", "sobel-y", "--normalize", "none", "--format", "zarr")
    ok("conv", path, "-o", out, "-k", "sobel-y", "--format", "npy")
    values = np.load(out / "a_conv-sobel-y-sum.npy")
    for k in (0, 1):
        store = zarr.open_group(out / f"a_conv-sobel-y-none-sum_f{k}.zarr", mode="r")
        np.testing.assert_array_equal(store["0"][:], values[k, ..., 0])


def test_zarr_stores_of_frames_go_to_object_storage(tmp_path):
    zarr = pytest.importorskip("zarr")
    path = _save(tmp_path / "a.tiff", _frames(2))
    ok(
        "conv",
        path,
        "-o",
        "memory://frames-zarr/out",
        "-k",
        "sobel-y",
        "--normalize",
        "none",
        "--format",
        "zarr",
    )
    ok("conv", path, "-o", tmp_path / "o", "-k", "sobel-y", "--format", "npy")
    values = np.load(tmp_path / "o" / "a_conv-sobel-y-sum.npy")
    for k in (0, 1):
        url = f"memory://frames-zarr/out/a_conv-sobel-y-none-sum_f{k}.zarr"
        np.testing.assert_array_equal(zarr.open_group(url, mode="r")["0"][:], values[k, ..., 0])


def test_raw_values_of_a_stack_are_a_multipage_float_tiff(tmp_path):
    path = _save(tmp_path / "a.tiff", _frames(2))
    out = tmp_path / "o"
    ok("conv", path, "-o", out, "-k", "sobel-y", "--normalize", "none", "--format", "tiff")
    values, _, _ = _read_frames(out / "a_conv-sobel-y-none-sum.tiff")
    ok("conv", path, "-o", out, "-k", "sobel-y", "--format", "npy")
    np.testing.assert_array_equal(np.stack(values), np.load(out / "a_conv-sobel-y-sum.npy")[..., 0])


def test_frames_of_different_sizes_are_each_processed_and_written_on_their_own(tmp_path):
    arrays = _frames(2) + _frames(1, size=(10, 8), seed=4) + _frames(1, seed=5)
    path = _save(tmp_path / "m.tiff", arrays)
    out = tmp_path / "o"
    result = ok("pool", path, "-o", out, "--format", "npy")
    assert "frames of 2 sizes" in result.stderr
    for k, frame in enumerate(arrays):
        expected, _ = pool_forward(frame[None].astype(np.float32), {"f": 2, "stride": 2})
        np.testing.assert_array_equal(np.load(out / f"m_pool-max-f2-s2_f{k}.npy"), expected[0])
    # png: one scale for all the frames, whatever their size
    ok("pool", path, "-o", out, "--format", "png", "--separate")
    with Image.open(out / "m_pool-max-f2-s2-R_f2.png") as im:
        assert im.size == (5, 4)


def _tiff_layout(path) -> tuple:
    with tifffile.TiffFile(path) as tif:
        page = tif.pages[0]
        return tif.is_bigtiff, page.is_tiled, page.compression, page.predictor, page.dtype


@pytest.mark.parametrize("args", [(), ("--normalize", "none")], ids=["levels", "values"])
def test_a_frame_written_on_its_own_is_the_file_a_single_image_gives(tmp_path, args):
    arrays = [f[:, :, 0] for f in _frames(2) + _frames(1, size=(10, 8), seed=4)]
    with tifffile.TiffWriter(tmp_path / "m.tif") as tif:
        for frame in arrays:
            tif.write(frame)
    tifffile.imwrite(tmp_path / "one.tif", arrays[2])
    op = ("conv", "-k", "sobel-y", *args) if args else ("pool",)
    ok(*op, tmp_path / "m.tif", "-o", tmp_path / "stack", "--format", "tiff")
    ok(*op, tmp_path / "one.tif", "-o", tmp_path / "single", "--format", "tiff")
    (frame_file,) = (tmp_path / "stack").glob("*_f2.tiff")
    (single_file,) = (tmp_path / "single").glob("*.tiff")
    assert _tiff_layout(frame_file) == _tiff_layout(single_file)
    frame_values, single_values = tifffile.imread(frame_file), tifffile.imread(single_file)
    assert frame_values.dtype == (np.float32 if args else np.uint8)
    if args:  # the values: the same scale for every frame
        np.testing.assert_array_equal(frame_values, single_values)


def test_a_stack_of_float_pages_stays_float_values_in_tiff(tmp_path):
    gen = np.random.default_rng(7)
    heights = (gen.random((3, 12, 16), dtype=np.float32) * 3400 - 600).astype(np.float32)
    tifffile.imwrite(tmp_path / "dem.tif", heights, photometric="minisblack")
    mixed = tmp_path / "mixed.tif"
    with tifffile.TiffWriter(mixed) as tif:
        tif.write(heights[0])
        tif.write(heights[1, :8, :10])
    ok("pool", "--mode", "average", tmp_path / "dem.tif", "-o", tmp_path / "o")
    expected, _ = pool_forward(heights[..., None], {"f": 2, "stride": 2}, mode="average")
    (written,) = (tmp_path / "o").glob("dem_*.tiff")
    np.testing.assert_array_equal(tifffile.imread(written), expected[..., 0])
    assert (manifest_records(tmp_path / "o")[0]["mapping"]) == "none"
    assert read_stack(tmp_path / "dem.tif").floats
    ok("pool", "--mode", "average", mixed, "-o", tmp_path / "m")
    second = tifffile.imread(next((tmp_path / "m").glob("mixed_*_f1.tiff")))
    assert second.dtype == np.float32
    np.testing.assert_array_equal(
        second,
        pool_forward(heights[1:2, :8, :10, None], {"f": 2, "stride": 2}, mode="average")[0][
            0, ..., 0
        ],
    )


def test_a_phone_mpo_jpeg_is_no_stack_its_first_image_is_used(tmp_path):
    photo, preview = _frames(1)[0], _frames(1, size=(8, 6), seed=2)[0]
    Image.fromarray(photo).save(
        tmp_path / "p.jpg",
        format="MPO",
        save_all=True,
        append_images=[Image.fromarray(preview)],
        quality=95,
    )
    result = ok("pool", tmp_path / "p.jpg", "-o", tmp_path / "o", "--format", "npy")
    assert "used the first of 2 frames" in result.stderr
    assert np.load(tmp_path / "o" / "p_pool-max-f2-s2.npy").shape == (H // 2, W // 2, 3)


def test_one_frame_picked_is_written_as_a_picture(tmp_path):
    arrays = _frames(3)
    path = _save(tmp_path / "a.tiff", arrays)
    result = ok("pool", path, "-o", tmp_path / "o", "--format", "npy", "--frames", "2")
    assert "used frame 2 of 3 frames" in result.stderr
    expected, _ = pool_forward(arrays[2][None].astype(np.float32), {"f": 2, "stride": 2})
    written = np.load(tmp_path / "o" / "a_pool-max-f2-s2-frames2.npy")
    np.testing.assert_array_equal(written, expected[0])


def _corrupt_tiff_of_3_frames(path, frame: int, garbage):
    """A deflated 3-page TIFF whose page `frame` holds ``garbage(its byte count)`` as its data."""
    path = _save(path, _frames(3), compression="tiff_deflate")
    with Image.open(path) as im:
        im.seek(frame)
        offset, count = im.tag_v2[273][0], im.tag_v2[279][0]
    data = bytearray(path.read_bytes())
    data[offset : offset + count] = garbage(count)
    path.write_bytes(bytes(data))
    return path


def test_a_corrupt_frame_in_the_middle_fails_the_file_naming_it_and_writes_nothing(tmp_path):
    path = _corrupt_tiff_of_3_frames(
        tmp_path / "c.tiff",
        1,
        lambda count: bytes(range(256)) * (count // 256) + bytes(count % 256),
    )
    out = tmp_path / "o"
    out.mkdir()
    result = run("pool", path, "-o", out, "-q")
    assert_one_line_error(result, 1, "c.tiff", "frame 1 of 3", "cannot decode")
    assert list(out.iterdir()) == []


# --- figure, grad, fit --------------------------------------------------------------------------


def test_figure_draws_a_row_per_frame_and_says_how_many_are_left_out(tmp_path):
    arrays = _frames(FIGURE_FRAMES + 2)
    pics = [Picture(a.astype(np.float32), ("R", "G", "B"), 255.0, 8) for a in arrays]
    op = PoolOp()
    drawn = [(k, pic, op.compute(pic)) for k, pic in enumerate(pics[:FIGURE_FRAMES])]
    grid = stack_figure(op, drawn, len(pics))
    titled = [p.title for p in grid.panels if p is not None]
    assert [t.split(":")[0] for t in titled[::5]] == [f"frame {k}" for k in range(FIGURE_FRAMES)]
    assert len(grid.panels) % grid.ncols == 0 and len(titled) == 5 * FIGURE_FRAMES
    assert grid.title.endswith("(2 more frames left out)")
    path = _save(tmp_path / "a.gif", arrays[:2])
    ok("pool", path, "-o", tmp_path / "o", "--figure")
    ok("pool", path, "-o", tmp_path / "one", "--figure", "--frames", "first")
    with (
        Image.open(tmp_path / "o" / "a_pool-max-f2-s2_grid.png") as two,
        Image.open(tmp_path / "one" / "a_pool-max-f2-s2-frames0_grid.png") as one,
    ):
        assert two.width == one.width and two.height > 1.5 * one.height  # a row per frame


def test_grad_conv_of_a_stack_sums_dW_over_its_frames():
    arrays = _frames(3)
    op = GradConvOp(ConvOp((get_kernel("sobel-x"),)))
    whole = Picture(np.stack(arrays).astype(np.float32), ("R", "G", "B"), 255.0, 8)
    maps, (dW,) = op.gradients(whole)
    singles = [
        op.gradients(Picture(a.astype(np.float32), ("R", "G", "B"), 255.0, 8)) for a in arrays
    ]
    for k, (single_maps, _) in enumerate(singles):
        np.testing.assert_allclose(maps[k], single_maps, rtol=1e-5, atol=1e-2)
    np.testing.assert_allclose(dW, sum(s[1][0] for s in singles), rtol=1e-5)


def test_fit_learns_one_kernel_from_two_stacks(tmp_path):
    before = _save(tmp_path / "b.tiff", _frames(3))
    out = tmp_path / "o"
    ok("conv", before, "-o", out, "-k", "sobel-x", "--format", "npy")
    after = out / "b_conv-sobel-x-sum.npy"
    assert np.load(after).shape[0] == 3
    ok("fit", before, after, "-o", tmp_path / "k.toml")
    learned = load_kernel_file(tmp_path / "k.toml").weights
    np.testing.assert_allclose(learned, get_kernel("sobel-x").weights, atol=1e-6)
    two = _save(tmp_path / "two.tiff", _frames(2))
    result = run("fit", two, after, "-o", tmp_path / "k2.toml")
    assert result.exit_code != 0 and "has 3 frames" in result.stderr


@pytest.mark.parametrize("shape, dtype", [((3, 4, 5, 3), np.uint8), ((3, 4, 5), np.uint16)])
def test_write_apng_keeps_every_frame_even_repeated_ones(shape, dtype):
    stack = np.random.default_rng(1).integers(0, np.iinfo(dtype).max, shape, dtype=dtype)
    stack[2] = stack[1]  # Pillow's writer would merge these two into one frame
    buf = io.BytesIO()
    write_apng(buf, stack, durations=[10, None, 70_000], loop=None)
    frames, durations, loop = _read_frames(buf)
    assert (len(frames), durations, loop) == (3, [10, 100, 70_000], 0)
    np.testing.assert_array_equal(np.stack(frames), stack)


# --- memory: frames in groups -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, args",
    [
        ("a.gif", ["conv", "-k", "sobel-x", "-k", "box-blur", "--channels", "each"]),
        ("a.tiff", ["pool", "--format", "tiff"]),
        ("a.png", ["conv", "-k", "sobel-y", "--format", "npy"]),
        ("a.tiff", ["conv", "-k", "emboss", "--normalize", "none", "--format", "tiff"]),
        ("a.gif", ["pad", "--format", "jpg"]),
        ("a.gif", ["conv", "-k", "sobel-x", "--figure"]),  # draws the frames' pictures
    ],
)
def test_frames_in_groups_under_memory_give_the_same_files(tmp_path, name, args):
    path = _save(tmp_path / name, _frames(5), duration=DURATIONS + [20], loop=0)
    whole, grouped = tmp_path / "whole", tmp_path / "grouped"
    ok(*args[:1], path, "-o", whole, *args[1:])
    # A frame's work is under 2 MiB (1 MiB of engine buffers and its pixels), two frames' over.
    result = ok(*args[:1], path, "-o", grouped, "--memory", "2M", *args[1:])
    assert "read and processed in groups of at most 1 frame " in result.stderr
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(p.name for p in grouped.iterdir()) and len(names) > 1
    for n in names:
        if not n.endswith(".jsonl"):
            assert_same_file(whole / n, grouped / n)


@pytest.mark.parametrize("memory", [None, 2 << 20])
def test_a_robust_scale_taken_in_two_passes_gives_the_same_levels(tmp_path, monkeypatch, memory):
    path = _save(tmp_path / "a.gif", _frames(3), duration=DURATIONS[:3])
    op = ConvOp((get_kernel("sobel-x"),))
    one = process_file(Task(str(path), str(tmp_path / "one"), "a", op, memory=memory))
    monkeypatch.setattr(level_stats, "KEPT_MAGNITUDES", 0)  # the radix selection's two passes
    two = process_file(Task(str(path), str(tmp_path / "two"), "a", op, memory=memory))
    assert one.status == two.status == "done" and one.records == two.records
    name = "a_conv-sobel-x-sum.png"
    assert_same_file(tmp_path / "one" / name, tmp_path / "two" / name)


def test_a_corrupt_frame_fails_a_grouped_stack_before_anything_is_written(tmp_path):
    path = _corrupt_tiff_of_3_frames(tmp_path / "c.tiff", 2, bytes)
    out = tmp_path / "o"
    out.mkdir()
    result = run("pool", path, "-o", out, "-q", "--memory", "2M", "--format", "jpg")
    assert_one_line_error(result, 1, "c.tiff", "frame 2 of 3")
    assert list(out.iterdir()) == []


def test_dry_run_lists_the_files_a_stack_run_writes(tmp_path):
    arrays = _frames(2) + _frames(1, size=(10, 8), seed=4)
    path = _save(tmp_path / "m.tiff", arrays)
    gif = _save(tmp_path / "a.gif", _frames(3))
    out = tmp_path / "o"
    listed = run("pool", path, gif, "-o", out, "-n")
    assert listed.exit_code == 0
    lines = listed.stdout.splitlines()
    assert f"{gif} -> {out / 'a_pool-max-f2-s2.png'} (8x6 png, 3 frames)" in lines
    assert f"{path} -> {out / 'm_pool-max-f2-s2_f2.tiff'} (5x4 tiff)" in lines
    ok("pool", path, gif, "-o", out)
    assert sorted(line.split(" -> ")[1].split(" (")[0] for line in lines) == sorted(
        str(p) for p in out.iterdir() if p.suffix in (".png", ".tiff")
    )


@pytest.mark.cluster
def test_a_stack_on_a_local_dask_cluster_gives_the_files_of_a_local_run(tmp_path):
    gif = _save(tmp_path / "a.gif", _frames(3), duration=DURATIONS[:3], loop=2)
    tiff = _save(tmp_path / "z.tiff", _frames(2, seed=7))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    for out, extra in (("here", []), ("dask", ["--scheduler", "local", "-j", "1"])):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "convcli",
                "pool",
                gif,
                tiff,
                "-o",
                tmp_path / out,
                "-q",
                *extra,
            ],
            check=True,
            env=env,
            timeout=120,
        )
    assert digests(tmp_path / "dask") == digests(tmp_path / "here")
    frames, durations, loop = _read_frames(tmp_path / "dask" / "a_pool-max-f2-s2.png")
    assert (len(frames), durations, loop) == (3, DURATIONS[:3], 3)


@pytest.mark.parametrize("suffix, fmt", [(".webp", None), (".png", None), (".webp", "jpg")])
def test_a_stack_keeps_its_exif_with_the_orientation_of_its_frames(tmp_path, suffix, fmt):
    """The frames of a stack are not turned upright: their EXIF keeps its orientation."""
    frames = _frames(3)
    exif = Image.Exif()
    exif[0x010F], exif[0x0112] = "Canon", 6
    exif.get_ifd(0x8769)[0x9003] = "2024:01:02 03:04:05"
    Image.fromarray(frames[0]).save(
        tmp_path / f"anim{suffix}",
        save_all=True,
        lossless=True,
        append_images=[Image.fromarray(f) for f in frames[1:]],
        exif=exif.tobytes(),
    )
    out = tmp_path / "o"
    ok("pool", tmp_path / f"anim{suffix}", "-o", out, *(["--format", fmt] if fmt else []))
    written = sorted(p for p in out.iterdir() if p.suffix in (".png", ".jpg"))
    assert len(written) == (3 if fmt == "jpg" else 1)
    expected, _ = pool_forward(np.stack(frames).astype(np.float32), {"f": 2, "stride": 2})
    for path in written:
        with Image.open(path) as im:
            found = im.getexif()
            assert found[0x010F] == "Canon" and found[0x0112] == 6
            assert found.get_ifd(0x8769)[0x9003] == "2024:01:02 03:04:05"
            assert im.size == (W // 2, H // 2)  # as stored, not turned
            if fmt is None:
                assert im.n_frames == 3
                im.seek(2)
                np.testing.assert_array_equal(
                    np.asarray(im.convert("RGB")), expected[2].astype(np.uint8)
                )


def _traced_peak(*args) -> int:
    """The largest memory numpy and Python held during the command (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        ok(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_frames_in_groups_hold_about_one_frames_work(tmp_path):
    # Each frame's float32 copy stayed with it beside the group's (2.6 times one frame's
    # peak, 1.16 GB for 20 MP RGB frames at --memory 450M), and the frames before and
    # after the group were held while it was computed.
    rng = np.random.default_rng(8)
    path = tmp_path / "stack.tif"
    with tifffile.TiffWriter(path) as tif:
        for _ in range(5):
            tif.write(rng.integers(0, 256, (600, 800, 3), dtype=np.uint8), photometric="rgb")
    options = ("--size", "2", "--format", "tiff", "--memory", "12M", "-q")
    one = _traced_peak("pool", *options, "--frames", "0", path, "-o", tmp_path / "one")
    grouped = _traced_peak("pool", *options, "--frames", "all", path, "-o", tmp_path / "all")
    assert grouped <= 1.5 * one, (grouped / 2**20, one / 2**20)


def test_runs_with_other_frames_write_files_of_their_own(tmp_path):
    """--frames is in the names: a run of every frame after one of frame 0 (or of 2,0) is not
    skipped for the earlier run's file, and the dry run names the files the run writes."""
    arrays = _frames(3)
    path = _save(tmp_path / "a.tiff", arrays)
    out = tmp_path / "o"
    expected, _ = pool_forward(np.stack(arrays).astype(np.float32), {"f": 2, "stride": 2})
    runs = {"0": "-frames0", "2,0": "-frames2,0", "all": ""}
    for frames, tag in runs.items():
        command = ("pool", path, "-o", out, "--format", "npy", "--frames", frames)
        name = out / f"a_pool-max-f2-s2{tag}.npy"
        planned = run(*command, "--dry-run")
        assert planned.exit_code == 0 and f"-> {name} (" in planned.stdout
        assert "1 processed, 0 skipped" in ok(*command).stderr
        assert name.exists()
    assert sorted(p.name for p in out.glob("*.npy")) == [
        "a_pool-max-f2-s2-frames0.npy",
        "a_pool-max-f2-s2-frames2,0.npy",
        "a_pool-max-f2-s2.npy",
    ]
    np.testing.assert_array_equal(np.load(out / "a_pool-max-f2-s2-frames0.npy"), expected[0])
    np.testing.assert_array_equal(np.load(out / "a_pool-max-f2-s2-frames2,0.npy"), expected[[2, 0]])
    np.testing.assert_array_equal(np.load(out / "a_pool-max-f2-s2.npy"), expected)


def test_the_dry_run_of_o_file_names_each_frames_file(tmp_path):
    """-o FILE with a file per frame: the dry run names the files the run writes."""
    path = _save(tmp_path / "a.tiff", _frames(3))
    target = tmp_path / "o" / "f.jpg"
    planned = run("pool", path, "--format", "jpg", "-o", target, "--dry-run")
    assert planned.exit_code == 0
    names = [line.split(" -> ")[1].split(" (")[0] for line in planned.stdout.splitlines()]
    assert names == [str(target.with_name(f"f_f{k}.jpg")) for k in range(3)]
    ok("pool", path, "--format", "jpg", "-o", target)
    assert sorted(map(str, target.parent.iterdir())) == names


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["plain", "overwrite"])
def test_o_file_keeps_a_users_file_in_the_way_of_a_frames_file_and_writes_nothing(
    tmp_path, overwrite
):
    """-o x.png of 3 frames of different sizes writes x_f0.png ... x_f2.png: a user's
    x_f1.png fails the run before anything is written, --overwrite or not (it replaces the
    file named, x.png, only)."""
    sizes = [(W, H), (W - 4, H - 2), (W, H)]
    path = _save(
        tmp_path / "mixed.tiff", [_frames(1, size, seed=k)[0] for k, size in enumerate(sizes)]
    )
    out = tmp_path / "o"
    out.mkdir()
    mine = out / "x_f1.png"
    Image.fromarray(_frames(1, seed=9)[0]).save(mine)
    before = mine.read_bytes()
    for dry_run in ([], ["--dry-run"]):
        result = run("conv", "-k", "sobel-x", path, "-o", out / "x.png", *overwrite, *dry_run)
        assert_one_line_error(result, 1, f"{mine}: the existing file was not written by convcli")
        assert "--overwrite replaces only the file named" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["x_f1.png"]
    assert mine.read_bytes() == before


@pytest.mark.parametrize(
    ("source", "fmt", "said"),
    [("a.png", "tiff", True), ("a.gif", "npy", True), ("a.png", "png", False)]
    + [("a.tiff", "tiff", False)],
)
def test_an_animations_frame_durations_lost_by_its_format_are_said(tmp_path, source, fmt, said):
    """Only an animated PNG holds frame durations: other formats say they lose them, once;
    a multi-page TIFF has none to lose."""
    timing = {"duration": [50, 120, 200], "loop": 3} if source != "a.tiff" else {}
    path = _save(tmp_path / source, _frames(3), **timing)
    result = ok("pool", path, "--format", fmt, "-o", tmp_path / "o")
    line = f"convcli: frame durations not kept: {fmt} outputs hold none (png outputs do)"
    assert (line in result.stderr.splitlines()) is said
    if fmt == "png" and source == "a.png":
        with Image.open(next((tmp_path / "o").glob("*.png"))) as im:
            assert im.n_frames == 3 and im.info.get("loop") == 3


@pytest.mark.parametrize(
    ("name", "loop", "plays"), [("a.gif", 1, 2), ("a.gif", 0, 0), ("a.png", 2, 2), ("a.webp", 2, 2)]
)
def test_an_animation_plays_as_often_as_its_input(tmp_path, name, loop, plays):
    """A GIF's loop count is of the repeats after the first play (browsers play a GIF of
    NETSCAPE count 1 twice); an APNG's num_plays, and WebP's count, are of all the plays."""
    path = _save(tmp_path / name, _frames(3), duration=DURATIONS[:3], loop=loop)
    ok("pool", path, "-o", tmp_path / "o")
    with open(next((tmp_path / "o").glob("*.png")), "rb") as f:
        data = f.read()
    at = data.index(b"acTL")
    assert struct.unpack(">II", data[at + 4 : at + 12]) == (3, plays)


def test_an_apng_frame_of_a_fifteenth_of_a_second_lasts_67_ms(tmp_path):
    path = _save(tmp_path / "a.png", _frames(3), duration=[200 / 3] * 3, loop=0)
    with Image.open(path) as im:
        assert abs(im.info["duration"] - 200 / 3) < 1e-9  # stored as 1/15 s
    ok("pool", path, "-o", tmp_path / "o")
    _, durations, _ = _read_frames(tmp_path / "o" / "a_pool-max-f2-s2.png")
    assert durations == [67, 67, 67]  # 66 before: cut, not rounded


def test_a_gif_without_a_loop_count_gives_an_animation_that_plays_once(tmp_path):
    # A GIF without the NETSCAPE extension plays once; acTL's 0 would play it for ever.
    path = _save(tmp_path / "a.gif", _frames(3), duration=DURATIONS[:3])
    with Image.open(path) as im:
        assert "loop" not in im.info
    out = tmp_path / "o"
    ok("pool", path, "-o", out)
    frames, durations, loop = _read_frames(out / "a_pool-max-f2-s2.png")
    assert (len(frames), durations, loop) == (3, DURATIONS[:3], 1)


def test_an_8_bit_page_among_16_bit_pages_is_widened_to_their_scale(tmp_path):
    # A page's 254 of 255 is near white: among 16-bit pages it is 254 * 257, not 254 of 65535.
    gen = np.random.default_rng(11)
    low = gen.integers(0, 256, (H, W), dtype=np.uint8)
    high = gen.integers(0, 65536, (H, W), dtype=np.uint16)
    path = tmp_path / "depths.tif"
    with tifffile.TiffWriter(path) as tif:
        tif.write(low)
        tif.write(high)
    widened = np.stack([low.astype(np.uint16) * 257, high])
    out = tmp_path / "o"
    ok("pool", path, "-o", out, "--size", "1")
    (written,) = out.glob("depths_pool-*.tiff")
    with tifffile.TiffFile(written) as tif:
        pages = np.stack([page.asarray() for page in tif.pages])
    np.testing.assert_array_equal(pages, widened)
    ok("conv", path, "-o", out, "-k", "identity", "--format", "npy", "--normalize", "none")
    (values,) = [np.load(p) for p in out.glob("depths_conv-identity-*.npy")]
    np.testing.assert_array_equal(values[..., 0], widened.astype(np.float32))
    np.testing.assert_array_equal(read_stack(path).pixels[..., 0], widened.astype(np.float32))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")


def _apng_16_bit(path, frames: np.ndarray, delay_ms: int = 100) -> Path:
    """A 16-bit RGB animated PNG of `frames` (m, H, W, 3), which Pillow cannot write."""
    m, h, w, _ = frames.shape
    chunks = [_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))]
    chunks.append(_chunk(b"acTL", struct.pack(">II", m, 0)))
    sequence = 0
    for k, frame in enumerate(frames):
        control = struct.pack(">IIIIIHHBB", sequence, w, h, 0, 0, delay_ms, 1000, 0, 0)
        chunks.append(_chunk(b"fcTL", control))
        rows = b"".join(b"\0" + row.astype(">u2").tobytes() for row in frame)
        data = zlib.compress(rows)
        if k == 0:
            chunks.append(_chunk(b"IDAT", data))
            sequence += 1
        else:
            chunks.append(_chunk(b"fdAT", (sequence + 1).to_bytes(4, "big") + data))
            sequence += 2
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"".join(chunks) + _chunk(b"IEND", b""))
    return path


def test_a_16_bit_colour_animation_without_imagecodecs_is_read_at_8_bits_and_says_so(tmp_path):
    deep = np.random.default_rng(21).integers(0, 65536, (3, H, W, 3), dtype=np.uint16)
    path = _apng_16_bit(tmp_path / "deep.png", deep)
    with Image.open(path) as im:
        assert (im.n_frames, im.mode) == (3, "RGB")
    result = run_without("imagecodecs", "pad", "--pad", "1", path, "-o", tmp_path / "o", "-v")
    assert result.returncode == 0, result.stderr
    assert "deep.png: done, 1 written (3 frames; 16-bit colour read as 8-bit (" in result.stderr
    assert "install convcli[deep] for 16" in result.stderr
    frames, durations, _ = _read_frames(tmp_path / "o" / "deep_pad-constant-1.png")
    assert durations == [100] * 3
    # Each frame as Pillow reads it: the high byte of every sample.
    for frame, samples in zip(frames, deep, strict=True):
        assert np.array_equal(frame[1:-1, 1:-1], (samples >> 8).astype(np.uint8))
    plain = _save(tmp_path / "plain.png", _frames(3), duration=DURATIONS[:3])
    result = ok("pad", "--pad", "1", plain, "-o", tmp_path / "o", "-v")
    assert "16-bit" not in result.stderr


def test_one_frame_of_a_16_bit_colour_animation_read_at_8_bits_says_so(tmp_path):
    # --frames 1 replaced the frame's notes with "used frame 1 of 3 frames"
    deep = np.random.default_rng(22).integers(0, 65536, (3, H, W, 3), dtype=np.uint16)
    path = _apng_16_bit(tmp_path / "deep.png", deep)
    options = ("pad", "--pad", "1", "--frames", "1", path, "-o", tmp_path / "o", "-v")
    result = run_without("imagecodecs", *options)
    assert "used frame 1 of 3 frames; 16-bit colour read as 8-bit (" in result.stderr


@pytest.mark.parametrize("bits", [2, 4])
def test_an_apngs_2_and_4_bit_grey_level_marked_transparent_is_alpha_in_every_frame(tmp_path, bits):
    """Its tRNS level is on the file's scale (2 of 0-3 is 170), as a still PNG's is read."""
    top = 2**bits - 1
    levels = np.array([[0, 1, 2, top]], np.uint8)  # one row of four pixels
    packed = np.packbits(np.unpackbits(levels[..., None], axis=2)[..., 8 - bits :].ravel())

    def control(sequence):
        return _chunk(b"fcTL", struct.pack(">IIIIIHHBB", sequence, 4, 1, 0, 0, 10, 100, 0, 0))

    data = zlib.compress(b"\0" + packed.tobytes())
    chunks = [
        _chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 1, bits, 0, 0, 0, 0)),
        _chunk(b"acTL", struct.pack(">II", 2, 0)),
        _chunk(b"tRNS", struct.pack(">H", 2)),
        control(0),
        _chunk(b"IDAT", data),
        control(1),
        _chunk(b"fdAT", struct.pack(">I", 2) + data),
    ]
    path = tmp_path / "g.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"".join(chunks) + _chunk(b"IEND", b""))
    stack = read_stack(path)
    assert stack.channels == ("L", "A")
    np.testing.assert_array_equal(stack.pixels[..., 1], [[[255, 255, 0, 255]]] * 2)


def test_frame_0_of_an_apng_whose_default_image_is_no_frame_is_its_first_frame(tmp_path):
    """Its default image (for viewers without APNG) is not frame 0: --frames 0 wrote it,
    named frames0, where --frames 0,1 and --frames all start with the animation's first."""
    still, *animation = (Image.fromarray(np.full((8, 8, 3), v, np.uint8)) for v in (10, 100, 200))
    path = tmp_path / "fallback.png"
    still.save(path, save_all=True, append_images=animation, default_image=True, duration=100)
    ok("pool", "--size", 1, "--format", "npy", "--frames", 0, path, "-o", tmp_path / "one")
    (written,) = (tmp_path / "one").glob("*.npy")
    assert written.name == "fallback_pool-max-f1-s1-frames0.npy"
    np.testing.assert_array_equal(np.load(written), np.full((8, 8, 3), 100.0))
    ok("pool", "--size", 1, "--format", "npy", path, "-o", tmp_path / "all")
    np.testing.assert_array_equal(
        np.load(next((tmp_path / "all").glob("*.npy")))[0], np.load(written)
    )
    picture = read_image(path)  # the library's plain read: the still, said so
    assert picture.notes == ("used its default image, no frame of its 2-frame animation",)
    np.testing.assert_array_equal(picture.pixels, np.full((8, 8, 3), 10.0))


def test_a_one_frame_animation_beside_a_still_says_no_frame_was_picked(tmp_path):
    still, frame = (Image.fromarray(np.full((8, 8, 3), v, np.uint8)) for v in (10, 100))
    path = tmp_path / "one.png"
    still.save(path, save_all=True, append_images=[frame], default_image=True)
    result = ok("pool", "--size", 1, "--format", "npy", "-v", path, "-o", tmp_path / "out")
    assert "used frame" not in result.stderr
    np.testing.assert_array_equal(np.load(next((tmp_path / "out").glob("*.npy"))), 100.0)
