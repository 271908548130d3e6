"""Batches on a real Dask cluster on 127.0.0.1: the same outputs, messages and exit codes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers import (
    MANIFEST,
    DaskProcesses,
    assert_one_line_error,
    digests,
    make_copies,
    make_folder,
    make_image,
    manifest_records,
    run,
    run_without,
    wait_until,
)

distributed = pytest.importorskip("distributed")

from convcli.app.manifest import ManifestHooks  # noqa: E402
from convcli.engines.dask import ClusterError, ClusterRun  # noqa: E402
from convcli.engines.processes import WORKER_DIED, FileResult  # noqa: E402

pytestmark = pytest.mark.cluster

CONVCLI = [sys.executable, "-m", "convcli"]


def _convcli(*args, timeout=180, cwd=None):
    return subprocess.run(
        [*CONVCLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def _started(*args) -> subprocess.Popen:
    """convcli started with `args`, its output and errors piped as text, not waited for."""
    return subprocess.Popen(
        [*CONVCLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = make_folder(tmp_path_factory.mktemp("photos") / "in", 10, (64, 48))
    (folder / "broken.png").write_bytes(b"not an image")
    return folder


def test_a_cluster_run_writes_what_a_local_run_writes(cluster, photos, tmp_path):
    local = _convcli(
        "conv", "-k", "vertical", "-k", "edge", photos, "-o", tmp_path / "local", "-j", "2"
    )
    remote = _convcli(
        "conv",
        "-k",
        "vertical",
        "-k",
        "edge",
        photos,
        "-o",
        tmp_path / "remote",
        "--scheduler",
        cluster.address,
        "--files-per-task",
        "3",
    )
    assert local.returncode == remote.returncode == 1, remote.stderr
    assert digests(tmp_path / "remote") == digests(tmp_path / "local")  # byte for byte
    assert len(digests(tmp_path / "remote")) == 20
    # The manifests hold the same records (the command lines aside), in any order.
    records = {}
    for name in ("local", "remote"):
        records[name] = sorted(
            json.dumps({**record, "command": ""}) for record in manifest_records(tmp_path / name)
        )
    assert records["remote"] == records["local"] and len(records["local"]) == 20
    failure = f"convcli: {photos / 'broken.png'}: not an image file"
    for result in (local, remote):
        lines = result.stderr.splitlines()
        assert [line for line in lines if line.startswith(failure)] == [lines[0]]
        assert lines[-1].startswith("convcli: 10 processed, 0 skipped, 1 failed in ")
    again = _convcli(
        "conv",
        "-k",
        "vertical",
        "-k",
        "edge",
        photos,
        "-o",
        tmp_path / "remote",
        "--scheduler-file",
        cluster.file,
    )
    assert again.returncode == 1
    assert "0 processed, 10 skipped, 1 failed" in again.stderr


def test_pool_on_the_cluster_with_overwrite(cluster, photos, tmp_path):
    out = tmp_path / "out"
    args = ["pool", "--mode", "average", photos, "-o", out, "--scheduler", cluster.address]
    first = _convcli(*args)
    assert first.returncode == 1, first.stderr
    before = digests(out)
    forced = _convcli(*args, "--overwrite")
    assert forced.returncode == 1 and "10 processed, 0 skipped, 1 failed" in forced.stderr
    assert digests(out) == before


def test_what_a_format_cannot_hold_is_said_once_for_the_cluster_run(cluster, tmp_path):
    from PIL import Image

    folder = tmp_path / "scans"
    folder.mkdir()
    for k in range(4):
        Image.new("L", (40, 30), 50 * k).save(folder / f"s{k}.png", dpi=(300, 300))
    args = [folder, "-o", tmp_path / "out", "--format", "npy", "-v", "--files-per-task", "1"]
    result = _convcli("pool", *args, "--scheduler", cluster.address)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(": done, 1 written") == 4
    said = [line for line in result.stderr.splitlines() if "not kept" in line]
    assert said == [
        "convcli: resolution not kept: npy outputs hold none (png, jpg and tiff outputs do)"
    ]


def test_relative_paths_name_the_clients_files_on_workers_started_elsewhere(tmp_path):
    here, there = tmp_path / "client", tmp_path / "worker"
    make_folder(here / "data", 3, (32, 24))
    (here / "data" / "broken.png").write_bytes(b"not an image")
    make_folder(there / "data", 5, (32, 24))  # what a worker would read by mistake
    workers = DaskProcesses(tmp_path, 1, cwd=there)
    try:
        result = _convcli(
            "pool", "--separate", "data", "-o", "out", "--scheduler", workers.address, cwd=here
        )
    finally:
        workers.close()
    assert result.returncode == 1, result.stderr
    assert "3 processed, 0 skipped, 1 failed" in result.stderr
    assert not (there / "out").exists()
    records = manifest_records(here / "out")
    assert len(records) == len(digests(here / "out")) == 12  # 4 images a file
    assert all(Path(here / "out" / record["output"]).is_file() for record in records)
    assert {record["input"] for record in records} == {
        str(path) for path in (here / "data").iterdir() if path.name != "broken.png"
    }
    # Messages name the files as they were given.
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"convcli: {os.path.join('data', 'broken.png')}: not an image")
    assert str(here) not in result.stderr


def test_an_unreachable_scheduler_is_one_line_and_no_folder(photos, tmp_path):
    result = _convcli(
        "pool", photos, "-o", tmp_path / "out", "--scheduler", "tcp://127.0.0.1:9", timeout=120
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "convcli: cannot reach the Dask scheduler at tcp://127.0.0.1:9"
    )
    assert not (tmp_path / "out").exists()


def _pool_on_a_worker_preloaded_with(code: str, photos, tmp_path):
    """`convcli pool` on a one-worker cluster whose worker first runs `code`."""
    preload = tmp_path / "preload.py"
    preload.write_text(code)
    other = DaskProcesses(tmp_path, 1, preload=preload, nanny=False)
    try:
        return _convcli("pool", photos, "-o", tmp_path / "out", "--scheduler", other.address)
    finally:
        other.close()


def test_workers_without_convcli_are_one_line(photos, tmp_path):
    result = _pool_on_a_worker_preloaded_with(
        "import sys\nsys.modules['convcli'] = None\n", photos, tmp_path
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("convcli: convcli cannot be imported on the Dask workers (")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("address", ["LOCAL", "local:", "", "foo://bar", "tcp://", "a b:1"])
def test_a_scheduler_that_is_no_address_is_a_usage_error(photos, tmp_path, address):
    if address.lower() == "local":  # any case starts a local cluster: no convcli there
        from convcli.engines.dask import check_scheduler

        assert check_scheduler(address) == "local"
        return
    started = time.monotonic()
    result = run("pool", photos, "-o", tmp_path / "out", "--scheduler", address)
    assert_one_line_error(result, 2, "--scheduler", f"{address!r} is not a Dask scheduler address")
    assert time.monotonic() - started < 5 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "No such file or directory"),
        ("", "is not a Dask scheduler file"),
        ("{not json", "is not a Dask scheduler file"),
        ('{"id": 1}', "names no address"),
        ("[1]", "names no address"),
    ],
)
def test_a_scheduler_file_that_names_no_scheduler_is_a_usage_error(photos, tmp_path, text, says):
    path = tmp_path / "scheduler.json"
    if text is not None:
        path.write_text(text)
    started = time.monotonic()
    result = run("pool", photos, "-o", tmp_path / "out", "--scheduler-file", path)
    assert_one_line_error(result, 2, "--scheduler-file", str(path), says)
    assert time.monotonic() - started < 5 and not (tmp_path / "out").exists()


def test_workers_with_another_version_are_named(photos, tmp_path):
    result = _pool_on_a_worker_preloaded_with(
        "import convcli._version\nconvcli._version.__version__ = '0.0.1'\n", photos, tmp_path
    )
    from convcli import __version__

    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"convcli: the Dask workers must run convcli {__version__}, ")
    assert lines[0].endswith(" has 0.0.1")
    assert not (tmp_path / "out").exists()


def _assert_manifest_names_every_output(out: Path, *, killed: bool = False) -> list[dict]:
    """Every output in `out` has one manifest record, and every record names a whole output.

    No temporary file is left, unless a worker was `killed` while writing one (a later run
    removes it).
    """
    records = manifest_records(out) if (out / "convcli-manifest.jsonl").exists() else []
    names = sorted(record["output"] for record in records)
    assert names == sorted(path.name for path in out.glob("*.png"))
    if not killed:
        assert not list(out.glob(".convcli-*"))  # no temporary left by a task that was stopped
    return records


@pytest.mark.slow
def test_a_stopped_cluster_run_records_every_output_written(cluster, tmp_path):
    # SIGTERM is counted as Ctrl-C is (convcli.app.stop_requests.StopRequests), and exits 143.
    sig = signal.SIGINT
    src = make_copies(tmp_path / "many", 120, (320, 240))
    out = tmp_path / "out"
    proc = _started(
        "conv", str(src), "-o", str(out), "--scheduler", cluster.address, "--files-per-task", "8"
    )
    wait_until(lambda: out.exists() and len(list(out.glob("*.png"))) >= 12, 120)
    proc.send_signal(sig)
    stopped = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - stopped < 10
    assert proc.returncode == (130 if sig == signal.SIGINT else 143), stderr
    assert "Traceback" not in stderr and "stopping: finishing " in stderr
    assert stderr.splitlines()[-1].startswith("convcli: interrupted: ")
    # The workers started no file after the run stopped; what they wrote is recorded.
    time.sleep(1)
    records = _assert_manifest_names_every_output(out)
    processed = re.search(r"interrupted: (\d+) processed", stderr)
    assert 0 < len(records) == 3 * int(processed[1]) < 360  # three outputs an RGB file


@pytest.mark.slow
def test_a_second_ctrl_c_leaves_no_output_unrecorded(cluster, tmp_path):
    src = make_copies(tmp_path / "big", 16, (1200, 900))
    out = tmp_path / "out"
    proc = _started(
        "conv",
        "-k",
        "edge",
        "-k",
        "vertical",
        str(src),
        "-o",
        str(out),
        "--scheduler",
        cluster.address,
        "--files-per-task",
        "4",
    )
    wait_until(lambda: out.exists() and any(out.glob("*.png")), 120)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    # 130, or, where the second Ctrl-C lands in the last moments of Python's exit (its
    # signal handlers already put back), ended by SIGINT itself: a shell shows 130 for both.
    assert proc.returncode in (130, -signal.SIGINT) and "Traceback" not in stderr, stderr
    # The tasks still running finish their file, then remove what the run did not record.
    assert wait_until(lambda: _unrecorded(out) == 0 and not list(out.glob(".convcli-*")), 60), (
        f"left after 60 s: {_unrecorded_names(out)} unrecorded, "
        f"{sorted(path.name for path in out.glob('.convcli-*'))}; stderr: {stderr}"
    )
    time.sleep(1)
    _assert_manifest_names_every_output(out)


def _unrecorded(out: Path) -> int:
    return len(_unrecorded_names(out))


def _unrecorded_names(out: Path) -> list[str]:
    """The PNG outputs in `out` that its manifest does not name."""
    named = (
        {record["output"] for record in manifest_records(out)}
        if (out / "convcli-manifest.jsonl").exists()
        else set()
    )
    return sorted({path.name for path in out.glob("*.png")} - named)


def test_a_worker_killed_mid_batch_loses_nothing(own_cluster, tmp_path):
    src = make_folder(tmp_path / "in", 40, (320, 240))
    reference = _convcli("conv", "-k", "edge", src, "-o", tmp_path / "local", "-j", "2")
    assert reference.returncode == 0, reference.stderr
    with distributed.Client(scheduler_file=str(own_cluster.file), set_as_default=False) as client:
        victim = next(iter(client.run(os.getpid).values()))
        out = tmp_path / "remote"
        proc = _started(
            "conv",
            "-k",
            "edge",
            str(src),
            "-o",
            str(out),
            "--scheduler",
            own_cluster.address,
            "--files-per-task",
            "8",
        )
        assert wait_until(lambda: out.exists() and len(list(out.glob("*.png"))) >= 4, 120)
        os.kill(victim, signal.SIGKILL)  # its nanny starts another
        _, stderr = proc.communicate(timeout=180)
        client.wait_for_workers(2, timeout=60)
    # As a local run whose worker dies: said on one line, exit status 1.
    assert proc.returncode == 1, stderr
    lines = stderr.splitlines()
    assert lines[0].startswith("convcli: 1 Dask worker(s) were lost during the run (tcp://")
    # The files that the lost task had written are written again by its second run, and
    # recorded: none is counted as skipped, every output has its manifest record.
    assert lines[1].startswith("convcli: 40 processed, 0 skipped, 0 failed in "), stderr
    assert len(_assert_manifest_names_every_output(out, killed=True)) == 40
    finished = {k: v for k, v in digests(out).items() if not k.startswith(".convcli-")}
    assert finished == digests(tmp_path / "local")  # every output whole, byte for byte


def _outputs(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.png")}


def _recorded(folder: Path) -> set[str]:
    """The outputs named in `folder`'s manifest, and in fragments left to merge."""
    from convcli.app.manifest import FRAGMENT_PREFIX

    files = [folder / MANIFEST, *folder.glob(FRAGMENT_PREFIX + "*")]
    return {
        json.loads(line)["output"]
        for path in files
        if path.exists()
        for line in path.read_text().splitlines()
    }


