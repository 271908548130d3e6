"""The documentation's commands: the picture scripts under docs/ and the README's recipes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["docs/tour/make-pictures.sh", "docs/learning/make-pictures.sh",
           "docs/side-by-side/make.sh"]

# Stands in for convcli in the picture scripts: writes, as convcli does, a manifest in the
# folder of -o (a folder, or a file's folder), and nothing else.
MANIFEST_ONLY = '''\
import os, sys
args = sys.argv[1:]
out = args[args.index("-o") + 1] if "-o" in args else "convcli-out"
folder = os.path.dirname(out) if os.path.splitext(out)[1] else out
os.makedirs(folder, exist_ok=True)
open(os.path.join(folder, "convcli-manifest.jsonl"), "a").write("{}\\n")
'''


def on_path(folder: Path, name: str, code: str) -> dict:
    """An environment with a program `name` on PATH that runs the Python `code`."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / f"{name}.py").write_text(code)
    program = bin_dir / name
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{bin_dir / name}.py" "$@"\n')
    program.chmod(0o755)
    return dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("script", SCRIPTS)
def test_picture_scripts_leave_no_manifest_in_docs(tmp_path, script):
    copy = tmp_path / "project"
    folder = copy / Path(script).parent
    folder.mkdir(parents=True)
    shutil.copy(ROOT / script, copy / script)
    env = on_path(tmp_path, "convcli", MANIFEST_ONLY)
    for tool in ("convert", "montage", "python"):  # side-by-side's other tools do nothing
        env = on_path(tmp_path, tool, "import sys\nprint('Version: ImageMagick')\n")
    result = subprocess.run(["bash", script], cwd=copy, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert not list((copy / "docs").rglob("convcli-manifest.jsonl"))
