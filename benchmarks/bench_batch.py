"""Whole-run throughput of a batch edge-detection job on a folder of photos, and its codecs.

Run from the repository root, with ``pip install -e ".[bench]"``::

    python benchmarks/bench_batch.py            # 16 photos of 2400x1800
    python benchmarks/bench_batch.py --count 32 --repeat 5 --no-mogrify-png

It builds the photo folder once (JPEG, quality 90, from ``sample_images/``)
and times whole runs on it, each into an empty output folder. Every round
runs every command once, in turn, so that a slower moment of the machine
touches all of them alike; the figures are medians over the rounds, after a
warm-up round that is dropped. Python commands run with their bytecode
cached, as an installed package has it (:func:`python_env`). The commands:

- ``convcli conv -k vertical`` with ``--jobs 1``, with the default jobs, and
  with the default jobs but without the fast codecs (``CONVCLI_FAST_CODECS=0``:
  Pillow, numpy and Python's zlib only); and ``--channels each`` (three maps
  and an RGB image per photo, to set beside libvips' one RGB PNG);
- libvips ``vips conv`` with the same 3x3 mask, PNG compression 1, one
  process per photo and as many at a time as there are CPUs (``apt-get install
  libvips-tools``): a 3-band result clipped to 0..255, not convcli's mapping;
- OpenCV doing convcli's job, in a Python script run as its own process (this
  file with ``--opencv``), one worker process per CPU: ``cv2.imread``, the
  channel sum, ``cv2.filter2D`` (reflect-101 border, as convcli), the same
  robust mapping (|x|, 99.5th percentile away from the border white) and
  ``cv2.imwrite`` at PNG compression 1 with the run-length strategy; its maps
  are checked against convcli's (levels within 1) before timing;
- ImageMagick's ``mogrify -morphology Correlate '3x3: 1,0,-1 1,0,-1 1,0,-1'``
  (``apt-get install imagemagick``), JPEG out (its default) and ``-format png``.

Then, in this process, it splits convcli's time per photo into its stages
(decoding, the convolution with the channels' sum and its border, mapping, PNG
encoding) with the functions the command line's worker calls, and compares PNG
encoders and JPEG decoders on one photo and its edge map.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from installed import convcli_command, engine_line
from PIL import Image, ImageOps

ROOT = Path(__file__).resolve().parent.parent
VERTICAL = "3x3: 1,0,-1 1,0,-1 1,0,-1"
VERTICAL_WEIGHTS = np.array([[1, 0, -1], [1, 0, -1], [1, 0, -1]], np.float32)


def make_photos(data: Path, count: int, size=(2400, 1800)) -> list[Path]:
    """Write `count` JPEG photos of `size` made from the sample images.

    They go in a folder of their own under `data`, one per count: convcli is
    given the folder, the other tools the files, so the folder holds exactly
    these photos (a folder shared by counts would give convcli the others too).
    """
    folder = data / f"photos-{count}"
    folder.mkdir(parents=True, exist_ok=True)
    sources = sorted((ROOT / "sample_images").glob("*.png"))
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"photo{i:03d}.jpg"
        paths.append(path)
        if path.exists():
            continue
        with Image.open(sources[i % len(sources)]) as src:
            img = src.convert("RGB")
        if (i // len(sources)) % 2:
            img = ImageOps.mirror(img)
        img = ImageOps.fit(img, size, Image.Resampling.LANCZOS)
        # Mild per-photo noise so no two files are alike.
        arr = np.asarray(img, dtype=np.int16) + rng.integers(-3, 4, (size[1], size[0], 3))
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(path, quality=90)
    if sorted(folder.iterdir()) != paths:
        raise SystemExit(f"{folder} holds other files than the {count} photos: remove it")
    return paths


# --- OpenCV doing convcli's job -----------------------------------------------------------


def opencv_edges(photo: str, out_dir: str) -> None:
    """convcli's default ``conv -k vertical`` map of one photo, with OpenCV."""
    import cv2

    from convcli.levels.mapping import robust_top

    bgr = cv2.imread(photo, cv2.IMREAD_COLOR)
    total = cv2.transform(bgr.astype(np.float32), np.ones((1, 3), np.float32))  # channel sum
    response = cv2.filter2D(total, cv2.CV_32F, VERTICAL_WEIGHTS, borderType=cv2.BORDER_REFLECT_101)
    scale = 255.0 / robust_top(response, margin=4)  # convcli's margin for a 3x3 kernel
    levels = cv2.convertScaleAbs(response, alpha=scale)  # |x| scaled, rounded, saturated
    name = Path(photo).stem + "_conv-vertical-sum.png"
    cv2.imwrite(
        str(Path(out_dir) / name),
        levels,
        [cv2.IMWRITE_PNG_COMPRESSION, 1, cv2.IMWRITE_PNG_STRATEGY, cv2.IMWRITE_PNG_STRATEGY_RLE],
    )


