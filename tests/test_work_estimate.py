"""The whole-image work estimate: near the memory a whole run takes, and what --memory decides."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import tifffile
from helpers import assert_same_file, names, run

from convcli.app import process

KINDS = {
    "rgb8": lambda g, shape: g.integers(0, 256, (*shape, 3), np.uint8),
    "grey8": lambda g, shape: g.integers(0, 256, shape, np.uint8),
    "rgb16": lambda g, shape: g.integers(0, 65536, (*shape, 3), np.uint16),
    "float": lambda g, shape: (g.standard_normal(shape) * 100).astype(np.float32),
}

COMMANDS = [
    ["pad", "--pad", "2"],
    ["pool", "--size", "2"],
    ["pool", "--mode", "average", "--size", "3", "--stride", "3"],
    ["conv", "-k", "vertical"],
    ["conv", "-k", "sobel-x", "-k", "sobel-y", "--channels", "each"],
    ["conv", "-k", "sharpen", "--stride", "2", "--channels", "each"],
]


@pytest.fixture(scope="module")
def tiffs(tmp_path_factory):
    """A tiled TIFF of 900x700 seeded samples of each kind."""
    folder = tmp_path_factory.mktemp("estimate")
    g = np.random.default_rng(5)
    for kind, make in KINDS.items():
        samples = make(g, (700, 900))
        tifffile.imwrite(
            folder / f"{kind}.tif",
            samples,
            tile=(256, 256),
            compression="zlib",
            photometric="rgb" if samples.ndim == 3 else "minisblack",
        )
    return folder


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:3]))
@pytest.mark.parametrize("kind", KINDS)
def test_the_estimate_is_within_one_and_a_half_times_the_whole_runs_peak(
    tiffs, tmp_path, monkeypatch, kind, command
):
    """The peak is tracemalloc's (numpy's and Python's allocations: what grows with the
    image), of the run itself, whole."""
    estimates = []
    real = process.strips_reason

    def taking(task, source):
        reason = real(task, source)
        estimates.append(reason[1])
        return reason

    monkeypatch.setattr(process, "strips_reason", taking)
    tracemalloc.start()
    try:
        # PNG levels, as the estimate counts them (pad and pool keep a TIFF otherwise)
        result = run(
            *command,
            "-j",
            "1",
            "--memory",
            "64G",
            tiffs / f"{kind}.tif",
            "-o",
            tmp_path,
            "--format",
            "png",
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    (estimate,) = estimates
    assert 1 / 1.5 <= estimate / peak <= 1.5, f"estimate {estimate:,} peak {peak:,}"


def _strips_said(result) -> bool:
    assert result.exit_code == 0, result.output
    return "processed in strips" in result.stderr


@pytest.mark.parametrize("command", [COMMANDS[1], COMMANDS[4]], ids=["pool", "conv"])
def test_more_memory_reads_whole_the_same_files_and_the_dry_run_says_so(tiffs, tmp_path, command):
    """Below the estimate in strips, above it whole; a larger budget never fails where a
    smaller one worked; the files are the same bytes (TIFF: tiles, deflate, levels)."""
    from convcli.app import dryrun

    source = tiffs / "rgb8.tif"
    estimates = []
    real = process.strips_reason
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            dryrun,
            "strips_reason",
            lambda task, src: estimates.append(real(task, src)[1]) or real(task, src),
        )
        assert run(*command, "--dry-run", source, "-o", tmp_path / "probe").exit_code == 0
    (estimate,) = estimates
    folders = {}
    for budget in (estimate // 2, estimate + (1 << 20), 64 << 30):
        out = tmp_path / f"m{budget}"
        common = [*command, "--format", "tiff", "-v", "--memory", str(budget), source, "-o", out]
        dry, real_run = run(*common, "--dry-run"), run(*common)
        in_strips = _strips_said(real_run)
        assert in_strips == (budget < estimate)
        assert dry.exit_code == 0 and ("in strips" in dry.stdout + dry.stderr) == in_strips
        folders[budget] = out
    first, *others = folders.values()
    for folder in others:
        assert names(folder) == names(first)
        for name in names(first):
            if name.endswith(".tiff"):
                assert_same_file(folder / name, first / name)


@pytest.mark.parametrize("case", ["png", "frames", "tiff frame", "gradient"])
def test_an_image_read_whole_over_a_memory_given_is_refused_before_it_is_decoded(
    tmp_path, monkeypatch, case
):
    """A 9000x9000 PNG of zeros (236 KB) took 1.74 GB under --memory 100M: refused now, from
    its header; without --memory, or with enough, it is processed."""
    from PIL import Image

    from convcli.io import images

    if case == "png":
        path, command = tmp_path / "zeros.png", ["pool"]
        Image.fromarray(np.zeros((1500, 2000), np.uint8)).save(path)
        why = "only TIFFs and Zarr stores are read in strips"
    elif case == "frames":
        path, command = tmp_path / "anim.gif", ["pool", "--frames", "all"]
        frames = [Image.new("RGB", (1000, 800), (40 * k, 0, 0)) for k in range(3)]
        frames[0].save(path, save_all=True, append_images=frames[1:])
        why = "frames are never read in strips"
    elif case == "tiff frame":
        # Said "only TIFFs and Zarr stores are read in strips" of this TIFF.
        path, command = tmp_path / "pages.tif", ["pool", "--frames", "1"]
        with tifffile.TiffWriter(path) as tif:
            for _ in range(2):
                tif.write(np.zeros((1500, 2000), np.uint8), tile=(256, 256), metadata=None)
        why = "only the first frame of a TIFF is read in strips"
    else:
        path, command = tmp_path / "big.tif", ["grad", "pool"]
        tifffile.imwrite(path, np.zeros((1500, 2000), np.uint8), tile=(256, 256))
        why = "a gradient is computed whole"
    decoded = []
    monkeypatch.setattr(
        images.ImageSource,
        "read",
        lambda self, *a, real=images.ImageSource.read, **k: (
            decoded.append(1) or real(self, *a, **k)
        ),
    )
    refused = run(*command, path, "-o", tmp_path / "small", "--memory", "4M")
    assert refused.exit_code == 1, refused.output
    (line,) = [x for x in refused.stderr.splitlines() if path.name in x]
    assert "over --memory 4.00 MiB" in line and why in line and "raise --memory" in line
    assert not (tmp_path / "small").exists() and decoded == []
    for extra in ([], ["--memory", "1G"]):
        result = run(*command, path, "-o", tmp_path / f"ok{len(extra)}", *extra)
        assert result.exit_code == 0, result.output
        assert any((tmp_path / f"ok{len(extra)}").iterdir())
