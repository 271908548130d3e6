"""convcli explain: the scripts for scipy, OpenCV and PyTorch give convcli's --format npy values.

Each script is run in this process (``runpy``, with ``sys.argv`` set as on a
command line) on a real image file, and its ``.npy`` compared with the one
``convcli ... --format npy`` writes, to float32 precision. A tool that is not
installed is skipped (``pip install -e ".[interop,bench]"`` installs them all).
"""

from __future__ import annotations

import importlib.util
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from helpers import (
    MODES,
    assert_one_line_error,
    imagemagick,
    import_afresh,
    make_image,
    ok,
    outputs_in,
    run,
)
from PIL import Image

from convcli import choices
from convcli.choices import BORDER_MODES, EXPLAIN_TARGETS

PYTHON_TARGETS = {"scipy": "scipy.ndimage", "opencv": "cv2", "torch": "torch"}

CONV_CASES = [
    ["-k", "sobel-x"],
    ["-k", "edge,vertical", "--stride", "2", "--border", "constant", "--channels", "each"],
    ["-k", "roberts-ne", "--pad", "1,0,2,1", "--border", "wrap", "--channels", "gray"],
    ["-k", "sobel-x,sobel-y", "--combine", "magnitude", "--border", "edge", "--stride", "2"],
    ["-k", "gaussian-5x5", "--border", "symmetric", "--stride", "3", "--bias", "1.5"],
    ["-k", "edge", "--pad", "valid", "--bias", "-10", "--combine", "max"],
    ["-k", "laplacian,sharpen", "--pad", "3,0,1,2", "--border", "reflect", "--channels", "each"],
    ["-k", "emboss", "--pad", "2", "--border", "constant", "--combine", "sum"],
    ["-k", "sobel-x,log-5x5", "--dilation", "2", "--stride", "2"],
    ["-k", "vertical", "--dilation", "3", "--pad", "1,2,3,0", "--border", "wrap"],
    ["-k", "gaussian-3x3,sharpen", "--channels", "each", "--stride", "2", "--bias", "2"],
]
POOL_CASES = [
    ["--mode", "max"],
    ["--mode", "average", "--size", "3", "--stride", "2"],
    ["--mode", "max", "--size", "3", "--stride", "1"],
    ["--mode", "max", "--size", "3", "--stride", "2", "--pad", "1", "--ceil"],
    ["--mode", "average", "--size", "4", "--stride", "3", "--pad", "2", "--ceil"],
    ["--mode", "average", "--size", "3", "--stride", "2", "--pad", "1"],
]
PAD_CASES = [
    ["--pad", "1,2,3,4", "--value", "7"],
    ["--mode", "reflect", "--pad", "2"],
    ["--mode", "symmetric", "--pad", "1,0,2,3"],
    ["--mode", "wrap", "--pad", "0,3,2,1"],
    ["--mode", "edge", "--pad", "3"],
]


@pytest.fixture(autouse=True)
def _imagemagick_7(monkeypatch, request):
    """The scripts as they are where ImageMagick 7 is installed (``magick``), whatever this
    machine has; the test of that choice itself (its ``installed`` cases) sees the real one."""
    if "installed" not in request.fixturenames:
        from convcli.app import explain as explain_module

        monkeypatch.setattr(explain_module, "magick_program", lambda: "magick")


def explained(*args) -> str:
    """What `convcli explain ARGS` prints on stdout (nothing on stderr, exit 0)."""
    result = run("explain", *args)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    return result.stdout


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("explain")
    return {
        mode: make_image(
            folder / f"{mode.replace(';', '')}.{MODES[mode]}", mode, seed=3, size=(23, 17)
        )
        for mode in ("RGB", "L", "RGBA", "P", "P+transparency", "I;16", "1", "CMYK")
    }


def _script_values(tmp_path, monkeypatch, command: list[str], image) -> np.ndarray:
    """Write the script of `convcli explain ...` and run it on `image`, as a user would."""
    script = tmp_path / "translated.py"
    script.write_text(explained(*command))
    out = tmp_path / "translated.npy"
    monkeypatch.setattr(sys, "argv", [str(script), str(image), str(out)])
    runpy.run_path(str(script), run_name="__main__")
    return np.load(out)