def opencv_main(out_dir: str, photos: list[str]) -> None:
    """The OpenCV script: one worker process per CPU, one OpenCV thread each."""
    from concurrent.futures import ProcessPoolExecutor

    import cv2

    cv2.setNumThreads(1)
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(opencv_edges, photos, [out_dir] * len(photos)))


# --- whole runs ------------------------------------------------------------------------------


def run_commands(commands: list[list[str]], jobs: int, env=None) -> None:
    """Run the commands, at most `jobs` at a time (one per photo, as xargs -P)."""

    def one(cmd):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, commands))


def imagemagick() -> list[str] | None:
    if shutil.which("magick"):
        return ["magick", "mogrify"]
    if shutil.which("mogrify"):
        return ["mogrify"]
    return None


def python_env(pycache: Path) -> dict[str, str]:
    """The environment for the Python commands: their bytecode cached (in `pycache`).

    An installed package has its modules compiled (pip writes the ``.pyc``);
    from a checkout with ``PYTHONDONTWRITEBYTECODE=1`` every run would compile
    convcli's modules again (about 0.1 s), which no installed run does.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(pycache)}


def batch_commands(photos: list[Path], out: Path, args) -> dict[str, callable]:
    """Label -> a function that runs the whole batch into `out` once."""
    convcli = [
        *convcli_command(),
        "conv",
        "-k",
        "vertical",
        str(photos[0].parent),
        "-o",
        str(out),
        "-q",
    ]
    env = python_env(out.parent / "pycache")
    no_fast = {**env, "CONVCLI_FAST_CODECS": "0"}
    cpus = os.cpu_count() or 1
    runs = {
        "convcli --jobs 1": lambda: run_commands([[*convcli, "--jobs", "1"]], 1, env),
        "convcli (default jobs)": lambda: run_commands([convcli], 1, env),
        "convcli, CONVCLI_FAST_CODECS=0": lambda: run_commands([convcli], 1, no_fast),
        # A colour result: the three channels' maps and one RGB image of them, per photo.
        "convcli --channels each": lambda: run_commands([[*convcli, "--channels", "each"]], 1, env),
    }
    if shutil.which("vips"):
        mask = out.parent / "vertical.mat"
        mask.write_text("3 3 1 0\n1 0 -1\n1 0 -1\n1 0 -1\n")
        runs[f"vips conv, PNG compression 1, {cpus} at a time"] = lambda: run_commands(
            [
                ["vips", "conv", str(p), f"{out / (p.stem + '.png')}[compression=1]", str(mask)]
                for p in photos
            ],
            cpus,
        )
    try:
        import cv2  # noqa: F401
    except ImportError:
        pass
    else:
        runs[f"OpenCV script, {cpus} processes"] = lambda: run_commands(
            [[sys.executable, __file__, "--opencv", str(out), *map(str, photos)]], 1, env
        )
    magick = imagemagick()
    if magick:
        for label, fmt in (
            ("ImageMagick mogrify (JPEG out)", []),
            ("ImageMagick mogrify -format png", ["-format", "png"]),
        ):
            if fmt and not args.mogrify_png:
                continue
            cmd = [
                *magick,
                "-path",
                str(out),
                *fmt,
                "-morphology",
                "Correlate",
                VERTICAL,
                *map(str, photos),
            ]
            runs[label] = lambda cmd=cmd: run_commands([cmd], 1)
    return runs


def time_rounds(runs: dict, out: Path, repeat: int) -> dict[str, float]:
    """Median seconds of each run over `repeat` interleaved rounds (after a warm-up round)."""
    times: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(repeat + 1):
        for label, run in runs.items():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            start = time.perf_counter()
            run()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(t[1:]) for label, t in times.items()}


def check_opencv_matches(photo: Path, out: Path) -> int:
    """The largest level difference between OpenCV's map and convcli's, on one photo."""
    shutil.rmtree(out, ignore_errors=True)
    (out / "opencv").mkdir(parents=True)
    opencv_edges(str(photo), str(out / "opencv"))
    with Image.open(out / "opencv" / f"{photo.stem}_conv-vertical-sum.png") as im:
        theirs = np.asarray(im).astype(int)
    subprocess.run(
        [
            *convcli_command(),
            "conv",
            "-k",
            "vertical",
            str(photo),
            "-o",
            str(out / "convcli"),
            "-q",
        ],
        check=True,
    )
    with Image.open(out / "convcli" / f"{photo.stem}_conv-vertical-sum.png") as im:
        ours = np.asarray(im).astype(int)
    return int(np.abs(theirs - ours).max())


# --- in-process splits -----------------------------------------------------------------------


def median_ms(fn, repeat: int = 7) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times), result


def stage_split(photos: list[Path], out: Path) -> dict[str, float]:
    """Median ms per photo of each stage, with the functions the command line's worker calls."""
    from convcli.app.ops import ConvOp
    from convcli.app.process import _levels
    from convcli.engines.processes import keep_freed_memory
    from convcli.io.image_files import save_levels
    from convcli.io.images import read_image
    from convcli.kernels import parse_kernel_spec

    keep_freed_memory()  # as in the command line's workers
    op = ConvOp((parse_kernel_spec("vertical"),))
    stages: dict[str, list[float]] = {s: [] for s in ("decode", "conv", "mapping", "encode")}
    for number, photo in enumerate(photos):
        start = time.perf_counter()
        pic = read_image(photo)  # 8-bit samples, not converted to float32
        read = time.perf_counter() - start
        start = time.perf_counter()
        data = np.asarray(op.compute(pic), dtype=np.float32)  # the sum, its border, the conv
        conv = time.perf_counter() - start
        start = time.perf_counter()
        levels, _ = _levels(data, 0, op.mappings(pic)[0], 8)
        mapping = time.perf_counter() - start
        start = time.perf_counter()
        # A new file each time, as the batch writes them: replacing one file over and over
        # (ext4 then writes the new file out at the rename) took 5 ms a photo more.
        save_levels(out / f"map{number}.png", levels, fmt="png", overwrite=True)
        encode = time.perf_counter() - start
        for stage, sec in zip(stages, (read, conv, mapping, encode), strict=True):
            stages[stage].append(1000 * sec)
    return {stage: statistics.median(ms) for stage, ms in stages.items()}


