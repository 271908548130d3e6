"""Tests for resolving ``--kernel`` specs: names before paths, comma lists, fractions in grids."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from convcli.kernels import KernelError, get_kernel, list_kernels, parse_kernel_spec

# A grid unlike every shipped kernel, written into files named like kernels.
OTHER_GRID = "9 8 7\n6 5 4\n3 2 1\n"
OTHER_WEIGHTS = [[9, 8, 7], [6, 5, 4], [3, 2, 1]]


@pytest.fixture
def crowded(tmp_path, monkeypatch):
    """A working directory holding a folder ``edge`` and a file ``sobel-y``."""
    monkeypatch.chdir(tmp_path)
    Path("edge").mkdir()
    Path("sobel-y").write_text(OTHER_GRID)
    return tmp_path


# --- names before paths ----------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["edge", "EDGE", "laplacian8", "sobel-y", " Sobel-Y "])
def test_a_name_wins_over_a_file_or_folder_of_that_name(crowded, spec):
    kernel = parse_kernel_spec(spec)
    expected = get_kernel(spec)
    assert kernel is expected and kernel.source == "builtin"
    np.testing.assert_array_equal(kernel.weights, expected.weights)


def test_a_rotated_name_wins_over_a_file_of_that_name(crowded):
    Path("sobel-y:90").write_text(OTHER_GRID)
    kernel = parse_kernel_spec("sobel-y:90")
    assert kernel.name == "sobel-y:90" and kernel.source == "builtin"
    np.testing.assert_array_equal(kernel.weights, np.rot90(get_kernel("sobel-y").weights, -1))
    np.testing.assert_array_equal(
        parse_kernel_spec("edge:90").weights, get_kernel("edge").weights  # symmetric
    )


def test_dot_slash_reaches_the_file(crowded):
    kernel = parse_kernel_spec("./sobel-y")
    assert kernel.source == "./sobel-y" and kernel.name == "sobel-y"
    np.testing.assert_array_equal(kernel.weights, OTHER_WEIGHTS)
    rotated = parse_kernel_spec("./sobel-y:90")
    np.testing.assert_array_equal(rotated.weights, np.rot90(OTHER_WEIGHTS, -1))


def test_a_folder_named_by_path_is_refused_on_one_line(crowded):
    with pytest.raises(KernelError) as info:
        parse_kernel_spec("./edge")
    assert str(info.value) == "./edge: is a directory, not a kernel file"


@pytest.mark.parametrize("spec", ["my.txt", "dir/k", "dir/sub.x.txt"])
def test_a_spec_with_an_extension_or_a_separator_loads_a_file(tmp_path, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    Path("dir").mkdir()
    Path(spec).write_text(OTHER_GRID)
    kernel = parse_kernel_spec(spec)
    assert kernel.source == spec
    np.testing.assert_array_equal(kernel.weights, OTHER_WEIGHTS)


def test_an_unregistered_extensionless_file_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("mykernel").write_text("1 -1\n")
    kernel = parse_kernel_spec("mykernel")
    assert kernel.name == "mykernel" and kernel.source == "mykernel"
    np.testing.assert_array_equal(kernel.weights, [[1, -1]])
    np.testing.assert_array_equal(parse_kernel_spec("mykernel:90").weights, [[1], [-1]])


def test_an_existing_path_with_a_colon_is_taken_whole(tmp_path):
    path = tmp_path / "k:90.txt"
    path.write_text("1 -1\n")
    kernel = parse_kernel_spec(str(path))
    assert kernel.source == str(path)
    np.testing.assert_array_equal(kernel.weights, [[1, -1]])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x.txt", "x.txt: no such kernel file"),
        ("./sobel-x", "./sobel-x: no such kernel file"),
        ("dir/k:90", "dir/k: no such kernel file"),
        ("mykernel", "unknown kernel 'mykernel'; known kernels: box-blur, "),
        ("sobl-y", "unknown kernel 'sobl-y'; did you mean sobel-y"),
    ],
)
def test_missing_specs_are_one_line_errors(tmp_path, monkeypatch, spec, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KernelError) as info:
        parse_kernel_spec(spec)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_every_name_and_alias_resolves_to_itself_among_files_of_those_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for kernel in list_kernels():
        for name in (kernel.name, *kernel.aliases):
            Path(name).write_text(OTHER_GRID)
            assert parse_kernel_spec(name) is kernel, name
            assert parse_kernel_spec(f"./{name}").weights.tolist() == OTHER_WEIGHTS
