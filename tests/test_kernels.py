"""Tests for convcli.kernels: the shipped kernels, kernel files, specs and rotation."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import imagemagick
from hypothesis import given
from hypothesis import strategies as st

from convcli import conv_forward
from convcli.kernels import (
    Kernel,
    KernelError,
    _build_registry,
    _kernel_folder,
    format_kernel_grid,
    get_kernel,
    list_kernels,
    load_kernel_file,
    parse_kernel_spec,
    rotate_kernel,
)

KERNELS = list_kernels()
NAMES = [k.name for k in KERNELS]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "kernels.md"

REQUIRED = [
    "vertical",
    "horizontal",
    "edge",
    "laplacian",
    "sobel-x",
    "sobel-y",
    "prewitt-x",
    "prewitt-y",
    "scharr-x",
    "scharr-y",
    "roberts-nw",
    "roberts-ne",
    "kirsch-n",
    "kirsch-ne",
    "kirsch-e",
    "kirsch-se",
    "kirsch-s",
    "kirsch-sw",
    "kirsch-w",
    "kirsch-nw",
    "log-5x5",
    "identity",
    "box-blur",
    "gaussian-3x3",
    "gaussian-5x5",
    "sharpen",
    "emboss",
]

# Compass directions as (row step, column step): rows go down, columns go right.
DIRECTIONS = {
    "n": (-1, 0),
    "ne": (-1, 1),
    "e": (0, 1),
    "se": (1, 1),
    "s": (1, 0),
    "sw": (1, -1),
    "w": (0, -1),
    "nw": (-1, -1),
}
CLOCKWISE = list(DIRECTIONS)

# The documented sign convention of every directional kernel: the side of an edge that must be
# brighter for a positive response. (emboss: its relief, emboss minus identity.)
BRIGHT_SIDE = {
    "vertical": "w",
    "horizontal": "n",
    "sobel-x": "w",
    "sobel-y": "n",
    "prewitt-x": "w",
    "prewitt-y": "n",
    "scharr-x": "w",
    "scharr-y": "n",
    "roberts-nw": "nw",
    "roberts-ne": "ne",
    **{f"kirsch-{d}": d for d in DIRECTIONS},
    "emboss": "se",
}
BLURS = ["box-blur", "gaussian-3x3", "gaussian-5x5"]
ZERO_SUM = [n for n in NAMES if n not in {*BLURS, "identity", "sharpen", "emboss"}]


def step_image(side: str, n: int = 12) -> np.ndarray:
    """An n x n image that is 1 on the `side` half of a straight edge through the centre, 0 else."""
    di, dj = DIRECTIONS[side]
    i, j = np.mgrid[0:n, 0:n]
    c = (n - 1) / 2
    return ((i - c) * di + (j - c) * dj > 0).astype(np.float64)


def respond(weights, image, pad=0) -> np.ndarray:
    """Cross-correlate one 2-D image with one 2-D kernel through conv_forward."""
    w = np.asarray(weights, dtype=np.float64)
    Z, _ = conv_forward(
        image[None, :, :, None],
        w[:, :, None, None],
        np.zeros((1, 1, 1, 1)),
        {"stride": 1, "pad": pad},
    )
    return Z[0, :, :, 0]


def relief(kernel: Kernel, image: np.ndarray) -> np.ndarray:
    """The part of a kernel's response that depends on direction (emboss minus the image)."""
    out = respond(kernel.weights, image)
    if kernel.name.split(":")[0] == "emboss":
        out = out - image[1:-1, 1:-1]
    return out


