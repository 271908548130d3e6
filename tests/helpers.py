"""Shared test helpers: small seeded image files (made with Pillow), and running the CLI.

The command line is run in-process with click's CliRunner (:func:`run`); the
subprocess tests that need real signals build their own command lines, and
share :func:`interrupt`, :func:`run_without` and :class:`DaskProcesses`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image, ImageOps

from convcli.app.manifest import is_manifest_name
from convcli.cli.main import main
from convcli.layers._engine import native

built = pytest.mark.skipif(native._native is None, reason="the C extension was not built")
"""Marks a test of the native engine's C kernels: skipped where they were not built."""


@contextmanager
def _set_within(setter, value):
    """``setter(value)`` inside the block, and what it gave back (the setting before) after."""
    before = setter(value)
    try:
        yield
    finally:
        setter(before)


def engine(name):
    """The layers on engine `name` (``native`` or ``numpy``) inside the block."""
    return _set_within(native.use_engine, name)


def vector_level(level):
    """The native kernels at vector `level` (``sse2``, ``avx2`` ...) inside the block."""
    return _set_within(native.set_vector_level, level)


WIDTH, HEIGHT = 40, 30

# mode -> file extension it is written as
ONE_PASS_KERNELS = {
    "vertical": [[1, 0, -1]] * 3,
    "sobel": [[1, 0, -1], [2, 0, -2], [1, 0, -1]],
    "box 5x5": np.full((5, 5), 1 / 25),
    "gaussian 7x3": np.outer([1, 6, 15, 20, 15, 6, 1], [1, 2, 1]) / 256,
    "laplacian": [[0, 1, 0], [1, -4, 1], [0, 1, 0]],  # not rank 1: no one-pass path
}
"""Kernels for the native one-pass correlation of 8-bit pictures (the channel sum, each
channel), against the float32 path."""


def conv_options(kernels, widths, border, bias, *, channels):
    """The options of ``convcli conv`` that :mod:`convcli.app.conv_pixels` reads, for
    `kernels` (2-D weights), the pad `widths` (top, bottom, left, right) filled as `border`."""
    made = []
    for weights in kernels:
        kernel = SimpleNamespace(weights=np.asarray(weights, np.float32))
        kernel.size = kernel.weights.shape
        made.append(kernel)
    return SimpleNamespace(
        kernels=made,
        channels=channels,
        stride=1,
        dilation=1,
        border=border,
        bias=bias,
        pad=widths,
        pad_widths=lambda _: widths,
    )