def png_encoders(levels: np.ndarray) -> list[tuple[str, float, int]]:
    """(encoder, ms, bytes) for the PNG encoders that are installed, on `levels`."""
    from convcli.io import png
    from convcli.layers._engine import native

    def ours(backend, engine="numpy"):
        def encode():
            before = native.use_engine(engine)
            try:
                buf = io.BytesIO()
                png.write_png(buf, levels, backend=backend)
                return buf.getvalue()
            finally:
                native.use_engine(before)

        return encode

    def pillow():
        buf = io.BytesIO()
        options = {"compress_type": zlib.Z_RLE} if levels.ndim == 2 else {}
        Image.fromarray(levels).save(buf, format="PNG", compress_level=1, **options)
        return buf.getvalue()

    encoders = {
        "Pillow, level 1": pillow,
        "numpy Up + zlib level 1 RLE (fallback)": ours("zlib"),
    }
    try:
        from zlib_ng import zlib_ng

        def zlibng():
            filtered = np.empty((levels.shape[0], 1 + levels[0].size), np.uint8)
            filtered[:, 0] = 2
            rows = levels.reshape(levels.shape[0], -1)
            filtered[0, 1:] = rows[0]
            np.subtract(rows[1:], rows[:-1], out=filtered[1:, 1:])
            c = zlib_ng.compressobj(1, zlib.DEFLATED, 15, 9, zlib.Z_RLE)
            return c.compress(filtered) + c.flush()  # the deflate only: no chunks

        encoders["numpy Up + zlib-ng level 1 RLE"] = zlibng
    except ImportError:
        pass
    if png.deflate_backend() == "isal":
        encoders["numpy Up + ISA-L level 1 (numpy engines)"] = ours("isal")
        if native.active():
            encoders["Up + native Huffman or ISA-L (convcli)"] = ours("isal", "native")
    try:
        import cv2

        bgr = levels[:, :, ::-1] if levels.ndim == 3 else levels
        encoders["OpenCV imencode, level 1 RLE Up"] = lambda: cv2.imencode(
            ".png",
            bgr,
            [
                cv2.IMWRITE_PNG_COMPRESSION,
                1,
                cv2.IMWRITE_PNG_STRATEGY,
                cv2.IMWRITE_PNG_STRATEGY_RLE,
                cv2.IMWRITE_PNG_FILTER,
                cv2.IMWRITE_PNG_FILTER_UP,
            ],
        )[1]
    except ImportError:
        pass
    try:
        import imagecodecs

        encoders["imagecodecs png_encode, level 1 RLE Up"] = lambda: imagecodecs.png_encode(
            levels, level=1, strategy=3, filter=32
        )
    except ImportError:
        pass
    rows = []
    for label, encode in encoders.items():
        ms, data = median_ms(encode)
        rows.append((label, ms, len(data)))
    return rows


