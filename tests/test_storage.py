"""Inputs and outputs on object storage: an S3 server (moto) on 127.0.0.1, and memory://."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from helpers import assert_one_line_error, digests, make_folder, make_image, run, run_without

from convcli.cli.main import main


@pytest.fixture(scope="module")
def s3(s3_server):
    """The environment that points convcli at the S3 server, and a client of it."""
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID=s3_server["key"],
        AWS_SECRET_ACCESS_KEY=s3_server["secret"],
        AWS_DEFAULT_REGION="us-east-1",
        FSSPEC_S3_ENDPOINT_URL=s3_server["endpoint_url"],
    )
    env.pop("AWS_PROFILE", None)
    return env, pytest.importorskip("s3fs").S3FileSystem(**s3_server)


def _photos(tmp_path):
    folder = make_folder(tmp_path / "photos", 4, (48, 36))
    (folder / "sub").mkdir()
    make_image(folder / "sub" / "deep.png", "L", seed=9)
    (folder / "broken.png").write_bytes(b"not an image")
    return folder


def _upload(fs, folder, url):
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            fs.put_file(str(path), f"{url}/{path.relative_to(folder).as_posix()}")


def _download(fs, url, folder):
    folder.mkdir(parents=True, exist_ok=True)
    for key in fs.find(url):
        rel = key[len(url.split("://", 1)[-1]) :].lstrip("/")
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(key, str(target))
    return folder


def _convcli(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "convcli", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_bucket_to_a_bucket_as_on_disk(s3, s3_bucket, tmp_path):
    env, fs = s3
    photos = _photos(tmp_path)
    _upload(fs, photos, f"{s3_bucket}/in")
    local = _convcli(env, "conv", "-k", "vertical", "-r", photos, "-o", tmp_path / "local")
    remote = _convcli(
        env, "conv", "-k", "vertical", "-r", f"s3://{s3_bucket}/in", "-o", f"s3://{s3_bucket}/out"
    )
    assert local.returncode == remote.returncode == 1, remote.stderr
    assert remote.stderr.splitlines()[0] == (
        f"convcli: s3://{s3_bucket}/in/broken.png: not an image file "
        "(Pillow cannot identify its format)"
    )
    assert remote.stderr.splitlines()[-1].startswith("convcli: 5 processed, 0 skipped, 1 failed")
    got = digests(_download(fs, f"s3://{s3_bucket}/out", tmp_path / "got"))
    assert got == digests(tmp_path / "local")  # byte for byte, sub/ mirrored
    assert "sub/deep_conv-vertical-sum.png" in got
    again = _convcli(
        env, "conv", "-k", "vertical", "-r", f"s3://{s3_bucket}/in", "-o", f"s3://{s3_bucket}/out"
    )
    assert "0 processed, 5 skipped, 1 failed" in again.stderr


def test_overwrite_replaces_only_what_convcli_wrote(s3, s3_bucket, tmp_path):
    env, fs = s3
    make_image(tmp_path / "a.png", "RGB")
    fs.put_file(str(tmp_path / "a.png"), f"{s3_bucket}/a.png")
    out = f"s3://{s3_bucket}/out"
    assert _convcli(env, "pool", f"s3://{s3_bucket}/a.png", "-o", out, "--separate").returncode == 0
    mine = f"{s3_bucket}/out/a_pool-max-f2-s2-R.png"
    first = fs.cat_file(mine)
    fs.pipe_file(f"{s3_bucket}/out/a_pool-max-f2-s2-G.png", b"somebody else's file")
    forced = _convcli(
        env, "pool", f"s3://{s3_bucket}/a.png", "-o", out, "--overwrite", "--separate"
    )
    assert forced.returncode == 1
    assert "a_pool-max-f2-s2-G.png" in forced.stderr and "not written by convcli" in forced.stderr
    # Named by its URL, not by the local staging copy.
    assert f"s3://{s3_bucket}/out/a_pool-max-f2-s2-G.png: the existing file" in forced.stderr
    assert "/output/" not in forced.stderr
    assert fs.cat_file(f"{s3_bucket}/out/a_pool-max-f2-s2-G.png") == b"somebody else's file"
    assert fs.cat_file(mine) == first  # replaced by the same bytes


def test_output_prefix_equal_to_the_input_prefix(s3, s3_bucket, tmp_path):
    env, fs = s3
    make_image(tmp_path / "p.png", "RGB")
    fs.put_file(str(tmp_path / "p.png"), f"{s3_bucket}/photos/p.png")
    url = f"s3://{s3_bucket}/photos"
    assert _convcli(env, "pool", url, "-o", url).returncode == 0
    listed = sorted(fs.ls(f"{s3_bucket}/photos"))
    again = _convcli(env, "pool", url, "-o", url)
    assert again.returncode == 0
    assert "0 processed, 1 skipped, 0 failed" in again.stderr  # its outputs are not inputs
    assert sorted(fs.ls(f"{s3_bucket}/photos")) == listed


def test_local_photos_to_a_bucket_on_a_local_cluster(s3, s3_bucket, tmp_path):
    pytest.importorskip("distributed")
    env, fs = s3
    photos = make_folder(tmp_path / "photos", 6, (48, 36))
    ok_local = _convcli(env, "conv", "-k", "edge", photos, "-o", tmp_path / "local")
    assert ok_local.returncode == 0, ok_local.stderr
    remote = _convcli(
        env,
        "conv",
        "-k",
        "edge",
        photos,
        "-o",
        f"s3://{s3_bucket}/edges",
        "--scheduler",
        "local",
        "-j",
        "2",
        "--files-per-task",
        "2",
    )
    assert remote.returncode == 0, remote.stderr
    # The tasks' manifest fragment objects are gone once the run's own object is put.
    objects = [p.rsplit("/", 1)[1] for p in fs.ls(f"{s3_bucket}/edges", detail=False, refresh=True)]
    manifests = [name for name in objects if name.startswith("convcli-manifest")]
    assert len(manifests) == 1 and "-part-" not in manifests[0], objects
    from convcli.app.manifest import read_manifest

    records = read_manifest(f"s3://{s3_bucket}/edges", _options(env))
    assert sorted(r["output"] for r in records) == sorted(digests(tmp_path / "local"))
    got = digests(_download(fs, f"s3://{s3_bucket}/edges", tmp_path / "got"))
    assert got == digests(tmp_path / "local")


def test_one_object_to_one_object(s3, s3_bucket, tmp_path):
    env, fs = s3
    make_image(tmp_path / "a.png", "RGB")
    fs.put_file(str(tmp_path / "a.png"), f"{s3_bucket}/a.png")
    result = _convcli(
        env, "pool", f"s3://{s3_bucket}/a.png", "-o", f"s3://{s3_bucket}/small.png", "-v"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.rstrip().endswith(f"output in s3://{s3_bucket}/small.png")
    local = _convcli(env, "pool", tmp_path / "a.png", "-o", tmp_path / "small.png")
    assert local.returncode == 0
    assert fs.cat_file(f"{s3_bucket}/small.png") == (tmp_path / "small.png").read_bytes()


def test_missing_objects_fail_on_one_line(s3, s3_bucket, tmp_path):
    env, _ = s3
    result = _convcli(env, "pool", f"s3://{s3_bucket}/none.png", "-o", f"s3://{s3_bucket}/out")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        f"convcli: s3://{s3_bucket}/none.png: No such file or directory"
    )


def test_a_missing_bucket_is_named_on_one_line_before_any_file(s3, s3_bucket, tmp_path):
    # To a bucket that is not there: the listing of -o says so, and no file is tried. From
    # one: the store's failure, which stops the run, names the bucket, where it said "No
    # such file or directory".
    env, fs = s3
    photos = _gray_photos(tmp_path / "in", "p", 3)
    missing = s3_bucket + "-none"
    result = _convcli(env, "pool", photos, "-o", f"s3://{missing}/out")
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"convcli: s3://{missing}/out: the bucket '{missing}' does not exist"
    ]
    for source in (f"s3://{missing}/in", f"s3://{missing}/in/p00.png"):
        result = _convcli(env, "pool", source, "-o", tmp_path / "out")
        assert result.returncode == 1, result.stderr
        first, summary = result.stderr.splitlines()
        assert first == f"convcli: {source}: the bucket '{missing}' does not exist; the run stops"
        assert summary.startswith("convcli: stopped: 0 processed, 0 skipped, 1 failed in ")
        assert not (tmp_path / "out").exists()
    assert not fs.exists(missing)


# --- without a cluster or a server ------------------------------------------------------------


def test_only_a_missing_object_raised_from_a_nosuchbucket_answer_is_a_missing_bucket():
    from convcli.io import storage

    class Answer(Exception):
        response = {"Error": {"Code": "NoSuchBucket"}}  # as botocore's ClientError holds it

    def raised(exc, *, cause=None, context=None):
        with pytest.raises(Exception) as caught, storage.store_errors("s3://have/a.png"):
            try:
                raise context
            except Exception:
                raise exc from cause
        return caught.value

    missing = raised(FileNotFoundError("gone"), cause=Answer(), context=Answer())
    assert isinstance(missing, storage.StoreError)
    assert missing.strerror == "the bucket 'have' does not exist"
    # another object's error, met while the answer was being handled: the object's own
    other = raised(FileNotFoundError("gone"), context=Answer())
    assert type(other) is FileNotFoundError


def test_memory_urls_in_this_process(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    for i in range(3):
        make_image(tmp_path / f"p{i}.png", "RGB", seed=i)
        fs.put_file(str(tmp_path / f"p{i}.png"), f"/convcli-test/in/p{i}.png")
    try:
        result = CliRunner().invoke(
            main, ["pool", "memory://convcli-test/in", "-o", "memory://convcli-test/out", "-j", "2"]
        )
        assert result.exit_code == 0, result.stderr
        names = sorted(p.rsplit("/", 1)[1] for p in fs.find("/convcli-test/out"))
        manifests = [n for n in names if n.startswith("convcli-manifest-")]
        assert sorted(set(names) - set(manifests)) == sorted(
            f"p{i}_pool-max-f2-s2.png" for i in range(3)
        )  # the image alone, a PNG as its input
        assert len(manifests) == 1 and manifests[0].endswith(".jsonl")
    finally:
        fs.rm("/convcli-test", recursive=True)


def test_an_output_folder_on_object_storage_is_listed_once(tmp_path, monkeypatch):
    import fsspec

    from convcli.app import plan
    from convcli.app.ops import PoolOp

    fs = fsspec.filesystem("memory")
    for i in range(5):
        fs.pipe_file(f"/convcli-list/out/p{i}_pool-max-f2-s2.png", b"x")
    calls = []
    real = plan.list_names
    monkeypatch.setattr(plan, "list_names", lambda *a: calls.append(a) or real(*a))
    try:
        inputs = [
            plan.InputFile(f"memory://convcli-list/in/p{i}.png", "memory://convcli-list/out")
            for i in range(5)
        ]
        tasks = plan.plan_tasks(inputs, PoolOp())
    finally:
        fs.rm("/convcli-list", recursive=True)
    assert len(calls) == 1
    assert [t.existing for t in tasks] == [(f"p{i}_pool-max-f2-s2.png",) for i in range(5)]


def test_memory_with_a_scheduler_is_a_usage_error(tmp_path):
    result = run("pool", "memory://x/in", "-o", tmp_path / "out", "--scheduler", "local")
    assert result.exit_code == 2 and "memory://" in result.stderr
    for cluster, blamed in (
        (["--scheduler", "local"], "--scheduler"),
        (["--engine", "dask"], "--engine"),
    ):
        result = run("pool", tmp_path / "a.png", "-o", "memory://x/out", *cluster)
        assert result.exit_code == 2 and f"Invalid value for '{blamed}'" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_missing_backend_names_the_extra(tmp_path):
    proc = run_without("s3fs", "pool", "s3://b/in", "-o", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.startswith("convcli: s3://b/in: s3:// needs s3fs: pip install 'convcli[s3]'")
    assert len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_storage_option_must_be_key_value(tmp_path):
    result = run("pool", "s3://b/in", "-o", tmp_path / "out", "--storage-option", "anon")
    assert result.exit_code == 2 and "--storage-option" in result.stderr


def test_a_storage_option_given_twice_is_a_usage_error(photo, tmp_path):
    # the last value used to win, the first one silently dropped
    result = run(
        "pool", photo, "-o", tmp_path / "out",
        "--storage-option", "anon=true", "--storage-option", "anon=false",
    )  # fmt: skip
    assert_one_line_error(result, 2, "--storage-option", "'anon' is given twice")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("hdfs://nn/in", "no convcli extra installs (fsspec: pyarrow"),
        ("abfs://c/in", "needs adlfs, which no convcli extra installs"),
    ],
)
def test_a_protocol_no_extra_installs_names_its_package_not_s3(url, names, tmp_path):
    result = run("pool", url, "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert names in result.stderr and "convcli[s3]" not in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_the_s3_extras_have_a_floor_that_resolves_beside_moto():
    """s3fs 2025.3.1 pins a yanked fsspec: pip backtracked to it beside moto[server]."""
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    for extra in ("s3", "test"):
        assert "s3fs>=2025.9" in extras[extra], extra


# --- runs side by side, and a store that fails ------------------------------------------------


def _gray_photos(folder, prefix, count):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        make_image(folder / f"{prefix}{i:02d}.png", "L", seed=i, size=(24, 18))
    return folder


def _options(env):
    return {"key": "testing", "secret": "testing", "endpoint_url": env["FSSPEC_S3_ENDPOINT_URL"]}


def _manifest_records(fs, folder):
    """The lines of every manifest object in `folder`, in name order, as JSON."""
    names = sorted(
        p
        for p in fs.ls(folder, detail=False, refresh=True)
        if p.rsplit("/", 1)[1].startswith("convcli-manifest")
    )
    return [json.loads(line) for name in names for line in fs.cat_file(name).splitlines()]


@pytest.mark.slow
def test_two_runs_into_one_prefix_keep_every_manifest_line(s3, s3_bucket, tmp_path):
    env, fs = s3
    out = f"s3://{s3_bucket}/out"
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "convcli",
                "pool",
                _gray_photos(tmp_path / side, side, 6),
                "-o",
                out,
                "-q",
                "-j",
                "1",
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for side in "ab"
    ]
    for proc in runs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
        proc.stderr.close()
    records = _manifest_records(fs, f"{s3_bucket}/out")
    expected = sorted(f"{side}{i:02d}_pool-max-f2-s2-L.png" for side in "ab" for i in range(6))
    assert sorted(r["output"] for r in records) == expected  # 12 lines, none lost
    from convcli.app.manifest import read_manifest

    assert read_manifest(out, _options(env)) == records
    for record in records:
        assert record["input"] == str(
            tmp_path / record["output"][0] / (record["output"].split("_")[0] + ".png")
        )
    assert (
        sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{s3_bucket}/out") if p.endswith(".png"))
        == expected
    )


def test_a_run_that_ends_while_another_puts_its_manifest_loses_no_line(monkeypatch):
    """Two runs' manifests put at the same moment (read, append, put back lost one run's lines)."""
    import fsspec

    from convcli.app import manifest
    from convcli.app.ops import PoolOp
    from convcli.engines.processes import FileResult

    out = "memory://convcli-race/out"
    runs = [
        manifest.Manifest(PoolOp(), fmt="png", argv=["convcli", "pool", name])
        for name in ("a.png", "b.png")
    ]
    for run_, name in zip(runs, ("a", "b"), strict=True):
        run_.add(
            FileResult(
                f"/in/{name}.png",
                "done",
                outputs=(f"{out}/{name}_p.png",),
                records=({"output": f"{name}_p.png"},),
            )
        )
    real, other = manifest.storage.upload, []

    def upload(local, url, options=None, **counted):
        # The other run ends between this one's read and its put (of its run's object: the
        # part objects put on the way are the runs' own threads').
        if not other and "-part-" not in url:
            other.append("closing")
            other.append(runs[1].close())
        real(local, url, options, **counted)

    monkeypatch.setattr(manifest.storage, "upload", upload)
    try:
        assert runs[0].close() == [] and other == ["closing", []]
        records = _manifest_records(fsspec.filesystem("memory"), "/convcli-race/out")
    finally:
        fsspec.filesystem("memory").rm("/convcli-race", recursive=True)
    assert sorted((r["output"], r["input"]) for r in records) == [
        ("a_p.png", "/in/a.png"),
        ("b_p.png", "/in/b.png"),
    ]


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _one_line_exit_1(result, *, written=None):
    """The run failed on one line (no traceback, exit 1); nothing written in `written`."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert written is None or not written.exists()
    return result.stderr.rstrip()


