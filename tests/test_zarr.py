"""Zarr stores in (arrays, OME-Zarr) and out (--format zarr): as the same pixels in TIFFs."""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest
import tifffile
from helpers import assert_one_line_error, hide_modules, names, ok, run
from PIL import Image

zarr = pytest.importorskip("zarr")

from convcli.io.row_writers import open_row_writer  # noqa: E402
from convcli.io.safeio import remove_stale_temporaries  # noqa: E402
from convcli.io.zarr_stores import level_sizes  # noqa: E402

SAMPLES = __import__("pathlib").Path(__file__).parents[1] / "sample_images"


def _rgb(height=700, width=600) -> np.ndarray:
    rgb = np.asarray(Image.open(SAMPLES / "astronaut.png").convert("RGB"))
    return np.tile(rgb, (2, 2, 1))[:height, :width]


def _ome(path, planes: np.ndarray, axes: str) -> None:
    """An OME-Zarr 0.4 image of `planes` with these axes, and a smaller level beside it."""
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    group.create_array("0", data=planes, chunks=planes.shape[:-2] + (128, 128))
    group.create_array("1", data=planes[..., ::2, ::2])
    group.attrs["multiscales"] = [
        {
            "version": "0.4",
            "axes": [
                {"name": a, "type": "channel" if a == "c" else "space" if a in "zyx" else "time"}
                for a in axes
            ],
            "datasets": [{"path": "0"}, {"path": "1"}],
        }
    ]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """The same pixels as a TIFF and as a Zarr store, in folders of their own (same stems)."""
    top = tmp_path_factory.mktemp("pairs")
    rgb = _rgb()
    grey = rgb[:, :, 1]
    deep = (grey.astype(np.uint16) * 257)[:300, :400]
    floats = (grey.astype(np.float32) / 100 - 0.5)[:333, :555]
    cases = {
        "rgb": (rgb, lambda p: zarr.create_array(str(p), data=rgb, chunks=(100, 256, 3))),
        "grey": (grey, lambda p: zarr.save_array(str(p), grey, zarr_format=2)),
        "deep": (deep, lambda p: zarr.save_array(str(p), deep)),
        "float": (floats, lambda p: zarr.save_array(str(p), floats)),
        "ome": (rgb, lambda p: _ome(p, np.moveaxis(rgb, 2, 0), "cyx")),
        "ome5": (
            grey,
            lambda p: _ome(p, np.stack([np.stack([grey, grey // 2])[None]] * 2), "tczyx"),
        ),
    }
    for name, (pixels, save) in cases.items():
        (top / name / "tiff").mkdir(parents=True)
        (top / name / "zarr").mkdir()
        tifffile.imwrite(
            top / name / "tiff" / "a.tif",
            pixels,
            tile=(256, 256),
            photometric="rgb" if pixels.ndim == 3 else "minisblack",
        )
        save(top / name / "zarr" / "a.zarr")
    return top


COMMANDS = [
    ["conv", "-k", "vertical"],
    ["conv", "-k", "vertical,horizontal", "--channels", "each", "--stride", "2"],
    ["conv", "-k", "edge", "--format", "npy"],
    ["pool", "--mode", "average", "--size", "3", "--pad", "1", "--format", "png"],
    ["pad", "--pad", "7,2,3,1", "--mode", "symmetric", "--format", "tiff"],
]


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:3]))
@pytest.mark.parametrize("case", ["rgb", "grey", "deep", "float", "ome", "ome5"])
def test_a_store_gives_the_outputs_of_the_same_pixels_in_a_tiff(
    pairs, tmp_path, case, command, memory, small_strips
):
    extra = ["--memory", memory, "-v"] if memory else []
    outputs = {}
    for kind, name in (("tiff", "a.tif"), ("zarr", "a.zarr")):
        result = run(*command, *extra, pairs / case / kind / name, "-o", tmp_path / kind)
        assert result.exit_code == 0, result.output
        assert ("processed in strips" in result.stderr) == bool(memory)
        outputs[kind] = tmp_path / kind
    assert names(outputs["zarr"]) == names(outputs["tiff"])
    for output in names(outputs["tiff"]):
        if output.endswith(".npy"):
            assert np.array_equal(
                np.load(outputs["zarr"] / output), np.load(outputs["tiff"] / output)
            )
        elif not output.endswith(".jsonl"):
            assert np.array_equal(
                _pixels(outputs["zarr"] / output), _pixels(outputs["tiff"] / output)
            ), output


def _pixels(path) -> np.ndarray:
    return tifffile.imread(path) if path.suffix == ".tiff" else np.asarray(Image.open(path))


def test_the_first_time_point_and_plane_are_read_with_a_note(pairs, tmp_path):
    result = run("pool", pairs / "ome5" / "zarr" / "a.zarr", "-o", tmp_path, "-v")
    assert result.exit_code == 0, result.output
    assert "used the first of 2 time points" in result.stderr
    assert "used the first of 2 planes" in result.stderr


def _level(store, index: int) -> np.ndarray:
    """Level `index` of a written store as (H, W) or (H, W, C)."""
    values = zarr.open_group(str(store), mode="r")[str(index)][:]
    return values if values.ndim == 2 else np.moveaxis(values, 0, 2)


OUTPUT_COMMANDS = [
    ["conv", "-k", "vertical"],
    ["conv", "-k", "vertical", "--normalize", "none"],
    ["conv", "-k", "sobel-x,sobel-y", "--channels", "each", "--normalize", "none"],
    ["pool", "--mode", "average", "--size", "2"],
]


@pytest.mark.parametrize("memory", [None, "4M"], ids=["whole", "strips"])
@pytest.mark.parametrize("command", OUTPUT_COMMANDS, ids=lambda c: " ".join(c))
def test_zarr_outputs_hold_the_tiff_outputs_values_and_their_levels(
    pairs, tmp_path, command, memory
):
    extra = ["--memory", memory] if memory else []
    source = pairs / "rgb" / "tiff" / "a.tif"
    for fmt in ("tiff", "zarr"):
        result = run(*command, *extra, "--format", fmt, source, "-o", tmp_path / fmt)
        assert result.exit_code == 0, result.output
    tiffs = [n for n in names(tmp_path / "tiff") if n.endswith(".tiff")]
    assert sorted(p.name for p in (tmp_path / "zarr").glob("*.zarr")) == [
        n[: -len("tiff")] + "zarr" for n in tiffs
    ]
    for name in tiffs:
        store = tmp_path / "zarr" / (name[: -len("tiff")] + "zarr")
        expected = tifffile.imread(tmp_path / "tiff" / name)
        assert np.array_equal(_level(store, 0), expected, equal_nan=True)
        sizes = level_sizes(*expected.shape[:2])
        assert len(sizes) > 1
        for index, size in enumerate(sizes):
            assert _level(store, index).shape[:2] == size
        if memory:  # the strips path's TIFF has the same reduced levels, as SubIFDs
            with tifffile.TiffFile(tmp_path / "tiff" / name) as tif:
                levels = tif.series[0].levels
                assert len(levels) == len(sizes)
                for index, level in enumerate(levels):
                    assert np.array_equal(_level(store, index), level.asarray(), equal_nan=True)


@pytest.mark.parametrize("memory", [None, "1M"], ids=["whole", "strips"])
@pytest.mark.parametrize("channels", [1, 3])
def test_chunk_files_written_here_are_the_bytes_zarr_writes(
    tmp_path, monkeypatch, small_strips, channels, memory
):
    """Every file of a store, edge chunks and reduced levels included, the same bytes as when
    zarr writes the chunks itself; and the values read back through zarr are the input's."""
    from convcli.io import zarr_stores

    shape = (700, 900) if channels == 1 else (700, 900, 3)
    values = np.random.default_rng(8).integers(0, 256, shape, np.uint8)
    tifffile.imwrite(
        tmp_path / "in.tif",
        values,
        tile=(64, 64),
        photometric="minisblack" if channels == 1 else "rgb",
    )
    extra = ["--memory", memory] if memory else []
    put, chunk_files = zarr_stores._ChunkFiles._put, []
    monkeypatch.setattr(
        zarr_stores._ChunkFiles,
        "_put",
        lambda self, key, data: chunk_files.append(key) or put(self, key, data),
    )
    ok(
        "pad",
        "--pad",
        "0",
        "--format",
        "zarr",
        tmp_path / "in.tif",
        "-o",
        tmp_path / "here",
        *extra,
    )
    assert len(chunk_files) >= 17  # 12 + 4 + 1 chunks of each store, written here
    monkeypatch.setattr(zarr_stores._ChunkFiles, "of", classmethod(lambda cls, array: None))
    ok(
        "pad",
        "--pad",
        "0",
        "--format",
        "zarr",
        tmp_path / "in.tif",
        "-o",
        tmp_path / "zarr",
        *extra,
    )
    store = "in_pad-constant-0-L.zarr" if channels == 1 else "in_pad-constant-0.zarr"
    here, there = tmp_path / "here" / store, tmp_path / "zarr" / store
    files = sorted(p.relative_to(here) for p in here.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(there) for p in there.rglob("*") if p.is_file())
    assert len(files) > 20
    for name in files:
        assert (here / name).read_bytes() == (there / name).read_bytes(), name
    level0 = zarr.open_group(str(here), mode="r")["0"][:]
    np.testing.assert_array_equal(level0 if channels == 1 else np.moveaxis(level0, 0, 2), values)


def test_the_store_is_ome_zarr_with_convcli_s_marker(pairs, tmp_path):
    assert (
        run(
            "pool",
            "--size",
            "2",
            "--format",
            "zarr",
            pairs / "rgb" / "tiff" / "a.tif",
            "-o",
            tmp_path,
            "--separate",
        ).exit_code
        == 0
    )
    store = tmp_path / "a_pool-max-f2-s2-R.zarr"
    group = zarr.open_group(str(store), mode="r")
    assert group.metadata.zarr_format == 2
    (image,) = group.attrs["multiscales"]
    assert image["version"] == "0.4"
    assert image["axes"] == [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    assert [d["path"] for d in image["datasets"]] == ["0", "1"]
    assert [d["coordinateTransformations"] for d in image["datasets"]] == [
        [{"type": "scale", "scale": [1.0, 1.0]}],  # level 1's pixel (0, 0) is centred on 0.5
        [
            {"type": "scale", "scale": [2.0, 2.0]},
            {"type": "translation", "translation": [0.5, 0.5]},
        ],
    ]
    assert "omero" not in group.attrs  # a grey image
    assert group.attrs["convcli"]["version"]
    array = group["0"]
    assert array.shape == (350, 300) and array.chunks == (256, 256)
    assert (store / "0" / "0" / "0").is_file()  # chunk keys with "/", as OME-Zarr 0.4 has them
    colour = tmp_path / "a_pool-max-f2-s2.zarr"
    (image,) = zarr.open_group(str(colour), mode="r").attrs["multiscales"]
    assert [a["name"] for a in image["axes"]] == ["c", "y", "x"]
    omero = zarr.open_group(str(colour), mode="r").attrs["omero"]
    assert [(c["label"], c["color"], c["window"]["end"]) for c in omero["channels"]] == [
        ("R", "FF0000", 255),
        ("G", "00FF00", 255),
        ("B", "0000FF", 255),
    ]
    assert zarr.open_group(str(colour), mode="r")["0"].chunks == (3, 256, 256)


def test_a_failure_while_writing_leaves_no_store_and_no_temporary(tmp_path):
    with pytest.raises(RuntimeError, match="stopped"):
        with open_row_writer(
            tmp_path / "out.zarr", fmt="zarr", height=600, width=300, channels=3, dtype=np.uint8
        ) as writer:
            writer.write(np.ones((300, 300, 3), np.uint8))
            raise RuntimeError("stopped")
    with pytest.raises(ValueError, match="rows written of"):
        with open_row_writer(
            tmp_path / "out.zarr", fmt="zarr", height=600, width=300, channels=1, dtype=np.float32
        ) as writer:
            writer.write(np.ones((599, 300), np.float32))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("failing", [3, 14])
def test_a_full_disk_while_chunks_are_written_leaves_no_store_and_no_temporary(
    pairs, tmp_path, monkeypatch, failing
):
    """ENOSPC at a chunk: one line; nothing of the store stays (a chunk written after the
    cleanup used to make its temporary folder again, without .zgroup, never removed)."""
    import errno

    from convcli.io import zarr_stores

    calls, put = [], zarr_stores._ChunkFiles._put

    def full_disk(self, key, data):
        calls.append(key)
        if len(calls) >= failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        put(self, key, data)

    monkeypatch.setattr(zarr_stores._ChunkFiles, "_put", full_disk)
    out = tmp_path / "out"
    result = run(
        "pool", "--format", "zarr", pairs / "rgb" / "tiff" / "a.tif", "-o", out, "-q", "--separate"
    )
    assert_one_line_error(result, 1, "a.tif", "no space left on the device")
    assert len(calls) >= failing
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    stores = [name for name in left if name.endswith(".zarr")]
    assert left == sorted(stores + (["convcli-manifest.jsonl"] if stores else []))
    assert all(zarr_stores.store_marked(out / name) for name in stores)  # each one finished
    recorded = (
        [
            json.loads(line)["output"]
            for line in (out / "convcli-manifest.jsonl").read_text().splitlines()
        ]
        if stores
        else []
    )
    assert sorted(recorded) == stores


def test_a_store_named_with_o_is_replaced_as_a_file_is(pairs, tmp_path):
    """-o FILE rules: convcli's own store replaced; another kept unless --overwrite."""
    source = pairs / "grey" / "tiff" / "a.tif"
    out = tmp_path / "edges.zarr"
    assert run("conv", "-k", "vertical", source, "-o", out).exit_code == 0
    first = _level(out, 0)
    assert run("conv", "-k", "horizontal", source, "-o", out).exit_code == 0
    assert not np.array_equal(_level(out, 0), first)
    foreign = tmp_path / "foreign.zarr"
    zarr.save_array(str(foreign), np.zeros((4, 4), np.uint8))
    result = run("conv", "-k", "vertical", source, "-o", foreign)
    assert "not written by convcli" in result.stderr and result.exit_code == 1
    assert zarr.open_array(str(foreign), mode="r").shape == (4, 4)
    assert run("conv", "-k", "vertical", source, "-o", foreign, "--overwrite").exit_code == 0
    assert np.array_equal(_level(foreign, 0), first)


def test_stores_in_a_folder_are_inputs_never_walked_and_earlier_outputs_are_not(pairs, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    zarr.save_array(str(folder / "b.zarr"), _rgb(100, 120))
    Image.fromarray(_rgb(90, 80)).save(folder / "c.png")
    inside = sorted((folder / "b.zarr").rglob("*"))
    for summary in ("2 processed", "0 processed, 2 skipped"):  # then its own outputs are there
        result = run(
            "pool", "--size", "2", "-r", folder, "-o", folder, "--format", "zarr", "--separate"
        )
        assert result.exit_code == 0 and summary in result.stderr, result.output
    stores = sorted(p.name for p in folder.glob("*.zarr"))
    assert stores[0] == "b.zarr" and len(stores) == 9  # R, G, B and the colour image, twice
    assert sorted((folder / "b.zarr").rglob("*")) == inside


def test_zarr_cannot_go_to_standard_output(pairs):
    result = run("pool", "--format", "zarr", pairs / "grey" / "tiff" / "a.tif", "-o", "-")
    assert_one_line_error(result, 2, "writes a folder", "-o -")


def test_a_stale_temporary_store_is_removed(tmp_path):
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    stale = tmp_path / f".convcli-a_pool.zarr.{proc.pid}-0a1b2c3d.part"
    zarr.create_array(
        str(stale), data=np.ones((300, 300), np.uint8), zarr_format=2, chunks=(100, 100)
    )
    stale.joinpath(".zgroup").write_text(json.dumps({"zarr_format": 2}))
    then = __import__("time").time() - 600
    for folder, _, _ in os.walk(stale):
        os.utime(folder, (then, then))
    assert remove_stale_temporaries(tmp_path) == 1
    assert os.listdir(tmp_path) == []


def test_a_bad_store_is_one_line_naming_it(tmp_path):
    group = zarr.open_group(str(tmp_path / "group.zarr"), mode="w")
    group.create_array("x", shape=(4, 4), dtype="u1")
    zarr.save_array(str(tmp_path / "ints.zarr"), np.zeros((4, 4), np.int32))
    zarr.save_array(str(tmp_path / "five.zarr"), np.zeros((4, 4, 5), np.uint8))
    for name, needle in (
        ("group.zarr", "not an OME-Zarr image"),
        ("ints.zarr", "int32"),
        ("five.zarr", "5 channels"),
        ("missing.zarr", "No such file"),
    ):
        result = run("pool", tmp_path / name, "-o", tmp_path / "out")
        assert result.exit_code == 1
        (line,) = [x for x in result.stderr.splitlines() if name in x]
        assert needle in line and "Traceback" not in result.output


def _labelled(path, count: int, labels) -> None:
    """An OME-Zarr image of `count` channels, with ``omero`` channel `labels` (None: none;
    not a tuple: that value as the channels, which are no list)."""
    planes = np.arange(count * 40 * 60, dtype=np.uint16).reshape(count, 40, 60)
    _ome(path, planes, "cyx")
    if labels is not None:
        group = zarr.open_group(str(path), mode="a")
        channels = [{"label": x} for x in labels] if isinstance(labels, tuple) else labels
        group.attrs["omero"] = {"channels": channels}


@pytest.mark.parametrize(
    ("count", "labels"),
    [(2, ("DAPI", "GFP")), (2, None), (4, ("a", "b", "c", "d")), (2, 3)],  # 3: not a list
)
def test_an_ome_zarr_image_of_channels_that_are_no_alpha_is_not_read_with_alpha(
    tmp_path, count, labels
):
    """OME-NGFF has no alpha: a 2- or 4-channel image (a fluorescence image's DAPI and GFP)
    is not read as grey or colour + alpha, whose alpha would weigh the others in a pool."""
    _labelled(tmp_path / "cells.zarr", count, labels)
    result = run("pool", tmp_path / "cells.zarr", "-o", tmp_path / "out", "-q")
    named = f" ({', '.join(labels)})" if isinstance(labels, tuple) else ""
    assert_one_line_error(result, 1, "cells.zarr", f"{count} channels{named}, none of them alpha")


def test_an_ome_zarr_images_own_channel_labels_are_read_and_others_said(tmp_path):
    _labelled(tmp_path / "own.zarr", 2, ("L", "A"))  # as convcli writes grey + alpha
    _labelled(tmp_path / "three.zarr", 3, ("DAPI", "GFP", "mCherry"))
    result = ok("pool", tmp_path / "own.zarr", tmp_path / "three.zarr", "-o", tmp_path / "out")
    assert "own.zarr" not in result.stderr
    assert "three.zarr: channel names not kept: DAPI, GFP, mCherry read as R, G, B" in (
        result.stderr
    )


def test_a_stores_georeference_that_is_not_read_back_is_said(tmp_path):
    keys = (1, 1, 0, 4, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633, 3076, 0, 1, 9001)
    tifffile.imwrite(
        tmp_path / "geo.tif",
        np.zeros((40, 60), np.uint8),
        extratags=[
            (33550, "d", 3, (10.0, 10.0, 0.0), True),
            (33922, "d", 6, (0, 0, 0, 500000.0, 4600000.0, 0), True),
            (34735, "H", len(keys), keys, True),
        ],
    )
    ok("pool", tmp_path / "geo.tif", "--format", "zarr", "-o", tmp_path / "z")
    (store,) = (tmp_path / "z").glob("*.zarr")
    assert "georeference" in zarr.open_group(str(store), mode="r").attrs
    result = ok("pool", store, "--format", "tiff", "-o", tmp_path / "t")
    assert "georeference not kept: convcli reads none from a Zarr store" in result.stderr


def test_without_zarr_each_use_is_one_line_naming_the_extra(pairs, tmp_path, monkeypatch):
    hide_modules(monkeypatch, "zarr")
    result = run("pool", pairs / "grey" / "zarr" / "a.zarr", "-o", tmp_path / "a")
    assert_one_line_error(result, 2, "reading .zarr needs zarr: pip install 'convcli[zarr]'")
    result = run(
        "pool", "--format", "zarr", pairs / "grey" / "tiff" / "a.tif", "-o", tmp_path / "b"
    )
    assert_one_line_error(result, 2, "--format zarr needs zarr: pip install 'convcli[zarr]'")
    result = run("pool", pairs / "grey" / "zarr", "-o", tmp_path / "c")  # found in a folder
    assert result.exit_code == 1
    assert "a.zarr: reading .zarr needs zarr: pip install 'convcli[zarr]'" in result.stderr
    assert "Traceback" not in result.output


def test_a_store_on_object_storage_is_read_where_it_is(pairs, tmp_path):
    pytest.importorskip("fsspec")
    grey = np.asarray(Image.open(pairs / "grey" / "tiff" / "a.tif"))
    zarr.create_array("memory://zarr-test/in/a.zarr", data=grey, chunks=(128, 128))
    for source, out in (
        (pairs / "grey" / "tiff" / "a.tif", "tiff"),
        ("memory://zarr-test/in", "url"),
    ):
        result = run("conv", "-k", "vertical", "--memory", "1M", source, "-o", tmp_path / out)
        assert result.exit_code == 0 and "1 processed" in result.stderr, result.output
    assert np.array_equal(
        _pixels(tmp_path / "url" / "a_conv-vertical-sum.png"),
        _pixels(tmp_path / "tiff" / "a_conv-vertical-sum.png"),
    )
    for out in (tmp_path / "disk", "memory://zarr-test/out"):  # whole, and in strips
        for memory in ("4G", "1M"):
            result = run(
                "pool",
                "--format",
                "zarr",
                pairs / "grey" / "tiff" / "a.tif",
                "-o",
                out,
                "--memory",
                memory,
                "--overwrite",
            )
            assert result.exit_code == 0 and "1 processed" in result.stderr, result.output
            assert ("in strips" in result.stderr) == (memory == "1M")
    local = zarr.open_group(str(tmp_path / "disk" / "a_pool-max-f2-s2-L.zarr"), mode="r")
    remote = zarr.open_group("memory://zarr-test/out/a_pool-max-f2-s2-L.zarr", mode="r")
    assert dict(remote.attrs) == dict(local.attrs) and "convcli" in remote.attrs
    for key in local.array_keys():
        np.testing.assert_array_equal(remote[key][:], local[key][:])
    again = run(
        "pool",
        "--format",
        "zarr",
        pairs / "grey" / "tiff" / "a.tif",
        "-o",
        "memory://zarr-test/out",
        "-v",
    )
    assert again.exit_code == 0 and "1 skipped" in again.stderr, again.output


def test_overwrite_in_a_folder_replaces_only_stores_convcli_wrote(pairs, tmp_path):
    source = pairs / "grey" / "tiff" / "a.tif"
    out = tmp_path / "out"
    assert run("conv", "-k", "vertical", source, "-o", out, "--format", "zarr").exit_code == 0
    (store,) = out.glob("*.zarr")
    shutil.rmtree(store)
    zarr.save_array(str(store), np.zeros((4, 4), np.uint8))  # now a store convcli did not write
    result = run("conv", "-k", "vertical", source, "-o", out, "--format", "zarr", "--overwrite")
    assert result.exit_code == 1 and "not written by convcli" in result.stderr
    assert zarr.open_array(str(store), mode="r").shape == (4, 4)


def test_a_store_on_object_storage_not_written_by_convcli_is_kept(pairs, monkeypatch):
    """--overwrite replaces only convcli's stores there, as on disk; a failed write leaves none."""
    pytest.importorskip("fsspec")
    from convcli.io import zarr_stores

    theirs = "memory://zarr-kept/out/a_pool-max-f2-s2-L.zarr"
    zarr.create_array(theirs, data=np.ones((4, 4), np.uint8))
    for memory in ("4G", "1M"):
        result = run(
            "pool",
            "--format",
            "zarr",
            pairs / "grey" / "tiff" / "a.tif",
            "-o",
            "memory://zarr-kept/out",
            "--memory",
            memory,
            "--overwrite",
        )
        assert result.exit_code == 1 and "not written by convcli" in result.stderr, result.output
        np.testing.assert_array_equal(zarr.open_array(theirs, mode="r")[:], 1)

    def full(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(zarr_stores.StoreSink, "close", full)
    result = run(
        "pool",
        "--format",
        "zarr",
        pairs / "grey" / "tiff" / "a.tif",
        "-o",
        "memory://zarr-kept/failed",
        "--memory",
        "1M",
    )
    assert result.exit_code == 1 and "no space left" in result.stderr.lower(), result.output
    import fsspec

    assert not fsspec.filesystem("memory").exists("/zarr-kept/failed/a_pool-max-f2-s2-L.zarr")


def _memory_store(url: str):
    """The fsspec memory filesystem and the path of `url` on it."""
    import fsspec

    return fsspec.filesystem("memory"), url.removeprefix("memory://")


def test_a_store_on_object_storage_a_run_never_finished_is_written_again(pairs):
    """Killed mid-write, a store holds chunks and its run's claim but no marker: the next run
    writes it again (it used to say "outputs exist"), with --overwrite or without."""
    pytest.importorskip("fsspec")
    from convcli.io.store_claims import CLAIM_NAME

    source = pairs / "grey" / "tiff" / "a.tif"
    tmp_whole = "memory://zarr-claims/whole"
    ok("pool", "--format", "zarr", source, "-o", tmp_whole)
    name = "a_pool-max-f2-s2-L.zarr"
    want = zarr.open_group(f"{tmp_whole}/{name}", mode="r")["0"][:]
    fs, _ = _memory_store(tmp_whole)
    for extra in ([], ["--overwrite"]):
        folder = f"memory://zarr-claims/killed{len(extra)}"
        fs.pipe_file(f"/zarr-claims/killed{len(extra)}/{name}/{CLAIM_NAME}", b"a run now gone")
        fs.pipe_file(f"/zarr-claims/killed{len(extra)}/{name}/0/0/0", b"half a chunk")
        result = ok("pool", "--format", "zarr", source, "-o", folder, *extra)
        assert "1 processed, 0 skipped" in result.stderr
        group = zarr.open_group(f"{folder}/{name}", mode="r")
        assert group.attrs["convcli"]["version"]
        np.testing.assert_array_equal(group["0"][:], want)
        assert not fs.exists(f"/zarr-claims/killed{len(extra)}/{name}/{CLAIM_NAME}")


def _pool_tall(pairs, shape: tuple[int, int], folder: str):
    """``pool --format zarr`` of a seeded grey tiled TIFF ``tall.tif`` of `shape` into `folder`."""
    values = np.random.default_rng(shape[0]).integers(0, 256, shape, np.uint8)
    tifffile.imwrite(pairs.parent / "tall.tif", values, tile=(64, 64))
    return run("pool", "--format", "zarr", pairs.parent / "tall.tif", "-o", folder, "-q")


def test_a_run_whose_store_another_run_claimed_stops_and_leaves_it(pairs, monkeypatch):
    """Two runs writing one store name: the one whose claim was taken fails on one line, and
    removes nothing of the other's (its cleanup used to delete the winner's dataset)."""
    pytest.importorskip("fsspec")
    from convcli.io import zarr_stores
    from convcli.io.store_claims import CLAIM_NAME

    name = "tall_pool-max-f2-s2-L.zarr"
    claim = f"/zarr-claims/taken/{name}/{CLAIM_NAME}"
    fs, _ = _memory_store("memory://zarr-claims/taken")
    real_write = zarr_stores._StoreLevel._write

    def taken_after_the_first_band(self, band):
        real_write(self, band)
        fs.pipe_file(claim, b"the other run")  # another run claims the store meanwhile

    monkeypatch.setattr(zarr_stores._StoreLevel, "_write", taken_after_the_first_band)
    result = _pool_tall(pairs, (1100, 300), "memory://zarr-claims/taken")
    assert_one_line_error(result, 1, "another run is writing this Zarr store now")
    assert fs.cat_file(claim) == b"the other run"
    assert fs.exists("/zarr-claims/taken/tall_pool-max-f2-s2-L.zarr/0/.zarray")


def test_of_two_runs_that_start_together_one_writes_the_store_and_the_other_says_so(
    pairs, monkeypatch
):
    """The second claim lands between the first run's claim and its removal of what was
    there: the first run stops on one line before writing, removes neither the other's
    claim nor its objects, and the other run's store is left to it. (Each run used to
    remove the store before claiming it, so each deleted the other's claim and objects:
    both failed, one with zarr's own text, and left a store no later run would replace.)"""
    pytest.importorskip("fsspec")
    from convcli.io import store_claims
    from convcli.io.store_claims import CLAIM_NAME

    name = "tall_pool-max-f2-s2-L.zarr"
    store = f"/zarr-claims/together/{name}"
    fs, _ = _memory_store("memory://zarr-claims/together")
    real_claim = store_claims.claim

    def another_claims_after_us(url, options=None):
        token = real_claim(url, options)
        fs.pipe_file(f"{store}/{CLAIM_NAME}", b"the other run")
        fs.pipe_file(f"{store}/0/.zarray", b"the other run's array")
        return token

    monkeypatch.setattr(store_claims, "claim", another_claims_after_us)
    result = _pool_tall(pairs, (300, 200), "memory://zarr-claims/together")
    assert_one_line_error(result, 1, "another run is writing this Zarr store now")
    assert fs.cat_file(f"{store}/{CLAIM_NAME}") == b"the other run"
    assert fs.cat_file(f"{store}/0/.zarray") == b"the other run's array"
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.find(store)) == [CLAIM_NAME, ".zarray"]


def test_a_store_is_replaced_but_its_claim(pairs):
    pytest.importorskip("fsspec")
    from convcli.io.storage import remove_tree
    from convcli.io.store_claims import CLAIM_NAME

    fs, _ = _memory_store("memory://zarr-claims/spared")
    for key in (CLAIM_NAME, ".zgroup", "0/.zarray", "0/0/0", f"0/{CLAIM_NAME}"):
        fs.pipe_file(f"/zarr-claims/spared/s.zarr/{key}", b"x")
    remove_tree("memory://zarr-claims/spared/s.zarr", keep=CLAIM_NAME)
    assert fs.find("/zarr-claims/spared/s.zarr") == [f"/zarr-claims/spared/s.zarr/{CLAIM_NAME}"]


def test_a_band_task_of_a_run_gone_writes_nothing_into_a_store_claimed_since(tmp_path):
    """The tasks of a client that died still run: each checks the claim before writing."""
    pytest.importorskip("fsspec")
    from convcli.io import store_claims, zarr_stores

    url = "memory://zarr-claims/bands/out.zarr"
    zarr_stores.create_store(url, (512, 256, 1), np.dtype(np.uint8))
    ours = store_claims.claim(url)
    store_claims.claim(url)  # a later run's
    with pytest.raises(store_claims.StoreTaken, match="another run"):
        zarr_stores.StoreBand(
            url, (512, 256, 1), np.dtype(np.uint8), top=0, levels=1, last=False, claim=ours
        )
    fs, path = _memory_store(url)
    assert not fs.exists(f"{path}/0/0/0")


def _pooled_by_one_into_store(tmp_path, source, where: str, bucket: str):
    """`pool --size 1 --stride 1` of `source` into a Zarr store on disk, or on object storage
    (memory://`bucket`, removed after): its level 0's fill value, chunk names and values."""
    import fsspec

    out = tmp_path / "out" if where == "disk" else f"memory://{bucket}/out"
    try:
        ok("pool", "--size", "1", "--stride", "1", "--format", "zarr", source, "-o", out)
        url = f"{out}/{source.stem}_pool-max-f1-s1-L.zarr"
        array = zarr.open_group(url, mode="r")["0"]
        fs, path = fsspec.core.url_to_fs(f"{url}/0")
        names = [name[len(path.rstrip("/")) + 1 :] for name in fs.find(path)]
        return array.fill_value, sorted(n for n in names if not n.startswith(".")), array[:]
    finally:
        if where != "disk":
            fsspec.filesystem("memory").rm(f"/{bucket}", recursive=True)


@pytest.mark.parametrize("where", ["disk", "object storage"])
def test_a_float_store_is_missing_its_values_as_nan_for_gdal_too(tmp_path, where):
    # fill_value 0 made GDAL's Zarr driver take every 0.0 for a nodata pixel (NoData Value=0).
    values = np.zeros((300, 300), np.float32)
    values[:256, :256] = np.nan  # a whole chunk missing, and chunks of zeros that are values
    tifffile.imwrite(tmp_path / "flat.tif", values)
    fill, chunks, read = _pooled_by_one_into_store(tmp_path, tmp_path / "flat.tif", where, "zn")
    assert np.isnan(fill)
    assert chunks == ["0/0", "0/1", "1/0", "1/1"]
    np.testing.assert_array_equal(read, values)


@pytest.mark.parametrize("where", ["disk", "object storage"])
def test_a_store_of_levels_claims_no_nodata_and_holds_every_chunk(tmp_path, where):
    # fill_value 0: GDAL's Zarr driver took every black pixel of an edge map for nodata. With
    # no fill value, a chunk zarr leaves out (all black) would be undefined: each is written.
    values = np.zeros((300, 300), np.uint8)
    values[256:, 256:] = 200  # the other chunks all black
    Image.fromarray(values).save(tmp_path / "dark.png")
    fill, chunks, read = _pooled_by_one_into_store(tmp_path, tmp_path / "dark.png", where, "zl")
    assert fill is None
    assert chunks == ["0/0", "0/1", "1/0", "1/1"]
    np.testing.assert_array_equal(read, values)
