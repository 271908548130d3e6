"""GeoTIFFs placed on the ground otherwise than by a pixel scale and one tiepoint (a
transformation matrix, control points), and GDAL's nodata value in a TIFF with no
georeference: kept, moved with the output's pixel grid, and the nodata pixels left out."""

from __future__ import annotations

import json
import shutil
import subprocess
from xml.etree import ElementTree

import numpy as np
import pytest
import tifffile
from helpers import ok

from convcli.io.geotags import GeoTags
from convcli.io.images import open_image, read_stack

# UTM 33N, PixelIsArea.
_KEYS = (1, 1, 0, 4, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633, 3076, 0, 1, 9001)
# A grid turned and sheared, as GDAL writes a geotransform (500000, 10, 1, 4000000, 1, -10):
# ground x = 500000 + 10 i + 1 j, y = 4000000 + 1 i - 10 j, for the raster's column i, row j.
_MATRIX = (10.0, 1.0, 0.0, 500000.0, 1.0, -10.0, 0.0, 4000000.0) + (0.0,) * 7 + (1.0,)


def _tiff(path, values, *tags):
    tifffile.imwrite(path, values, extratags=list(tags))
    return path


def _ground(matrix, i, j):
    m = np.asarray(matrix).reshape(4, 4)
    return tuple((m @ [i, j, 0.0, 1.0])[:2])


def _pooled(tmp_path, source, *options):
    ok("pool", "--mode", "average", "--format", "tiff", source, "-o", tmp_path / "out", *options)
    (written,) = (tmp_path / "out").glob("*.tiff")
    with tifffile.TiffFile(written) as tif:
        return written, tif.pages[0].asarray(), {k: t.value for k, t in tif.pages[0].tags.items()}


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_a_turned_grid_keeps_its_place_and_its_nodata_is_left_out(tmp_path, memory):
    values = np.full((200, 300), 100, np.uint8)
    values[0, 0] = 0  # missing
    values[10:12, 20:22] = [[0, 50], [60, 70]]
    source = _tiff(
        tmp_path / "turned.tif",
        values,
        (34264, "d", 16, _MATRIX, True),
        (34735, "H", len(_KEYS), _KEYS, True),
        (42113, "s", 0, "0", True),
    )
    _, got, tags = _pooled(tmp_path, source, *(["--memory", memory] if memory else []))
    assert got[0, 0] == 100  # the valid three of its window, not 75
    assert got[5, 10] == 60  # (50 + 60 + 70) / 3
    assert tags[42113] == "0" and tags[34735] == _KEYS
    # Output pixel (i, j) covers input pixels 2i, 2j on: the same corners on the ground.
    matrix = tags[34264]
    for i, j in ((0, 0), (1, 0), (0, 1), (149, 99)):
        assert _ground(matrix, i, j) == pytest.approx(_ground(_MATRIX, 2 * i, 2 * j))


@pytest.mark.skipif(shutil.which("gdalinfo") is None, reason="GDAL's gdalinfo")
def test_gdal_reads_the_turned_grid_of_a_pooled_output(tmp_path):
    values = np.arange(64 * 48, dtype=np.float32).reshape(48, 64)
    source = _tiff(
        tmp_path / "turned.tif",
        values,
        (34264, "d", 16, _MATRIX, True),
        (34735, "H", len(_KEYS), _KEYS, True),
    )
    written, _, _ = _pooled(tmp_path, source, "--size", "4")
    info = json.loads(
        subprocess.run(
            ["gdalinfo", "-json", str(written)], check=True, capture_output=True, text=True
        ).stdout
    )
    assert info["geoTransform"] == pytest.approx([500000, 40, 4, 4000000, 4, -40])
    assert "32633" in info["coordinateSystem"]["wkt"]


