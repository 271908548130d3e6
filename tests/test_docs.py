"""The documentation's commands: the picture scripts under docs/ and the README's recipes."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from click.testing import CliRunner
from helpers import make_image, read

from convcli.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = [
    "docs/tour/make-pictures.sh",
    "docs/learning/make-pictures.sh",
    "docs/side-by-side/make.sh",
]

# Stands in for convcli in the picture scripts: writes, as convcli does, a manifest in the
# folder of -o (a folder, or a file's folder), and nothing else.
MANIFEST_ONLY = """\
import os, sys
args = sys.argv[1:]
out = args[args.index("-o") + 1] if "-o" in args else "convcli-out"
folder = os.path.dirname(out) if os.path.splitext(out)[1] else out
os.makedirs(folder, exist_ok=True)
open(os.path.join(folder, "convcli-manifest.jsonl"), "a").write("{}\\n")
"""


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
    result = subprocess.run(
        ["bash", script], cwd=copy, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert not list((copy / "docs").rglob("convcli-manifest.jsonl"))


# --- the README's recipes -----------------------------------------------------------------------


def recipes() -> list[str]:
    """The commands of the README's recipes block, comments cut off."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    if "Recipes (" not in readme:
        return []
    block = readme.split("Recipes (", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_recipes_cover_what_a_newcomer_asks_for():
    commands = recipes()
    assert len(commands) <= 12
    for wanted in (
        "-r photos",
        "--channels each",
        "-k sharpen",
        "--combine magnitude",
        "--size 2",
        "-o vertical.png",
        "| convcli",
        "--scheduler",
    ):
        assert any(wanted in c for c in commands), wanted


@pytest.fixture(scope="module")
def recipe_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recipes")
    (folder / "photos").mkdir()
    make_image(folder / "photo.jpg", "RGB", seed=1)
    for seed in range(2):
        make_image(folder / "photos" / f"p{seed}.png", "RGB", seed=seed)
    heights = np.random.default_rng(2).uniform(-50, 900, (60, 80)).astype(np.float32)
    tifffile.imwrite(
        folder / "dem.tif",
        heights,
        extratags=[  # a GeoTIFF elevation model
            (33550, "d", 3, (30.0, 30.0, 0.0), True),
            (33922, "d", 6, (0, 0, 0, 400000.0, 5000000.0, 0), True),
            (34735, "H", 8, (1, 1, 0, 1, 3072, 0, 1, 32632), True),
        ],
    )
    return folder


@pytest.mark.parametrize("command", [c for c in recipes() if "--scheduler" not in c])
def test_each_recipe_works_on_a_photo(recipe_folder, monkeypatch, command):
    """Run in-process as the shell would: stdin from `cat FILE |`, stdout to `> FILE`."""
    monkeypatch.chdir(recipe_folder)
    source = sink = None
    if command.startswith("cat "):
        source, command = (part.strip() for part in command[4:].split("|", 1))
    if ">" in command:
        command, sink = (part.strip() for part in command.split(">", 1))
    words = shlex.split(command)
    assert words[0] == "convcli"
    stdin = Path(source).read_bytes() if source else None
    result = CliRunner().invoke(main, words[1:], input=stdin)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    if sink:
        Path(sink).write_bytes(result.stdout_bytes)
    out = words[words.index("-o") + 1] if sink is None else sink
    written = Path(out)
    files = sorted(written.glob("*.png")) if written.is_dir() else [written]
    assert files and all(read(f).size for f in files)
    if "dem.tif" in command:  # float heights and their place kept
        with tifffile.TiffFile(written) as tif:
            assert tif.pages[0].dtype == np.float32 and tif.pages[0].tags[33550].value[0] == 60
    if "--channels each" in command:
        assert read(files[0]).ndim == 3  # the colour result


def test_the_cluster_recipe_parses():
    """Its options are conv's (no cluster is started): click parses them without an error."""
    (command,) = [c for c in recipes() if "--scheduler" in c]
    words = shlex.split(command)[1:]
    context = main.make_context("convcli", list(words), resilient_parsing=False)
    name, sub, rest = main.resolve_command(context, list(words))
    sub.make_context(name, rest, parent=context)


def test_the_library_reference_is_made_from_the_docstrings_as_they_are():
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "make_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "page, most", [("README.md", 2000), ("docs/performance.md", 2500)], ids=["readme", "perf"]
)
def test_the_front_pages_stay_short(page, most):
    """The README is a front door and the performance page a page of figures: their words
    (as ``wc -w`` counts them, table bars included) stay within these limits."""
    assert len((ROOT / page).read_text(encoding="utf-8").split()) <= most


def test_the_guide_speaks_of_convcli_not_of_how_it_was_made():
    """Pages for users: no work log (rounds, issue numbers, what a turn or session built)."""
    log = re.compile(
        r"\b(first|second|third|fourth|last|next|this) round\b|\bissue #?\d+|"
        r"\bthis (turn|session)\b|\bwhat was tried\b",
        re.IGNORECASE,
    )
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        assert log.search(page.read_text(encoding="utf-8")) is None, page.name