def _convcli_values(tmp_path, command: list[str], image) -> np.ndarray:
    folder = tmp_path / "convcli"
    ok(*command, image, "-o", folder, "--format", "npy", "-q", "--overwrite")
    (npy,) = [p for p in outputs_in(folder) if p.suffix == ".npy"]
    values = np.load(npy)
    npy.unlink()
    return values


def _check(tmp_path, monkeypatch, op: str, args: list[str], target: str, image):
    pytest.importorskip(PYTHON_TARGETS[target])
    ours = _convcli_values(tmp_path, [op, *args], image)
    theirs = _script_values(tmp_path, monkeypatch, [op, *args, "--as", target], image)
    assert theirs.dtype == np.float32
    assert theirs.shape == ours.shape
    scale = max(float(np.abs(ours).max()), 1.0)
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=2e-6 * scale * 16)


@pytest.mark.parametrize("target", PYTHON_TARGETS)
@pytest.mark.parametrize("args", CONV_CASES, ids=" ".join)
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_conv_scripts_give_convcli_values(tmp_path, monkeypatch, images, target, args, mode):
    _check(tmp_path, monkeypatch, "conv", args, target, images[mode])


@pytest.mark.parametrize("target", PYTHON_TARGETS)
@pytest.mark.parametrize("args", POOL_CASES, ids=" ".join)
@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_pool_scripts_give_convcli_values(tmp_path, monkeypatch, images, target, args, mode):
    _check(tmp_path, monkeypatch, "pool", args, target, images[mode])


@pytest.mark.parametrize("target", PYTHON_TARGETS)
@pytest.mark.parametrize("args", PAD_CASES, ids=" ".join)
@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_pad_scripts_give_convcli_values(tmp_path, monkeypatch, images, target, args, mode):
    _check(tmp_path, monkeypatch, "pad", args, target, images[mode])


@pytest.mark.parametrize("target", PYTHON_TARGETS)
@pytest.mark.parametrize("mode", ["P", "P+transparency", "I;16", "1", "CMYK"])
def test_scripts_read_other_modes_as_convcli(tmp_path, monkeypatch, images, target, mode):
    if target == "opencv" and mode == "CMYK":
        pytest.skip("OpenCV reads a CMYK TIFF as four channels")
    _check(
        tmp_path, monkeypatch, "conv", ["-k", "sobel-x", "--channels", "each"], target, images[mode]
    )
    _check(tmp_path, monkeypatch, "pool", ["--mode", "average"], target, images[mode])


