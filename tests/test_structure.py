"""The package's shape: every function in convcli/ small enough to read at once."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "convcli"
MAX_FUNCTION_LINES = 60
"""From the ``def`` line to the last line of the body, docstring included."""


def long_functions(root: Path, limit: int) -> list[str]:
    """``file:line name length`` for every function under `root` longer than `limit` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    where = path.relative_to(root.parent).as_posix()
                    found.append(f"{where}:{node.lineno} {node.name} {length}")
    return found


def test_long_functions_are_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "mod.py").write_text(
        "def short():\n"
        "    return 1\n"
        "\n"
        "\n"
        "class Layer:\n"
        "    def forward(self):\n"
        '        """Three lines."""\n'
        "        x = 1\n"
        "        return x\n"
    )
    assert long_functions(package, 3) == ["pkg/sub/mod.py:6 forward 4"]
    assert long_functions(package, 4) == []


def test_no_function_is_over_the_limit():
    found = long_functions(PACKAGE, MAX_FUNCTION_LINES)
    assert not found, (
        f"functions over {MAX_FUNCTION_LINES} lines (file:line name length):\n" + "\n".join(found)
    )


def test_every_benchmark_imports():
    """The benchmarks import each other's helpers: a helper removed from one breaks another."""
    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    script = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(folder)!r})\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        if exc.name not in ('torch', 'cv2', 'scipy', 'zlib_ng', 'imagecodecs'):\n"
        "            raise\n"
    )
    names = sorted(path.stem for path in folder.glob("bench_*.py"))
    assert len(names) >= 5
    done = subprocess.run([sys.executable, "-c", script, *names], capture_output=True,
                          text=True, cwd=folder)
    assert done.returncode == 0, done.stderr