MODES = {
    "1": "png",
    "L": "png",
    "LA": "png",
    "P": "png",
    "P+transparency": "png",
    "RGB": "png",
    "RGBA": "png",
    "CMYK": "tiff",
    "I;16": "png",
    "I": "tiff",
    "F": "tiff",
}


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def rgb_array(seed: int = 0, size=(WIDTH, HEIGHT)) -> np.ndarray:
    """A random uint8 (H, W, 3) picture with some structure (a bright square)."""
    w, h = size
    arr = rng(seed).integers(0, 200, size=(h, w, 3), dtype=np.uint8)
    arr[h // 4 : h // 2, w // 4 : w // 2] = 250
    return arr


def make_image(path: Path, mode: str = "RGB", *, seed: int = 0, size=(WIDTH, HEIGHT)) -> Path:
    """Write a `mode` image (see MODES) to `path` and return the path."""
    w, h = size
    g = rng(seed)
    rgb = rgb_array(seed, size)
    if mode == "1":
        im = Image.fromarray(g.integers(0, 2, size=(h, w)).astype(bool))
    elif mode == "L":
        im = Image.fromarray(rgb[:, :, 0])
    elif mode == "LA":
        la = np.dstack([rgb[:, :, 0], g.integers(0, 256, size=(h, w), dtype=np.uint8)])
        im = Image.fromarray(la)
    elif mode == "P":
        im = Image.fromarray(rgb).quantize(16)
    elif mode == "P+transparency":
        im = Image.fromarray(rgb).quantize(16)
        im.save(path, transparency=0)
        return path
    elif mode == "RGB":
        im = Image.fromarray(rgb)
    elif mode == "RGBA":
        alpha = g.integers(0, 256, size=(h, w), dtype=np.uint8)
        im = Image.fromarray(np.dstack([rgb, alpha]))
    elif mode == "CMYK":
        im = Image.fromarray(rgb).convert("CMYK")
    elif mode == "I;16":
        im = Image.fromarray(g.integers(0, 65536, size=(h, w)).astype(np.uint16))
    elif mode == "I":
        im = Image.fromarray(g.integers(0, 70000, size=(h, w)).astype(np.int32))
    elif mode == "F":
        im = Image.fromarray(g.random((h, w)).astype(np.float32))
    else:
        raise ValueError(mode)
    im.save(path)
    return path


def make_folder(folder: Path, count: int, size=(WIDTH, HEIGHT)) -> Path:
    """`count` RGB images p00.png, p01.png ... of `size` in a new `folder`."""
    folder.mkdir(parents=True)
    for i in range(count):
        make_image(folder / f"p{i:02d}.png", "RGB", seed=i, size=size)
    return folder


def make_copies(folder: Path, count: int, size=(WIDTH, HEIGHT)) -> Path:
    """`count` copies p00.png, p01.png ... of one RGB image of `size` in a new `folder`.

    Quick at any size: one image is encoded, the others are copies of its bytes.
    """
    folder.mkdir(parents=True)
    first = make_image(folder / "p00.png", "RGB", size=size)
    for i in range(1, count):
        shutil.copyfile(first, folder / f"p{i:02d}.png")
    return folder


def make_gif(path: Path, frames: int = 3) -> Path:
    """An animated GIF whose frames differ (frame i is filled with grey 60 * (i + 1))."""
    ims = [Image.new("L", (WIDTH, HEIGHT), 60 * (i + 1)) for i in range(frames)]
    ims[0].save(path, save_all=True, append_images=ims[1:])
    return path


def make_multipage_tiff(path: Path, pages: int = 2) -> Path:
    ims = [Image.fromarray(rgb_array(seed=i)) for i in range(pages)]
    ims[0].save(path, save_all=True, append_images=ims[1:])
    return path


def make_exif_rotated_jpeg(path: Path, orientation: int = 6) -> np.ndarray:
    """A JPEG stored 40 wide x 30 high with an EXIF orientation tag.

    The stored picture is dark with a white block in its top-left corner.
    Returns the stored (un-rotated) array.
    """
    arr = np.full((HEIGHT, WIDTH, 3), 20, np.uint8)
    arr[:10, :10] = 255
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(arr).save(path, exif=exif, quality=95)
    return arr


def make_bomb_png(path: Path, width: int = 100_000, height: int = 100_000) -> Path:
    """A tiny PNG whose header claims `width` x `height` pixels (IHDR patched, CRC fixed)."""
    Image.new("L", (8, 8)).save(path)
    data = bytearray(path.read_bytes())
    # Signature (8) + IHDR length (4) + "IHDR" (4), then width and height.
    data[16:24] = struct.pack(">II", width, height)
    crc = zlib.crc32(bytes(data[12:29])) & 0xFFFFFFFF
    data[29:33] = struct.pack(">I", crc)
    path.write_bytes(bytes(data))
    return path


def make_truncated_png(path: Path) -> Path:
    make_image(path, "RGB")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


# --- running the command line ----------------------------------------------------------------


def run(*args):
    """Invoke convcli in-process; arguments are converted to strings."""
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args):
    """:func:`run`, asserting success, no traceback and nothing on stdout."""
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""  # messages go to stderr
    return result