def _transparent_colour_images(folder: Path) -> dict[str, Path]:
    """PNGs of a transparent colour (tRNS): grey, RGB and bilevel; and a JPEG on its side."""
    rng = np.random.default_rng(11)
    grey = rng.choice([0, 60, 120, 240], (9, 14)).astype(np.uint8)
    rgb = rng.choice([0, 80, 160, 200], (9, 14, 3)).astype(np.uint8)
    rgb[2:4, 3:6] = (80, 160, 0)
    Image.fromarray(grey).save(folder / "grey_trns.png", transparency=60)
    Image.fromarray(rgb).save(folder / "rgb_trns.png", transparency=(80, 160, 0))
    Image.fromarray(grey > 100).save(folder / "bilevel_trns.png", transparency=0)
    exif = Image.Exif()
    exif[0x0112] = 6  # turned 90 degrees clockwise to be upright
    Image.fromarray(rgb).save(folder / "turned.jpg", exif=exif, quality=95)
    # Uncompressed and turned: Pillow scrambles it where it maps the file by its name.
    tifffile.imwrite(folder / "turned_grey.tif", grey, extratags=[(274, "H", 1, 6, True)])
    return {p.stem: p for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("target", PYTHON_TARGETS)
def test_scripts_read_a_transparent_colour_and_an_orientation_as_convcli(
    tmp_path, monkeypatch, target
):
    """A PNG's transparent grey level or colour is alpha (Pillow's scripts left it out, and
    OpenCV drops a grey one); OpenCV does not turn a JPEG upright by its EXIF orientation
    where it keeps the samples as stored: its script turns them as its BGR reading does."""
    (tmp_path / "in").mkdir()
    for name, image in _transparent_colour_images(tmp_path / "in").items():
        if name == "turned" and target != "opencv":  # Pillow's scripts turn a JPEG
            continue
        if name == "turned_grey" and target == "opencv":  # OpenCV 5 cannot read it
            continue
        _check(tmp_path, monkeypatch, "pool", ["--mode", "average"], target, image)
        _check(tmp_path, monkeypatch, "conv", ["-k", "box-blur"], target, image)


@pytest.mark.parametrize("args", [["-k", "sobel-x"], ["-k", "gaussian-5x5", "--border", "wrap"]])
def test_torch_scripts_pad_by_numpy_where_f_pad_cannot(tmp_path, monkeypatch, args):
    """F.pad reflects by less than a side and wraps by at most one: a 1x17 image, or a
    5x5 kernel on a 2x2 one, is padded wider, as convcli (and numpy) pad it."""
    for size in ((17, 1), (2, 2)):
        image = make_image(tmp_path / f"small{size[0]}.png", "L", seed=4, size=size)
        _check(tmp_path, monkeypatch, "conv", args, "torch", image)
    image = make_image(tmp_path / "rgb3.png", "RGB", seed=4, size=(3, 3))
    _check(tmp_path, monkeypatch, "pad", ["--mode", "reflect", "--pad", "5"], "torch", image)
    _check(tmp_path, monkeypatch, "pad", ["--mode", "wrap", "--pad", "5"], "torch", image)


def test_a_cmyk_images_scripts_read_it_through_its_profile_as_convcli(tmp_path, monkeypatch):
    profile = Path("/usr/share/color/icc/ghostscript/default_cmyk.icc")
    if not profile.exists():
        pytest.skip("no CMYK colour profile here (Ghostscript's, /usr/share/color/icc)")
    cmyk = np.random.default_rng(4).integers(0, 256, (17, 23, 4), dtype=np.uint8)
    path = tmp_path / "print.tif"
    Image.fromarray(cmyk, "CMYK").save(path, icc_profile=profile.read_bytes())
    _check(tmp_path, monkeypatch, "pool", ["--mode", "average"], "scipy", path)


def test_skimage_script_gives_convcli_values(tmp_path, monkeypatch, images):
    pytest.importorskip("skimage")
    pytest.importorskip("scipy.ndimage")
    for op, args in [("conv", CONV_CASES[1]), ("pool", POOL_CASES[1]), ("pad", PAD_CASES[0])]:
        ours = _convcli_values(tmp_path, [op, *args], images["RGB"])
        theirs = _script_values(
            tmp_path, monkeypatch, [op, *args, "--as", "skimage"], images["RGB"]
        )
        np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-3)


def test_the_skimage_sobel_note_holds():
    """The script's note: skimage.filters.sobel_v is -1/4 of sobel-x with 'symmetric'."""
    filters = pytest.importorskip("skimage.filters")
    from convcli.kernels import parse_kernel_spec
    from convcli.layers.padding import pad_images

    plane = np.random.default_rng(5).uniform(0, 255, (9, 11)).astype(np.float32)
    padded = pad_images(plane[None, :, :, None], 1, mode="symmetric")[0, :, :, 0]
    for name, theirs in (("sobel-x", filters.sobel_v), ("sobel-y", filters.sobel_h)):
        w = parse_kernel_spec(name).weights
        ours = sum(w[i, j] * padded[i : i + 9, j : j + 11] for i in range(3) for j in range(3))
        np.testing.assert_allclose(theirs(plane), -ours / 4, atol=1e-3)


def test_a_kernel_is_written_with_every_digit():
    text = explained("conv", "-k", "box-blur", "--as", "scipy")
    assert "0.1111111111111111" in text


