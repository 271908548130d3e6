"""The package's shape: every function in convcli/ small enough to read at once."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
    done = subprocess.run(
        [sys.executable, "-c", script, *names], capture_output=True, text=True, cwd=folder
    )
    assert done.returncode == 0, done.stderr


# --- the import graph: layers whose imports go only downward --------------------------------

TIERS = {"layers": 0, "kernels": 1, "levels": 1, "io": 1, "engines": 2, "app": 3, "cli": 4}
"""Each package's tier: a module imports only from its own tier or lower ones
(cli -> app -> engines -> io, levels, kernels -> layers)."""

BASE = {
    "convcli.errors",
    "convcli.choices",
    "convcli.units",
    "convcli._version",
    "convcli.startup",
}
"""Modules of the package root that import nothing of convcli's: any module may import them."""

LAZY_PLACES = ("convcli.cli", "convcli.__main__", "convcli")
"""Where a convcli module may be imported inside a function: the command line (its start
must load little), and the package root's lazy public names."""


def convcli_imports(root: Path) -> dict[str, list[tuple[str, bool]]]:
    """Each module of the package under `root`: the convcli modules it imports, each with
    whether the import statement is inside a function."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    found: dict[str, list[tuple[str, bool]]] = {}
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_function = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(node)
        }
        here = name.split(".") if is_package else name.split(".")[:-1]
        imports = []
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                base = ".".join(base + ([node.module] if node.module else []))
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != name and target.startswith(root.name):
                    imports.append((target, id(node) in in_function))
        found[name] = imports
    return found


def _tier(module: str) -> int | None:
    parts = module.split(".")
    return TIERS.get(parts[1]) if len(parts) > 1 else None


def import_problems(graph: dict[str, list[tuple[str, bool]]]) -> list[str]:
    """Upward imports, imports inside functions outside :data:`LAZY_PLACES`, and cycles."""
    problems = []
    for module, imports in graph.items():
        for target, inside in imports:
            if target in BASE:
                continue
            if module in BASE:
                problems.append(f"{module} -> {target}: a base module imports convcli")
            mine, theirs = _tier(module), _tier(target)
            if mine is not None and (theirs is None or theirs > mine):
                problems.append(f"{module} -> {target}: upward")
            if inside and not (module in LAZY_PLACES or module.startswith("convcli.cli.")):
                problems.append(f"{module} -> {target}: inside a function")
    # cycles (imports inside functions count: they hold a cycle together as well)
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target, _ in graph.get(module, []):
            if state.get(target) == 1:
                problems.append("cycle: " + " -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return problems


def test_import_problems_are_found(tmp_path):
    package = tmp_path / "convcli"
    for folder in ("io", "app", "layers"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text("")
    (package / "io" / "reader.py").write_text("from ..app import run\nfrom ..errors import x\n")
    (package / "app" / "run.py").write_text("def go():\n    from ..io import reader\n")
    (package / "layers" / "a.py").write_text("from . import b\n")
    (package / "layers" / "b.py").write_text("from . import a\n")
    problems = import_problems(convcli_imports(package))
    assert "convcli.io.reader -> convcli.app.run: upward" in problems
    assert "convcli.app.run -> convcli.io.reader: inside a function" in problems
    assert any(p.startswith("cycle: convcli.app.run") for p in problems)
    assert any(p.startswith("cycle: convcli.layers.a -> convcli.layers.b") for p in problems)
    assert not any("errors" in p for p in problems)


def test_imports_go_only_downward_without_cycles():
    problems = import_problems(convcli_imports(PACKAGE))
    assert not problems, "\n".join(problems)


MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 250


def test_no_module_or_class_is_over_the_limits():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(PACKAGE.parent).as_posix()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno >= MAX_CLASS_LINES:
                found.append(
                    f"{where}:{node.lineno} class {node.name}: "
                    f"{node.end_lineno - node.lineno + 1} lines"
                )
    assert not found, "\n".join(found)


def test_one_table_of_output_formats():
    # --format's choices, the app's outputs and io's writers read the same table.
    from convcli.choices import FORMAT_ALIASES, FORMAT_NAMES
    from convcli.io import image_files, row_writers
    from convcli.io.formats import FORMATS

    assert tuple(FORMATS) == FORMAT_NAMES
    assert set(FORMAT_ALIASES.values()) <= set(FORMATS)
    assert row_writers.ROW_FORMATS == ("npy", "png", "tiff", "zarr")
    assert image_files._PIL_FORMATS == {"png": "PNG", "jpg": "JPEG", "tiff": "TIFF"}
    assert [name for name, f in FORMATS.items() if not f.stacks] == ["jpg", "zarr"]


def test_ruff_finds_nothing():
    pytest.importorskip("ruff")
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "convcli",
            "tests",
            "benchmarks",
            "docs",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_changes_nothing():
    # The code is as `ruff format` writes it (line length 100, pyproject.toml).
    pytest.importorskip("ruff")
    root = Path(__file__).resolve().parent.parent
    command = ["ruff", "format", "--check", "--no-cache", "convcli", "tests", "benchmarks", "docs"]
    result = subprocess.run(
        [sys.executable, "-m", *command], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
