"""Hostile kernel files: deep nesting and sizes, refused on one line naming the file."""

from __future__ import annotations

import re

import pytest
from helpers import assert_one_line_error, make_image, run

from convcli.kernels import KernelError, load_kernel_file, parse_kernel_spec

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