def test_control_points_move_with_the_output_pixels(tmp_path):
    points = (0, 0, 0, 500000, 4000000, 0) + (63, 0, 0, 500630, 4000000, 0)
    points += (0, 47, 0, 500000, 3999530, 0)
    source = _tiff(
        tmp_path / "gcps.tif",
        np.zeros((48, 64), np.uint8),
        (33922, "d", len(points), points, True),
        (34735, "H", len(_KEYS), _KEYS, True),
    )
    _, _, tags = _pooled(tmp_path, source)
    got = np.reshape(tags[33922], (-1, 6))
    np.testing.assert_allclose(got[:, :2], [[0, 0], [31.5, 0], [0, 23.5]])
    np.testing.assert_allclose(got[:, 3:5], np.reshape(points, (-1, 6))[:, 3:5])
    assert 33550 not in tags and 34264 not in tags


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_gdal_nodata_alone_is_kept_and_left_out(tmp_path, memory):
    """A TIFF with GDAL's nodata value and no georeference: GDAL honours it, so does
    convcli; a PNG output says it is not kept."""
    values = np.full((100, 80), 100, np.uint8)
    values[0, 0] = 0
    source = _tiff(tmp_path / "plain.tif", values, (42113, "s", 0, "0", True))
    _, got, tags = _pooled(tmp_path, source, *(["--memory", memory] if memory else []))
    assert got[0, 0] == 100 and tags[42113] == "0"
    assert not {33550, 33922, 34264, 34735} & set(tags)
    result = ok("pool", "--format", "png", source, "-o", tmp_path / "png", "-v")
    assert "nodata value not kept: png outputs hold none (tiff and zarr outputs do)" in (
        result.stderr
    )
    assert "georeference" not in result.stderr


_GDAL_METADATA = """<GDALMetadata>
  <Item name="STATISTICS_MEAN" sample="0">1234</Item>
  <Item name="OFFSET" sample="0" role="offset">5</Item>
  <Item name="SCALE" sample="0" role="scale">0.01</Item>
  <Item name="UNITTYPE" sample="0" role="unittype">metre</Item>
</GDALMetadata>"""


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_the_scale_and_offset_of_values_stay_with_them(tmp_path, memory):
    """An Int16 DEM in centimetres above 5 m (GDAL's scale 0.01, offset 5): outputs of its
    values (pool, a blur) keep the scale, offset and unit, not its statistics; an edge map,
    whose values are no heights, keeps none."""
    values = np.random.default_rng(3).integers(-3000, 30000, (400, 300)).astype(np.int16)
    source = _tiff(
        tmp_path / "dem.tif",
        values,
        (33550, "d", 3, (10.0, 10.0, 0.0), True),
        (33922, "d", 6, (0, 0, 0, 500000.0, 4000000.0, 0), True),
        (34735, "H", len(_KEYS), _KEYS, True),
        (42112, "s", 0, _GDAL_METADATA, True),
    )
    extra = ["--memory", memory] if memory else []
    out = tmp_path / "out"
    for command in (["pool"], ["conv", "-k", "gaussian-3x3"], ["conv", "-k", "sobel-x"]):
        result = ok(*command, "--format", "tiff", source, "-o", out, "-v", *extra)
        assert ("processed in strips" in result.stderr) == bool(memory)
    for name in ("dem_pool-max-f2-s2-L.tiff", "dem_conv-gaussian-3x3-sum.tiff"):
        with tifffile.TiffFile(out / name) as tif:
            metadata = tif.pages[0].tags[42112].value
        assert 'role="scale">0.01<' in metadata and 'role="offset">5<' in metadata
        assert 'role="unittype">metre<' in metadata and "STATISTICS" not in metadata
    with tifffile.TiffFile(out / "dem_conv-sobel-x-sum.tiff") as tif:
        assert 42112 not in tif.pages[0].tags and 34735 in tif.pages[0].tags
    records = [
        json.loads(line)
        for line in (out / "convcli-manifest.jsonl").read_text().split("\n")
        if line
    ]
    kept = [r["kept"].get("band_values") for r in records]
    assert kept == [[{"band": 0, "offset": 5.0, "scale": 0.01, "unittype": "metre"}]] * 2 + [None]


def _band_metadata(path) -> dict[int, dict[str, str]]:
    """GDAL_METADATA's band items of a TIFF, by sample: {sample: {role: text}}."""
    with tifffile.TiffFile(path) as tif:
        tag = tif.pages[0].tags.get(42112)
        if tag is None:
            return {}
        items = ElementTree.fromstring(tag.value).iter("Item")
    by_sample: dict[int, dict[str, str]] = {}
    for item in items:
        if item.get("role"):
            by_sample.setdefault(int(item.get("sample")), {})[item.get("role")] = item.text
    return by_sample