@pytest.mark.parametrize(
    ("option", "reason"),
    [
        ("endpoint_url=http://127.0.0.1:{port}", "cannot connect to http://127.0.0.1:{port}"),
        ("endpoint_url=notaurl", "Invalid endpoint: notaurl (endpoint_url must be a URL"),
        ("foo=1", "the store does not take the option 'foo' (--storage-option)"),
        ("config_kwargs=5", "the storage options do not work (AttributeError: "),
    ],
)
def test_a_store_that_cannot_be_used_is_one_line(option, reason, tmp_path):
    port = _free_port()  # nothing listens there
    photos = _gray_photos(tmp_path / "in", "p", 3)
    result = run(
        "pool",
        photos,
        "-o",
        "s3://convcli-none/out",
        "--storage-option",
        option.format(port=port),
        "--storage-option",
        "key=testing",
        "--storage-option",
        "secret=testing",
    )
    line = _one_line_exit_1(result)
    assert line == f"convcli: s3://convcli-none/out: {reason.format(port=port)}" or (
        line.startswith(f"convcli: s3://convcli-none/out: {reason}")
    )


def test_an_error_of_a_connection_cut_that_nobody_awaits_is_not_printed(caplog):
    import asyncio

    from convcli.io.storage import _orphaned_task_error

    loop = asyncio.new_event_loop()
    try:
        _orphaned_task_error(
            loop,
            {
                "message": "Task exception was never retrieved",
                "exception": ConnectionResetError("closing transport"),
            },
        )
        assert caplog.messages == []
        _orphaned_task_error(loop, {"message": "something else", "exception": KeyError("k")})
        assert caplog.messages == ["something else"]  # other errors: asyncio's own handler
    finally:
        loop.close()


