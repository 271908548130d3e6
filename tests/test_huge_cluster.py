"""One image over the memory budget on a real Dask cluster: band tasks, the local run's values."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import tifffile
from helpers import assert_same_file, names, run
from PIL import Image

distributed = pytest.importorskip("distributed")
zarr = pytest.importorskip("zarr")

pytestmark = pytest.mark.cluster

SAMPLES = __import__("pathlib").Path(__file__).parents[1] / "sample_images"


@pytest.fixture(scope="module")
def tiffs(tmp_path_factory):
    """A tiled RGB TIFF (700 x 500) and a stripped grey one of an odd height (2101 x 200)."""
    folder = tmp_path_factory.mktemp("tiffs")
    rgb = np.asarray(Image.open(SAMPLES / "astronaut.png").convert("RGB"))
    tifffile.imwrite(
        folder / "rgb.tif",
        np.tile(rgb, (2, 1, 1))[:700, :500],
        tile=(256, 256),
        compression="zlib",
        photometric="rgb",
    )
    grey = np.asarray(Image.open(SAMPLES / "camera.png").convert("L"))
    tifffile.imwrite(folder / "grey.tif", np.tile(grey, (5, 1))[:2101, :200], rowsperstrip=64)
    return folder


def _on_cluster(cluster, *args):
    command = [
        sys.executable,
        "-m",
        "convcli",
        *map(str, args),
        "--scheduler",
        cluster.address,
        "-v",
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


def _records(folder):
    records = [
        json.loads(line) for line in (folder / "convcli-manifest.jsonl").read_text().splitlines()
    ]
    return sorted((dict(r, command="") for r in records), key=lambda r: r["output"])


def _tasks(stderr: str, name: str) -> int:
    line = next(line for line in stderr.splitlines() if f"{name}: done" in line)
    return int(line.split(", in ")[1].split()[0])


def test_band_tasks_write_the_local_runs_tiff_bytes(cluster, tiffs, tmp_path):
    command = [
        "conv",
        "-k",
        "sobel-x",
        "-k",
        "edge",
        "--channels",
        "gray",
        "--format",
        "tiff",
        "--memory",
        "1M",
        tiffs,
    ]
    assert run(*command, "-o", tmp_path / "local").exit_code == 0
    result = _on_cluster(cluster, *command, "-o", tmp_path / "remote")
    assert result.returncode == 0, result.stderr
    assert (_tasks(result.stderr, "rgb.tif"), _tasks(result.stderr, "grey.tif")) == (3, 4)
    assert names(tmp_path / "remote") == names(tmp_path / "local")
    for name in names(tmp_path / "local"):
        if name != "convcli-manifest.jsonl":
            assert_same_file(tmp_path / "remote" / name, tmp_path / "local" / name)
    assert _records(tmp_path / "remote") == _records(tmp_path / "local")


def test_workers_write_zarr_bands_into_a_folder_or_object_storage(
    cluster, tiffs, s3_server, s3_bucket, tmp_path
):
    """grey.tif to an S3 bucket (moto): 2 bands of 1024 rows, the workers write levels 0 to
    2 straight into the store there, the rest are made from level 2; rgb.tif to a folder:
    raw values, 2 bands of 256 rows. The local run's values at every level, bit for bit."""
    given = [
        arg for key, value in s3_server.items() for arg in ("--storage-option", f"{key}={value}")
    ]
    grey = [
        "conv",
        "-k",
        "edge",
        "--normalize",
        "robust",
        "--format",
        "zarr",
        "--memory",
        "1M",
        tiffs / "grey.tif",
    ]
    raw = [
        "conv",
        "-k",
        "vertical",
        "--normalize",
        "none",
        "--format",
        "zarr",
        "--memory",
        "1M",
        tiffs / "rgb.tif",
    ]
    for args, there in ((grey, [f"s3://{s3_bucket}/out", *given]), (raw, [tmp_path / "remote"])):
        assert run(*args, "-o", tmp_path / "local").exit_code == 0
        result = _on_cluster(cluster, *args, "-o", *there)
        assert result.returncode == 0, result.stderr
        assert _tasks(result.stderr, args[-1].name) == 2
    grey_store, raw_store = "grey_conv-edge-robust-sum.zarr", "rgb_conv-vertical-none-sum.zarr"
    stores = {
        grey_store: zarr.storage.FsspecStore.from_url(
            f"s3://{s3_bucket}/out/{grey_store}", storage_options=s3_server, read_only=True
        ),
        raw_store: str(tmp_path / "remote" / raw_store),
    }
    assert sorted(path.name for path in (tmp_path / "local").glob("*.zarr")) == sorted(stores)
    for name, store in stores.items():
        local = zarr.open_group(str(tmp_path / "local" / name), mode="r")
        remote = zarr.open_group(store, mode="r")
        assert dict(remote.attrs) == dict(local.attrs)
        assert sorted(remote.array_keys()) == sorted(local.array_keys())
        for key in local.array_keys():
            want, got = local[key][:], remote[key][:]
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # bits
    assert len(zarr.open_group(str(tmp_path / "local" / "grey_conv-edge-robust-sum.zarr"))) == 5