def _three_bands(path, scaled):
    """A 3-band uint16 TIFF with GDAL's scale and offset for the bands in `scaled`."""
    items = "".join(
        f'<Item name="SCALE" sample="{band}" role="scale">{scale}</Item>'
        f'<Item name="OFFSET" sample="{band}" role="offset">{offset}</Item>'
        for band, (scale, offset) in scaled.items()
    )
    values = np.random.default_rng(5).integers(0, 1000, (300, 400, 3)).astype(np.uint16)
    tifffile.imwrite(
        path,
        values,
        photometric="rgb",
        extratags=[(42112, "s", 0, f"<GDALMetadata>{items}</GDALMetadata>", True)],
    )
    return path


_BANDS = {0: ("0.01", "5"), 1: ("0.5", "-3"), 2: ("2", "1")}


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
def test_each_band_file_keeps_its_own_bands_scale_and_offset(tmp_path, memory):
    """pool --separate and conv --channels each of a 3-band TIFF with a scale and offset for
    each band: each channel's file holds that band's values, and gets that band's scale and
    offset as its own (sample 0); the whole image and the colour result keep all three."""
    source = _three_bands(tmp_path / "bands.tif", _BANDS)
    out = tmp_path / "out"
    extra = ["--memory", memory] if memory else []
    for command in (["pool", "--separate"], ["conv", "-k", "box-blur", "--channels", "each"]):
        result = ok(*command, "--format", "tiff", source, "-o", out, "-v", *extra)
        assert ("processed in strips" in result.stderr) == bool(memory)
    expected = {band: {"scale": s, "offset": o} for band, (s, o) in _BANDS.items()}
    for tag in ("pool-max-f2-s2", "conv-box-blur"):
        for band, name in enumerate("RGB"):
            assert _band_metadata(out / f"bands_{tag}-{name}.tiff") == {0: expected[band]}
    assert _band_metadata(out / "bands_pool-max-f2-s2.tiff") == expected
    assert _band_metadata(out / "bands_conv-box-blur-each.tiff") == expected
    records = {
        r["output"]: r["kept"].get("band_values")
        for r in map(json.loads, (out / "convcli-manifest.jsonl").read_text().splitlines())
    }
    assert records["bands_pool-max-f2-s2-G.tiff"] == [{"band": 0, "offset": -3.0, "scale": 0.5}]
    assert len(records["bands_conv-box-blur-each.tiff"]) == 3


def test_a_sum_of_bands_keeps_no_bands_scale(tmp_path):
    """conv --channels sum of a 3-band TIFF whose first band alone has a scale and offset:
    the map holds R + G + B, none of which the first band's scale describes, and is written
    without it, and -v does not say it kept one; --channels each gives R's file R's."""
    source = _three_bands(tmp_path / "first.tif", {0: _BANDS[0]})
    out = tmp_path / "out"
    blur = ("conv", "-k", "box-blur", "--format", "tiff", source, "-o", out, "-v")
    summed = ok(*blur, "--normalize", "none")
    assert _band_metadata(out / "first_conv-box-blur-none-sum.tiff") == {}
    assert "value scale" not in summed.stderr
    each = ok(*blur, "--channels", "each")
    assert "kept: value scale and offset" in each.stderr
    assert _band_metadata(out / "first_conv-box-blur-R.tiff") == {
        0: {"scale": "0.01", "offset": "5"}
    }
    assert _band_metadata(out / "first_conv-box-blur-G.tiff") == {}


@pytest.mark.parametrize(
    ("model", "codes", "crs"),
    [
        (1, {2048: 4326, 3072: 32633}, "EPSG:32633"),  # projected, with its base's code too
        (2, {2048: 4326}, "EPSG:4326"),
        (1, {2048: 4326, 3072: 32767}, None),  # a projection the file defines itself
    ],
)
def test_the_coordinate_system_is_the_one_the_model_type_names(tmp_path, model, codes, crs):
    keys = [1, 1, 0, 1 + len(codes), 1024, 0, 1, model]
    for key, code in sorted(codes.items()):
        keys += [key, 0, 1, code]
    source = _tiff(
        tmp_path / "placed.tif",
        np.zeros((40, 60), np.uint8),
        (33550, "d", 3, (10.0, 10.0, 0.0), True),
        (33922, "d", 6, (0, 0, 0, 500000.0, 4600000.0, 0), True),
        (34735, "H", len(keys), tuple(keys), True),
    )
    _pooled(tmp_path, source)
    lines = (tmp_path / "out" / "convcli-manifest.jsonl").read_text().splitlines()
    (record,) = map(json.loads, lines)
    assert record["kept"]["crs"] == crs