@pytest.mark.parametrize(
    "op",
    [
        ["conv", "-k", "sobel-x", "--stride", "2", "--pad", "1,2,0,1", "--border", "reflect"],
        ["pool", "--mode", "average"],
        ["pad", "--mode", "reflect"],
    ],
)
def test_magick_says_what_differs(op):
    text = explained(*op, "--as", "magick")
    assert "magick IN.png" in text
    assert "clips" in text and "no stride" in text
    if op[0] == "conv":
        assert "-morphology Correlate 3x3:1,0,-1,2,0,-2,1,0,-1 " in text
        # reflect (edge pixel not repeated) has no virtual-pixel method.
        assert "Mirror" in text and "symmetric" in text


def test_without_as_a_table_of_conventions():
    text = explained("conv", "-k", "sobel-x")
    for needle in (
        "ndimage.correlate",
        "mirror",
        "BORDER_REFLECT_101",
        "F.conv2d",
        "-morphology Correlate",
        "convolve flips",
    ):
        assert needle in text
    assert "cv2.dilate" in explained("pool")
    assert "copyMakeBorder" in explained("pad", "--mode", "wrap")


def test_every_tool_is_tested():
    assert {*PYTHON_TARGETS, "skimage", "magick"} == set(EXPLAIN_TARGETS)


def test_the_border_table_has_a_row_for_each_border_mode_and_no_other():
    from convcli.app.borders import BORDERS

    assert tuple(BORDERS) == BORDER_MODES


@pytest.mark.parametrize("modes", [(*choices.PAD_MODES, "fake"), choices.PAD_MODES[:-1]])
def test_a_mode_added_or_removed_in_choices_stops_the_import_by_name(monkeypatch, modes):
    odd = (set(modes) ^ set(choices.PAD_MODES)).pop()
    monkeypatch.setattr(choices, "PAD_MODES", modes)
    with pytest.raises(LookupError, match=f"border table .*{odd!r}"):
        import_afresh("convcli.app.borders")


@pytest.mark.parametrize("target", EXPLAIN_TARGETS)
@pytest.mark.parametrize("border", BORDER_MODES)
def test_every_tool_has_words_for_every_border(target, border):
    """Each border mode is named, or said to be missing: never a None in the text."""
    from convcli.app.explain import conventions, explain
    from convcli.app.ops import ConvOp, PadOp
    from convcli.kernels import get_kernel

    ops = [
        ConvOp((get_kernel("sobel-x"),), border=border),
        ConvOp((get_kernel("edge"),), pad=(1, 2, 0, 1), border=border),
        PadOp(pad=(1, 0, 2, 3), mode=border),
    ]
    for op in ops:
        for text in (explain(op, target), conventions(op)):
            # None only where the scripts index (x[None]) or test for it (raw is None)
            assert "None" not in re.sub(r"\[[^]]*\]|raw is None", "", text)


@pytest.mark.parametrize("target", PYTHON_TARGETS)
def test_scripts_centre_odd_kernels_that_are_not_square(tmp_path, monkeypatch, images, target):
    """--pad same with a 3x5 kernel file: the scripts pad (1, 1, 2, 2) as convcli does."""
    path = tmp_path / "wide.txt"
    path.write_text("1 0 -1 2 3\n0 1 1 0 2\n-1 2 0 1 1\n")
    for border in ("reflect", "constant"):
        _check(
            tmp_path,
            monkeypatch,
            "conv",
            ["-k", str(path), "--border", border],
            target,
            images["RGB"],
        )


# The package that installs each module the scripts import.
PACKAGES = {
    "numpy": "numpy",
    "PIL": "pillow",
    "scipy": "scipy",
    "skimage": "scikit-image",
    "cv2": "opencv-python-headless",
    "torch": "torch",
}


