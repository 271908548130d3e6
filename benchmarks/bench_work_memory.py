"""The whole-image work estimate against the measured peak memory of whole runs.

Run from the repository root, with convcli installed::

    python benchmarks/bench_work_memory.py                 # 3000x2400 inputs
    python benchmarks/bench_work_memory.py --side 2000 1600 --only pool

convcli reads an image in strips where its whole-image work
(:func:`convcli.app.process.strips_reason`) would not fit ``--memory``. For
each operation and input kind (tiled TIFFs: RGB and grey 8-bit, RGB 16-bit,
grey float32) this runs the command whole (``-j 1 --memory 64G``) in a
child process and reads its peak resident set (``ru_maxrss``). The work is
that peak less the peak of the same command on a 64x64 file of the same
kind (the interpreter, the libraries, their buffers); the table gives the
estimate over the work: 1.00 is exact, above 1 an over-estimate.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import tifffile
from installed import convcli_command

CASES = {
    "pad": "pad --pad 2",
    "pool max": "pool --size 2",
    "pool average": "pool --mode average --size 3 --stride 3",
    "conv sum": "conv -k vertical",
    "conv each": "conv -k vertical --channels each",
    "conv blur each": "conv -k gaussian-5x5 --channels each",
    "conv 2 kernels": "conv -k sobel-x -k sobel-y --channels each",
    "conv stride 2": "conv -k sharpen --stride 2 --channels each",
}

KINDS = ("rgb8", "grey8", "rgb16", "grey-float")


def make_input(folder: Path, kind: str, height: int, width: int) -> Path:
    """A tiled, deflated TIFF of random samples of `kind`, made once."""
    path = folder / f"{kind}-{width}x{height}.tif"
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    channels = 3 if kind.startswith("rgb") else 1
    shape = (height, width, channels) if channels > 1 else (height, width)
    if kind.endswith("8"):
        pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    elif kind.endswith("16"):
        pixels = rng.integers(0, 65536, shape, dtype=np.uint16)
    else:
        pixels = (rng.standard_normal(shape) * 100).astype(np.float32)
    photometric = "rgb" if channels > 1 else "minisblack"
    tifffile.imwrite(path, pixels, tile=(256, 256), compression="deflate", photometric=photometric)
    return path


def peak_bytes(command: list[str]) -> int:
    """The peak resident set of `command`, in bytes (its exit status must be 0).

    Started from a small child of this process (``--peak``): on Linux a
    process's peak counts what it held before ``exec``, so a command forked
    from this process (which made the inputs) would count this process's size.
    """
    proc = subprocess.run(
        [sys.executable, __file__, "--peak", *command], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"failed: {shlex.join(command)}\n{proc.stderr}")
    return int(proc.stdout)


def _peak_of_child(command: list[str]) -> int:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(os.waitstatus_to_exitcode(status))
    return usage.ru_maxrss * 1024


def estimate_bytes(case: str, source_path: Path) -> int:
    """convcli's own estimate of the whole-image work for `case` on the file."""
    from click.testing import CliRunner

    from convcli.app import dryrun
    from convcli.cli.main import main as cli

    seen = []
    real = dryrun.strips_reason

    def spying(task, source):
        reason = real(task, source)
        seen.append(reason[1])
        return reason

    dryrun.strips_reason = spying
    try:
        with tempfile.TemporaryDirectory() as out:
            args = shlex.split(CASES[case]) + [
                "--dry-run",
                "--max-pixels",
                "0",
                str(source_path),
                "-o",
                out,
            ]
            result = CliRunner().invoke(cli, args)
            assert result.exit_code == 0, result.output
    finally:
        dryrun.strips_reason = real
    if not seen:
        raise SystemExit(f"{case}: the dry run took no estimate for {source_path}")
    return seen[-1]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, nargs=2, default=(3000, 2400), metavar=("W", "H"))
    parser.add_argument("--only", nargs="*", default=None, help="cases whose name starts so")
    parser.add_argument("--kinds", nargs="*", default=list(KINDS), choices=KINDS)
    parser.add_argument("--formats", nargs="*", default=["png", "tiff"])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--estimate", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--peak", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peak:
        print(_peak_of_child(args.peak))
        return
    if args.estimate:  # in a child: a parent's size would count in its children's peaks
        print(estimate_bytes(args.estimate[0], Path(args.estimate[1])))
        return
    width, height = args.side
    convcli = convcli_command()
    folder = Path(tempfile.mkdtemp(prefix="convcli-work-"))
    ratios = []
    print(f"{width}x{height} inputs; work = peak - peak on 64x64; MiB")
    print(f"{'case':16} {'input':10} {'format':6} {'work':>8} {'estimate':>9} {'ratio':>6}")
    for case, options in CASES.items():
        if args.only and not any(case.startswith(o) for o in args.only):
            continue
        for kind in args.kinds:
            big = make_input(folder, kind, height, width)
            small = make_input(folder, kind, 64, 64)
            estimate = int(
                subprocess.run(
                    [sys.executable, __file__, "--estimate", case, str(big)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
            for fmt in args.formats:

                def run(path, fmt=fmt, options=options):
                    out = folder / "out"
                    command = (
                        convcli
                        + shlex.split(options)
                        + [
                            "-j",
                            "1",
                            "--memory",
                            "64G",
                            "--max-pixels",
                            "0",
                            "--overwrite",
                            "--format",
                            fmt,
                            str(path),
                            "-o",
                            str(out),
                        ]
                    )
                    return statistics.median(peak_bytes(command) for _ in range(args.repeat))

                work = run(big) - run(small)
                ratio = estimate / work
                ratios.append(ratio)
                print(
                    f"{case:16} {kind:10} {fmt:6} {work / 2**20:8.1f} {estimate / 2**20:9.1f} "
                    f"{ratio:6.2f}",
                    flush=True,
                )
    print(
        f"estimate / work: median {statistics.median(ratios):.2f}, "
        f"range {min(ratios):.2f} to {max(ratios):.2f}, "
        f"{sum(1 / 1.5 <= r <= 1.5 for r in ratios)} of {len(ratios)} within 1.5x"
    )


if __name__ == "__main__":
    main()