def test_the_manifest_records_the_grid_as_the_file_gives_it():
    turned = GeoTags(keys=_KEYS, matrix=_MATRIX, nodata="-9999")
    assert turned.record() == {
        "crs": "EPSG:32633",
        "transformation": list(_MATRIX),
        "nodata": -9999,
    }
    assert turned.geotransform() == [500000.0, 10.0, 1.0, 4000000.0, 1.0, -10.0]
    assert GeoTags(nodata="0").record() == {"nodata": 0.0}
    assert GeoTags(keys=_POINT_KEYS, matrix=_MATRIX).record()["area_or_point"] == "Point"
    assert GeoTags(nodata="0").geotransform() is None


# UTM 33N, PixelIsPoint: the raster coordinates name pixels' centres.
_POINT_KEYS = (1, 1, 0, 4, 1024, 0, 1, 1, 1025, 0, 1, 2, 3072, 0, 1, 32633, 3076, 0, 1, 9001)


def test_the_geotransform_of_pixel_centres_is_of_the_corner_as_gdal_reads_it():
    # gdalinfo reads these two files' geotransforms as (499990, 20, 0, 4600010, 0, -20)
    # and (499994.5, 10, 1, 4000004.5, 1, -10): half a pixel up and left of the centre.
    scaled = GeoTags((20.0, 20.0, 0.0), (0.0, 0.0, 0.0, 500000.0, 4600000.0, 0.0), _POINT_KEYS)
    assert scaled.geotransform() == [499990.0, 20.0, 0.0, 4600010.0, 0.0, -20.0]
    turned = GeoTags(keys=_POINT_KEYS, matrix=_MATRIX)
    assert turned.geotransform() == [499994.5, 10.0, 1.0, 4000004.5, 1.0, -10.0]


def test_a_zarr_store_of_pixel_centres_says_the_corner_of_its_first_pixel(tmp_path):
    zarr = pytest.importorskip("zarr")
    source = _tiff(
        tmp_path / "points.tif",
        np.arange(60 * 40, dtype=np.float32).reshape(60, 40),
        (33550, "d", 3, (20.0, 20.0, 0.0), True),
        (33922, "d", 6, (0.0, 0.0, 0.0, 500000.0, 4600000.0, 0.0), True),
        (34735, "H", len(_POINT_KEYS), _POINT_KEYS, True),
    )
    ok("pool", "--size", "2", "--format", "zarr", source, "-o", tmp_path / "out")
    (store,) = (tmp_path / "out").glob("*.zarr")
    geo = zarr.open_group(str(store), mode="r").attrs["georeference"]
    # The first output pixel spans input pixels 0 and 1: its corner is the input's corner,
    # 10 m up and left of input pixel (0, 0)'s centre; its centre is the tiepoint's.
    assert geo["geotransform"] == [499990.0, 40.0, 0.0, 4600010.0, 0.0, -40.0]
    assert geo["tiepoint"] == [0.0, 0.0, 0.0, 500010.0, 4599990.0, 0.0]
    assert geo["area_or_point"] == "Point"  # the tiepoint names a pixel's centre


def _palette_geotiff(path, *, orientation=1, nodata=None):
    """A palette GeoTIFF (a classified map: Pillow reads it), 10 m pixels from (500000,
    4000000); its colours 0-3 red, green, blue, white."""
    index = np.random.default_rng(6).integers(0, 4, (20, 30), dtype=np.uint8)
    colormap = np.zeros((3, 256), np.uint16)
    colormap[:, :4] = np.array([[65535, 0, 0, 65535], [0, 65535, 0, 65535], [0, 0, 65535, 65535]])
    tags = [
        (33550, "d", 3, (10.0, 10.0, 0.0), True),
        (33922, "d", 6, (0.0, 0.0, 0.0, 500000.0, 4000000.0, 0.0), True),
        (34735, "H", len(_KEYS), _KEYS, True),
    ]
    tags += [(274, "H", 1, orientation, True)] * (orientation != 1)
    tags += [(42113, "s", 0, nodata, True)] * (nodata is not None)
    tifffile.imwrite(path, index, photometric="palette", colormap=colormap, extratags=tags)
    return path, index