def jpeg_decoders(photo: Path) -> list[tuple[str, float]]:
    """(decoder, ms) for the JPEG decoders that are installed, on `photo` (RGB out)."""
    data = photo.read_bytes()

    def pillow():
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return np.asarray(im)

    decoders = {"Pillow (no draft or reduce)": pillow}
    try:
        import simplejpeg

        decoders["simplejpeg (convcli)"] = lambda: simplejpeg.decode_jpeg(data, "RGB", strict=True)
    except ImportError:
        pass
    try:
        import cv2

        decoders["OpenCV imdecode"] = lambda: cv2.imdecode(
            np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR
        )
    except ImportError:
        pass
    try:
        from turbojpeg import TurboJPEG

        turbo = TurboJPEG()  # needs the system's libturbojpeg
        decoders["PyTurboJPEG"] = lambda: turbo.decode(data)
    except (ImportError, RuntimeError, OSError):
        pass
    return [(label, median_ms(decode)[0]) for label, decode in decoders.items()]


def main(argv=None) -> None:
    if argv is None and sys.argv[1:2] == ["--opencv"]:
        opencv_main(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "convcli-bench")
    parser.add_argument(
        "--no-mogrify-png",
        dest="mogrify_png",
        action="store_false",
        help="leave out mogrify -format png (about 20 s a run)",
    )
    args = parser.parse_args(argv)

    photos = make_photos(args.data, args.count)
    out = args.data / "out"
    n = len(photos)
    cpus = os.cpu_count()
    runs = batch_commands(photos, out, args)
    if any(label.startswith("OpenCV") for label in runs):
        print(
            f"OpenCV's map against convcli's, one photo: levels differ by at most "
            f"{check_opencv_matches(photos[0], out)}"
        )
    medians = time_rounds(runs, out, args.repeat)

    print(
        f"\n{n} photos of 2400x1800 (JPEG q90), {cpus} CPUs, medians of {args.repeat} "
        f"interleaved rounds; convcli's {engine_line()}"
    )
    default = medians["convcli (default jobs)"]
    print(f"{'command':48s} {'seconds':>8s} {'photos/s':>9s} {'convcli default vs it':>22s}")
    for label, seconds in medians.items():
        print(f"{label:48s} {seconds:8.2f} {n / seconds:9.1f} {seconds / default:21.2f}x")

    stages = stage_split(photos, out)
    total = sum(stages.values())
    print(
        f"\nconvcli per photo, one process (median ms of {n} photos): "
        + ", ".join(f"{stage} {ms:.1f} ({100 * ms / total:.0f}%)" for stage, ms in stages.items())
        + f"; total {total:.1f}"
    )

    from convcli.io.images import read_image

    pic = read_image(photos[0])
    from convcli.app.ops import ConvOp
    from convcli.app.process import _levels
    from convcli.kernels import parse_kernel_spec

    op = ConvOp((parse_kernel_spec("vertical"),))
    edge_map, _ = _levels(np.asarray(op.compute(pic), np.float32), 0, op.mappings(pic)[0], 8)
    photo = pic.pixels.astype(np.uint8)
    for title, levels in (
        ("the edge map (2400x1800 grey)", edge_map),
        ("the photo (2400x1800 RGB)", photo),
    ):
        rows = png_encoders(levels)
        base = rows[0][2]
        print(f"\nPNG encoders on {title}, median ms of 7")
        for label, ms, size in rows:
            print(f"{label:44s} {ms:7.1f} ms {size / 1024:8.0f} KB {size / base:6.2f}x size")
    print("\nJPEG decoders on one photo, median ms of 7")
    for label, ms in jpeg_decoders(photos[0]):
        print(f"{label:44s} {ms:7.1f} ms")


if __name__ == "__main__":
    main()