@pytest.mark.parametrize("kind", ["conv", "pool", "pad"])
@pytest.mark.parametrize("target", EXPLAIN_TARGETS)
def test_each_script_first_says_what_to_install(kind, target):
    text = explained(kind, "--as", target)
    if target == "magick":
        assert text.startswith("# Needs ImageMagick: apt-get install imagemagick")
        return
    needs = text.split('"""', 2)[1].splitlines()[2]
    assert needs.startswith("Needs: pip install ")
    modules = set(re.findall(r"^(?:import|from) (\w+)", text, flags=re.M)) - {"sys", "io"}
    assert modules and {PACKAGES[m] for m in modules} == set(needs.split()[3:])


def test_explain_refuses_an_unknown_tool_on_one_line():
    assert_one_line_error(run("explain", "conv", "--as", "matlab"), 2, "--as")
    assert_one_line_error(run("explain", "conv", "--pad", "1,2"), 2, "--pad")


def _run_magick(text: str, image, out) -> np.ndarray:
    """Run the one command line of `text` on `image`, as ImageMagick 7 or 6 is installed."""
    program = imagemagick()
    if program is None:
        pytest.skip("ImageMagick is not installed")
    (line,) = [x for x in text.splitlines() if x.startswith("magick ")]
    words = shlex.split(line)
    words = [
        str(image) if w == "IN.png" else str(out) if w.startswith("OUT") else w for w in words[1:]
    ]
    subprocess.run([program, *words], check=True, capture_output=True)
    with Image.open(out) as im:
        return np.asarray(im).astype(np.float32)


def test_the_magick_blur_by_channel_weighs_colours_by_alpha_as_convcli(tmp_path, images):
    """ImageMagick's convolution of an RGBA image is alpha-weighted, alpha convolved too."""
    args = ["-k", "gaussian-3x3", "--channels", "each", "--border", "edge"]
    theirs = _run_magick(
        explained("conv", *args, "--as", "magick"), images["RGBA"], tmp_path / "magick.tiff"
    )
    ours = _convcli_values(tmp_path, ["conv", *args], images["RGBA"])
    assert theirs.shape == ours.shape and ours.shape[2] == 4
    np.testing.assert_allclose(theirs[..., 3], ours[..., 3], atol=1.0)
    seen = ours[..., 3] >= 8  # where a level of error is not amplified by a faint alpha
    assert seen.sum() > 100
    np.testing.assert_allclose(theirs[seen][:, :3], ours[seen][:, :3], atol=1.0)


def test_the_magick_pad_command_gives_the_pad_values(tmp_path, images):
    for args in (
        ["--pad", "1,2,3,4", "--value", "9"],
        ["--mode", "symmetric", "--pad", "0,2,1,3"],
        ["--mode", "wrap", "--pad", "2"],
        ["--mode", "edge", "--pad", "3,1,0,2"],
    ):
        theirs = _run_magick(
            explained("pad", *args, "--as", "magick"), images["RGB"], tmp_path / "magick.tiff"
        )
        ours = _convcli_values(tmp_path, ["pad", *args], images["RGB"])
        np.testing.assert_array_equal(theirs, ours)


def test_the_magick_conv_command_is_within_a_level_where_nothing_clips(tmp_path, images):
    args = ["-k", "gaussian-3x3", "--channels", "each", "--border", "symmetric"]
    theirs = _run_magick(
        explained("conv", *args, "--as", "magick"), images["RGB"], tmp_path / "magick.tiff"
    )
    ours = _convcli_values(tmp_path, ["conv", *args], images["RGB"])
    assert np.abs(theirs - ours).max() <= 1.0  # ImageMagick writes 8-bit levels here


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_the_magick_gray_command_gives_convcli_grey_within_a_level(tmp_path, images, mode):
    """--channels gray: the luminance of Pillow's weights, not ImageMagick 6's linear grey."""
    args = ["-k", "gaussian-3x3", "--channels", "gray", "--border", "symmetric"]
    text = explained("conv", *args, "--as", "magick")
    assert "-colorspace" not in text.split("\nmagick ", 1)[1]
    theirs = _run_magick(text, images[mode], tmp_path / "magick.tiff")
    ours = _convcli_values(tmp_path, ["conv", *args], images[mode])
    assert theirs.shape == ours.shape[:2]
    assert np.abs(theirs - ours[:, :, 0]).max() <= 1.0  # ImageMagick writes 8-bit levels here