def test_a_palette_geotiffs_georeference_is_kept(tmp_path):
    """A palette page is read by Pillow, whose path kept no georeference, without a word."""
    source, index = _palette_geotiff(tmp_path / "classes.tif")
    written, got, tags = _pooled(tmp_path, source, "--size", "2")
    assert got.shape == (10, 15, 3)
    assert tags[33550] == (20.0, 20.0, 0.0)  # two pixels a side
    assert tags[33922][3:5] == (500000.0, 4000000.0) and tags[34735] == _KEYS
    expected = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]]
    np.testing.assert_array_equal(
        got[0, 0], np.mean([expected[k] for k in index[:2, :2].ravel()], 0).round()
    )


def test_a_palette_geotiffs_nodata_index_is_not_applied_to_its_colours_and_said(tmp_path):
    source, _ = _palette_geotiff(tmp_path / "classes.tif", nodata="0")
    result = ok("pool", "--size", "2", "--format", "tiff", source, "-o", tmp_path / "out", "-v")
    assert "its nodata value not kept: its palette is read as colours" in result.stderr
    with tifffile.TiffFile(next((tmp_path / "out").glob("*.tiff"))) as tif:
        tags = tif.pages[0].tags
        assert 42113 not in tags and tags[33550].value == (20.0, 20.0, 0.0)


def test_a_turned_palette_geotiff_says_its_georeference_is_not_kept(tmp_path):
    source, _ = _palette_geotiff(tmp_path / "classes.tif", orientation=6)
    result = ok("pool", "--size", "1", "--format", "tiff", source, "-o", tmp_path / "out", "-v")
    assert "its georeference not kept: it places the pixels as stored" in result.stderr
    with tifffile.TiffFile(next((tmp_path / "out").glob("*.tiff"))) as tif:
        assert tif.pages[0].shape[:2] == (30, 20)  # upright
        assert 33922 not in tif.pages[0].tags and 34735 not in tif.pages[0].tags


def test_a_cmyk_geotiffs_nodata_value_is_not_put_on_its_rgb(tmp_path):
    """Inks 0 (the nodata value) read as white, full black as 0: the value would mark the
    valid black pixels missing and the missing ones valid."""
    inks = np.zeros((4, 4, 4), np.uint8)
    inks[:, 2:, 3] = 255
    tags = [
        (33550, "d", 3, (10.0, 10.0, 0.0), True),
        (33922, "d", 6, (0.0, 0.0, 0.0, 500000.0, 4000000.0, 0.0), True),
        (34735, "H", len(_KEYS), _KEYS, True),
        (42113, "s", 0, "0", True),
    ]
    source = tmp_path / "cmyk.tif"
    tifffile.imwrite(source, inks, photometric="separated", extratags=tags)
    result = ok("pad", "--pad", "1", "--format", "tiff", source, "-o", tmp_path / "out", "-v")
    assert "its nodata value not kept: its CMYK is read as RGB" in result.stderr
    with tifffile.TiffFile(next((tmp_path / "out").glob("*.tiff"))) as tif:
        tags = tif.pages[0].tags
        assert 42113 not in tags and tags[33922].value[3:5] == (499990.0, 4000010.0)


def test_a_turned_palette_page_of_a_stack_says_its_georeference_is_not_kept(tmp_path):
    """Pillow turns a page upright in load(), which forgets its Orientation: the note is
    taken before. The upright page keeps its georeference."""
    path, index = _palette_geotiff(tmp_path / "pages.tif")
    with tifffile.TiffFile(path) as tif:
        colormap, tags = tif.pages[0].colormap, tif.pages[0].tags
        geo = [
            (code, tags[code].dtype, tags[code].count, tags[code].value, True)
            for code in (33550, 33922, 34735)
        ]
    with tifffile.TiffWriter(path, append=True) as tif:
        tif.write(
            index,
            photometric="palette",
            colormap=colormap,
            extratags=[*geo, (274, "H", 1, 6, True)],
        )
    with open_image(str(path)) as source:
        (upright, _), (turned, _) = source.read_frames((0, 1))
    assert upright.carried.geo.placed and not upright.notes
    assert turned.pixels.shape[:2] == (30, 20) and turned.carried.geo is None
    assert turned.notes == (
        "its georeference not kept: it places the pixels as stored, which its Orientation turns",
    )