@pytest.mark.slow
def test_a_lost_scheduler_is_one_line(tmp_path):
    src = make_copies(tmp_path / "many", 80, (320, 240))
    doomed = DaskProcesses(tmp_path, 1, nanny=False)
    out = tmp_path / "out"
    try:
        proc = _started(
            "pool", str(src), "-o", str(out), "--scheduler", doomed.address, "--files-per-task", "4"
        )
        wait_until(lambda: out.exists() and len(list(out.glob("*.png"))) >= 8, 120)
        os.kill(doomed.procs[0].pid, signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = proc.communicate(timeout=60)
        waited = time.monotonic() - killed
        # Every output kept has its manifest line, also those of the tasks whose results
        # were on their way (in a fragment that a later run merges, if written after the end).
        assert wait_until(lambda: _outputs(out) == _recorded(out), 30)
    finally:
        doomed.close()
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert lines[0] == (
        f"convcli: lost the Dask scheduler at {doomed.address}: the files not "
        "reported were not processed"
    )
    assert len(lines) == 2 and " processed, 0 skipped, 0 failed in " in lines[1]
    assert waited < 30
    assert not list(out.glob(".convcli-*"))


# --- ClusterRun in this process, on a LocalCluster: deaths and retries -----------------------


class _Job(NamedTuple):
    source: str
    marker: str = ""


def _dies_once(job):
    """Kills its worker the first time it sees job "c" (a marker file remembers)."""
    if job.source == "c" and not os.path.exists(job.marker):
        Path(job.marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return FileResult(job.source, "done")


def _always_dies_on_c(job):
    if job.source == "c":
        os.kill(os.getpid(), signal.SIGKILL)
    return FileResult(job.source, "done")


@pytest.fixture(scope="module")
def by_value():
    """The functions of this test module travel by value: the workers cannot import it."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _local_cluster(workers: int = 2):
    """A LocalCluster of `workers` processes of one thread; a task may kill one worker only."""
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        return distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        )


@pytest.fixture(scope="module")
def local_client(by_value):
    """A client of a LocalCluster of two workers, shared by the tests that kill none."""
    with _local_cluster() as cluster, distributed.Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        yield client


@pytest.fixture
def own_local_client(by_value):
    """A client of a LocalCluster of two workers, for one test that kills them."""
    with _local_cluster() as cluster, distributed.Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        yield client


def test_a_worker_killed_once_loses_nothing(own_local_client, tmp_path):
    tasks = [_Job(name, str(tmp_path / "died")) for name in "abcdefgh"]
    run = ClusterRun(own_local_client, tasks, _dies_once, files_per_task=3, in_flight=4)
    results = list(run)
    assert sorted(r.source for r in results) == list("abcdefgh")  # each exactly once
    assert all(r.status == "done" for r in results)
    assert len(run.recovered_deaths) == 1 and run.recovered_deaths[0].startswith("tcp://")


def _slow(job):
    time.sleep(0.2)
    return FileResult(job.source, "done")


def _writes_slowly(job):
    """Writes the file `job.marker` in half a second, as a file's output."""
    time.sleep(0.5)
    Path(job.marker).write_text(job.source)
    return FileResult(job.source, "done", outputs=(job.marker,))


def _recorded_at_once(job):
    """Writes the file `job.marker` at once, with its manifest record."""
    Path(job.marker).write_text(job.source)
    record = {"output": Path(job.marker).name}
    return FileResult(job.source, "done", outputs=(job.marker,), records=(record,))


def _writes_at_once(job):
    Path(job.marker).write_text(job.source)
    return FileResult(job.source, "done", outputs=(job.marker,))


def test_a_stop_after_one_result_keeps_the_results_that_finished_with_it(
    own_local_client, tmp_path
):
    # The results of tasks finished together came in one batch, taken from the pending
    # futures: a caller stopping after the first result lost the others (outputs neither
    # recorded nor removed: 2 files in 1 of about 20 runs beside three CPU hogs).
    jobs = [_Job(str(n), str(tmp_path / f"{n}.out")) for n in range(6)]
    run = ClusterRun(own_local_client, jobs, _writes_at_once, files_per_task=1, in_flight=6)
    pending = run._flight.pending  # the run looks once every task is done: one batch of six
    run._flight.wait = lambda: wait_until(lambda: pending.queue.qsize() == len(jobs), 60)
    taken = [next(iter(run))]
    late = run.stop()
    reported = sorted(Path(path).name for result in taken + late for path in result.outputs)
    assert reported == sorted(f"{n}.out" for n in range(6))
    assert sorted(p.name for p in tmp_path.glob("*.out")) == reported


@pytest.mark.slow
def test_a_second_stop_request_abandons_the_running_tasks(own_local_client, tmp_path):
    # A cluster of its own: tasks another test abandoned may still run on a shared one.
    requests = []
    jobs = [_Job(str(n), str(tmp_path / f"{n}.out")) for n in range(16)]
    run = ClusterRun(
        own_local_client,
        jobs,
        _writes_slowly,
        files_per_task=2,
        stop_requests=lambda: len(requests),
        stop_wait_seconds=30,
    )
    taken = [next(iter(run))]
    requests += ["Ctrl-C", "Ctrl-C"]
    late = run.stop()  # the tasks running are abandoned, not waited for: the note says so
    assert re.match(
        r"stopped waiting for the Dask workers: the \d+ task\(s\) "
        "not finished remove the outputs they write",
        run.stop_note,
    )
    # Each running task finishes its file, sees that it was abandoned, and removes what it
    # wrote: the outputs left are those of the results the run had.
    reported = {Path(path).name for result in taken + late for path in result.outputs}
    assert wait_until(lambda: {p.name for p in tmp_path.glob("*.out")} == reported, 30)
    time.sleep(0.6)  # nothing is written after that
    assert {p.name for p in tmp_path.glob("*.out")} == reported and len(reported) < 16


@pytest.mark.slow
def test_a_cluster_left_without_workers_ends_the_run(local_client):
    # A scheduler here and one worker without a nanny, both able to import this module.
    path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    with distributed.LocalCluster(n_workers=0, dashboard_address="127.0.0.1:0") as cluster:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                cluster.scheduler_address,
                "--nthreads",
                "1",
                "--no-nanny",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": path},
        )
        try:
            with distributed.Client(cluster, set_as_default=False) as client:
                client.wait_for_workers(1, timeout=60)
                run = ClusterRun(
                    client,
                    [_Job(str(n)) for n in range(100)],
                    _slow,
                    files_per_task=1,
                    no_workers_seconds=1,
                )
                results = iter(run)
                assert next(results).status == "done"
                worker.kill()
                killed = time.monotonic()
                with pytest.raises(
                    ClusterError,
                    match=r"^the Dask cluster at tcp://\S+ has had "
                    r"no workers for 1 s: stopping$",
                ):
                    list(results)
                assert time.monotonic() - killed < 10
                assert run.stop() == []
        finally:
            worker.kill()
            worker.wait()


class _OutJob(NamedTuple):
    source: str
    out_dir: str


def _writes_an_output(job):
    """Writes SOURCE.out in `job.out_dir`, with its manifest record."""
    name = f"{Path(job.source).name}.out"
    Path(job.out_dir, name).write_text(job.source)
    return FileResult(
        job.source,
        "done",
        outputs=(str(Path(job.out_dir, name)),),
        records=({"output": name, "bytes": len(job.source)},),
    )


def _lines_and_jobs(tmp_path):
    from convcli.app.manifest import ManifestLines

    lines = ManifestLines({"command": "convcli pool in -o out", "version": "1"}, {})
    return lines, [_OutJob(str(tmp_path / f"{name}.png"), str(tmp_path)) for name in "abcde"]


def test_a_result_lost_with_the_scheduler_keeps_its_manifest_lines(local_client, tmp_path):
    # The tasks finish, then their results never reach this process: the scheduler is lost
    # meanwhile (as it is when it is killed in that moment). The outputs they wrote get
    # their manifest lines all the same, from the fragments the tasks left beside them.
    from convcli.app.manifest import FRAGMENT_PREFIX

    lines, jobs = _lines_and_jobs(tmp_path)
    run = ClusterRun(
        local_client,
        jobs,
        _writes_an_output,
        files_per_task=2,
        in_flight=3,
        hooks=ManifestHooks(lines),
    )
    run._fill()  # its three tasks submitted (in_flight); their results are never taken
    assert wait_until(lambda: all(future.done() for future in run._group_of), 60)
    run._failed = "scheduler"  # what the run notes when it loses the scheduler
    assert run.stop() == []
    records = sorted(manifest_records(tmp_path), key=lambda record: record["output"])
    assert records == [
        {
            "output": f"{name}.png.out",
            "input": str(tmp_path / f"{name}.png"),
            "command": "convcli pool in -o out",
            "version": "1",
            "bytes": len(str(tmp_path / f"{name}.png")),
        }
        for name in "abcde"
    ]
    assert not list(tmp_path.glob(FRAGMENT_PREFIX + "*"))


def test_results_that_cannot_be_fetched_keep_their_manifest_lines(
    local_client, tmp_path, monkeypatch
):
    # The tasks return, then fetching their results fails as with a scheduler killed in that
    # moment (the run ends on one line): their outputs' lines come from their fragments.
    from convcli.app.manifest import FRAGMENT_PREFIX

    lines, jobs = _lines_and_jobs(tmp_path)
    run = ClusterRun(
        local_client,
        jobs,
        _writes_an_output,
        files_per_task=2,
        in_flight=3,
        hooks=ManifestHooks(lines),
    )
    run._fill()  # its three tasks submitted (in_flight)
    assert wait_until(lambda: all(future.done() for future in run._group_of), 60)

    def lost(*args, **kwargs):
        raise OSError("connection closed")

    monkeypatch.setattr(distributed.Future, "result", lost)
    try:
        with pytest.raises(ClusterError, match="^lost the Dask scheduler at "):
            list(run)
        assert run.stop() == []
    finally:
        del local_client._convcli_lost  # it was not lost: closed as usual
    assert sorted(record["output"] for record in manifest_records(tmp_path)) == [
        f"{name}.png.out" for name in "abcde"
    ]
    assert not list(tmp_path.glob(FRAGMENT_PREFIX + "*"))


@pytest.fixture(scope="module")
def s3_options(s3_server):
    """fsspec options for the S3 server (moto), which holds the bucket ``fragments``."""
    pytest.importorskip("s3fs").S3FileSystem(**s3_server).mkdir("fragments")
    return s3_server


class _UrlJob(NamedTuple):
    source: str
    out_dir: str
    storage_options: dict


def _puts_an_output(job):
    """Puts SOURCE's name + .out in the URL `job.out_dir`, with its manifest record."""
    from convcli.io import storage

    name = f"{storage.basename(job.source)}.out"
    url = storage.join(job.out_dir, name)
    fs, path = storage.filesystem(url, job.storage_options)
    fs.pipe_file(path, job.source.encode())
    return FileResult(
        job.source, "done", outputs=(url,), records=({"output": name, "bytes": len(job.source)},)
    )


def _url_run(client, out, options):
    """A run of five files in three tasks, all in flight, whose outputs go to `out` on object
    storage, and its manifest lines."""
    from convcli.app.manifest import ManifestLines

    lines = ManifestLines({"command": "convcli pool in -o out", "version": "1"}, {})
    jobs = [_UrlJob(f"s3://fragments/in/{name}.png", out, options) for name in "abcde"]
    return lines, ClusterRun(
        client, jobs, _puts_an_output, files_per_task=2, in_flight=3, hooks=ManifestHooks(lines)
    )


def _object_names(out, options):
    from convcli.io import storage

    return sorted(storage.list_names(out, options))


def test_a_result_lost_with_the_scheduler_keeps_its_manifest_lines_on_object_storage(
    local_client, s3_options
):
    # As above, with outputs on object storage: each task puts its lines in a manifest
    # object of its own, which readers of the manifest take.
    from convcli.app.manifest import read_manifest

    out = "s3://fragments/lost"
    lines, run = _url_run(local_client, out, s3_options)
    run._fill()  # its three tasks submitted (in_flight); their results are never taken
    assert wait_until(lambda: all(future.done() for future in run._group_of), 60)
    run._failed = "scheduler"
    assert run.stop() == []
    records = sorted(read_manifest(out, s3_options), key=lambda record: record["output"])
    assert records == [
        {
            "output": f"{name}.png.out",
            "input": f"s3://fragments/in/{name}.png",
            "command": "convcli pool in -o out",
            "version": "1",
            "bytes": len(f"s3://fragments/in/{name}.png"),
        }
        for name in "abcde"
    ]
    assert sum("-part-convcli-run-" in name for name in _object_names(out, s3_options)) == 3


def test_fragment_objects_of_recorded_results_go_once_the_run_s_manifest_is_put(
    local_client, s3_options
):
    from convcli.io import storage

    out = "s3://fragments/recorded"
    lines, run = _url_run(local_client, out, s3_options)
    results = list(run)
    for result in results:
        run.recorded(result)  # its lines are this run's, not put yet: the fragments stay
    assert run.stop() == []
    fragments = [name for name in _object_names(out, s3_options) if "-part-" in name]
    assert len(fragments) == 3
    from convcli.app.manifest import put_text, read_manifest, run_manifest_name

    # The run's manifest object, put as the run ends: both hold the lines, read once.
    name = run_manifest_name()
    put_text(
        storage.join(out, name),
        "".join(line for result in results for line in lines.of(result)[out]),
        s3_options,
    )
    expected = sorted(read_manifest(out, s3_options), key=lambda record: record["output"])
    assert [record["output"] for record in expected] == [f"{n}.png.out" for n in "abcde"]
    run.manifest_put([out], s3_options)
    assert _object_names(out, s3_options) == sorted([*(f"{n}.png.out" for n in "abcde"), name])
    assert sorted(read_manifest(out, s3_options), key=lambda r: r["output"]) == expected


def test_the_fragments_of_recorded_results_are_removed(local_client, tmp_path):
    from convcli.app.manifest import FRAGMENT_PREFIX

    lines, jobs = _lines_and_jobs(tmp_path)
    run = ClusterRun(
        local_client, jobs, _writes_an_output, files_per_task=2, hooks=ManifestHooks(lines)
    )
    results = list(run)
    assert len(list(tmp_path.glob(FRAGMENT_PREFIX + "*"))) == 3  # one per task, until ...
    for result in results:
        run.recorded(result)  # ... the caller says it wrote their lines
    assert run.stop() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{n}.png.out" for n in "abcde"]


def test_the_tasks_in_flight_follow_the_workers_that_join(by_value, monkeypatch):
    import convcli.engines.dask
    import convcli.engines.dask_cluster

    monkeypatch.setattr(convcli.engines.dask_cluster, "_CHECK_SECONDS", 0.0)  # at each submission
    with _local_cluster(0) as cluster, distributed.Client(cluster, set_as_default=False) as client:
        run = ClusterRun(client, [_Job(str(n)) for n in range(12)], _slow, files_per_task=1)
        run._fill()
        assert len(run._group_of) == convcli.engines.dask.MIN_IN_FLIGHT  # no workers yet
        cluster.scale(3)
        client.wait_for_workers(3, timeout=60)
        run._fill()
        assert len(run._group_of) == 6  # twice the three workers' threads
        assert sorted(int(r.source) for r in run) == list(range(12))
        assert run.recovered_deaths == []


def test_a_file_that_kills_every_worker_fails_alone(own_local_client, tmp_path):
    tasks = [_Job(name) for name in "abcdef"]
    results = list(
        ClusterRun(own_local_client, tasks, _always_dies_on_c, files_per_task=3, in_flight=2)
    )
    assert sorted(r.source for r in results) == list("abcdef")
    failed = [r for r in results if r.status == "failed"]
    assert [r.source for r in failed] == ["c"]
    assert failed[0].message.startswith(WORKER_DIED)


# --- without the extra -------------------------------------------------------------------------


def test_without_dask_the_option_names_the_extra(tmp_path):
    src = make_image(tmp_path / "a.png", "RGB")
    proc = run_without("distributed", "pool", src, "-o", tmp_path / "out", "--scheduler", "local")
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "convcli: --scheduler needs Dask distributed: pip install 'convcli[dask]'"
    )
    assert len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_files_per_task_needs_a_scheduler(tmp_path):
    src = make_image(tmp_path / "a.png", "RGB")
    result = run("pool", src, "-o", tmp_path / "out", "--files-per-task", "4")
    assert result.exit_code == 2 and "--files-per-task" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_stop_reads_every_task_journal_in_one_request(tmp_path):
    """Which unfinished tasks said they were done, and which outputs the lost ones wrote."""
    from convcli.engines.dask import ClusterRun

    written = [tmp_path / f"p{i}.png" for i in range(3)]
    for path in written:
        path.write_bytes(b"x")
    journals = {
        "t1": {"done": True},
        "t2": None,
        "g1": {"files": {0: [str(written[0])], 2: [str(written[1])]}},
        "g2": {"files": {1: [str(written[2])]}},
    }
    requests = []

    class Client:
        def get_metadata(self, keys, default):
            requests.append(keys)
            return {"tasks": journals}[keys[1]]

    run = object.__new__(ClusterRun)
    run._client, run._run_key = Client(), "run"
    run._sent = {"f1": (0.0, (0, 2), "t1", "g1"), "f2": (0.0, (1,), "t2", "g2")}
    assert run._returning() == {"f1"}
    run._remove_unreported()
    assert requests == [["run", "tasks"]] * 2
    assert not any(path.exists() for path in written)


