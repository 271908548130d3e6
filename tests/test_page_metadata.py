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
