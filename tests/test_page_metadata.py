"""Each page of a multi-page TIFF keeps its own metadata (a fax's pages may each have a
resolution of their own), whether tifffile or Pillow reads the page."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from helpers import manifest_records, ok
from PIL import Image, ImageCms


def _pages(path, *, orientation: int = 1):
    """Three 60x40 RGB pages at 72, 144 and 216 dpi, each with a description and an artist of
    its own, an sRGB profile on the first alone; with `orientation` (6: Pillow reads them)."""
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    rng = np.random.default_rng(9)
    with tifffile.TiffWriter(path) as tif:
        for k in range(3):
            tags = [(315, "s", 0, f"artist{k}", True), (274, "H", 1, orientation, True)]
            tags += [(34675, 7, len(icc), icc, True)] if k == 0 else []
            tif.write(
                rng.integers(0, 256, (40, 60, 3), dtype=np.uint8),
                photometric="rgb",
                resolution=(72 * (k + 1), 72 * (k + 1)),
                resolutionunit="INCH",
                description=f"page {k}",
                metadata=None,
                extratags=tags,
            )
    return path


@pytest.mark.parametrize("orientation", [1, 6])
def test_a_multipage_tiffs_pages_keep_their_own_metadata_in_a_tiff(tmp_path, orientation):
    source = _pages(tmp_path / "fax.tif", orientation=orientation)
    ok("pool", "--format", "tiff", source, "-o", tmp_path)
    with tifffile.TiffFile(tmp_path / "fax_pool-max-f2-s2.tiff") as tif:
        assert len(tif.pages) == 3
        for k, page in enumerate(tif.pages):
            assert page.tags["XResolution"].value == (36 * (k + 1), 1)
            assert page.tags["ImageDescription"].value == f"page {k}"
            assert page.tags["Artist"].value == f"artist{k}"
            assert ("InterColorProfile" in page.tags) == (k == 0)
            assert page.tags.valueof(274, 1) == 1  # written upright
            assert page.shape[:2] == ((20, 30) if orientation == 1 else (30, 20))


@pytest.mark.parametrize("orientation", [1, 6])
def test_a_multipage_tiffs_frame_files_keep_their_pages_metadata(tmp_path, orientation):
    source = _pages(tmp_path / "fax.tif", orientation=orientation)
    ok("pool", "--format", "jpg", source, "-o", tmp_path)
    for k in range(3):
        with Image.open(tmp_path / f"fax_pool-max-f2-s2_f{k}.jpg") as im:
            assert im.info["dpi"] == (36 * (k + 1), 36 * (k + 1))
            assert ("icc_profile" in im.info) == (k == 0)
            exif = im.getexif()
            assert (exif[270], exif[315]) == (f"page {k}", f"artist{k}")
    records = {r["output"]: r for r in manifest_records(tmp_path)}
    assert records["fax_pool-max-f2-s2_f2.jpg"]["kept"]["dpi"] == [108.0, 108.0]
    assert "colour_profile" not in records["fax_pool-max-f2-s2_f2.jpg"]["kept"]


_UTM_KEYS = (1, 1, 0, 4, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633, 3076, 0, 1, 9001)


def test_pillow_read_pages_have_their_own_resolution_and_the_file_its_first_pages(tmp_path):
    """Pages that Pillow reads (turned by their Orientation): a page without a resolution has
    none, where Pillow keeps the page before's; the file's own is its first page's."""
    rng = np.random.default_rng(10)
    with tifffile.TiffWriter(tmp_path / "two.tif") as tif:
        for k, resolution in enumerate(((300, 300), None)):
            tif.write(
                rng.integers(0, 256, (40, 60, 3), dtype=np.uint8),
                photometric="rgb",
                metadata=None,
                resolution=resolution,
                resolutionunit="INCH" if resolution else "NONE",
                extratags=[(274, "H", 1, 6, True), (315, "s", 0, f"artist{k}", True)],
            )
    ok("pool", "--format", "jpg", tmp_path / "two.tif", "-o", tmp_path / "jpg")
    with Image.open(tmp_path / "jpg" / "two_pool-max-f2-s2_f1.jpg") as im:
        assert im.info["jfif_unit"] == 0  # no density: not the first page's 150 dpi
        assert im.getexif()[315] == "artist1"
    result = ok("pool", "-v", "--format", "png", tmp_path / "two.tif", "-o", tmp_path / "png")
    assert "150x150 dpi" in result.stderr  # the first page's, pooled
    with Image.open(tmp_path / "png" / "two_pool-max-f2-s2.png") as im:
        assert im.getexif()[315] == "artist0"
        assert tuple(round(d) for d in im.info["dpi"]) == (150, 150)


def test_what_a_later_page_loses_is_said_too(tmp_path):
    """Only the second page is placed on the ground: a PNG of the stack cannot hold that."""
    rng = np.random.default_rng(11)
    geo = [
        (33550, "d", 3, (10.0, 10.0, 0.0), True),
        (33922, "d", 6, (0, 0, 0, 500000.0, 4000000.0, 0), True),
        (34735, "H", len(_UTM_KEYS), _UTM_KEYS, True),
    ]
    with tifffile.TiffWriter(tmp_path / "scenes.tif") as tif:
        for tags in ([], geo):
            tif.write(rng.integers(0, 256, (40, 60), dtype=np.uint8), extratags=tags)
    said = ok("pool", "--format", "png", tmp_path / "scenes.tif", "-o", tmp_path).stderr
    line = "convcli: georeference not kept: png outputs hold none (tiff and zarr outputs do)"
    assert said.splitlines().count(line) == 1


def test_an_ome_tiff_stacks_pages_all_keep_its_physical_pixel_size(tmp_path):
    stack = np.random.default_rng(12).integers(0, 256, (3, 40, 60), dtype=np.uint8)
    metadata = {"axes": "ZYX", "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5}
    tifffile.imwrite(tmp_path / "cells.ome.tif", stack, ome=True, metadata=metadata)
    ok("pool", tmp_path / "cells.ome.tif", "-o", tmp_path / "out.ome.tiff")
    with tifffile.TiffFile(tmp_path / "out.ome.tiff") as tif:
        xml = tif.ome_metadata
    assert xml.count('PhysicalSizeX="1.0"') == 3, xml
