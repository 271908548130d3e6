"""Batches on a Dask cluster: overhead against local processes, and the client at scale.

Run from the repository root, with ``convcli[dask]`` installed::

    python benchmarks/bench_scale.py                 # 16 photos; 1,000,000 no-op tasks
    python benchmarks/bench_scale.py --tasks 200000  # a shorter client test

It measures, on this machine:

1. The same ``convcli conv -k vertical`` job on 16 photos of 2400x1800 (the
   folder of ``bench_batch.py``), whole-process medians: ``--jobs 2``; on a
   running cluster of 2 one-thread workers (``--scheduler tcp://...``); and
   ``--scheduler local -j 2``, which also starts and stops its cluster.
2. The client streaming N synthetic tasks through :class:`convcli.engines.dask.ClusterRun`
   with a no-op worker function, in a fresh process: its time, its peak
   memory, and the tasks per second through the scheduler. The tasks are made
   lazily; the client holds at most twice the cluster's threads of Dask tasks.
   N tasks go 100 to a Dask task, and N / 10 at the default 8 to a task.
3. The command line's planning of a folder of N empty ``.jpg`` files in folders
   of 1,000 (``convcli conv -r``): streamed a folder at a time
   (:func:`convcli.app.plan.stream_tasks`) through the cluster to a no-op
   worker function, against listing every input and planning the whole batch
   first (``find_inputs`` and ``plan_tasks``): time and peak memory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(_HERE), str(_HERE.parent / "tests")]
from bench_batch import make_photos  # noqa: E402
from helpers import DaskProcesses  # noqa: E402  (the cluster the tests start, too)
from installed import convcli_command  # noqa: E402


def time_command(cmd: list[str], out_dir: Path, repeat: int) -> float:
    """Median wall-clock seconds of `cmd`, with a fresh empty `out_dir` each run."""
    times = []
    for _ in range(repeat + 1):  # the first run warms the file cache
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


# This process's peak resident memory. (ru_maxrss would count the parent's, kept across exec.)
_PEAK = """
def peak_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
"""

# argv: N, files per Dask task, scheduler file, and a folder to plan (or "" for
# N synthetic tasks, the names of files).
_STREAM = (
    _PEAK
    + """
import json, sys, time
import distributed
from convcli.app.ops import ConvOp
from convcli.app.plan import stream_tasks
from convcli.engines.processes import FileResult
from convcli.engines.dask import ClusterRun
from convcli.kernels import get_kernel

def no_op(task):
    return FileResult(getattr(task, "source", task), "done")

n, per_task, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[4]
if folder:
    tasks = stream_tasks([folder], ConvOp((get_kernel("vertical"),)), out_dir=folder + "-out",
                         recursive=True, notes=[])
else:
    tasks = (str(i) for i in range(n))
with distributed.Client(scheduler_file=sys.argv[3], set_as_default=False) as client:
    start = time.perf_counter()
    count = sum(1 for _ in ClusterRun(client, tasks, no_op, files_per_task=per_task))
    seconds = time.perf_counter() - start
print(json.dumps({"count": count, "seconds": seconds, "peak_mib": peak_mib()}))
"""
)

_PLAN_WHOLE = (
    _PEAK
    + """
import json, sys, time
from convcli.app.ops import ConvOp
from convcli.app.plan import find_inputs, plan_tasks
from convcli.kernels import get_kernel

folder = sys.argv[1]
base = peak_mib()
start = time.perf_counter()
found = find_inputs([folder], out_dir=folder + "-out", recursive=True)
tasks = plan_tasks(found.files, ConvOp((get_kernel("vertical"),)))
seconds = time.perf_counter() - start
print(json.dumps({"count": len(tasks), "seconds": seconds, "peak_mib": peak_mib(),
                  "base_mib": base}))
"""
)


def make_tree(root: Path, count: int, per_folder: int = 1000) -> None:
    """`count` empty ``.jpg`` files in folders of `per_folder` under `root` (kept between runs)."""
    marker = root / f".complete-{count}"
    if marker.exists():
        return
    shutil.rmtree(root, ignore_errors=True)
    for start in range(0, count, per_folder):
        folder = root / f"{start // per_folder:04d}"
        folder.mkdir(parents=True)
        for i in range(start, min(count, start + per_folder)):
            (folder / f"IMG_{i:07d}.jpg").touch()
    marker.touch()


def _json_run(code: str, *args) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16, help="photos")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1_000_000, help="synthetic tasks")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "convcli-bench")
    args = parser.parse_args(argv)

    photos = make_photos(args.data, args.count)[0].parent
    out = args.data / "out-scale"
    work = Path(tempfile.mkdtemp(prefix="convcli-scale-"))
    cluster = DaskProcesses(work, 2)
    try:
        job = [
            *convcli_command(),
            "conv",
            "-k",
            "vertical",
            str(photos),
            "-o",
            str(out),
            "-q",
        ]
        rows = [
            ("--jobs 2", time_command([*job, "--jobs", "2"], out, args.repeat)),
            (
                "--scheduler (2 workers running)",
                time_command([*job, "--scheduler", cluster.address], out, args.repeat),
            ),
            (
                "--scheduler local -j 2 (starts it)",
                time_command([*job, "--scheduler", "local", "-j", "2"], out, args.repeat),
            ),
        ]
        print(f"{args.count} photos of 2400x1800, median of {args.repeat} whole-process runs")
        local = rows[0][1]
        for label, seconds in rows:
            print(
                f"  {label:36s} {seconds:6.2f} s  {args.count / seconds:5.1f} photos/s  "
                f"{seconds / local:5.2f}x --jobs 2"
            )

        # The default grouping on a tenth of the tasks (the scheduler's rate bounds it),
        # and all of them in groups of 100.
        for count, per_task in ((args.tasks // 10, 8), (args.tasks, 100)):
            stream = _json_run(_STREAM, count, per_task, cluster.file, "")
            dask_tasks = -(-stream["count"] // per_task)
            print(
                f"client streaming {stream['count']:,} no-op tasks, {per_task} per Dask task: "
                f"{stream['seconds']:.1f} s, peak {stream['peak_mib']:.0f} MiB, "
                f"{stream['count'] / stream['seconds']:,.0f} files/s, "
                f"{dask_tasks / stream['seconds']:,.0f} Dask tasks/s"
            )

        tree = args.data / f"tree-{args.tasks}"
        make_tree(tree, args.tasks)
        stream = _json_run(_STREAM, args.tasks, 100, cluster.file, tree)
        print(
            f"planning a folder of {stream['count']:,} files, -r, streamed through the "
            f"cluster (100 per Dask task): {stream['seconds']:.1f} s, "
            f"peak {stream['peak_mib']:.0f} MiB"
        )
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)

    whole = _json_run(_PLAN_WHOLE, tree)
    print(
        f"planning the same folder whole first (find_inputs, plan_tasks): "
        f"{whole['seconds']:.1f} s, peak {whole['peak_mib']:.0f} MiB "
        f"({whole['base_mib']:.0f} MiB before)"
    )


if __name__ == "__main__":
    main()