def test_the_readme_table_is_what_explain_prints():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    table = explained("conv", "-k", "sobel-x", "--border", "constant", "--stride", "2")
    assert "```text\n" + table + "```" in readme
    script = explained(
        "conv", "-k", "sobel-x", "--border", "constant", "--stride", "2", "--as", "scipy"
    )
    assert (
        "out = ndimage.correlate(plane, weights, mode='constant', cval=0.0)\n"
        "    return out[::2, ::2] + np.float32(0.0)" in script
    )


# File names that break out of a docstring, a comment or a shell word if written as they are.
HOSTILE_NAMES = [
    'a"""; __import__("os").system("touch MARK"); """b.txt',
    'n\n__import__("os").system("touch MARK")\n#.txt',
    'r\r__import__("os").system("touch MARK")\r.txt',
    'd\\"""+__import__("os").system("touch MARK")#.txt',
    "ends in a backslash\\",
    "$(touch MARK).txt",
    "`touch MARK`.txt",
    "q'; touch MARK; echo '\".txt",
    "u\u2028x\x0bv\x0cw.txt",
]


def _hostile_kernel(folder: Path, name: str) -> Path:
    """A sobel-x kernel file called `name`, as ``convcli kernels sobel-x > NAME`` writes it."""
    path = folder / name
    path.write_text(explained_kernel("sobel-x"), encoding="utf-8")
    return path


def explained_kernel(name: str) -> str:
    result = run("kernels", name)
    assert result.exit_code == 0, result.output
    return result.stdout


def _no_marker(folder: Path) -> None:
    assert not [p for p in folder.rglob("*") if "MARK" in p.name and p.name.startswith("MARK")]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
@pytest.mark.parametrize("target", [*PYTHON_TARGETS, "skimage"])
def test_a_hostile_file_name_stays_text_in_the_scripts(tmp_path, images, target, name):
    """The path reaches the script quoted: its docstring gives the -k word back, nothing runs."""
    import ast

    kernel = _hostile_kernel(tmp_path, name)
    script = explained("conv", "-k", kernel, "--as", target)
    tree = ast.parse(compile(script, "script.py", "exec", flags=ast.PyCF_ONLY_AST))
    command = ast.get_docstring(tree, clean=False).split("\n\n", 1)[0].rsplit(", with ", 1)[0]
    assert shlex.split(command) == ["convcli", "conv", "-k", str(kernel), "--format", "npy"]
    assert len(tree.body) == len(ast.parse(explained("conv", "-k", "sobel-x", "--as", target)).body)
    module = {"skimage": "skimage", **PYTHON_TARGETS}[target]
    if target in ("torch", "skimage") or importlib.util.find_spec(module.split(".")[0]) is None:
        return  # compiled only: the tool is not installed here
    if name not in HOSTILE_NAMES[:2]:
        return  # the same code as every other name (above); two of them are also run
    (tmp_path / "script.py").write_text(script, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "script.py", str(images["RGB"]), "out.npy"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    _no_marker(tmp_path)
    ours = _convcli_values(tmp_path, ["conv", "-k", kernel], images["RGB"])
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), ours, atol=1e-3)