def test_a_manifest_that_cannot_be_put_after_every_file_is_exit_1(tmp_path, monkeypatch):
    """The store went away between the last output and the manifest: exit 0 before."""
    import fsspec

    from convcli.app import manifest
    from convcli.io import storage

    real = storage.upload

    def upload(local, url, options=None, **counted):
        if not manifest.is_manifest_name(storage.basename(url)):
            return real(local, url, options, **counted)
        raise storage.StoreError(url, "cannot connect to http://127.0.0.1:9")

    monkeypatch.setattr(storage, "upload", upload)
    make_image(tmp_path / "a.png", "L")
    try:
        result = run("pool", tmp_path / "a.png", "-o", "memory://convcli-lost/out")
        written = fsspec.filesystem("memory").ls("/convcli-lost/out", detail=False)
    finally:
        fsspec.filesystem("memory").rm("/convcli-lost", recursive=True)
    assert written == ["/convcli-lost/out/a_pool-max-f2-s2-L.png"]
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith("convcli: memory://convcli-lost/out/convcli-manifest-")
    assert lines[0].endswith(
        ": the manifest could not be written (1 line(s) of this run lost): "
        "cannot connect to http://127.0.0.1:9"
    )
    assert lines[1].startswith("convcli: 1 processed, 0 skipped, 0 failed") and len(lines) == 2


