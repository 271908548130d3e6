"""Ctrl-C during requests to object storage: each request is cancelled where it runs, and the
requests of a stopped run's cleanup are bounded. A file system whose requests never end
(an asyncio Event never set) stands for a store that does not answer."""

from __future__ import annotations

import _thread
import asyncio
import subprocess
import sys
import threading

import pytest

from convcli.io import row_writers, storage

fsspec_asyn = pytest.importorskip("fsspec.asyn")


class _StuckFS(fsspec_asyn.AsyncFileSystem):
    """An async file system whose requests named in `stuck` never end; the others work
    on a dict. Each stuck request sets `started` when it begins and `ended` when it ends."""

    protocol = "stuck"
    cachable = False  # a fresh one each time

    def __init__(self, stuck=()):
        super().__init__(loop=fsspec_asyn.get_loop(), skip_instance_cache=True)
        self.stuck, self.objects = set(stuck), {}
        self.started, self.ended = threading.Event(), threading.Event()

    async def _block(self, name: str) -> bool:
        if name not in self.stuck:
            return False
        self.started.set()
        try:
            await asyncio.Event().wait()  # never set
        finally:
            self.ended.set()
        return True

    async def _put_file(self, lpath, rpath, **kwargs):
        if not await self._block("put_file"):
            self.objects[rpath] = b"put"

    async def _pipe_file(self, path, value, **kwargs):
        self.objects[path] = value

    async def _cat_file(self, path, start=None, end=None, **kwargs):
        await self._block("cat_file")
        if path not in self.objects:
            raise FileNotFoundError(path)
        return self.objects[path]

    async def _find(self, path, **kwargs):
        await self._block("find")
        return sorted(k for k in self.objects if k.startswith(path.rstrip("/") + "/"))

    async def _rm(self, path, recursive=False, **kwargs):
        await self._block("rm")
        for one in path if isinstance(path, list) else [path]:
            for key in [k for k in self.objects if k == one or k.startswith(one + "/")]:
                del self.objects[key]


@pytest.fixture
def stuck(monkeypatch):
    """Make the stub file system serve every URL; returns a function that makes it."""
    made = []

    def make(*names):
        fs = _StuckFS(names)
        made.append(fs)
        monkeypatch.setattr(
            storage, "filesystem", lambda url, options=None: (fs, url.split("://", 1)[-1])
        )
        return fs

    yield make
    for fs in made:  # nothing left running in fsspec's loop
        fs.stuck.clear()


def _ctrl_c_once(event: threading.Event) -> threading.Thread:
    """Ctrl-C this process's main thread once `event` is set (a request has begun)."""

    def wait_then_interrupt():
        event.wait()
        _thread.interrupt_main()

    thread = threading.Thread(target=wait_then_interrupt, daemon=True)
    thread.start()
    return thread


def test_an_upload_stopped_by_ctrl_c_is_cancelled_not_left_running(stuck, tmp_path):
    """fsspec stopped waiting and left the put running: it then put an object that the run
    had counted out (in no manifest). Now the put is cancelled before Ctrl-C goes on."""
    fs = stuck("put_file")
    local = tmp_path / "a.png"
    local.write_bytes(b"png")
    counted = []
    thread = _ctrl_c_once(fs.started)
    with pytest.raises(KeyboardInterrupt):
        storage.upload(str(local), "s3://b/out/a.png", done=lambda: counted.append(1))
    thread.join()
    assert fs.ended.is_set()  # the request ended (cancelled) before the interrupt went on
    assert counted == [] and fs.objects == {}


def test_an_upload_that_finishes_is_counted(stuck, tmp_path):
    fs = stuck()
    local = tmp_path / "a.png"
    local.write_bytes(b"png")
    counted = []
    storage.upload(str(local), "s3://b/out/a.png", done=lambda: counted.append(1))
    assert counted == [1] and fs.objects == {"b/out/a.png": b"put"}


def _in_a_thread(function) -> tuple[threading.Thread, list]:
    raised: list = []

    def call():
        try:
            function()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread, raised


@pytest.mark.parametrize("never_answers", ["cat_file", "rm"])
def test_removing_a_stopped_store_is_bounded_when_the_store_does_not_answer(
    stuck, monkeypatch, never_answers
):
    """The store written in place is removed when its write stops; reading the claim or
    removing the objects that never answer ended the run only when botocore gave up.
    Now each takes CLEANUP_SECONDS at most, and the interrupt goes on."""
    fs = stuck()
    monkeypatch.setattr(row_writers, "CLEANUP_SECONDS", 0.2)

    def write_then_stop():
        with row_writers.remote_store("s3://b/out/a.zarr"):
            fs.objects["b/out/a.zarr/0/0.0"] = b"chunk"
            fs.stuck.add(never_answers)
            raise KeyboardInterrupt

    thread, raised = _in_a_thread(write_then_stop)
    thread.join(60)  # a bound far above the cleanup's: before, it never ended
    assert not thread.is_alive()
    assert len(raised) == 1 and type(raised[0]) is KeyboardInterrupt
    assert fs.ended.is_set()  # the request that did not answer was cancelled
    # Left claimed (never taken for a finished output): the next run writes it again.
    assert "b/out/a.zarr/.convcli-writing" in fs.objects


def test_a_store_stopped_by_ctrl_c_is_removed_while_the_claim_is_its_own(stuck):
    fs = stuck()
    with pytest.raises(KeyboardInterrupt):
        with row_writers.remote_store("s3://b/out/a.zarr"):
            fs.objects["b/out/a.zarr/0/0.0"] = b"chunk"
            raise KeyboardInterrupt
    assert fs.objects == {}


def test_zarr_requests_left_in_flight_by_ctrl_c_are_cancelled():
    """zarr's own wait stops at Ctrl-C, not its requests: chunks were then written after
    the stopped store was removed, a store with neither claim nor marker."""
    pytest.importorskip("zarr")
    from zarr.core import sync

    from convcli.io import zarr_stores

    ended = threading.Event()

    async def never_ends():
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    asyncio.run_coroutine_threadsafe(never_ends(), sync._get_loop())
    zarr_stores.cancel_zarr_requests(5.0)
    assert ended.is_set()


def test_a_run_that_ends_stopped_or_failed_leaves_nothing_running_in_zarrs_loop(tmp_path):
    """A run stopped while zarr read a store of small chunks left its requests in zarr's
    event loop, and zarr's clean-up at exit printed a traceback ("Cannot close a running
    event loop"): the command line cancels them as it ends on a non-zero status."""
    pytest.importorskip("zarr")
    script = tmp_path / "left_running.py"
    script.write_text(
        "import asyncio, sys\n"
        "from zarr.core import sync\n"
        "from convcli.cli.main import main\n"
        "async def never_ends():\n"
        "    await asyncio.Event().wait()\n"
        "pending = asyncio.run_coroutine_threadsafe(never_ends(), sync._get_loop())\n"
        "try:\n"
        "    main(['pool', 'no-such-file.png', '-q'])\n"
        "finally:\n"
        "    print('cancelled:', pending.cancelled(), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 1
    assert "cancelled: True" in done.stderr
    assert "Traceback" not in done.stderr and "destroyed but it is pending" not in done.stderr
