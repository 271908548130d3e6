"""Tests for resolving ``--kernel`` specs: names before paths, comma lists, fractions in grids."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import run

from convcli.kernels import (
    MAX_KERNEL_SIDE,
    KernelError,
    format_kernel_grid,
    get_kernel,
    list_kernels,
    load_kernel_file,
    parse_kernel_spec,
    parse_kernel_specs,
)

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
        parse_kernel_spec("edge:90").weights,
        get_kernel("edge").weights,  # symmetric
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


# --- comma lists -----------------------------------------------------------------------------


def _weights(kernels):
    return [k.weights.tolist() for k in kernels]


def test_a_comma_list_gives_kernels_in_order():
    kernels = parse_kernel_specs("sobel-x,sobel-y")
    assert [k.name for k in kernels] == ["sobel-x", "sobel-y"]
    assert _weights(kernels) == _weights([get_kernel("sobel-x"), get_kernel("sobel-y")])
    reverse = parse_kernel_specs("sobel-y,sobel-x")
    assert _weights(reverse) == _weights(kernels[::-1])


def test_a_comma_list_takes_angles_and_ignores_whitespace():
    kernels = parse_kernel_specs("  sobel-x:90 ,\tEdge , vertical:-90 ")
    assert [k.name for k in kernels] == ["sobel-x:90", "edge", "vertical:270"]
    np.testing.assert_array_equal(kernels[0].weights, get_kernel("sobel-y").weights)
    np.testing.assert_array_equal(kernels[1].weights, get_kernel("edge").weights)
    np.testing.assert_array_equal(kernels[2].weights, -get_kernel("horizontal").weights)


def test_a_single_spec_is_a_list_of_one(tmp_path):
    assert parse_kernel_specs("sobel-x") == [get_kernel("sobel-x")]
    path = tmp_path / "k.txt"
    path.write_text("1 -1\n")
    assert _weights(parse_kernel_specs(path)) == [[[1, -1]]]
    assert _weights(parse_kernel_specs(f"{path}:90")) == [[[1], [-1]]]


def test_a_comma_list_mixes_files_and_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("a.txt").write_text("1 -1\n")
    kernels = parse_kernel_specs("a.txt:90, box, ./a.txt")
    assert _weights(kernels) == [[[1], [-1]], get_kernel("box-blur").weights.tolist(), [[1, -1]]]


@pytest.mark.parametrize(
    ("spec", "item"),
    [
        ("sobel-x,,edge", "item 2 of 3"),
        ("sobel-x,", "item 2 of 2"),
        (",edge", "item 1 of 2"),
        ("edge, ,edge", "item 2 of 3"),
        (",", "item 1 of 2"),
    ],
)
def test_an_empty_item_is_refused_naming_the_spec(spec, item):
    with pytest.raises(KernelError) as info:
        parse_kernel_specs(spec)
    message = str(info.value)
    assert message.startswith(f"kernel spec {spec!r}: {item} is empty") and "\n" not in message


def test_a_bad_item_names_itself():
    with pytest.raises(KernelError, match="unknown kernel 'nope'"):
        parse_kernel_specs("sobel-x,nope")
    with pytest.raises(KernelError, match="empty kernel spec"):
        parse_kernel_specs("  ")


@pytest.mark.parametrize("name", ["a,b.txt", "dir/x,y", "sobel-x,sobel-y.txt"])
def test_an_existing_file_with_a_comma_in_its_name_is_taken_whole(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    Path("dir").mkdir()
    Path(name).write_text(OTHER_GRID)
    for spec in (name, f"./{name}", str(tmp_path / name)):
        (kernel,) = parse_kernel_specs(spec)
        assert kernel.source == spec and kernel.weights.tolist() == OTHER_WEIGHTS
    (rotated,) = parse_kernel_specs(f"{name}:90")
    np.testing.assert_array_equal(rotated.weights, np.rot90(OTHER_WEIGHTS, -1))


def test_a_comma_list_that_names_no_existing_file_is_split(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("sobel-x,sobel-y").write_text(OTHER_GRID)  # no separator, no extension: not a path
    kernels = parse_kernel_specs("sobel-x,sobel-y")
    assert _weights(kernels) == _weights([get_kernel("sobel-x"), get_kernel("sobel-y")])
    with pytest.raises(KernelError, match="a.txt: no such kernel file"):
        parse_kernel_specs("a.txt,b.txt")


# --- fractions in text grids -----------------------------------------------------------------


def _grid_file(tmp_path, text, name="grid.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_box_blur_written_in_ninths_is_exact(tmp_path):
    path = _grid_file(tmp_path, "1/9 1/9 1/9\n1/9, 1/9, 1/9\n1/9\t1/9 1/9  # box\n")
    weights = load_kernel_file(path).weights
    assert weights.dtype == np.float64
    np.testing.assert_array_equal(weights, np.full((3, 3), 1 / 9))
    assert (weights == 1 / 9).all()  # the same float as Python's 1/9, not one digit off
    np.testing.assert_array_equal(weights, get_kernel("box-blur").weights)


def test_negative_fractions_and_decimals_mix(tmp_path):
    path = _grid_file(tmp_path, "-1/8 -1/8 -1/8\n-1/8 1 -0.125\n-1/8 +1/8 1.5/3\n")
    weights = load_kernel_file(path).weights
    expected = [[-1 / 8] * 3, [-1 / 8, 1.0, -0.125], [-1 / 8, 1 / 8, 0.5]]
    assert weights.tolist() == expected


def test_fractions_are_float_num_over_float_den(tmp_path):
    cells = ["1/3", "2/3", "1e-3/7", "-5/-10", "22/7", "1/1e300"]
    path = _grid_file(tmp_path, " ".join(cells) + "\n")
    expected = [float(n) / float(d) for n, d in (c.split("/") for c in cells)]
    assert load_kernel_file(path).weights.tolist() == [expected]


def test_a_slash_in_a_comment_keeps_the_plain_reader(tmp_path):
    path = _grid_file(tmp_path, "# weights / 2\n1 2 # a/b\n3 4\n")
    assert load_kernel_file(path).weights.tolist() == [[1, 2], [3, 4]]


def test_fraction_files_rotate_and_list(tmp_path):
    path = _grid_file(tmp_path, "1/2 -1/2\n")
    np.testing.assert_array_equal(parse_kernel_spec(f"{path}:90").weights, [[0.5], [-0.5]])
    (kernel,) = parse_kernel_specs(f" {path}:180 ")
    np.testing.assert_array_equal(kernel.weights, [[-0.5, 0.5]])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1 1\n1/0 1\n", "line 2: '1/0' divides by zero"),
        ("\n# x\n1/-0 1\n", "line 3: '1/-0' divides by zero"),
        ("1/9 1/\n", "line 1: '1/' is not a number or a fraction such as 1/9"),
        ("1/9\n/9\n", "line 2: '/9' is not a number or a fraction such as 1/9"),
        ("1/2/3\n", "line 1: '1/2/3' is not a number or a fraction such as 1/9"),
        ("1/9 a/9\n", "line 1: 'a/9' is not a number or a fraction such as 1/9"),
        ("1/9 x\n", "line 1: 'x' is not a number"),
        ("1/9 1_0\n", "line 1: '1_0' is not a number"),
        ("1/2 1\n1\n", "ragged rows: line 2 has 1 value(s) but line 1 has 2"),
        ("1/2\ninf/2\n", "line 2: 'inf'; weights must be finite numbers"),
        ("1e308/1e-308\n", "line 1: '1e308/1e-308' is too large for a float64 weight"),
        (
            "1/2\n1/1e-39\n",
            "row 2, column 1 is 1.0000000000000001e+39: weights beyond the "
            "float32 range (magnitude at most about 3.4e38) cannot be applied",
        ),
    ],
)
def test_bad_fractions_are_refused_with_the_line(tmp_path, content, message):
    path = _grid_file(tmp_path, content)
    with pytest.raises(KernelError) as info:
        load_kernel_file(path)
    assert str(info.value) == f"{path}: {message}"


def test_a_fraction_grid_at_the_size_limit_loads(tmp_path):
    side = MAX_KERNEL_SIDE
    row = " ".join(["-1/255"] * side) + "\n"
    weights = load_kernel_file(_grid_file(tmp_path, row * side)).weights
    assert weights.shape == (side, side) and (weights == -1 / 255).all()
    with pytest.raises(KernelError, match=f"has {side + 1} rows"):
        load_kernel_file(_grid_file(tmp_path, row * (side + 1), "big.txt"))


@pytest.mark.parametrize("name", [k.name for k in list_kernels()])
def test_every_printed_kernel_reads_back_exactly(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    kernel = get_kernel(name)
    result = run("kernels", name)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[1:] == format_kernel_grid(kernel).splitlines()
    path = _grid_file(tmp_path, result.stdout, name)
    np.testing.assert_array_equal(load_kernel_file(path).weights, kernel.weights)
    np.testing.assert_array_equal(parse_kernel_spec(f"./{name}").weights, kernel.weights)