def assert_one_line_error(result, code, *needles):
    """Exit `code`, exactly one line on stderr containing every needle, no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("convcli: ")
    for needle in needles:
        assert needle in lines[0]
    assert result.stdout == ""


# --- reading what was written ----------------------------------------------------------------


MANIFEST = "convcli-manifest.jsonl"


def manifest_records(folder: Path) -> list[dict]:
    """The records of the run manifest in `folder`, one per line; each line must be whole JSON."""
    lines = (folder / MANIFEST).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _written(folder: Path) -> list[Path]:
    """Every file under `folder` but the run manifests (tests/test_manifest.py reads those)."""
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and not is_manifest_name(p.name)]


def outputs_in(folder: Path) -> list[Path]:
    """The files directly in `folder` but the run manifest, sorted."""
    return [p for p in sorted(folder.iterdir()) if not is_manifest_name(p.name)]


def names(folder: Path) -> list[str]:
    """Every file under `folder` (manifests aside), as sorted relative paths."""
    return sorted(str(p.relative_to(folder)) for p in _written(folder))


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` (manifests aside) as :func:`content` gives it,
    by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(content(p)).hexdigest() for p in _written(folder)
    }


# TIFF tags that say where the deflated tiles or strips lie, and how long they are.
_WHERE_TAGS = {273, 279, 324, 325, 330}


def content(path: Path) -> bytes:
    """The file's bytes, its deflated data inflated: a PNG's chunks with its IDAT stream
    inflated, a TIFF's tags (but where its tiles lie) and every page and level's samples.

    ISA-L's deflate, which writes convcli's PNG and TIFF outputs, does not promise the same
    stream for the same data every time (intel/isa-l#140: one tile in about a thousand
    came out as another valid stream, in a long test run); the tiles, filters, predictor
    and every sample must still be the same.
    """
    data = Path(path).read_bytes()
    try:
        return _inflated(path, data)
    except Exception:  # noqa: BLE001 - a damaged file (an input kept beside the outputs): its bytes
        return data


def _inflated(path: Path, data: bytes) -> bytes:
    """:func:`content` of a PNG or TIFF that can be read; else its bytes."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        parts, stream, at = [data[:8]], b"", 8
        while at < len(data):
            (length,), kind = struct.unpack(">I", data[at : at + 4]), data[at + 4 : at + 8]
            body = data[at + 8 : at + 8 + length]
            if kind == b"IDAT":
                stream += body
            else:
                parts.append(kind + body)
            at += 12 + length
        return b"".join(parts) + zlib.decompress(stream)
    if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        import tifffile

        parts = []
        with tifffile.TiffFile(path) as tif:
            for page in tif.pages:
                for level in (page, *(getattr(page, "pages", None) or ())):
                    tags = sorted((t.code, repr(t.value)) for t in level.tags.values())
                    parts.append(repr([t for t in tags if t[0] not in _WHERE_TAGS]).encode())
                    parts.append(np.ascontiguousarray(level.asarray()).tobytes())
        return b"".join(parts)
    return data


def assert_same_file(a: Path, b: Path) -> None:
    """`a` and `b` hold the same bytes, but for deflate's own choices (:func:`content`)."""
    if Path(a).read_bytes() != Path(b).read_bytes():
        assert content(a) == content(b), f"{a} and {b} differ"


def pixels(path, mode="RGB"):
    """The picture as Pillow reads it, upright, as float32 (H, W, C)."""
    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im)
        arr = np.asarray(im.convert(mode) if mode else im).astype(np.float32)
    return arr if arr.ndim == 3 else arr[:, :, None]


def read(path) -> np.ndarray:
    """The file's pixels as Pillow stores them."""
    with Image.open(path) as im:
        return np.asarray(im)


# --- processes: Ctrl-C, a missing optional module, a Dask cluster ------------------------------