def test_a_scheduler_gone_while_waiting_for_workers_is_said_as_such():
    """The scheduler went away (the client reconnects) while the run waits for a worker:
    convcli's own line at once, not "no workers" after Dask's "Failed to reconnect"."""
    from types import SimpleNamespace

    from convcli.engines.dask import check_versions

    client = SimpleNamespace(
        status="connecting",
        scheduler_info=lambda: {},
        scheduler=SimpleNamespace(address="tcp://127.0.0.1:8786"),
    )
    started = time.monotonic()
    with pytest.raises(
        ClusterError,
        match=r"^the Dask scheduler at tcp://127\.0\.0\.1:8786 "
        r"went away before the run started: no file was processed$",
    ):
        check_versions(client, wait_seconds=5)
    assert time.monotonic() - started < 2 and client._convcli_lost


@pytest.mark.slow
def test_a_scheduler_killed_while_the_run_waits_for_workers_is_said_as_such(tmp_path):
    """A real scheduler with no workers, killed (SIGKILL) once convcli's client is on it:
    one line saying it went away, exit 1; it was "the Dask cluster has no workers"
    (asking the scheduler for its workers waited out Dask's reconnection, 10 s)."""
    make_image(tmp_path / "a.png", "RGB")
    lonely = DaskProcesses(tmp_path, 0)
    try:
        with distributed.Client(lonely.address, timeout=30, set_as_default=False) as watch:

            def clients():  # a lambda: sent by value to the scheduler
                return watch.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.clients))

            before = clients()
            proc = _started(
                "pool",
                str(tmp_path / "a.png"),
                "-o",
                str(tmp_path / "out"),
                "--scheduler",
                lonely.address,
            )
            # convcli's client has joined: it waits for a worker now.
            joined = wait_until(lambda: clients() > before, 60)
        assert joined, proc.stderr
        os.killpg(lonely.procs[0].pid, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
    finally:
        lonely.close()
    assert proc.returncode == 1, stderr
    assert stderr.splitlines() == [
        f"convcli: the Dask scheduler at {lonely.address} went away "
        "before the run started: no file was processed"
    ]
    assert not (tmp_path / "out").exists()


def test_dask_s_failed_reconnect_error_is_not_logged(caplog):
    import logging

    from convcli.engines.dask import connect

    with pytest.raises(ClusterError):
        connect("tcp://127.0.0.1:1")  # nothing listens: the filter is installed first
    with caplog.at_level(logging.ERROR, logger="distributed.client"):
        logging.getLogger("distributed.client").error(
            "Failed to reconnect to scheduler after %.2f seconds, closing client", 10.0
        )
    assert "Failed to reconnect" not in caplog.text


def test_no_lost_workers_line_once_the_scheduler_is_lost():
    """The run's own line says the scheduler was lost: the workers lost before it were not
    made up for, as the lost-workers line would say."""
    from types import SimpleNamespace

    from convcli.engines.base import EngineSettings
    from convcli.engines.dask import DaskEngine

    engine = DaskEngine(EngineSettings(scheduler="tcp://127.0.0.1:8786"))
    engine.recovered_deaths = ["tcp://127.0.0.1:9"]
    engine._run = SimpleNamespace(lost_scheduler=False)
    assert engine.deaths_note().startswith("1 Dask worker(s) were lost during the run")
    engine._run = SimpleNamespace(lost_scheduler=True)
    assert engine.deaths_note() is None


def test_a_run_stopped_at_once_merges_the_fragments_of_results_it_took(own_local_client, tmp_path):
    # A second Ctrl-C ended stop() with results taken from finished tasks and not recorded:
    # their fragments stayed beside outputs that no manifest named (1 run of the suite).
    from convcli.app.manifest import ManifestHooks, ManifestLines, operation_record, read_manifest
    from convcli.app.ops import PoolOp

    lines = ManifestLines({"command": "convcli pool", **operation_record(PoolOp())}, {})
    jobs = [_Job(str(n), str(tmp_path / f"{n}.out")) for n in range(4)]
    run = ClusterRun(
        own_local_client,
        jobs,
        _recorded_at_once,
        files_per_task=2,
        in_flight=2,
        hooks=ManifestHooks(lines),
    )
    pending = run._flight.pending  # every task done before the run looks: one batch
    run._flight.wait = lambda: wait_until(lambda: pending.queue.qsize() == 2, 60)
    next(iter(run))  # the caller records nothing: the second Ctrl-C comes now

    def second_ctrl_c(force):
        raise KeyboardInterrupt

    run._stop = second_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        run.stop()
    assert not list(tmp_path.glob(".convcli-manifest-part-*"))
    named = sorted(record["output"] for record in read_manifest(str(tmp_path)))
    assert named == sorted(f"{n}.out" for n in range(4))


class _Started:
    """A stand-in for a local cluster in Dask's list of clusters."""


def test_a_stop_while_the_local_cluster_starts_leaves_no_cluster_for_dasks_exit(monkeypatch):
    """Ctrl-C (or SIGTERM) inside ``LocalCluster(...)``: the half-started cluster leaves
    Dask's list (its exit handler printed a traceback closing it) and asyncio's log is
    silenced; a cluster that was there before stays listed."""
    import logging

    from convcli.engines import dask as engine

    listed = distributed.SpecCluster._instances
    earlier, half = _Started(), _Started()
    listed.add(earlier)

    def interrupted(**options):
        listed.add(half)
        raise KeyboardInterrupt

    monkeypatch.setattr(distributed, "LocalCluster", interrupted)
    asyncio_log = logging.getLogger("asyncio")
    level = asyncio_log.level
    try:
        with pytest.raises(KeyboardInterrupt):
            engine._client(distributed, "local", None, jobs=2, timeout=1.0)
        assert half not in listed and earlier in listed
        assert not asyncio_log.isEnabledFor(logging.CRITICAL)
    finally:
        listed.discard(earlier)
        asyncio_log.setLevel(level)


def _log_a_worker_error():
    import logging

    logging.getLogger("distributed.worker").error("a heartbeat that failed as the run ended")


def test_a_local_clusters_workers_print_no_log_of_their_own(by_value, capfd):
    """Dask's workers log their errors with tracebacks (a heartbeat to a scheduler that
    closed first, as a run ends); the run says what happened on its own lines."""
    from convcli.engines import dask as engine

    client = engine._client(distributed, "local", None, jobs=1, timeout=10.0)
    try:
        client.wait_for_workers(1, timeout=60)
        client.run(_log_a_worker_error)
    finally:
        engine.close(client)
    assert "heartbeat" not in capfd.readouterr().err