def test_an_animated_webp_with_unreadable_exif_is_read(tmp_path):
    """Only a TIFF's frames are asked for their georeference: another's EXIF is not read."""
    from PIL import Image

    frames = [Image.new("RGB", (8, 8), (40 * k, 0, 0)) for k in range(3)]
    path = tmp_path / "a.webp"
    frames[0].save(
        path,
        save_all=True,
        append_images=frames[1:],
        lossless=True,
        exif=b"Exif\x00\x00garbagegarbage",
    )
    stack = read_stack(str(path))
    assert stack.pixels.shape == (3, 8, 8, 3)
    np.testing.assert_array_equal(stack.pixels[:, 0, 0, 0], [0, 40, 80])


@pytest.mark.parametrize("photometric", ["minisblack", "palette"])
def test_one_frame_of_a_stack_keeps_its_own_pages_georeference(tmp_path, photometric):
    """--frames 1 wrote the first page's georeference on the second page's pixels."""
    path = tmp_path / "pages.tif"
    index = np.random.default_rng(8).integers(0, 4, (20, 30), dtype=np.uint8)
    colours = {"colormap": np.tile(np.arange(256, dtype=np.uint16) * 257, (3, 1))}
    colours = colours if photometric == "palette" else {}
    with tifffile.TiffWriter(path) as tif:
        for size, x in ((10.0, 500000.0), (20.0, 600000.0)):
            geo = [
                (33550, "d", 3, (size, size, 0.0), True),
                (33922, "d", 6, (0.0, 0.0, 0.0, x, 4000000.0, 0.0), True),
                (34735, "H", len(_KEYS), _KEYS, True),
            ]
            tif.write(
                index,
                photometric=photometric,
                extratags=geo,
                **colours,
            )
    ok("pool", "--size", "2", "--frames", "1", "--format", "tiff", path, "-o", tmp_path / "out")
    with tifffile.TiffFile(next((tmp_path / "out").glob("*.tiff"))) as tif:
        tags = tif.pages[0].tags
        assert tags[33550].value == (40.0, 40.0, 0.0)
        assert tags[33922].value[3:5] == (600000.0, 4000000.0)


def test_a_lost_scale_and_offset_is_said_beside_a_lost_nodata_value(tmp_path):
    """An Int16 file of centimetres (scale 0.01, offset 5) with nodata 0, written as npy:
    the line named the nodata value alone, and the scale's loss went unsaid."""
    metadata = (
        '<GDALMetadata><Item name="SCALE" sample="0" role="scale">0.01</Item>'
        '<Item name="OFFSET" sample="0" role="offset">5</Item></GDALMetadata>'
    )
    source = tmp_path / "dem.tif"
    stored = np.arange(600, dtype=np.int16).reshape(20, 30)
    tifffile.imwrite(
        source, stored, extratags=[(42112, "s", 0, metadata, True), (42113, "s", 0, "0", True)]
    )
    result = ok("pool", "--size", "2", "--format", "npy", source, "-o", tmp_path / "out")
    assert result.stderr.splitlines()[0] == (
        "convcli: nodata value and value scale and offset not kept: npy outputs hold none "
        "(tiff and zarr outputs do)"
    )


@pytest.mark.parametrize("photometric", ["minisblack", "palette"])
def test_gdal_metadata_no_output_keeps_is_said(tmp_path, photometric):
    """A dataset's items of GDAL_METADATA (its source, GDAL's copies of a JPEG's EXIF) went
    without a word; a band's scale and offset are kept, as before."""
    metadata = (
        '<GDALMetadata><Item name="SOURCE">Sentinel2</Item><Item name="EXIF_Make">Cam</Item>'
        '<Item name="SCALE" sample="0" role="scale">0.5</Item></GDALMetadata>'
    )
    colours = {"colormap": np.zeros((3, 256), np.uint16)} if photometric == "palette" else {}
    source = tmp_path / "g.tif"
    tifffile.imwrite(
        source,
        np.zeros((20, 30), np.uint8),
        photometric=photometric,
        extratags=[(42112, "s", 0, metadata, True)],
        **colours,
    )
    result = ok("pool", "--size", "2", "--format", "tiff", source, "-o", tmp_path / "out", "-v")
    assert "GDAL metadata (SOURCE, EXIF_Make) not kept: convcli writes none" in result.stderr
