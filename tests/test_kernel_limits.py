"""Hostile kernel files: deep nesting and sizes, refused on one line naming the file."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import assert_one_line_error, make_image, run

from convcli.kernels import (
    MAX_KERNEL_FILE_BYTES,
    MAX_KERNEL_SIDE,
    KernelError,
    format_kernel_grid,
    load_kernel_file,
    parse_kernel_spec,
)
from convcli.kernels import files as kernels

# --- nesting ---------------------------------------------------------------------------------


def _nested_array(depth: int) -> str:
    return "weights = " + "[" * depth + "1" + "]" * depth + "\n"


@pytest.mark.parametrize(
    "content",
    [
        _nested_array(500),  # the attack: tomllib recursed until Python's stack ran out
        _nested_array(20_000),
        "weights = [[1]]\nx = " + "{a = " * 2_000 + "1" + "}" * 2_000 + "\n",
        "weights = [[" + "{a = " * 2_000 + "1" + "}" * 2_000 + "]]\n",
    ],
    ids=["array-500", "array-20000", "inline-table", "table-in-weights"],
)
def test_deeply_nested_toml_is_refused_naming_the_file(tmp_path, content):
    path = tmp_path / "deep.toml"
    path.write_text(content)
    with pytest.raises(KernelError) as info:
        load_kernel_file(path)
    text = str(info.value)
    assert text == f"{path}: invalid TOML: arrays or inline tables nested too deeply"


@pytest.mark.parametrize("key", ["name", "aliases", "scale"])
def test_dotted_keys_thousands_deep_give_a_short_message(tmp_path, key):
    # Dotted keys build nested tables without recursion in the parser; showing the
    # value with repr() would then recurse (RecursionError) and print megabytes.
    path = tmp_path / "dotted.toml"
    path.write_text(f"weights = [[1]]\n{key}." + "a." * 5_000 + "b = 1\n")
    with pytest.raises(KernelError) as info:
        load_kernel_file(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and "{'a': {'a': {'a': {...}}}}" in text
    assert len(text) < len(str(path)) + 100


def test_an_alias_table_deep_and_a_long_name_are_shown_short(tmp_path):
    path = tmp_path / "alias.toml"
    path.write_text("weights = [[1]]\naliases = [{" + "a." * 5_000 + "b = 1}]\n")
    with pytest.raises(KernelError, match=re.escape("alias must be a string, got {'a': {'a'")):
        load_kernel_file(path)
    path.write_text('weights = [[1]]\nname = "' + "a b" * 10_000 + '"\n')
    with pytest.raises(KernelError, match="name 'a ba b.*\\.\\.\\..*' may only use") as info:
        load_kernel_file(path)
    assert len(str(info.value)) < len(str(path)) + 150


def test_nested_weights_that_parse_are_shown_short(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text(_nested_array(50))
    with pytest.raises(KernelError) as info:
        load_kernel_file(path)
    assert str(info.value) == f"{path}: row 1, column 1: [[[[...]]]] is not a number"


@pytest.mark.parametrize("command", ["conv", "kernels"])
def test_deeply_nested_toml_is_a_usage_error_on_the_command_line(tmp_path, command):
    path = tmp_path / "deep.toml"
    path.write_text(_nested_array(500))
    if command == "conv":
        photo = make_image(tmp_path / "photo.png")
        result = run("conv", "-k", path, photo, "-o", tmp_path / "out")
        assert not (tmp_path / "out").exists()
    else:
        result = run("kernels", path)
    assert_one_line_error(result, 2, str(path), "nested too deeply")
    with pytest.raises(KernelError, match="nested too deeply"):
        parse_kernel_spec(f"{path}:90")


# --- size ------------------------------------------------------------------------------------


def _worst_case_grid(rows: int, cols: int) -> np.ndarray:
    """Weights that each need all 17 significant digits and an exponent: the longest text."""
    g = np.random.default_rng(12)
    return -(1 + g.random((rows, cols))) * 1e-100


def test_a_kernel_at_the_limit_loads_from_text_and_toml(tmp_path):
    side = MAX_KERNEL_SIDE
    weights = _worst_case_grid(side, side)
    text = tmp_path / "k.txt"
    text.write_text(format_kernel_grid(weights) + "\n")
    toml = tmp_path / "k.toml"
    toml.write_text(
        "weights = [\n"
        + "".join("  [" + ", ".join(repr(float(x)) for x in row) + "],\n" for row in weights)
        + "]\n"
    )
    for path in (text, toml):
        assert path.stat().st_size <= MAX_KERNEL_FILE_BYTES
        kernel = load_kernel_file(path)
        np.testing.assert_array_equal(kernel.weights, weights)  # every digit read back


@pytest.mark.parametrize(
    ("filename", "content", "message"),
    [
        ("rows.txt", ("1 " * 255 + "\n") * 256, "the grid has 256 rows"),
        ("cols.txt", "1, " * 256 + "\n", "line 1 has 256 values"),
        (
            "ragged.txt",
            "# wide\n" + ("1 " * 5 + "\n") * 3 + "1 " * 300 + "\n",
            "line 5 has 300 values",
        ),
        ("rows.toml", "weights = [" + "[1, 2], " * 256 + "]\n", "'weights' has 256 rows"),
        ("cols.toml", "weights = [[1], [" + "1, " * 256 + "]]\n", "row 2 has 256 values"),
    ],
)
def test_a_grid_over_the_limit_is_refused(tmp_path, filename, content, message):
    path = tmp_path / filename
    path.write_text(content)
    with pytest.raises(KernelError) as info:
        load_kernel_file(path)
    assert str(info.value) == (
        f"{path}: {message}: a kernel file holds at most "
        f"{MAX_KERNEL_SIDE} x {MAX_KERNEL_SIDE} weights"
    )


@pytest.mark.parametrize("suffix", [".txt", ".toml"])
def test_a_file_over_the_size_limit_is_refused_before_parsing(tmp_path, monkeypatch, suffix):
    path = tmp_path / f"big{suffix}"
    # One byte over: a single row of 1s, which no parser would be asked to read.
    head = "weights = [[" if suffix == ".toml" else ""
    path.write_text(head + "1" * (MAX_KERNEL_FILE_BYTES + 1 - len(head)))
    parsed = []
    monkeypatch.setattr(kernels.tomllib, "loads", lambda *a: parsed.append(a))
    monkeypatch.setattr(kernels.np, "loadtxt", lambda *a, **k: parsed.append(a))
    with pytest.raises(KernelError) as info:
        load_kernel_file(path)
    assert str(info.value) == (
        f"{path}: the file is larger than 2 MiB, the limit for a kernel file "
        f"(at most {MAX_KERNEL_SIDE} x {MAX_KERNEL_SIDE} weights)"
    )
    assert parsed == []


def test_a_huge_kernel_file_is_a_usage_error_on_the_command_line(tmp_path):
    path = tmp_path / "huge.txt"
    path.write_text(("1 " * 2_000 + "\n") * 600)  # 2.4 MB: 600 x 2000 weights
    assert_one_line_error(run("kernels", path), 2, str(path), "larger than 2 MiB")
    photo = make_image(tmp_path / "photo.png")
    assert_one_line_error(
        run("conv", "-k", path, photo, "-o", tmp_path / "out"), 2, str(path), "larger than 2 MiB"
    )
    assert not (tmp_path / "out").exists()