@pytest.mark.parametrize("target", [*PYTHON_TARGETS, "skimage"])
def test_a_hostile_kernel_name_stays_in_its_comment(target):
    """A Kernel named with line breaks and quotes (the library takes any name) is repr'd in a
    comment: the code is that of any other name."""
    import ast

    from convcli.app.explain import explain
    from convcli.app.ops import ConvOp
    from convcli.kernels import Kernel

    name = 'x\n__import__("os").system("touch MARK")\r"""y\\'
    weights = np.array([[1.0, 0, -1], [2, 0, -2], [1, 0, -1]])
    scripts = [explain(ConvOp((Kernel(n, "", weights),)), target) for n in (name, "plain")]
    assert f"    # {name!r}\n" in scripts[0]
    trees = [ast.parse(s) for s in scripts]
    command = ast.get_docstring(trees[0]).split("\n\n", 1)[0].rsplit(", with ", 1)[0]
    assert shlex.split(command) == ["convcli", "conv", "-k", name, "--format", "npy"]
    code = [ast.dump(ast.Module(tree.body[1:], [])) for tree in trees]
    assert code[0] == code[1]  # the docstring aside, the same statements


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_a_hostile_file_name_gives_magick_exactly_its_words(tmp_path, name):
    """The printed command line splits into the intended words: no extra word, no substitution."""
    from convcli.kernels import load_kernel_file

    kernel = _hostile_kernel(tmp_path, name)
    label = load_kernel_file(kernel).label
    text = explained("conv", "-k", kernel, "--as", "magick")
    assert all(line.startswith(("# ", "magick ")) for line in text.splitlines())
    (line,) = [x for x in text.splitlines() if x.startswith("magick ")]
    assert shlex.split(line) == [
        "magick",
        "IN.png",
        "-background",
        "black",
        "-alpha",
        "remove",
        "-virtual-pixel",
        "Mirror",
        "-define",
        "convolve:scale=1",
        "-morphology",
        "Correlate",
        "3x3:1,0,-1,2,0,-2,1,0,-1",
        f"OUT_{label}.tiff",
    ]
    assert not set(f"OUT_{label}") & set("$`'\"\\\n\r")


@pytest.mark.parametrize("mode", choices.PAD_MODES)
def test_a_tool_without_a_border_mode_is_said_to_have_no_equivalent(mode):
    from convcli.app.borders import BORDERS, NO_EQUIVALENT
    from convcli.app.explain import conventions, explain
    from convcli.app.ops import ConvOp, PadOp
    from convcli.kernels import get_kernel

    for op in (PadOp(pad=2, mode=mode), ConvOp((get_kernel("vertical"),), border=mode)):
        table = conventions(op)
        assert "None" not in table
        assert (NO_EQUIVALENT in table) == (BORDERS[mode].torch is None)
        for target in ("scipy", "opencv", "torch", "skimage", "magick"):
            assert "mode=None" not in explain(op, target)


@pytest.mark.parametrize(
    ("installed", "program"),
    [
        ({"magick": "/usr/bin/magick", "convert": "/usr/bin/convert"}, "magick"),
        ({"convert": "IM6"}, "convert"),  # Debian 12: ImageMagick 6 only
        ({"convert": "other"}, "magick"),  # a convert that is not ImageMagick's
        ({}, "magick"),
    ],
)
def test_the_magick_scripts_use_the_imagemagick_installed(monkeypatch, installed, program):
    import shutil
    import subprocess
    from types import SimpleNamespace

    from convcli.app import explain as explain_module
    from convcli.app.ops import ConvOp, PadOp, PoolOp
    from convcli.kernels import get_kernel

    monkeypatch.setattr(shutil, "which", installed.get)
    said = {"IM6": "Version: ImageMagick 6.9.11-60 Q16", "other": "convert: not ImageMagick"}
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda args, **kw: SimpleNamespace(
            stdout=said.get(args[0], "Version: ImageMagick 7.1"), returncode=0
        ),
    )
    explain_module.magick_program.cache_clear()  # what is installed, asked once a process
    try:
        for op in (ConvOp((get_kernel("vertical"),)), PoolOp(size=2), PadOp(pad=1)):
            commands = [
                line
                for line in explain_module.explain(op, "magick").splitlines()
                if not line.startswith("#")
            ]
            assert commands and all(line.split()[0] == program for line in commands)
    finally:
        explain_module.magick_program.cache_clear()


