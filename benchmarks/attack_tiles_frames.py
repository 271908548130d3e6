"""Seeded attacks on frames, strips, the separable engine and --engine: a table of findings.

Each attack runs the command line (a subprocess, as a user would) on hostile
inputs or at hostile moments and checks what the project promises: exit 0, 1
or 2 with one line per error and no traceback; no partial file under a final
name; temporaries named as such; every output left in the manifest; strips
and frame groups equal to the whole run. Run it from the repository root::

    python benchmarks/attack_tiles_frames.py [--seed 0] [--only NAME] [--work DIR]

It prints a Markdown table: attack, trials, failures, worst seen.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
CLI = [sys.executable, "-m", "convcli"]


class Trial:
    """One attack's counts: trials, failures and the worst thing seen."""

    def __init__(self, name: str):
        self.name, self.trials, self.failures, self.worst = name, 0, 0, "-"
        self.worst_rank = -1.0

    def record(self, failed: str | None, seen: str = "", rank: float = 0.0) -> None:
        self.trials += 1
        if failed:
            self.failures += 1
            print(f"  {self.name[:30]}: {seen}: {failed}", file=sys.stderr)
            seen, rank = f"FAIL: {failed}", 1e18
        if seen and rank >= self.worst_rank:
            self.worst, self.worst_rank = seen, rank


def cli(*args, stdin=None, timeout=120, cwd=None):
    """Run convcli; (exit status, stdout bytes, stderr text, seconds)."""
    start = time.monotonic()
    done = subprocess.run(
        [*CLI, *map(str, args)], input=stdin, capture_output=True, env=ENV, timeout=timeout, cwd=cwd
    )
    return (
        done.returncode,
        done.stdout,
        done.stderr.decode(errors="replace"),
        time.monotonic() - start,
    )


def problems(code: int, err: str, folder: Path | None = None) -> str | None:
    """What breaks the rules in one run's exit status, stderr and output folder, or None."""
    if code not in (0, 1, 2):
        return f"exit {code}"
    if "Traceback" in err or "internal error" in err:
        return "traceback: " + err.strip().splitlines()[-1][:120]
    bad = [line for line in err.splitlines() if line and not line.startswith("convcli")]
    if bad:
        return f"stray stderr line {bad[0][:100]!r}"
    if folder is not None and folder.exists():
        return manifest_problems(folder)
    return None


def manifest_problems(folder: Path) -> str | None:
    """Every final file in the manifest, every manifest line a file that is there."""
    manifest = folder / "convcli-manifest.jsonl"
    listed = set()
    if manifest.exists():
        for line in manifest.read_text().splitlines():
            listed.add(json.loads(line)["output"])
    files = {
        p.name
        for p in folder.iterdir()
        if p.name != manifest.name and not p.name.startswith(".convcli-")
    }
    if files - listed:
        return f"not in the manifest: {sorted(files - listed)[:3]}"
    if listed - files:
        return f"in the manifest, not there: {sorted(listed - files)[:3]}"
    return None


def frames(rng, count, size=(12, 10), mode="RGB"):
    return [
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), np.uint8)).convert(mode)
        for _ in range(count)
    ]


def chunks(data: bytes):
    """(offset, type, body) of each PNG chunk."""
    at = 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        yield at, kind, data[at + 8 : at + 8 + length]
        at += 12 + length


def with_chunk(data: bytes, at: int, kind: bytes, body: bytes) -> bytes:
    """`data` with the chunk at `at` replaced by `body`, its CRC right."""
    (length,) = struct.unpack(">I", data[at : at + 4])
    crc = struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    return data[:at] + struct.pack(">I", len(body)) + kind + body + crc + data[at + 12 + length :]


# --- the attacks -----------------------------------------------------------------------------


