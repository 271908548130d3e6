"""Which inputs the batch worker may read in strips: only TIFF files and Zarr stores.

Anything else is read whole without importing the strips' modules (tifffile
among them), which a worker process would otherwise import for every folder of
JPEGs (about 0.1 s a process).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from helpers import make_image

from convcli.app import process
from convcli.io import regions


def test_the_signatures_are_the_region_readers():
    assert process.starts_as_tiff is regions.starts_as_tiff


def test_only_tiffs_stores_and_unreadable_names_may_be_read_in_strips(tmp_path):
    tiff = tmp_path / "a.tif"
    tifffile.imwrite(tiff, np.zeros((4, 5), np.uint8))
    big = tmp_path / "big.tif"
    tifffile.imwrite(big, np.zeros((4, 5), np.uint8), bigtiff=True)
    png = make_image(tmp_path / "b.png")
    jpeg = make_image(tmp_path / "c.jpg")
    named_tif = tmp_path / "d.tif"  # a PNG by its bytes: read whole, as open_regions says
    named_tif.write_bytes(png.read_bytes())
    empty = tmp_path / "e.tif"
    empty.write_bytes(b"")
    for path in (tiff, big):
        assert process._may_be_read_in_strips(str(path))
        source = regions.open_regions(path)
        assert source is not None
        source.close()
    for path in (png, jpeg, named_tif, empty, tmp_path):
        assert not process._may_be_read_in_strips(str(path))
        assert regions.open_regions(path) is None
    assert process._may_be_read_in_strips(str(tmp_path / "missing.png"))  # open_regions reports
    assert process._may_be_read_in_strips(str(tmp_path / "s.zarr"))
    assert process._may_be_read_in_strips("s3://bucket/a.tif")


@pytest.mark.slow
def test_a_folder_of_jpegs_is_processed_without_importing_tifffile(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    make_image(folder / "a.jpg")
    make_image(folder / "b.png", seed=1)
    script = (
        "import sys\n"
        "from convcli.cli.main import main\n"
        "try:\n"
        f"    main(['conv', '-k', 'vertical', {str(folder)!r}, '-o', {str(tmp_path / 'out')!r},"
        " '-q', '--jobs', '1'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m in ('tifffile', 'convcli.io.regions')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == [
        "a_conv-vertical-sum.png",
        "b_conv-vertical-sum.png",
    ]