@pytest.mark.parametrize("target", ["scipy", "opencv"])
@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("conv", ["-k", "sobel-x", "--border", "reflect", "--pad", "2"]),
        ("pad", ["--mode", "reflect", "--pad", "2"]),
    ],
)
def test_a_border_scipy_and_opencv_lack_is_padded_by_numpy(
    tmp_path, monkeypatch, images, target, op, args
):
    # A border mode with no scipy or OpenCV name (numpy's odd reflection, say) is one row
    # of the table: the scripts pad with np.pad, and still give convcli's values.
    from convcli.app.borders import BORDERS, NO_EQUIVALENT

    monkeypatch.setitem(BORDERS, "reflect", BORDERS["reflect"]._replace(scipy=None, opencv=None))
    script = explained(op, *args, "--as", target)
    assert "np.pad(" in script and "mode='reflect'" in script
    assert NO_EQUIVALENT in explained(op, *args)
    _check(tmp_path, monkeypatch, op, args, target, images["RGB"])


def test_pillow_scripts_refuse_16_bit_colour_which_opencvs_read(tmp_path, monkeypatch):
    """Pillow reads 16-bit colour PNG and TIFF as 8-bit: its scripts stop on one line
    naming the file instead of giving other values; OpenCV's give convcli's."""
    cv2 = pytest.importorskip("cv2")
    deep = tmp_path / "deep.png"
    values = np.random.default_rng(4).integers(0, 65536, (9, 12, 3), dtype=np.uint16)
    cv2.imwrite(str(deep), values)
    for target in ("scipy", "torch"):
        if importlib.util.find_spec(PYTHON_TARGETS[target]) is None:
            continue
        with pytest.raises(SystemExit, match=f"{deep}: 16-bit colour, which Pillow reads as 8"):
            _script_values(tmp_path, monkeypatch, ["conv", "-k", "sobel-x", "--as", target], deep)
    _check(tmp_path, monkeypatch, "conv", ["-k", "sobel-x", "--channels", "each"], "opencv", deep)


@pytest.mark.parametrize(
    "op, args", [("conv", ["-k", "sobel-x", "--channels", "each"]), ("pool", ["--mode", "max"])]
)
def test_the_opencv_script_reads_grey_and_alpha_as_two_channels(tmp_path, monkeypatch, op, args):
    """OpenCV reads a PNG of grey and alpha as BGRA: its script keeps grey and alpha."""
    pytest.importorskip("cv2")
    grey_alpha = tmp_path / "la.png"
    samples = np.random.default_rng(5).integers(0, 256, (9, 12, 2), dtype=np.uint8)
    Image.fromarray(samples, "LA").save(grey_alpha)
    _check(tmp_path, monkeypatch, op, args, "opencv", grey_alpha)


@pytest.mark.parametrize("target", ["scipy", "opencv", "torch", "skimage", "magick"])
def test_a_kernel_dilated_past_what_a_script_writes_is_refused_on_one_line(target):
    """The scripts write the dilated kernel's every tap: --dilation 100000 would be 40
    billion of them (convcli itself would need 298 GiB to make them)."""
    result = run("explain", "conv", "-k", "vertical", "--dilation", "100000", "--as", target)
    assert_one_line_error(result, 2, "--dilation")
    assert "200001x200001" in result.stderr
    assert run("explain", "conv", "-k", "vertical", "--dilation", "100000").exit_code == 0
    script = run("explain", "conv", "-k", "vertical", "--dilation", "127", "--as", target)
    assert script.exit_code == 0 and len(script.stdout) < 2_000_000


@pytest.mark.parametrize("target", ["scipy", "opencv", "torch"])
def test_a_scripts_blurred_alpha_is_convclis_exactly(tmp_path, monkeypatch, target):
    """Both convolve alpha as its whole levels: a blur's sums are exact, so the values are
    the same to the bit (and round alike at their exact halves)."""
    pytest.importorskip(PYTHON_TARGETS[target])
    rgba = np.random.default_rng(1).integers(0, 256, (60, 50, 4), dtype=np.uint8)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    command = ["conv", "-k", "gaussian-5x5", "--channels", "each"]
    ours = _convcli_values(tmp_path, command, tmp_path / "a.png")
    theirs = _script_values(tmp_path, monkeypatch, [*command, "--as", target], tmp_path / "a.png")
    np.testing.assert_array_equal(theirs[..., 3], ours[..., 3])