def hostile_frame_files(work: Path, rng, t: Trial) -> None:
    """GIF of 0 delays and of 3000 frames, APNGs with bad fcTL, mixed TIFF pages, truncations."""
    cases = []
    f = frames(rng, 3)
    f[0].save(work / "zero.gif", save_all=True, append_images=f[1:], duration=0)
    cases.append(work / "zero.gif")
    many = frames(rng, 3000, size=(2, 2))
    many[0].save(work / "many.gif", save_all=True, append_images=many[1:], duration=10)
    cases.append(work / "many.gif")
    f[0].save(work / "good.png", save_all=True, append_images=f[1:], duration=[0, 50, 70])
    data = (work / "good.png").read_bytes()
    fctl = [(at, body) for at, kind, body in chunks(data) if kind == b"fcTL"]
    for k in range(12):
        at, body = fctl[k % len(fctl)]
        body = bytearray(body)
        field = int(rng.integers(0, 8))  # seq, w, h, x, y, delay num/den, dispose/blend
        spans = [(0, 4), (4, 8), (8, 12), (12, 16), (16, 20), (20, 22), (22, 24), (24, 26)]
        lo, hi = spans[field]
        body[lo:hi] = rng.integers(0, 256, hi - lo, np.uint8).tobytes()
        if k % 3 == 0:
            body[lo:hi] = b"\xff" * (hi - lo)
        path = work / f"fctl{k}.png"
        path.write_bytes(with_chunk(data, at, b"fcTL", bytes(body)))
        cases.append(path)
    pages = [
        np.zeros((6, 7), np.uint8),
        np.ones((6, 7, 3), np.uint16) * 900,
        np.full((5, 4), 0.5, np.float32),
        np.zeros((6, 7, 4), np.uint8),
    ]
    with tifffile.TiffWriter(work / "mixed.tif") as tif:
        for page in pages:
            tif.write(page, photometric="rgb" if page.ndim == 3 else "minisblack")
    cases.append(work / "mixed.tif")
    f[0].save(work / "anim.webp", save_all=True, append_images=f[1:], duration=40)
    f[0].save(work / "anim.tif", save_all=True, append_images=f[1:])
    for k in range(16):
        source = work / ["anim.webp", "anim.tif", "good.png", "zero.gif"][k % 4]
        blob = source.read_bytes()
        path = work / f"cut{k}{source.suffix}"
        path.write_bytes(blob[: int(rng.integers(len(blob) // 4, len(blob)))])
        cases.append(path)
    for path in cases:
        out = work / f"out-{path.stem}"
        fmt = ["png", "tiff", "npy", "jpg"][int(rng.integers(4))]
        code, _, err, took = cli("conv", "-k", "box", path, "-o", out, "--format", fmt, "-q")
        t.record(problems(code, err, out), f"{path.name} {fmt}: exit {code} in {took:.1f} s", took)


def frame_lists(work: Path, rng, t: Trial) -> None:
    """Hostile --frames values."""
    f = frames(rng, 3)
    f[0].save(work / "a.gif", save_all=True, append_images=f[1:], duration=50)
    values = [
        "0-99999999",
        "0-" + "9" * 40,
        "9" * 30,
        "",
        ",",
        "-1",
        "1-",
        "0,,1",
        "first,all",
        " 0 - 2 ",
        "2,1,0,2",
        "0-1048576",
        "1e3",
        "٣",
        "0x1",
        "1" + "0" * 5000,
    ]
    for value in values:
        code, _, err, took = cli("pool", work / "a.gif", "-o", work / "fl", "--frames", value, "-q")
        failed = problems(code, err) or (took > 20 and f"took {took:.0f} s")
        t.record(failed, f"{value[:20]!r}: exit {code} in {took:.1f} s", took)


def frames_with_other_options(work: Path, rng, t: Trial) -> None:
    """Stacks with -o FILE, --figure, - pipes, --dry-run, every output format."""
    f = frames(rng, 4)
    f[0].save(work / "s.gif", save_all=True, append_images=f[1:], duration=50)
    stdin = (work / "s.gif").read_bytes()
    runs = [
        (["-o", work / "one.png"], None),
        (["-o", work / "one.tif"], None),
        (["-o", work / "one.jpg"], None),
        (["-o", work / "one.npy", "--format", "npy"], None),
        (["-o", "-"], None),
        (["--figure", "-o", work / "fig"], None),
        (["--figure", "-o", work / "fig.png"], None),
        (["-n", "-o", work / "dry"], None),
        (["-o", work / "z", "--format", "zarr"], None),
        (["-o", "-", "--format", "npy"], None),
        (["-o", work / "fr2", "--frames", "2"], None),
        (["-o", "-", "--frames", "1"], None),
    ]
    for extra, _ in runs:
        for source in ("file", "pipe"):
            args = [work / "s.gif"] if source == "file" else ["-"]
            code, out, err, took = cli(
                "conv", "-k", "sobel-x", *args, *extra, stdin=stdin if source == "pipe" else None
            )
            target = next((Path(a) for a in extra if isinstance(a, Path)), None)
            failed = problems(code, err, target if target and target.is_dir() else None)
            if code == 0 and "-" in extra and not out:
                failed = "exit 0 and nothing on stdout"
            t.record(failed, f"{source} {' '.join(map(str, extra))[-40:]}: exit {code}")


def _tiff(path: Path, rng, height: int, width: int, *, odd=False, channels=3):
    pixels = rng.integers(0, 256, (height, width, channels)).astype(np.uint8)
    if odd:
        pixels = pixels.astype(np.float32)
        pixels.flat[rng.integers(0, pixels.size, 20)] = np.nan
        pixels.flat[rng.integers(0, pixels.size, 20)] = np.inf
        pixels.flat[rng.integers(0, pixels.size, 20)] = -np.inf
    tifffile.imwrite(
        path,
        pixels,
        tile=(64, 64) if rng.integers(2) else None,
        rowsperstrip=int(rng.integers(1, 64)),
        compression="zlib",
    )
    return path


def _same_outputs(a: Path, b: Path) -> str | None:
    names_a = sorted(p.name for p in a.iterdir() if p.suffix != ".jsonl")
    names_b = sorted(p.name for p in b.iterdir() if p.suffix != ".jsonl")
    if names_a != names_b:
        return f"names differ {names_a[:2]} vs {names_b[:2]}"
    for name in names_a:
        x, y = _values(a / name), _values(b / name)
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            return f"{name} differs"
    return None


def _values(path: Path) -> np.ndarray:
    if path.suffix == ".npy":
        return np.load(path)
    if path.suffix in (".tif", ".tiff"):
        return tifffile.imread(path)
    if path.is_dir():
        import zarr

        group = zarr.open_group(str(path), mode="r")
        return np.asarray(group[next(iter(sorted(group.array_keys())))])
    return np.asarray(Image.open(path))


def strips_equal_whole(work: Path, rng, t: Trial, *, odd: bool = False) -> None:
    """Random strip runs (--memory) against the whole run, bit for bit."""
    for k in range(14 if not odd else 10):
        height, width = int(rng.integers(300, 900)), int(rng.integers(200, 700))
        src = _tiff(
            work / f"h{k}.tif", rng, height, width, odd=odd, channels=int(rng.choice([1, 3]))
        )
        command = [
            [
                "conv",
                "-k",
                str(rng.choice(["box", "sobel-x", "gaussian", "edge"])),
                "--stride",
                str(int(rng.integers(1, 3))),
            ],
            [
                "pool",
                "--size",
                str(int(rng.integers(2, 5))),
                "--mode",
                str(rng.choice(["max", "average"])),
            ],
            [
                "pad",
                "--pad",
                str(int(rng.integers(0, 9))),
                "--mode",
                str(rng.choice(["reflect", "edge", "wrap", "constant"])),
            ],
        ][k % 3]
        fmt = str(rng.choice(["npy", "tiff", "png"] if not odd else ["npy", "tiff"]))
        extra = ["--normalize", "none"] if fmt != "png" and command[0] == "conv" and odd else []
        whole, strips = work / f"w{k}", work / f"s{k}"
        a = cli(*command, src, "-o", whole, "--format", fmt, "-q", *extra)
        b = cli(*command, src, "-o", strips, "--format", fmt, "-v", "--memory", "1M", *extra)
        failed = problems(a[0], a[2], whole) or problems(b[0], b[2], strips)
        if not failed and a[0] == 0:
            if "strips" not in b[2]:
                failed = "not run in strips"
            else:
                failed = _same_outputs(whole, strips)
        t.record(failed, f"{height}x{width} {' '.join(command)} {fmt}: equal")


def strip_targets(work: Path, rng, t: Trial) -> None:
    """Strips into zarr, -o FILE, -o - and on a local Dask cluster: the whole run's values."""
    src = _tiff(work / "t.tif", rng, 1100, 700)
    runs = [
        ["--format", "zarr"],
        ["-o", "FILE.tif"],
        ["-o", "FILE.npy", "--format", "npy"],
        ["-o", "-", "--format", "npy"],
        ["-o", "FILE.png"],
        ["--format", "tiff", "-r"],
        ["--scheduler", "local", "-j", "2", "--format", "npy"],
        ["--scheduler", "local", "-j", "2", "--format", "zarr"],
    ]
    for k, extra in enumerate(runs):
        op = ["conv", "-k", str(rng.choice(["box", "sobel-x", "gaussian"]))]
        whole, strips = work / f"tw{k}", work / f"ts{k}"
        for folder in (whole, strips):
            folder.mkdir()
        args = [a.replace("FILE", "") for a in extra]
        if "FILE" in " ".join(extra):
            name = "r" + extra[1].replace("FILE", "")
            args = [whole / name if a.startswith(".") else a for a in args]
            a = cli(*op, src, *args, "-q")
            args = [strips / name if isinstance(a, Path) else a for a in args]
            b = cli(*op, src, *args, "-q", "--memory", "1M")
        elif "-" in extra:
            a = cli(*op, src, *args, "-q")
            b = cli(*op, src, *args, "-q", "--memory", "1M")
            (whole / "r.npy").write_bytes(a[1])
            (strips / "r.npy").write_bytes(b[1])
        else:
            a = cli(*op, src, "-o", whole, *args, "-q", timeout=300)
            b = cli(*op, src, "-o", strips, *args, "-q", "--memory", "1M", timeout=300)
        folders = not any(a.startswith(("FILE", "-")) for a in extra[1:2])  # no manifest else
        failed = problems(a[0], a[2], whole if folders else None) or problems(
            b[0], b[2], strips if folders else None
        )
        if not failed and a[0] == b[0] == 0:
            failed = _same_outputs(whole, strips)
        elif not failed:
            failed = f"exit {a[0]} whole, {b[0]} in strips: {b[2].strip()[:80]}"
        t.record(failed, f"{' '.join(extra)}: equal")


def hostile_tiff_tags(work: Path, rng, t: Trial) -> None:
    """Tiled and stripped TIFFs read in strips, one tag's value (size, tiles, offsets) garbled."""
    tags = [
        "ImageWidth",
        "ImageLength",
        "TileWidth",
        "TileLength",
        "RowsPerStrip",
        "StripOffsets",
        "TileOffsets",
        "StripByteCounts",
        "TileByteCounts",
        "BitsPerSample",
        "SamplesPerPixel",
        "Compression",
        "Predictor",
    ]
    for k in range(30):
        path = work / f"tag{k}.tif"
        pixels = rng.integers(0, 256, (700, 500, 3), np.uint8)
        tiled = bool(k % 2)
        tifffile.imwrite(
            path,
            pixels,
            tile=(64, 64) if tiled else None,
            rowsperstrip=32,
            compression="zlib",
            predictor=bool(k % 3 == 0),
        )
        with tifffile.TiffFile(path) as tif:
            present = [tif.pages[0].tags[name] for name in tags if name in tif.pages[0].tags]
        tag = present[int(rng.integers(len(present)))]
        data = bytearray(path.read_bytes())
        at, size = tag.valueoffset, tag.dtype.itemsize if hasattr(tag.dtype, "itemsize") else 4
        size = max(1, min(size, 4))
        value = [0, 1, 0xFFFF, int(rng.integers(0, 1 << 16))][int(rng.integers(4))]
        data[at : at + min(size, 2)] = value.to_bytes(4, "little")[: min(size, 2)]
        path.write_bytes(bytes(data))
        out = work / f"tag-out{k}"
        code, _, err, took = cli(
            "conv",
            "-k",
            "box",
            path,
            "-o",
            out,
            "--memory",
            "1M",
            "--format",
            "tiff",
            "-q",
            timeout=300,
        )
        t.record(
            problems(code, err, out),
            f"{tag.name}={value}: exit {code} in {took:.1f} s "
            f"{err.strip().splitlines()[0][-60:] if err.strip() else ''}",
            took,
        )


def _stack_file(work: Path, rng, count=40, size=(160, 120)):
    f = frames(rng, count, size=size)
    path = work / "stack.tif"
    f[0].save(path, save_all=True, append_images=f[1:])
    return path


def killed_runs(work: Path, rng, t: Trial) -> None:
    """SIGKILL, SIGINT or SIGTERM at a random moment of a strips run and a stack run."""
    big = _tiff(work / "big.tif", rng, 3000, 1500)
    stack = _stack_file(work, rng, count=200, size=(320, 240))  # about 3 s, as the strips
    startup = finished_runs = early_deaths = sigint_deaths = 0
    for k in range(36):
        sig = [signal.SIGKILL, signal.SIGINT, signal.SIGTERM][k % 3]
        src, extra = [
            (big, ["--memory", "2M", "--format", "tiff"]),
            (stack, ["--memory", "1M", "--format", "tiff"]),
        ][k // 3 % 2]
        out = work / f"kill{k}"
        proc = subprocess.Popen(
            [*CLI, "conv", "-k", "gaussian", src, "-o", out, *extra],
            env=ENV,
            stderr=subprocess.PIPE,
        )
        time.sleep(float(rng.uniform(0.02, 2.5)))
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            t.record(f"{sig.name}: no exit in 30 s")
            continue
        err = err.decode(errors="replace")
        failed = None
        if sig != signal.SIGKILL and "Traceback" in err:
            if "convcli/" in err:
                failed = f"{sig.name}: traceback"
                print(err, file=sys.stderr)
            else:  # Python's own start-up (site, .pth files), before convcli's first line
                startup += 1
        if out.exists():
            failed = failed or manifest_problems(out)
            left = [p.name for p in out.iterdir() if p.name.startswith(".convcli-")]
            if left and sig != signal.SIGKILL:
                failed = failed or f"{sig.name} left {left}"
            for p in out.iterdir():
                if p.suffix in (".tif", ".tiff") and not p.name.startswith("."):
                    try:
                        tifffile.imread(p)
                    except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
                        failed = failed or f"partial {p.name}: {exc}"
            if left and sig == signal.SIGKILL:  # the next run, a minute on, cleans them
                for p in out.iterdir():
                    if p.name.startswith(".convcli-"):
                        os.utime(p, (time.time() - 120, time.time() - 120))
                code, _, err2, _ = cli("conv", "-k", "gaussian", src, "-o", out, *extra, "-q")
                still = [p.name for p in out.iterdir() if p.name.startswith(".convcli-")]
                failed = failed or problems(code, err2, out) or (still and f"kept {still}")
        finished = proc.returncode == 0 and "interrupted" not in err  # before the signal
        finished_runs += finished
        early = proc.returncode == -sig and not err  # in start-up: the default action, 128 + sig
        early_deaths += early
        # "convcli: interrupted" then death by SIGINT: a shell sees 130 all the same
        died = proc.returncode == -signal.SIGINT and err.strip() == "convcli: interrupted"
        sigint_deaths += died
        early = early or died
        if (
            not failed
            and not finished
            and not early
            and sig != signal.SIGKILL
            and proc.returncode != {signal.SIGINT: 130, signal.SIGTERM: 143}[sig]
        ):
            failed = f"{sig.name}: exit {proc.returncode}"
        t.record(
            failed,
            f"{startup} traceback(s) and {early_deaths} silent deaths by the signal "
            f"in Python's start-up; {sigint_deaths} 'interrupted' then status -2, not 130; "
            f"{finished_runs} runs ended before the signal",
        )


def disk_full(work: Path, rng, t: Trial) -> None:
    """Strips and stacks into a 1-3 MB tmpfs."""
    big = _tiff(work / "df.tif", rng, 1500, 1200)
    stack = _stack_file(work, rng, count=30)
    mount = work / "full"
    mount.mkdir()
    full = 0
    for k in range(12):
        size = int(rng.integers(1, 4))
        src, extra = [(big, ["--memory", "2M"]), (stack, ["--memory", "1M"])][k % 2]
        fmt = ["tiff", "npy", "png"][k % 3]
        script = (
            f"mount -t tmpfs -o size={size}m tmpfs {mount} && "
            f"{' '.join(CLI)} conv -k box {src} -o {mount}/o --format {fmt} -q; "
            f"echo rc=$?; ls -a {mount}/o 2>/dev/null | grep -c convcli- ; "
            f"cp -r {mount}/o {work}/copy{k} 2>/dev/null; true"
        )
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", script], capture_output=True, env=ENV, timeout=300
        )
        out, err = done.stdout.decode(), done.stderr.decode(errors="replace")
        code = int(out.split("rc=")[1].split()[0]) if "rc=" in out else -1
        copy = work / f"copy{k}"
        failed = problems(code, err, copy)
        for path in copy.iterdir() if copy.exists() else ():
            if not path.name.startswith(".") and path.suffix != ".jsonl":
                try:
                    _values(path)
                except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
                    failed = failed or f"{path.name} unreadable: {exc}"
        if "rc=" in out and out.split()[1] != "0" and int(out.split()[1]) > 1:
            failed = failed or f"temporaries left: {out.split()[1]}"
        full += "no space" in err
        t.record(
            failed,
            f"{full} of {k + 1} runs out of space, each on one line; last: "
            f"{err.strip().splitlines()[0][-70:] if err.strip() else ''}",
        )


def stacks_nan(work: Path, rng, t: Trial) -> None:
    """Float TIFF stacks with NaN and inf: grouped (--memory) equals whole, no traceback."""
    for k in range(10):
        m = int(rng.integers(2, 12))
        pages = rng.standard_normal((m, 60, 50)).astype(np.float32) * 100
        pages.flat[rng.integers(0, pages.size, 30)] = np.nan
        pages.flat[rng.integers(0, pages.size, 30)] = [np.inf, -np.inf][k % 2]
        if k == 9:
            pages[:] = np.nan
        path = work / f"nan{k}.tif"
        with tifffile.TiffWriter(path) as tif:
            for page in pages:
                tif.write(page)
        fmt = ["npy", "tiff", "png"][k % 3]
        op = [["conv", "-k", "box"], ["pool", "--size", "3"], ["grad", "pool"]][k % 3]
        a, b = work / f"nw{k}", work / f"ng{k}"
        ra = cli(*op, path, "-o", a, "--format", fmt, "-q")
        rb = cli(*op, path, "-o", b, "--format", fmt, "-q", "--memory", "64K")
        failed = problems(ra[0], ra[2], a) or problems(rb[0], rb[2], b)
        if not failed and ra[0] == 0 and rb[0] == 0:
            failed = _same_outputs(a, b)
        elif not failed and ra[0] != rb[0]:
            failed = f"exit {ra[0]} whole, {rb[0]} grouped"
        t.record(failed, f"{m} frames {' '.join(op)} {fmt}: exit {ra[0]}/{rb[0]}")


def mixed_stacks(work: Path, rng, t: Trial) -> None:
    """Multi-page TIFFs of pages of random sizes, modes and dtypes; grouped vs whole."""
    for k in range(16):
        m = int(rng.integers(1, 9))
        path = work / f"mix{k}.tif"
        with tifffile.TiffWriter(path) as tif:
            same = rng.integers(2) == 0
            shape = (int(rng.integers(3, 40)), int(rng.integers(3, 40)))
            for _ in range(m):
                if not same:
                    shape = (int(rng.integers(3, 40)), int(rng.integers(3, 40)))
                channels = int(rng.choice([1, 3, 4]))
                dtype = rng.choice([np.uint8, np.uint16, np.float32]) if not same else np.uint8
                page = (rng.random((*shape, channels)) * 200).astype(dtype)
                tif.write(
                    page[..., 0] if channels == 1 else page,
                    photometric="minisblack" if channels == 1 else "rgb",
                    extrasamples=[2] if channels == 4 else None,
                )
        op = [
            ["conv", "-k", "box"],
            ["pool", "--size", "2"],
            ["pad", "--pad", "2"],
            ["grad", "conv", "-k", "sobel-x"],
        ][k % 4]
        fmt = ["png", "tiff", "npy", "jpg"][k // 4 % 4]
        a, b = work / f"mw{k}", work / f"mg{k}"
        ra = cli(*op, path, "-o", a, "--format", fmt, "-q")
        rb = cli(*op, path, "-o", b, "--format", fmt, "-q", "--memory", "64K")
        failed = problems(ra[0], ra[2], a) or problems(rb[0], rb[2], b)
        if not failed and ra[0] == rb[0] == 0:
            failed = _same_outputs(a, b)
        elif not failed and (ra[0], ra[2]) != (rb[0], rb[2].replace(str(b), str(a))):
            failed = f"exit {ra[0]} whole, {rb[0]} grouped: {rb[2].strip()[:80]}"
        t.record(
            failed,
            f"{m} pages {' '.join(op)} {fmt}: exit {ra[0]} "
            f"{ra[2].strip().splitlines()[0][-60:] if ra[2].strip() else ''}",
        )


def borderline_rank_one(work: Path, rng, t: Trial) -> None:
    """Kernels a hair from rank 1: the separable engine against a float64 oracle."""
    sys.path.insert(0, str(ROOT))
    from convcli.layers import conv
    from convcli.layers._engine.separable import rank_one_factors

    worst, took_separable = 0.0, 0
    for k in range(30):
        f_h, f_w = int(rng.integers(3, 16)), int(rng.integers(3, 16))
        u, v = rng.standard_normal(f_h), rng.standard_normal(f_w)
        scale = 10.0 ** float(rng.uniform(-30, 30))
        K = np.outer(u, v) * scale
        eps = 0.0 if k % 4 == 0 else np.finfo(np.float32).eps * 10.0 ** float(rng.uniform(-5, 1))
        K = K + eps * np.abs(K).max() * rng.standard_normal(K.shape)
        A = rng.standard_normal((2, 40, 37, 1)).astype(np.float32) * 50
        W = K.astype(np.float32)[:, :, None, None]
        with np.errstate(all="ignore"):
            Z, _ = conv.conv_forward(
                A, W, np.zeros((1, 1, 1, 1), np.float32), {"stride": 1, "pad": 0}
            )
        oracle = np.zeros((2, 40 - f_h + 1, 37 - f_w + 1))
        for i in range(f_h):
            for j in range(f_w):
                oracle += A[:, i : i + oracle.shape[1], j : j + oracle.shape[2], 0].astype(
                    np.float64
                ) * float(W[i, j, 0, 0])
        bound = np.abs(A).max() * np.abs(W).sum() * f_h * f_w * np.finfo(np.float32).eps * 4
        err = float(np.max(np.abs(Z[..., 0] - oracle)))
        failed = (
            None
            if err <= bound and np.all(np.isfinite(Z)) == np.all(np.isfinite(oracle))
            else f"error {err:.3g} > bound {bound:.3g} (scale {scale:.1e})"
        )
        worst = max(worst, err / bound if bound else 0)
        took_separable += rank_one_factors(W[:, :, 0, 0]) is not None
        t.record(
            failed, f"error {worst:.2g} of the bound ({took_separable} taken as rank 1)", worst
        )


def check_hostile_kernels(work: Path, rng, t: Trial) -> None:
    """kernels --check on files no one should write."""
    texts = [
        "",
        "\n\n",
        "nan nan\nnan nan",
        "inf 0\n0 0",
        "1e308 1e308\n1e308 1e308",
        "1 2\n3",
        "0 0\n0 0",
        "1",
        "1e-320 1e-320\n1e-320 1e-320",
        "1 " * 5000,
        "\n".join(["1"] * 5000),
        "\x00\x01\x02",
        "scale = 1/0\n1 1\n1 1",
        "[[1,2],[3,4]]",
        "1 2\n2 4.0000001",
        "-0 -0\n-0 -0",
        "1e400 1\n1 1",
        "1 2 1\n2 4 2\n1 2 1\n" * 200,
    ]
    for k, text in enumerate(texts):
        path = work / f"k{k}.txt"
        path.write_text(text) if "\x00" not in text else path.write_bytes(text.encode())
        code, out, err, took = cli("kernels", "--check", path)
        failed = problems(code, err)
        if code == 0 and not out:
            failed = failed or "exit 0 and nothing said"
        t.record(failed, f"{text[:16]!r}: exit {code} in {took:.1f} s", took)
    os.mkfifo(work / "fifo.txt")
    (work / "loop.txt").symlink_to(work / "loop.txt")
    (work / "broken.txt").symlink_to(work / "gone.txt")
    for special in ("fifo.txt", "loop.txt", "broken.txt", "/dev/zero", "/dev/urandom"):
        code, _, err, took = cli("kernels", "--check", work / special, timeout=20)
        t.record(problems(code, err), f"{special}: exit {code} in {took:.1f} s", took)
    blob = rng.integers(0, 256, 4096, np.uint8).tobytes()
    for name in ("rand.txt", "rand.npy", "rand.toml"):
        (work / name).write_bytes(blob)
        code, _, err, _ = cli("kernels", "--check", work / name)
        t.record(problems(code, err), f"{name}: exit {code}")


def engine_option(work: Path, rng, t: Trial) -> None:
    """--engine values and combinations."""
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(work / "e.png")
    runs = [
        ["--engine", "bogus"],
        ["--engine", ""],
        ["--engine", "DASK"],
        ["--engine", "processes", "--scheduler", "tcp://127.0.0.1:1"],
        ["--engine", "processes", "--files-per-task", "3"],
        ["--engine", "dask", "--scheduler", "tcp://127.0.0.1:1"],
        ["--engine", "processes", "-o", "memory://x"],
        ["--engine", "processes", "-j", "3"],
        ["--engine", "processes", "-o", "-"],
        ["--engine", "dask", "-o", "-"],
        ["--engine", "dask", "-o", "memory://x"],
        ["--engine", "dask", "--files-per-task", "0"],
        ["--engine", "processes", "--scheduler-file", work / "none.json"],
        ["--engine", "dask", "--scheduler-file", work / "none.json"],
        ["--engine", "dask", "--scheduler", "local", "-j", "1"],
    ]
    for extra in runs:
        extra = [a for a in extra]
        if "-o" not in extra:
            extra += ["-o", work / "eo"]
        code, _, err, took = cli("pool", work / "e.png", *extra, timeout=60)
        t.record(
            problems(code, err) or (took > 15 and f"took {took:.0f} s"),
            f"{' '.join(map(str, extra))[:50]}: exit {code} in {took:.1f} s",
            took,
        )


ATTACKS = {
    (
        "hostile frame files (0-delay GIF, 3000-frame GIF, bad fcTL, mixed TIFF pages, cuts)"
    ): hostile_frame_files,
    "--frames lists (0-99999999, 40 digits, empty, unicode digits)": frame_lists,
    "frames + -o FILE / --figure / - pipes / --dry-run / zarr": frames_with_other_options,
    "strips (--memory 1M) vs whole run, random TIFFs and ops": strips_equal_whole,
    "strips into zarr, -o FILE, -o -, and on a local Dask cluster, vs whole": strip_targets,
    "TIFF tags garbled (size, tiles, offsets), read in strips (--memory 1M)": hostile_tiff_tags,
    "NaN/inf float TIFFs in strips vs whole": lambda w, r, t: strips_equal_whole(w, r, t, odd=True),
    "NaN/inf stacks, grouped (--memory 64K) vs whole": stacks_nan,
    "kill -9 / SIGINT / SIGTERM of strips and stack runs": killed_runs,
    "disk full (1-3 MB tmpfs), strips and stacks": disk_full,
    "multi-page TIFFs of mixed sizes, modes, dtypes; grouped (--memory 64K) vs whole": mixed_stacks,
    "borderline rank-1 kernels, conv_forward vs float64 oracle": borderline_rank_one,
    "kernels --check on hostile files": check_hostile_kernels,
    "--engine values and combinations": engine_option,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="")
    parser.add_argument("--work", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the inputs and outputs")
    args = parser.parse_args()
    rows = []
    for number, (name, attack) in enumerate(ATTACKS.items()):
        if args.only and args.only not in name:
            continue
        work = Path(tempfile.mkdtemp(prefix="convcli-attack-", dir=args.work))
        trial = Trial(name)
        try:
            attack(work, np.random.default_rng([args.seed, number]), trial)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        rows.append(trial)
        print(f"| {name} | {trial.trials} | {trial.failures} | {trial.worst} |", flush=True)


if __name__ == "__main__":
    main()