def test_the_first_failure_of_the_store_stops_the_run_on_one_line(tmp_path, monkeypatch):
    """Each file used to fail on its own line, after its own wait, and the run went on."""
    import fsspec

    from convcli.io import storage

    tries = []

    def upload(local, url, options=None, **counted):
        tries.append(url)
        raise storage.StoreError(url, "cannot connect to http://127.0.0.1:9")

    monkeypatch.setattr(storage, "upload", upload)
    photos = _gray_photos(tmp_path / "in", "p", 6)
    try:
        result = run("pool", photos, "-o", "memory://convcli-stops/out", "-j", "1")
    finally:
        if fsspec.filesystem("memory").exists("/convcli-stops"):
            fsspec.filesystem("memory").rm("/convcli-stops", recursive=True)
    assert result.exit_code == 1, result.output
    assert tries == ["memory://convcli-stops/out/p00_pool-max-f2-s2-L.png"]  # no other file tried
    assert result.stderr.splitlines() == [
        f"convcli: {photos}/p00.png: memory://convcli-stops/out/p00_pool-max-f2-s2-L.png: "
        "cannot connect to http://127.0.0.1:9; the run stops",
        result.stderr.splitlines()[1],
    ]
    assert result.stderr.splitlines()[1].startswith(
        "convcli: stopped: 0 processed, 0 skipped, 1 failed in "
    )
    assert result.stderr.rstrip().endswith("no outputs written; 5 not started or not finished")