def rotate_direction(side: str, degrees: int) -> str:
    return CLOCKWISE[(CLOCKWISE.index(side) + degrees // 45) % 8]


# --- the shipped set ------------------------------------------------------------------------


def test_every_required_kernel_ships():
    assert sorted(REQUIRED) == sorted(NAMES)
    assert NAMES == sorted(NAMES)


def test_tutorial_kernels_exact():
    np.testing.assert_array_equal(get_kernel("vertical").weights, [[1, 0, -1]] * 3)
    np.testing.assert_array_equal(
        get_kernel("horizontal").weights, [[1, 1, 1], [0, 0, 0], [-1, -1, -1]]
    )
    np.testing.assert_array_equal(
        get_kernel("horizontal").weights, get_kernel("vertical").weights.T
    )
    np.testing.assert_array_equal(
        get_kernel("edge").weights, [[-1, -1, -1], [-1, 8, -1], [-1, -1, -1]]
    )
    assert get_kernel("laplacian8") is get_kernel("edge")


def test_known_weights():
    np.testing.assert_array_equal(
        get_kernel("laplacian").weights, [[0, -1, 0], [-1, 4, -1], [0, -1, 0]]
    )
    np.testing.assert_array_equal(
        get_kernel("sobel-x").weights, [[1, 0, -1], [2, 0, -2], [1, 0, -1]]
    )
    np.testing.assert_array_equal(
        get_kernel("scharr-x").weights, [[3, 0, -3], [10, 0, -10], [3, 0, -3]]
    )
    np.testing.assert_array_equal(get_kernel("roberts-nw").weights, [[1, 0], [0, -1]])
    np.testing.assert_array_equal(get_kernel("roberts-ne").weights, [[0, 1], [-1, 0]])
    np.testing.assert_array_equal(
        get_kernel("kirsch-n").weights, [[5, 5, 5], [-3, 0, -3], [-3, -3, -3]]
    )
    for family in ("sobel", "prewitt", "scharr"):
        np.testing.assert_array_equal(
            get_kernel(f"{family}-y").weights, get_kernel(f"{family}-x").weights.T
        )
    np.testing.assert_array_equal(get_kernel("prewitt-x").weights, get_kernel("vertical").weights)


@pytest.mark.parametrize("name", NAMES)
def test_shipped_kernel_is_well_formed(name):
    k = get_kernel(name)
    assert k.name == name and k.source == "builtin"
    assert k.weights.dtype == np.float64 and k.weights.ndim == 2
    assert np.isfinite(k.weights).all()
    assert not k.weights.flags.writeable
    assert k.size == k.weights.shape
    assert re.fullmatch(r"[a-z0-9._-]+", k.label) and k.label == name
    assert k.description and "\n" not in k.description and len(k.description) <= 80
    assert get_kernel(name.upper()) is k
    for alias in k.aliases:
        assert get_kernel(alias) is k and get_kernel(alias.upper()) is k


@pytest.mark.parametrize("name", NAMES)
def test_kernel_sums_to_zero_or_one(name):
    """Edge kernels ignore flat areas (sum 0); the rest keep brightness (sum 1)."""
    k = get_kernel(name)
    flat = np.full((9, 9), 7.0)
    out = respond(k.weights, flat)
    if name in ZERO_SUM:
        assert k.weights.sum() == pytest.approx(0, abs=1e-12)
        np.testing.assert_allclose(out, 0, atol=1e-12)
    else:
        assert k.weights.sum() == pytest.approx(1, abs=1e-12)
        np.testing.assert_allclose(out, 7.0, rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_grid_text_round_trips_through_a_kernel_file(name, tmp_path):
    k = get_kernel(name)
    path = tmp_path / f"{name}.txt"
    path.write_text(format_kernel_grid(k) + "\n")
    np.testing.assert_array_equal(load_kernel_file(path).weights, k.weights)  # exactly
    for angle in (45, 90) if k.size == (3, 3) else (90,):
        rotated = rotate_kernel(k.weights, angle)
        path.write_text(format_kernel_grid(rotated) + "\n")
        np.testing.assert_array_equal(load_kernel_file(path).weights, rotated)


def test_shipped_files_are_named_after_their_kernel():
    files = [f for f in _kernel_folder().iterdir() if f.name.endswith(".toml")]
    assert sorted(f.name[: -len(".toml")] for f in files) == NAMES


def test_names_and_aliases_are_unique_across_the_shipped_files():
    keys = [key for k in KERNELS for key in (k.name, *k.aliases)]
    assert len(keys) == len(set(keys))


def test_registry_rejects_a_duplicate_alias(tmp_path):
    (tmp_path / "one.toml").write_text('name = "one"\ndescription = "x"\nweights = [[1]]\n')
    (tmp_path / "two.toml").write_text(
        'name = "two"\ndescription = "x"\naliases = ["one"]\nweights = [[1]]\n'
    )
    with pytest.raises(
        KernelError,
        match=r"kernels/two\.toml: the name 'one' is already used by "
        r"kernels/one\.toml",
    ):
        _build_registry(tmp_path.iterdir())


def test_registry_rejects_a_name_that_differs_from_the_file(tmp_path):
    (tmp_path / "one.toml").write_text('name = "uno"\ndescription = "x"\nweights = [[1]]\n')
    with pytest.raises(KernelError, match=r"kernels/one\.toml: name 'uno' differs"):
        _build_registry(tmp_path.iterdir())


def test_registry_requires_a_description(tmp_path):
    (tmp_path / "one.toml").write_text('name = "one"\nweights = [[1]]\n')
    with pytest.raises(KernelError, match=r"kernels/one\.toml: no 'description'"):
        _build_registry(tmp_path.iterdir())


def test_docs_table_lists_every_kernel():
    rows = re.findall(
        r"^\| `([a-z0-9-]+)` \| ([^|]*) \| (\d+x\d+) \| ([^|]*) \|$", DOCS.read_text(), re.M
    )
    assert sorted(name for name, *_ in rows) == NAMES
    for name, aliases, size, description in rows:
        k = get_kernel(name)
        assert size == "{}x{}".format(*k.size)
        assert description == k.description
        assert sorted(re.findall(r"`([a-z0-9-]+)`", aliases)) == sorted(k.aliases)


# --- orientation on step edges ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BRIGHT_SIDE))
def test_directional_kernel_sign_on_a_step_edge(name):
    """Positive line where the documented side is brighter, negative for the opposite step."""
    k = get_kernel(name)
    side = BRIGHT_SIDE[name]
    out = relief(k, step_image(side))
    assert out.max() > 0.5 and out.min() >= 0
    opposite = rotate_direction(side, 180)
    out = relief(k, step_image(opposite))
    assert out.min() < -0.5 and out.max() <= 0


@pytest.mark.parametrize("name", sorted(n for n in BRIGHT_SIDE if not n.startswith("roberts")))
def test_directional_kernel_responds_most_to_its_own_direction(name):
    k = get_kernel(name)
    peaks = {side: relief(k, step_image(side)).max() for side in DIRECTIONS}
    best = max(peaks, key=peaks.get)
    assert best == BRIGHT_SIDE[name]
    assert sorted(peaks.values())[-2] < peaks[best]


@pytest.mark.parametrize("family", ["vertical", "sobel-x", "prewitt-x", "scharr-x"])
def test_x_kernel_sees_vertical_edges_only(family):
    x = get_kernel(family)
    y = get_kernel({"vertical": "horizontal"}.get(family, family[:-1] + "y"))
    vertical_step = step_image("w")
    line = respond(x.weights, vertical_step)
    # A strong line in the two columns next to the edge, nothing elsewhere.
    assert (line[:, 4:6] > 0).all() and (line[:, :4] == 0).all() and (line[:, 6:] == 0).all()
    np.testing.assert_array_equal(respond(y.weights, vertical_step), 0)
    np.testing.assert_array_equal(respond(x.weights, step_image("n")), 0)
    assert respond(y.weights, step_image("n")).max() > 0


def test_roberts_sees_its_own_diagonal_only():
    nw, ne = get_kernel("roberts-nw"), get_kernel("roberts-ne")
    np.testing.assert_array_equal(respond(nw.weights, step_image("ne")), 0)
    np.testing.assert_array_equal(respond(ne.weights, step_image("nw")), 0)
    assert respond(nw.weights, step_image("nw")).max() == 1
    assert respond(ne.weights, step_image("ne")).max() == 1


def test_tutorial_vertical_edge_on_a_bright_left_image():
    """The tutorial's vertical filter on bright-left / dark-right: +30 at the edge for 10 vs 0."""
    image = np.zeros((6, 6))
    image[:, :3] = 10
    out = respond(get_kernel("vertical").weights, image)
    np.testing.assert_array_equal(out, [[0, 30, 30, 0]] * 4)
    np.testing.assert_array_equal(respond(get_kernel("horizontal").weights, image), 0)


def test_laplacians_are_positive_on_the_bright_side():
    image = step_image("w")
    for name in ("edge", "laplacian", "log-5x5"):
        out = respond(get_kernel(name).weights, image, pad=0)
        cols = out.shape[1]
        left, right = out[:, : cols // 2], out[:, cols // 2 :]
        assert left.max() > 0 and left.min() >= 0, name
        assert right.min() < 0 and right.max() <= 0, name


@pytest.mark.parametrize("name", sorted(BRIGHT_SIDE))
def test_rotated_kernel_follows_the_documented_convention(name):
    """NAME:ANGLE turns the bright side clockwise by ANGLE (45-degree steps for 3x3 kernels)."""
    step = 45 if get_kernel(name).size == (3, 3) else 90
    for degrees in range(step, 360, step):
        k = parse_kernel_spec(f"{name}:{degrees}")
        side = rotate_direction(BRIGHT_SIDE[name], degrees)
        out = relief(k, step_image(side))
        assert out.max() > 0.5 and out.min() >= 0, (k.name, side)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("vertical:90", "horizontal"),
        ("sobel-x:90", "sobel-y"),
        ("prewitt-x:90", "prewitt-y"),
        ("scharr-x:90", "scharr-y"),
        ("roberts-nw:90", "roberts-ne"),
        ("kirsch:45", "kirsch-nw"),
        ("kirsch-n:-45", "kirsch-nw"),
        *[(f"kirsch-n:{45 * k}", f"kirsch-{d}") for k, d in enumerate(CLOCKWISE)],
    ],
)
def test_rotated_spec_equals_the_named_kernel(spec, expected):
    np.testing.assert_array_equal(parse_kernel_spec(spec).weights, get_kernel(expected).weights)


def test_half_turn_negates_antisymmetric_kernels():
    for name in ("vertical", "sobel-x", "sobel-y", "scharr-x", "roberts-nw"):
        np.testing.assert_array_equal(
            parse_kernel_spec(f"{name}:180").weights, -get_kernel(name).weights
        )
    np.testing.assert_array_equal(
        parse_kernel_spec("sobel-x:-90").weights, -get_kernel("sobel-y").weights
    )


# --- the blurs and friends ----------------------------------------------------------------------


@pytest.mark.parametrize("name", BLURS)
def test_blurs_sum_to_one_and_are_non_negative(name):
    w = get_kernel(name).weights
    assert w.sum() == pytest.approx(1, abs=1e-15)
    assert (w >= 0).all()
    np.testing.assert_array_equal(w, w.T)
    np.testing.assert_array_equal(w, w[::-1, ::-1])


def test_gaussian_values():
    g3 = np.outer([1, 2, 1], [1, 2, 1]) / 16
    g5 = np.outer([1, 4, 6, 4, 1], [1, 4, 6, 4, 1]) / 256
    np.testing.assert_allclose(get_kernel("gaussian-3x3").weights, g3, rtol=1e-15)
    np.testing.assert_allclose(get_kernel("gaussian-5x5").weights, g5, rtol=1e-15)
    assert get_kernel("gaussian") is get_kernel("gaussian-3x3")
    # The sigmas the descriptions state: variance n/4 of the binomial of order n, per axis.
    for name, variance in (("gaussian-3x3", 0.5), ("gaussian-5x5", 1.0)):
        w = get_kernel(name).weights
        offsets = np.arange(w.shape[0]) - w.shape[0] // 2
        assert (w.sum(axis=1) * offsets**2).sum() == pytest.approx(variance)
    np.testing.assert_allclose(get_kernel("box-blur").weights, np.full((3, 3), 1 / 9))


def test_log_sums_to_zero_and_is_symmetric():
    w = get_kernel("log-5x5").weights
    assert w.sum() == pytest.approx(0, abs=1e-12)
    assert w[2, 2] == w.max() > 0
    np.testing.assert_array_equal(w, np.rot90(w))
    np.testing.assert_array_equal(w, w.T)


def test_identity_returns_the_image():
    image = np.random.default_rng(0).standard_normal((7, 9))
    np.testing.assert_array_equal(respond(get_kernel("identity").weights, image, pad=1), image)


def test_sharpen_is_identity_plus_laplacian():
    np.testing.assert_array_equal(
        get_kernel("sharpen").weights,
        get_kernel("identity").weights + get_kernel("laplacian").weights,
    )


# --- rotation: ImageMagick's convention -----------------------------------------------------


def imagemagick_rotate_45(w):
    """MagickCore RotateKernelInfo's 45-degree step on a 3x3 kernel, transcribed index by index."""
    v = list(np.asarray(w, dtype=float).ravel())
    t = v[0]
    v[0], v[3], v[6], v[7], v[8], v[5], v[2] = v[3], v[6], v[7], v[8], v[5], v[2], v[1]
    v[1] = t
    return np.array(v).reshape(3, 3)


def imagemagick_rotate_90(w):
    """RotateKernelInfo's 90-degree step on a square kernel: new[r][c] = old[n-1-c][r]."""
    w = np.asarray(w, dtype=float)
    n = w.shape[0]
    return np.array([[w[n - 1 - c, r] for c in range(n)] for r in range(n)])


def test_sobel_90_prints_imagemagick_grid():
    np.testing.assert_array_equal(
        parse_kernel_spec("Sobel:90").weights, [[1, 2, 1], [0, 0, 0], [-1, -2, -1]]
    )


@given(
    st.lists(st.integers(-9, 9), min_size=9, max_size=9),
    st.integers(-8, 8),
)
def test_rotation_matches_imagemagick_on_3x3(values, steps):
    w = np.array(values, dtype=float).reshape(3, 3)
    expected = w
    for _ in range(steps % 8):
        expected = imagemagick_rotate_45(expected)
    np.testing.assert_array_equal(rotate_kernel(w, 45 * steps), expected)


@given(st.integers(1, 5), st.integers(-4, 4), st.integers(0, 2**32 - 1))
def test_rotation_by_quarter_turns_matches_imagemagick(n, turns, seed):
    w = np.random.default_rng(seed).integers(-9, 10, (n, n)).astype(float)
    expected = w
    for _ in range(turns % 4):
        expected = imagemagick_rotate_90(expected)
    np.testing.assert_array_equal(rotate_kernel(w, 90 * turns), expected)


def test_rotation_of_a_rectangular_kernel():
    w = np.arange(6.0).reshape(2, 3)
    out = rotate_kernel(w, 90)
    assert out.shape == (3, 2)
    np.testing.assert_array_equal(out, [[3, 0], [4, 1], [5, 2]])
    np.testing.assert_array_equal(rotate_kernel(w, 360), w)
    np.testing.assert_array_equal(rotate_kernel(w, -270), out)
    assert rotate_kernel(w, 0.0).flags.writeable


@pytest.mark.parametrize(
    ("weights", "angle", "message"),
    [
        ([[1, 0, -1]] * 3, 30, "multiple of 90"),
        ([[1, 0, -1]] * 3, 45.5, "multiple of 90"),
        ([[1, 0, -1]] * 3, "90", "multiple of 90"),
        ([[1, 0, -1]] * 3, True, "multiple of 90"),
        ([[1, 0, -1]] * 3, float("nan"), "multiple of 90"),
        (np.ones((5, 5)), 45, "5x5 kernel by 45 degrees"),
        ([[1, 0], [0, -1]], 135, "2x2 kernel by 135 degrees"),
        ([1, 2, 3], 90, "2-D"),
    ],
)
def test_rotate_kernel_rejects(weights, angle, message):
    with pytest.raises(KernelError, match=re.escape(message)):
        rotate_kernel(weights, angle)


# --- specs ------------------------------------------------------------------------------------


def test_spec_names_are_case_insensitive_and_aliases_work():
    assert parse_kernel_spec("SOBEL-X") is get_kernel("sobel-x")
    assert parse_kernel_spec(" Laplacian8 ") is get_kernel("edge")
    assert parse_kernel_spec("sobel") is get_kernel("sobel-x")


def test_rotated_spec_name_and_label():
    k = parse_kernel_spec("Sobel-X:90")
    assert k.name == "sobel-x:90" and k.label == "sobel-x_rot90"
    assert k.source == "builtin" and k.aliases == ()
    assert k.description == (
        "sobel-x rotated 90 degrees clockwise; unrotated: " + get_kernel("sobel-x").description
    )
    assert parse_kernel_spec("sobel-x:-90").name == "sobel-x:270"
    assert parse_kernel_spec("sobel-x:360") is get_kernel("sobel-x")
    assert parse_kernel_spec("kirsch-n:+45").label == "kirsch-n_rot45"


def test_unknown_name_suggests_close_matches():
    with pytest.raises(KernelError, match=r"unknown kernel 'sobl-x'; did you mean sobel-x"):
        parse_kernel_spec("sobl-x")
    with pytest.raises(KernelError, match=r"roberts-ne, roberts-nw|roberts-nw, roberts-ne"):
        get_kernel("roberts")
    with pytest.raises(KernelError, match=r"unknown kernel 'zzzz'; known kernels: box-blur, "):
        get_kernel("zzzz")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sobel-x:30", "multiple of 90"),
        ("sobel-x:abc", "kernel spec 'sobel-x:abc': the angle 'abc' is not a whole number"),
        ("gaussian-5x5:45", "cannot rotate a 5x5 kernel by 45 degrees"),
        ("roberts-nw:45", "cannot rotate a 2x2 kernel by 45 degrees"),
        ("nope:90", "unknown kernel 'nope'"),
        ("", "empty kernel spec"),
        ("missing.toml", "missing.toml: no such kernel file"),
        ("some/dir/k.txt:90", "some/dir/k.txt: no such kernel file"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(KernelError, match=re.escape(message)):
        parse_kernel_spec(spec)


def test_spec_name_wins_over_a_file_and_a_path_reaches_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("vertical").write_text("0 1 0\n")
    assert parse_kernel_spec("vertical") is get_kernel("vertical")
    k = parse_kernel_spec("./vertical")
    assert k.source == "./vertical" and k.size == (1, 3)
    np.testing.assert_array_equal(k.weights, [[0, 1, 0]])


def test_spec_path_with_angle(tmp_path):
    path = tmp_path / "diff.txt"
    path.write_text("1 -1\n")
    k = parse_kernel_spec(f"{path}:90")
    np.testing.assert_array_equal(k.weights, [[1], [-1]])
    assert k.name == "diff:90" and k.source == str(path) and k.label.startswith("diff_rot90-")
    assert parse_kernel_spec(path).source == str(path)


def test_centred_means_odd_sides():
    assert get_kernel("sobel-x").centred and get_kernel("log-5x5").centred
    assert not get_kernel("roberts-nw").centred
    assert not parse_kernel_spec("roberts-ne:90").centred
    assert Kernel("line", "", [[1, 2, 0, -2, -1]]).centred  # odd, not square: scipy centres it
    assert Kernel("tall", "", np.ones((5, 3))).centred
    assert not Kernel("even", "", np.ones((2, 3))).centred
    assert Kernel("one", "", [[1]]).centred
    assert parse_kernel_spec("roberts-nw").size == (2, 2)


# --- kernel files -----------------------------------------------------------------------------


def test_plain_text_grid(tmp_path):
    path = tmp_path / "my kernel.csv"
    path.write_text("# a comment\n\n1, 2, 3,\n4\t5  6  # trailing comment\n-7,-8,-9\n")
    k = load_kernel_file(path)
    np.testing.assert_array_equal(k.weights, [[1, 2, 3], [4, 5, 6], [-7, -8, -9]])
    assert k.name == "my kernel" and k.label.startswith("my-kernel-") and k.source == str(path)
    assert k.description == "" and k.aliases == ()


def test_toml_file_by_path(tmp_path):
    path = tmp_path / "blur.toml"
    path.write_text(
        '# mine\nname = "My-Blur"\ndescription = "A blur"\naliases = ["mb"]\n'
        'scale = "1/4"\nweights = [[0, 1, 0], [1, 0, 1], [0, 1, 0]]\n'
    )
    k = load_kernel_file(path)
    assert k.centred
    assert (k.name, k.description, k.aliases, k.source) == ("my-blur", "A blur", ("mb",), str(path))
    assert k.weights.sum() == 1 and k.weights[0, 1] == 0.25


def test_toml_without_suffix_and_minimal(tmp_path):
    path = tmp_path / "k"
    path.write_text("weights = [[1.5, -1.5]]\nscale = 2\n")
    k = load_kernel_file(path)
    assert k.name == "k" and k.description == ""
    np.testing.assert_array_equal(k.weights, [[3, -3]])


MALFORMED = [
    # (file name, content, what the message must say)
    ("ragged.txt", "1 2 3\n4 5\n", "ragged rows: line 2 has 2 value(s) but line 1 has 3"),
    ("ragged.toml", "weights = [[1, 2, 3], [4, 5]]\n", "ragged rows: row 2 has 2 value(s)"),
    ("word.txt", "1 2\n3 x\n", "line 2: 'x' is not a number"),
    ("word.toml", 'weights = [[1, "x"]]\n', "row 1, column 2: 'x' is not a number"),
    ("bool.toml", "weights = [[1, true]]\n", "row 1, column 2: True is not a number"),
    ("nan.txt", "1 nan\n", "line 1: 'nan'; weights must be finite"),
    ("inf.txt", "1 2\n-inf 3\n", "line 2: '-inf'; weights must be finite"),
    ("nan.toml", "weights = [[1, nan]]\n", "row 1, column 2 is nan; weights must be finite"),
    ("inf.toml", "weights = [[inf]]\n", "row 1, column 1 is inf; weights must be finite"),
    ("empty.txt", "", "the file is empty"),
    ("blank.txt", "  \n# only a comment\n", "the kernel is empty"),
    ("empty.toml", "weights = []\n", "the kernel is empty"),
    ("emptyrow.toml", "weights = [[]]\n", "the kernel is empty"),
    ("flat.toml", "weights = [1, 0, -1]\n", "'weights' must be a list of rows"),
    ("deep.toml", "weights = [[[1]]]\n", "row 1, column 1: [1] is not a number"),
    ("noweights.toml", 'name = "x"\n', "no 'weights'"),
    ("typo.toml", "weight = [[1]]\n", "unknown key 'weight'"),
    ("syntax.toml", "weights = [[1, 2]\n", "invalid TOML"),
    ("badname.toml", 'name = "a:b"\nweights = [[1]]\n', "name 'a:b' may only use"),
    ("zero.toml", "scale = 0\nweights = [[1]]\n", "scale must be a finite non-zero number"),
    ("scale.toml", 'scale = "a/b"\nweights = [[1]]\n', "scale 'a/b' is not a number"),
    ("huge.toml", "scale = 1e300\nweights = [[1e10]]\n", "is inf; weights must be finite"),
    (
        "bigfraction.toml",
        f'scale = "{10**400}/1"\nweights = [[1]]\n',
        "scale must be a finite non-zero number",
    ),
    (
        "tinyfraction.toml",
        f'scale = "1/{10**400}"\nweights = [[1]]\n',
        "scale must be a finite non-zero number",
    ),
    (
        "bigintscale.toml",
        f"scale = {10**400}\nweights = [[1]]\n",
        "scale must be a finite non-zero number",
    ),
    (
        "bigint.toml",
        f"weights = [[1], [{'9' * 400}]]\n",
        "row 2, column 1 is an integer of 400 digits: weights beyond the float32 range",
    ),
    (
        "big.toml",
        "weights = [[1, 1e308]]\n",
        "row 1, column 2 is 1e+308: weights beyond the float32 range",
    ),
    (
        "scaled.toml",
        "scale = 1e30\nweights = [[1e10]]\n",
        "row 1, column 1 is 1e+40: weights beyond the float32 range",
    ),
    ("big.txt", "1 2\n3 -1e308\n", "row 2, column 2 is -1e+308: weights beyond the float32 range"),
    # Past float64 too: the number as written, not the 'inf' it reads as.
    ("huge.txt", "1 2\n3 -1e400\n", "line 2: '-1e400': weights beyond the float32 range"),
    ("hugefraction.txt", "1 1e400/2\n", "line 1: '1e400/2': weights beyond the float32 range"),
    ("huge.toml", "weights = [[1, -1_0e4_00]]\n", "'-1_0e4_00' is too large for a float64"),
    ("hugescale.toml", "weights = [[1]]\nscale = 1e400\n", "'1e400' is too large for a float64"),
    ("desc.toml", "description = 3\nweights = [[1]]\n", "'description' must be one line"),
]


@pytest.mark.parametrize(("filename", "content", "message"), MALFORMED)
def test_malformed_file_error_names_the_file_and_the_problem(tmp_path, filename, content, message):
    path = tmp_path / filename
    path.write_text(content)
    with pytest.raises(KernelError) as info:
        load_kernel_file(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text
    assert "\n" not in text
    # The spec resolver gives the same error for the same path.
    with pytest.raises(KernelError, match=re.escape(message)):
        parse_kernel_spec(str(path))


def test_even_size_file_loads(tmp_path):
    path = tmp_path / "even.txt"
    path.write_text("1 0\n0 -1\n")
    for call in (load_kernel_file, parse_kernel_spec):
        kernel = call(path)
        assert kernel.size == (2, 2) and not kernel.centred and kernel.source == str(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("# a comment\n\n1 2\n\n3 x\n", "line 5: 'x' is not a number"),
        ("1, 2, 3,\n# gap\n\n4 5\n", "ragged rows: line 4 has 2 value(s) but line 1 has 3"),
        ("\n\n1 2 3\n4 5 6\n# end\n7 8\n", "ragged rows: line 6 has 2 value(s) but line 3 has 3"),
        ("# x\n1 2\n3 inf # hot\n", "line 3: 'inf'; weights must be finite"),
        ("x 2\n", "line 1: 'x' is not a number"),
    ],
)
def test_text_grid_errors_name_the_line_of_the_file(tmp_path, content, message):
    path = tmp_path / "grid.txt"
    path.write_text(content)
    with pytest.raises(KernelError, match=re.escape(f"{path}: {message}")):
        load_kernel_file(path)


def test_binary_missing_and_directory_files(tmp_path):
    binary = tmp_path / "photo.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    with pytest.raises(KernelError, match=re.escape(f"{binary}: not a text file")):
        load_kernel_file(binary)
    with pytest.raises(KernelError, match=re.escape(f"{tmp_path / 'no.txt'}: no such kernel file")):
        load_kernel_file(tmp_path / "no.txt")
    with pytest.raises(KernelError, match=re.escape(f"{tmp_path}: is a directory")):
        parse_kernel_spec(str(tmp_path))


# --- the Kernel object and the grid text ------------------------------------------------------


def test_kernel_weights_are_a_read_only_copy():
    source = np.array([[1.0, -1.0]])
    k = Kernel("diff", "x", source)
    source[0, 0] = 99
    assert k.weights[0, 0] == 1
    with pytest.raises(ValueError, match="read-only"):
        k.weights[0, 0] = 5
    with pytest.raises(AttributeError):
        k.name = "other"


def test_kernel_equality_and_hash():
    a = Kernel("d", "x", [[1, -1]])
    b = Kernel("d", "x", np.array([[1.0, -1.0]]))
    assert a == b and hash(a) == hash(b)
    assert a != Kernel("d", "x", [[1, 1]]) and a != Kernel("d", "x", [[1], [-1]])
    assert len({a, b}) == 1
    assert hash(Kernel("z", "", [[-0.0]])) == hash(Kernel("z", "", [[0.0]]))


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([[1, 2], [3]], "ragged rows"),
        ([], "empty"),
        ([[1, "a"]], "'a' is not a number"),
        ([[np.inf]], "must be finite"),
        ([1, 2], "2-D grid"),
        ([[1e39]], "beyond the float32 range"),
    ],
)
def test_kernel_validates_its_weights(weights, message):
    with pytest.raises(KernelError, match=message):
        Kernel("k", "", weights)


def test_format_kernel_grid():
    assert format_kernel_grid(get_kernel("vertical")) == "1  0  -1\n1  0  -1\n1  0  -1"
    assert format_kernel_grid(get_kernel("gaussian-3x3")).splitlines() == [
        "0.0625  0.125  0.0625",
        " 0.125   0.25   0.125",
        "0.0625  0.125  0.0625",
    ]
    assert format_kernel_grid(get_kernel("box-blur")).splitlines()[0] == (
        "0.1111111111111111  0.1111111111111111  0.1111111111111111"
    )
    assert format_kernel_grid([[-0.0, 2.5e-7]]) == "0  2.5e-07"
    # The fewest digits that read back exactly; whole numbers without .0; columns aligned.
    assert format_kernel_grid([[0.1, 1 / 3, 1e16, -7.0], [1.5, 2.0, 0.0, 1e-20]]).splitlines() == [
        "0.1  0.3333333333333333  1e+16     -7",
        "1.5                   2      0  1e-20",
    ]


# --- ImageMagick's kernel names -----------------------------------------------------------------

# Grids printed by ImageMagick 6.9.11 (convert xc: -define morphology:showKernel=1
# -morphology Convolve SPEC null:), for names that are convcli names or aliases too.
IMAGEMAGICK_GRIDS = {
    "Laplacian:0": [[-1, -1, -1], [-1, 8, -1], [-1, -1, -1]],
    "Laplacian:1": [[0, -1, 0], [-1, 4, -1], [0, -1, 0]],
    "Laplacian:15": [
        [0, 0, -1, 0, 0],
        [0, -1, -2, -1, 0],
        [-1, -2, 16, -2, -1],
        [0, -1, -2, -1, 0],
        [0, 0, -1, 0, 0],
    ],
    "Sobel:0": [[1, 0, -1], [2, 0, -2], [1, 0, -1]],
    "Sobel:45": [[2, 1, 0], [1, 0, -1], [0, -1, -2]],
    "Sobel:90": [[1, 2, 1], [0, 0, 0], [-1, -2, -1]],
    "Sobel:270": [[-1, -2, -1], [0, 0, 0], [1, 2, 1]],
    "Prewitt:0": [[1, 0, -1], [1, 0, -1], [1, 0, -1]],
    "Prewitt:90": [[1, 1, 1], [0, 0, 0], [-1, -1, -1]],
    "Kirsch:0": [[5, -3, -3], [5, 0, -3], [5, -3, -3]],
    "Kirsch:45": [[5, 5, -3], [5, 0, -3], [-3, -3, -3]],
}
IMAGEMAGICK_ANGLES = [
    f"{name}:{45 * step}" for name in ("Sobel", "Prewitt", "Kirsch") for step in range(8)
]


@pytest.mark.parametrize("spec", sorted(IMAGEMAGICK_GRIDS))
def test_imagemagick_names_give_imagemagick_grids(spec):
    """NAME:ARG, where NAME is an ImageMagick kernel too, is the grid ImageMagick prints."""
    for written in (spec, spec.lower(), spec.upper()):
        np.testing.assert_array_equal(parse_kernel_spec(written).weights, IMAGEMAGICK_GRIDS[spec])


def imagemagick_grid(program: str, spec: str) -> np.ndarray:
    """The kernel ImageMagick builds for `spec`, from its showKernel listing."""
    listing = subprocess.run(
        [
            program,
            "xc:",
            "-define",
            "morphology:showKernel=1",
            "-morphology",
            "Convolve",
            spec,
            "null:",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    rows = [
        line.split(":", 1)[1].split() for line in listing.splitlines() if re.match(r"\s*\d+:", line)
    ]
    return np.array(rows, dtype=float)


def test_imagemagick_names_equal_the_installed_imagemagick():
    program = imagemagick()
    if program is None:
        pytest.skip("ImageMagick is not installed")
    for spec in sorted({*IMAGEMAGICK_GRIDS, *IMAGEMAGICK_ANGLES}):
        np.testing.assert_array_equal(
            parse_kernel_spec(spec).weights, imagemagick_grid(program, spec), err_msg=spec
        )
    for spec, grid in IMAGEMAGICK_GRIDS.items():
        np.testing.assert_array_equal(imagemagick_grid(program, spec), grid, err_msg=spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("laplacian:2", "the number after Laplacian: is a type, not an angle"),
        ("Laplacian:90", "Laplacian:0 is edge here, Laplacian:1 laplacian"),
        ("gaussian:0x1", "in ImageMagick Gaussian:RADIUSxSIGMA is a sampled Gaussian"),
        ("Gaussian:90", "write gaussian (the 3x3 binomial"),
        ("LoG:2", "in ImageMagick LoG:RADIUS,SIGMA is a Laplacian of Gaussian"),
        ("roberts:45", "write roberts-nw or roberts-ne"),
    ],
)
def test_imagemagick_arguments_that_are_not_angles_are_explained(spec, message):
    with pytest.raises(
        KernelError, match=re.escape(f"kernel spec {spec!r}: ") + ".*" + re.escape(message)
    ):
        parse_kernel_spec(spec)


def test_names_that_are_not_imagemagick_kernels_keep_the_angle():
    np.testing.assert_array_equal(
        parse_kernel_spec("laplacian4:90").weights, get_kernel("laplacian").weights
    )
    np.testing.assert_array_equal(
        parse_kernel_spec("gaussian-3x3:90").weights, get_kernel("gaussian").weights
    )
    np.testing.assert_array_equal(
        parse_kernel_spec("log-5x5:180").weights, get_kernel("log").weights
    )


def test_a_scale_beyond_a_float_is_one_line_from_the_cli(tmp_path, photo):
    from helpers import assert_one_line_error, run

    path = tmp_path / "huge.toml"
    path.write_text(f'scale = "{10**400}/1"\nweights = [[1]]\n')
    result = run("conv", "-k", path, photo, "-o", tmp_path / "out")
    assert_one_line_error(result, 2, str(path), "scale")


def test_a_kernel_named_by_its_file_reads_that_file_alone(monkeypatch):
    """``-k vertical`` reads kernels/vertical.toml only; an alias (``sobel``) reads them
    all; both give the kernels of the whole registry."""
    import convcli.kernels.shipped as kernels_module

    built = []
    build = kernels_module._build_registry
    monkeypatch.setattr(
        kernels_module, "_build_registry", lambda files: built.append(1) or build(files)
    )
    for cache in (kernels_module._registry, kernels_module._shipped_file):
        cache.cache_clear()
    try:
        vertical = get_kernel("Vertical")
        assert built == []
        sobel = get_kernel("sobel")
        assert built == [1]
        registry = kernels_module._registry()[1]
        assert vertical == registry["vertical"] and sobel == registry["sobel-x"]
        np.testing.assert_array_equal(vertical.weights, [[1, 0, -1]] * 3)
    finally:
        for cache in (kernels_module._registry, kernels_module._shipped_file):
            cache.cache_clear()


def test_a_source_tree_without_the_kernel_files_package_reads_the_projects_folder(monkeypatch):
    from importlib import resources

    from convcli.kernels import shipped

    def missing(package):
        raise ModuleNotFoundError(package)

    monkeypatch.setattr(resources, "files", missing)
    folder = shipped._kernel_folder()
    assert (folder / "vertical.toml").is_file()


def test_a_files_label_names_its_weights(tmp_path):
    """A kernel file's label ends in six hex digits of its weights: the same weights give
    the same label wherever the file is; other weights, or a shipped kernel of the same
    name, another label."""
    first, moved, edited = tmp_path / "a" / "k.txt", tmp_path / "b" / "k.txt", tmp_path / "k.txt"
    for path, grid in ((first, "1 0 -1\n"), (moved, "1 0 -1\n"), (edited, "1 0 -2\n")):
        path.parent.mkdir(exist_ok=True)
        path.write_text(grid)
    labels = [load_kernel_file(p).label for p in (first, moved, edited)]
    assert labels[0] == labels[1] != labels[2]
    assert re.fullmatch(r"k-[0-9a-f]{6}", labels[0])
    (tmp_path / "edge.txt").write_text("-1 -1 -1\n-1 8 -1\n-1 -1 -1\n")
    assert load_kernel_file(tmp_path / "edge.txt").label != get_kernel("edge").label == "edge"
