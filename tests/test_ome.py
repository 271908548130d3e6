"""Outputs keep an OME image's physical pixel size: OME-TIFF, OME-Zarr, moved to their grid."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tifffile
from helpers import ok

from convcli.io.ome import physical_of
from convcli.io.physical import PhysicalSize, physical_size, unit_symbol

MICRO = "\u00b5m"


def _ome_tiff(path, values, x=0.25, y=0.5, unit=MICRO):
    """An OME-TIFF of `values` ((H, W), (H, W, 3) or frames (T, H, W)) with pixels of x by y."""
    axes = {2: "YX", 3: "YXS" if values.shape[-1] == 3 else "TYX"}[values.ndim]
    tifffile.imwrite(
        path,
        values,
        photometric="rgb" if axes == "YXS" else "minisblack",
        metadata={
            "axes": axes,
            "PhysicalSizeX": x,
            "PhysicalSizeXUnit": unit,
            "PhysicalSizeY": y,
            "PhysicalSizeYUnit": unit,
        },
    )
    return path


def _ome_sizes(path) -> list[tuple[float, float, str, str]]:
    """tifffile's view: each OME image's PhysicalSizeX, Y and their units."""
    with tifffile.TiffFile(path) as tif:
        assert tif.is_ome
        images = re.findall(r"<Pixels [^>]*>", tif.ome_metadata)
    sizes = []
    for pixels in images:
        found = dict(re.findall(r'(PhysicalSize[XY]\w*)="([^"]*)"', pixels))
        sizes.append(
            (
                float(found["PhysicalSizeX"]),
                float(found["PhysicalSizeY"]),
                found["PhysicalSizeXUnit"],
                found["PhysicalSizeYUnit"],
            )
        )
    return sizes


def _kept(folder) -> dict:
    """The manifest's "kept" of each output, by name."""
    lines = (folder / "convcli-manifest.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["output"]: r.get("kept") for r in map(json.loads, lines) if "output" in r}


@pytest.fixture(scope="module")
def colour():
    return np.random.default_rng(6).integers(0, 256, (600, 540, 3), np.uint8)


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_pool_2_doubles_the_physical_size_of_an_ome_tiff(tmp_path, colour, memory):
    source = _ome_tiff(tmp_path / "cells.ome.tif", colour)
    extra = ["--memory", memory] if memory else []
    result = ok(
        "pool",
        "--size",
        "2",
        source,
        "-o",
        tmp_path / "out",  # TIFF stays TIFF
        "-v",
        "--separate",
        *extra,
    )
    assert ("processed in strips" in result.stderr) == bool(memory)
    assert f"kept: pixel size 0.5x1 {MICRO}" in result.stderr
    for name in ("cells.ome_pool-max-f2-s2.tiff", "cells.ome_pool-max-f2-s2-G.tiff"):
        assert _ome_sizes(tmp_path / "out" / name) == [(0.5, 1.0, MICRO, MICRO)]
        with tifffile.TiffFile(tmp_path / "out" / name) as tif:
            (series,) = tif.series
            assert series.shape[:2] == (300, 270)
            assert [level.shape[:2] for level in series.levels] == [(300, 270), (150, 135)]
        assert _kept(tmp_path / "out")[name] == {
            "physical_size": {"x": 0.5, "y": 1.0, "unit": [MICRO, MICRO], "origin": [0.25, 0.125]},
            "ome": True,
        }


def test_conv_with_stride_1_keeps_the_physical_size_and_an_ome_name_is_ome(tmp_path, colour):
    source = _ome_tiff(tmp_path / "cells.ome.tif", colour[..., 0], x=80, y=80, unit="nm")
    ok("conv", "-k", "gaussian-3x3", source, "-o", tmp_path / "blur.ome.tiff")
    assert _ome_sizes(tmp_path / "blur.ome.tiff") == [(80.0, 80.0, "nm", "nm")]
    ok(
        "conv",
        "-k",
        "gaussian-3x3",
        "--stride",
        "3",
        "--format",
        "tiff",
        source,
        "-o",
        tmp_path / "out",
    )
    (written,) = (tmp_path / "out").glob("*.tiff")
    assert _ome_sizes(written) == [(240.0, 240.0, "nm", "nm")]


def test_a_plain_tiff_stays_plain_unless_named_ome(tmp_path, colour):
    tifffile.imwrite(tmp_path / "scan.tif", colour, photometric="rgb")
    ok("pool", "--format", "tiff", tmp_path / "scan.tif", "-o", tmp_path / "out")
    with tifffile.TiffFile(tmp_path / "out" / "scan_pool-max-f2-s2.tiff") as tif:
        assert not tif.is_ome and "OME" not in (tif.pages[0].description or "")
    ok("pool", tmp_path / "scan.tif", "-o", tmp_path / "scan_pool.OME.tif")
    with tifffile.TiffFile(tmp_path / "scan_pool.OME.tif") as tif:
        assert tif.is_ome and "PhysicalSizeX" not in tif.ome_metadata
        assert tif.series[0].shape == (300, 270, 3)


def test_the_frames_of_an_ome_stack_keep_it(tmp_path):
    frames = np.random.default_rng(7).integers(0, 256, (3, 64, 80), np.uint8)
    source = _ome_tiff(tmp_path / "movie.ome.tif", frames, x=0.2, y=0.2)
    ok("pool", "--frames", "all", "--format", "tiff", source, "-o", tmp_path / "out")
    (written,) = (tmp_path / "out").glob("*.tiff")
    assert _ome_sizes(written) == [(0.4, 0.4, MICRO, MICRO)] * 3


def test_an_ome_tiff_that_pillow_reads_keeps_it(tmp_path, colour):
    """JPEG tiles: Pillow decodes them, its ImageDescription gives the OME-XML."""
    pytest.importorskip("imagecodecs")
    tifffile.imwrite(
        tmp_path / "slide.ome.tif",
        colour,
        photometric="rgb",
        compression="jpeg",
        metadata={"axes": "YXS", "PhysicalSizeX": 0.25, "PhysicalSizeY": 0.25},
    )
    ok(
        "pool",
        "--size",
        "3",
        "--format",
        "tiff",
        tmp_path / "slide.ome.tif",
        "-o",
        tmp_path / "out",
    )
    assert _ome_sizes(tmp_path / "out" / "slide.ome_pool-max-f3-s3.tiff") == [
        (0.75, 0.75, MICRO, MICRO)
    ]


def _multiscales(store):
    """ome-zarr-py's view of a store: its first image's axes and transformations, and the
    omero channels' names, colours and windows (None for a grey image)."""
    io, reader = pytest.importorskip("ome_zarr.io"), pytest.importorskip("ome_zarr.reader")
    (image, *_) = reader.Reader(io.parse_url(str(store)))()
    meta = image.metadata
    channels = None
    if "channel_names" in meta:
        channels = list(zip(meta["channel_names"], meta["contrast_limits"], strict=True))
    return meta["axes"], meta["coordinateTransformations"], channels


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_ome_zarr_holds_the_scale_units_and_translation(tmp_path, colour, memory):
    source = _ome_tiff(tmp_path / "cells.ome.tif", colour)
    extra = ["--memory", memory] if memory else []
    ok(
        "pool",
        "--size",
        "2",
        "--format",
        "zarr",
        source,
        "-o",
        tmp_path / "out",
        "--separate",
        *extra,
    )
    axes, transforms, channels = _multiscales(tmp_path / "out" / "cells.ome_pool-max-f2-s2.zarr")
    assert axes == [
        {"name": "c", "type": "channel"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"},
    ]
    # Output pixel (0, 0) is the window over input pixels 0 and 1: centred on 0.5 of them;
    # level 1's pixel (0, 0) over level 0's first two: half a level-0 pixel further.
    assert transforms == [
        [
            {"type": "scale", "scale": [1.0, 1.0, 0.5]},
            {"type": "translation", "translation": [0.0, 0.25, 0.125]},
        ],
        [
            {"type": "scale", "scale": [1.0, 2.0, 1.0]},
            {"type": "translation", "translation": [0.0, 0.75, 0.375]},
        ],
    ]
    assert channels == [("R", [0, 255]), ("G", [0, 255]), ("B", [0, 255])]
    axes, transforms, channels = _multiscales(tmp_path / "out" / "cells.ome_pool-max-f2-s2-G.zarr")
    assert [a["unit"] for a in axes] == ["micrometer", "micrometer"] and channels is None
    assert transforms[0] == [
        {"type": "scale", "scale": [1.0, 0.5]},
        {"type": "translation", "translation": [0.25, 0.125]},
    ]


def test_a_valid_convolution_moves_the_origin_as_the_georeference(tmp_path, colour):
    """No padding: output pixel (0, 0) is the 3x3 window's centre, input pixel (1, 1)."""
    source = _ome_tiff(tmp_path / "cells.ome.tif", colour[..., 0], x=2.0, y=3.0, unit="nm")
    ok(
        "conv",
        "-k",
        "gaussian-3x3",
        "--pad",
        "valid",
        "--format",
        "zarr",
        source,
        "-o",
        tmp_path / "out",
    )
    (store,) = (tmp_path / "out").glob("*.zarr")
    axes, transforms, _ = _multiscales(store)
    assert [a["unit"] for a in axes] == ["nanometer", "nanometer"]
    assert transforms[0] == [
        {"type": "scale", "scale": [3.0, 2.0]},
        {"type": "translation", "translation": [3.0, 2.0]},
    ]
    ok("pool", "--size", "2", "--format", "zarr", store, "-o", tmp_path / "again")
    (again,) = (tmp_path / "again").glob("*.zarr")
    assert _multiscales(again)[1][0] == [
        {"type": "scale", "scale": [6.0, 4.0]},
        {"type": "translation", "translation": [4.5, 3.0]},
    ]
    ok("pool", "--size", "2", "--format", "tiff", store, "-o", tmp_path / "back.ome.tif")
    assert _ome_sizes(tmp_path / "back.ome.tif") == [(4.0, 6.0, "nm", "nm")]


def test_a_format_that_holds_none_says_so_once_a_run(tmp_path, colour):
    _ome_tiff(tmp_path / "a.ome.tif", colour[:64, :64])
    _ome_tiff(tmp_path / "b.ome.tif", colour[64:128, :64])
    result = ok(
        "pool",
        tmp_path / "a.ome.tif",
        tmp_path / "b.ome.tif",
        "-o",
        tmp_path / "out",
        "--format",
        "png",
    )
    assert result.stderr.count("physical pixel size not kept: png outputs hold none") == 1
    assert "physical_size" not in json.dumps(_kept(tmp_path / "out"))


def test_the_physical_size_moves_to_the_output_grid():
    size = PhysicalSize(0.25, 0.5)
    assert size.on_grid(1, 0.0, 0.0) == size  # conv, stride 1, "same"
    assert size.on_grid(2, 0.0, 0.0) == PhysicalSize(0.5, 1.0, origin=(0.25, 0.125))
    assert size.on_grid(1, -4.0, -2.0).origin == (-2.0, -0.5)  # pad 4 above, 2 left
    assert size.on_grid(2, 0, 0).transformations(2, False) == [
        {"type": "scale", "scale": [4.0, 2.0]},
        {"type": "translation", "translation": [1.75, 0.875]},
    ]


def _transformations(scale, translation) -> list[dict]:
    return [
        {"type": "scale", "scale": scale},
        {"type": "translation", "translation": translation},
    ]


def _ome_image(unit: str, scale, translation) -> dict:
    """An OME-Zarr image's ``multiscales`` entry: y and x in `unit`, level 0 at `scale` and
    `translation`."""
    return {
        "axes": [{"name": "y", "unit": unit}, {"name": "x", "unit": unit}],
        "datasets": [
            {"path": "0", "coordinateTransformations": _transformations(scale, translation)}
        ],
    }


def test_units_and_ome_xml_are_read():
    assert unit_symbol("micrometer") == unit_symbol("um") == unit_symbol("\u03bcm") == MICRO
    xml = (
        '<OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06"><Image ID="Image:0">'
        '<Pixels ID="Pixels:0" PhysicalSizeX="0.1" PhysicalSizeY="0.2" '
        'PhysicalSizeYUnit="nm"/></Image></OME>'
    )
    assert physical_size(xml) == PhysicalSize(0.1, 0.2, MICRO, "nm")
    assert physical_size("<OME><Image><Pixels/></Image></OME>") is None
    assert physical_size("not xml") is None
    image = _ome_image("millimeter", [2.0, 1.0], [5.0, 6.0])
    assert physical_of(image) == PhysicalSize(1.0, 2.0, "mm", "mm", (5.0, 6.0))
    assert (
        physical_of(
            {
                "axes": ["y", "x"],
                "datasets": [
                    {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}
                ],
            }
        )
        is None
    )


def test_an_ome_zarr_images_own_transformations_apply_after_its_levels():
    """OME-NGFF: the image's own scale and translation apply after level 0's, so a pixel's
    size is their product, and its place level 0's translation scaled, then moved."""
    image = _ome_image("micrometer", [2.0, 1.0], [4.0, 8.0])
    image["coordinateTransformations"] = _transformations([0.5, 0.25], [100.0, 200.0])
    # y: 0.5 * (2 * i + 4) + 100; x: 0.25 * (1 * j + 8) + 200.
    assert physical_of(image) == PhysicalSize(0.25, 1.0, MICRO, MICRO, (102.0, 202.0))
    del image["coordinateTransformations"][1]  # a scale alone
    assert physical_of(image) == PhysicalSize(0.25, 1.0, MICRO, MICRO, (2.0, 2.0))


def test_a_pooled_ome_zarr_of_image_wide_transformations_keeps_its_pixel_size(tmp_path):
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(tmp_path / "wide.zarr"), mode="w", zarr_format=2)
    group.create_array("0", data=np.arange(40 * 60, dtype=np.uint16).reshape(40, 60))
    axes = [{"name": n, "type": "space", "unit": "micrometer"} for n in "yx"]
    group.attrs["multiscales"] = [
        {
            "version": "0.4",
            "axes": axes,
            "datasets": [
                {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}
            ],
            "coordinateTransformations": [
                {"type": "scale", "scale": [0.5, 0.25]},
                {"type": "translation", "translation": [100.0, 200.0]},
            ],
        }
    ]
    ok(
        "pool",
        "--size",
        "2",
        "--format",
        "tiff",
        tmp_path / "wide.zarr",
        "-o",
        tmp_path / "p.ome.tif",
    )
    assert _ome_sizes(tmp_path / "p.ome.tif") == [(0.5, 1.0, MICRO, MICRO)]


@pytest.mark.parametrize(
    ("axes", "metadata", "said"),
    [
        (
            "CYX",
            {"Channel": {"Name": ["DAPI", "GFP", "RFP"]}},
            ["OME plane order (C 3)", "OME channel names (DAPI, GFP, RFP)"],
        ),
        ("ZYX", {"PhysicalSizeZ": 2.0}, ["OME plane order (Z 3)", "OME Z spacing"]),
    ],
)
def test_what_an_ome_tiffs_planes_carry_beyond_the_pixel_size_is_said_not_kept(
    tmp_path, axes, metadata, said
):
    """Its planes are written as separate images, their channel names and Z spacing lost:
    nothing said it but the pixel size kept."""
    planes = np.random.default_rng(0).integers(0, 4000, (3, 40, 60), dtype=np.uint16)
    source = tmp_path / "s.ome.tif"
    options = {"axes": axes, "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5, **metadata}
    tifffile.imwrite(source, planes, ome=True, photometric="minisblack", metadata=options)
    for frames in ("all", "0", "2"):  # a later plane alone is as much the file's as the first
        out = tmp_path / f"out-{frames}"
        result = ok("pool", "--size", "2", "--frames", frames, source, "-o", out, "-v")
        for what in said:
            assert f"convcli: {what} not kept: convcli writes none" in result.stderr