def test_no_credentials_is_one_line(s3, s3_bucket, tmp_path, monkeypatch):
    env, _ = s3
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = run(
        "pool",
        _gray_photos(tmp_path / "in", "p", 2),
        "-o",
        f"s3://{s3_bucket}/out",
        "--storage-option",
        f"endpoint_url={env['FSSPEC_S3_ENDPOINT_URL']}",
        "--storage-option",
        "skip_instance_cache=true",
    )
    line = _one_line_exit_1(result)
    assert line.startswith(
        f"convcli: s3://{s3_bucket}/out: Unable to locate credentials (set AWS_ACCESS_KEY_ID"
    )


def test_an_http_403_is_one_line(tmp_path):
    class Forbidden(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(403)
            self.end_headers()

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forbidden)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/photos/a.png"
    try:
        result = run("pool", url, "-o", tmp_path / "out")
    finally:
        server.shutdown()
        server.server_close()
    assert _one_line_exit_1(result, written=tmp_path / "out") == (
        f"convcli: {url}: HTTP 403 Forbidden"
    )


@pytest.mark.slow
def test_a_store_killed_mid_batch_stops_the_run_on_one_line(tmp_path):
    """Each of the files left once waited out botocore's retries: 167 s for 40 files.

    Its own S3 server, which it stops mid-run."""
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        endpoint = "http://{}:{}".format(*server.get_host_and_port())
        fs = pytest.importorskip("s3fs").S3FileSystem(
            key="testing", secret="testing", endpoint_url=endpoint, skip_instance_cache=True
        )
        fs.mkdir("killed")
        # One try per request (honoured over convcli's 3): the bound of those is tested above.
        env = dict(
            os.environ,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            FSSPEC_S3_ENDPOINT_URL=endpoint,
            AWS_MAX_ATTEMPTS="1",
        )
        photos = _gray_photos(tmp_path / "in", "p", 60)
        proc = subprocess.Popen(
            [sys.executable, "-m", "convcli", "pool", photos, "-o", "s3://killed/out", "-j", "1"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        while not fs.ls("killed", refresh=True) and proc.poll() is None:
            time.sleep(0.02)  # until the first output is there
    finally:
        server.stop()
    try:
        stderr = proc.communicate(timeout=60)[1]  # the bound: before, minutes
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    cause = f"cannot connect to {endpoint}"
    stops = [line for line in lines if line.endswith(f"{cause}; the run stops")]
    assert len(stops) == 1 and stops[0].startswith(f"convcli: {photos}/p"), stderr
    assert lines[-1].startswith("convcli: stopped: ") and "not started or not finished" in lines[-1]
    # The manifest cannot be put either: said once, with the number of lines lost.
    lost = [line for line in lines if "the manifest could not be written" in line]
    assert len(lost) == 1 and lost[0].startswith("convcli: s3://killed/out/convcli-manifest-")
    assert len(lines) == 3, stderr


def test_access_denied_to_one_input_fails_that_file_and_elsewhere_stops_the_run():
    """A bucket may hold objects these credentials cannot read: only reading one is per file."""
    from convcli.io.storage import StoreError, store_errors

    denied = PermissionError(13, "Access Denied")
    with pytest.raises(PermissionError) as one:
        with store_errors("s3://b/private.png", one_object=True):
            raise denied
    assert not isinstance(one.value, StoreError)
    with pytest.raises(StoreError) as store:
        with store_errors("s3://b/out"):
            raise denied
    assert (store.value.filename, store.value.strerror) == (
        "s3://b/out",
        "access denied: Access Denied",
    )
