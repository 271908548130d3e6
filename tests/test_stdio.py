"""Standard input and output: a byte limit on input, kills, full or closed output, one line each."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import types

import pytest
from helpers import wait_until

from convcli.app import stdio

_SUBPROCESS = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shells and signals")


def _convcli(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "convcli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


def _shell(line: str, **kwargs) -> subprocess.CompletedProcess:
    """`line` run by sh, ``convcli`` standing for this interpreter's ``-m convcli``."""
    command = line.replace("convcli", f"'{sys.executable}' -m convcli", 1)
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, timeout=120, **kwargs
    )


def _one_line(proc: subprocess.CompletedProcess, status: int, words: str) -> None:
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr


def _temp_env(tmp_path):
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder, {**os.environ, "TMPDIR": str(folder)}


# --- standard input --------------------------------------------------------------------------


def test_stdin_limit_follows_max_pixels():
    assert stdio.stdin_limit(10) == 80 + (1 << 20)
    assert stdio.stdin_limit(0) == 0  # no limit, as --max-pixels 0


@_SUBPROCESS
def test_endless_stdin_stops_at_the_limit_and_leaves_nothing(tmp_path):
    """``convcli conv - < /dev/zero`` once wrote 5 GB to the temporary folder."""
    tmp, env = _temp_env(tmp_path)
    with open("/dev/zero", "rb") as zeros:
        proc = _convcli(
            "conv",
            "-k",
            "sobel-x",
            "--max-pixels",
            "1000",
            "-",
            "-o",
            tmp_path / "out",
            stdin=zeros,
            env=env,
        )
    _one_line(proc, 1, "standard input is larger than 1,056,576 bytes")
    assert "--max-pixels" in proc.stderr
    assert list(tmp.iterdir()) == [] and not (tmp_path / "out").exists()


@_SUBPROCESS
def test_sigterm_while_reading_stdin_removes_the_saved_part(tmp_path):
    tmp, env = _temp_env(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convcli",
            "conv",
            "-k",
            "sobel-x",
            "-",
            "-o",
            str(tmp_path / "out"),
        ],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=False,
        env=env,
    )
    proc.stdin.write(b"\0" * (1 << 20))
    proc.stdin.flush()

    def saved() -> bool:
        return any(
            os.path.getsize(os.path.join(folder, name)) > 0
            for folder, _, files in os.walk(tmp)
            for name in files
        )

    assert wait_until(saved, 60)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    assert b"Traceback" not in stderr
    assert list(tmp.iterdir()) == []


def test_a_full_disk_while_saving_stdin_is_one_line(monkeypatch):
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(b"x" * 5000)))
    with pytest.raises(
        stdio.StreamError, match="^cannot save standard input: no space left on the device$"
    ):
        stdio.save_stdin("/dev/full", 1000)


# --- standard output -------------------------------------------------------------------------


@_SUBPROCESS
@pytest.mark.parametrize(
    "args", ["kernels", "kernels sobel-x", "explain conv --as scipy", "explain pool"]
)
def test_text_to_a_full_device_is_one_line(args):
    proc = _shell(f"convcli {args} > /dev/full")
    _one_line(proc, 1, "cannot write to standard output: no space left on the device")


@_SUBPROCESS
@pytest.mark.parametrize("args", ["kernels", "explain conv --as scipy"])
def test_text_to_a_closed_stdout_is_one_line(args):
    proc = _shell(f"convcli {args} >&-")
    _one_line(proc, 1, "standard output is closed")


@_SUBPROCESS
def test_an_image_to_a_full_device_is_one_line_and_leaves_nothing(photo, tmp_path):
    tmp, env = _temp_env(tmp_path)
    proc = _shell(f"convcli conv -k sobel-x '{photo}' -o - > /dev/full", env=env)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "convcli: cannot write to standard output: no space left on the device" in proc.stderr
    assert list(tmp.iterdir()) == []


@_SUBPROCESS
def test_an_image_to_a_closed_stdout_is_refused_before_work(photo, tmp_path):
    tmp, env = _temp_env(tmp_path)
    proc = _shell(f"convcli conv -k sobel-x '{photo}' -o - >&-", env=env)
    _one_line(proc, 2, "standard output is closed")
    assert list(tmp.iterdir()) == []


@_SUBPROCESS
def test_a_closed_stdin_is_one_line(photo, tmp_path):
    proc = _shell(f"convcli conv -k sobel-x - -o '{tmp_path / 'out'}' <&-")
    _one_line(proc, 2, "standard input, which is closed")