def wait_until(condition, seconds: float) -> bool:
    """Poll `condition` every 20 ms for up to `seconds`; whether it came true."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def interrupt(proc: subprocess.Popen, ready, *, seconds: float = 60) -> str:
    """Ctrl-C `proc` once `ready()` (or after `seconds`); check it stopped as Ctrl-C should.

    Within 10 s, with exit status 130 and no traceback. Returns its stderr.
    """
    wait_until(ready, seconds)
    proc.send_signal(signal.SIGINT)
    stopped = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - stopped < 10
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    return stderr


def run_without(module: str, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    """The command line in a fresh interpreter where `module` cannot be imported."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; sys.argv = ['convcli', *sys.argv[1:]]; "
        "from convcli.__main__ import main; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class DaskProcesses:
    """A ``dask scheduler`` and `workers` ``dask worker`` processes (`nthreads` each), on 127.0.0.1.

    `preload` is a Python file each worker runs when it starts; `nanny` False
    starts workers without a nanny (none restarts a worker that dies, and
    each worker is one process instead of two). :attr:`file` is the
    scheduler file, :attr:`address` the scheduler's address. `cwd` is the
    workers' working directory (by default this process's).

    The workers start with the scheduler: they wait for its file to appear.
    :meth:`close` kills every process (and what it started) at once: a Dask
    worker that shuts down cleanly can wait seconds on a scheduler going away.
    """

    def __init__(
        self,
        folder: Path,
        workers: int,
        *,
        preload: Path | None = None,
        nthreads: int = 1,
        nanny: bool = True,
        cwd: Path | None = None,
    ):
        import distributed

        self.file = folder / "scheduler.json"
        scheduler = [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--dashboard-address",
            "127.0.0.1:0",
            "--scheduler-file",
            str(self.file),
        ]
        worker = [
            sys.executable,
            "-m",
            "distributed.cli.dask_worker",
            "--scheduler-file",
            str(self.file),
            "--nthreads",
            str(nthreads),
            "--no-dashboard",
            "--host",
            "127.0.0.1",
        ]
        if preload is not None:
            worker += ["--preload", str(preload)]
        if not nanny:
            worker += ["--no-nanny"]
        # Each in its own process group, so that close() also reaches a nanny's worker.
        self.procs = [
            subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                cwd=None if command is scheduler else cwd,
            )
            for command in [scheduler] + [worker] * workers
        ]
        try:
            # The scheduler writes its file after creating it: wait for the whole address.
            if not wait_until(lambda: self._address_written() is not None, 60):
                raise TimeoutError("the Dask scheduler did not start")
            if workers:  # none: a scheduler alone
                with distributed.Client(scheduler_file=str(self.file), timeout=30) as client:
                    client.wait_for_workers(workers, timeout=60)
        except BaseException:
            self.close()
            raise
        self.address = self._address_written()

    def _address_written(self) -> str | None:
        """The scheduler's address from its file, or None until it is written whole."""
        try:
            return json.loads(self.file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            return None

    def close(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            proc.wait()


def import_afresh(name: str):
    """A new copy of module `name`, run from its source now (sys.modules keeps the old one).

    For a check a module makes when imported, under a monkeypatched setting.
    """
    spec = importlib.util.find_spec(name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imagemagick() -> str | None:
    """The path of a real ImageMagick program (``magick``, else ``convert``), or None.

    Its ``-version`` must name ImageMagick: a ``convert`` that is something else
    (a stand-in, Windows' disk tool) does not count.
    """
    for program in (shutil.which("magick"), "/usr/bin/convert", shutil.which("convert")):
        if program and os.path.isfile(program):
            try:
                version = subprocess.run(
                    [program, "-version"], capture_output=True, text=True, timeout=30
                ).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            if "ImageMagick" in version:
                return program
    return None


def hide_modules(monkeypatch, *modules) -> None:
    """Make `modules` (and their submodules) fail to import, as when an extra is missing."""
    import builtins

    real_import = builtins.__import__

    def refusing(name, *args, **kwargs):
        if name.split(".")[0] in modules:
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    for name in list(sys.modules):
        if name.split(".")[0] in modules:
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(builtins, "__import__", refusing)


def alpha_weighted_pool(levels: np.ndarray, f: int, mode: str, white: float) -> np.ndarray:
    """Pooling of (H, W, C) `levels` whose last channel is alpha, f x f windows of stride f,
    in float64 as docs/formats.md says ``pool`` weighs colours by alpha: alpha pooled as any
    channel; average: each colour ``sum(c * a) / sum(a)``, max: the largest colour of alpha
    above 0; a window of transparent pixels alone gives colour 0."""
    h, w = levels.shape[0] // f * f, levels.shape[1] // f * f
    windows = levels[:h, :w].astype(np.float64).reshape(h // f, f, w // f, f, -1)
    windows = windows.swapaxes(1, 2).reshape(h // f, w // f, f * f, -1)
    colour, alpha = windows[..., :-1], windows[..., -1:]
    if mode == "max":
        seen = np.where(alpha > 0, colour, -np.inf).max(axis=2)
        return np.concatenate([np.where(np.isinf(seen), 0, seen), alpha.max(axis=2)], axis=-1)
    weight = alpha / white
    total = weight.sum(axis=2)
    out = np.zeros(total.shape[:2] + (colour.shape[-1],))
    np.divide((colour * weight).sum(axis=2), total, out=out, where=total > 0)
    return np.concatenate([out, alpha.mean(axis=2)], axis=-1)
