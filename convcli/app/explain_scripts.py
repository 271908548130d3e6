"""The scripts of ``convcli explain`` for the Python tools: scipy, OpenCV, PyTorch, scikit-image.

Each script reads an image path from ``argv[1]``, does what convcli does step by
step (the picture in the file's own scale as float32, alpha weighing the colours,
the channel mode, the border of each side, cross-correlation, the stride, the
bias, then ``--combine``) and saves to ``argv[2]`` a ``.npy`` with the values of
``convcli ... --format npy``.
"""

from __future__ import annotations

import shlex
import textwrap

import numpy as np

from ..choices import CHANNEL_MODES, COMBINE_MODES, EXPLAIN_TARGETS, keyed_by
from .borders import border_name, np_pad_mode
from .conv_op import ConvOp, alpha_weighted
from .explain_alpha import ALPHA_CONV, ALPHA_POOL, CONV_COLOUR
from .op_helpers import pad_option
from .pad_pool import PadOp, PoolOp

_READ_PILLOW = """\
# From a file object: by its name, Pillow scrambles an uncompressed TIFF turned a quarter.
with open(sys.argv[1], "rb") as file, Image.open(file) as im:
    im.seek(0)  # the first frame of an animation or a multi-page TIFF
    if im.mode in ("RGB", "RGBA") and im.tile and ";16" in str(im.tile[0][3]):
        sys.exit(f"{sys.argv[1]}: 16-bit colour, which Pillow reads as 8-bit: "
                 "use --as opencv, or read it with tifffile or imageio")
    im = ImageOps.exif_transpose(im)  # upright, as convcli reads it
    if im.mode == "CMYK" and im.info.get("icc_profile"):
        # CMYK through its own colour profile into sRGB, as convcli reads it (LittleCMS).
        from PIL import ImageCms

        try:
            source = ImageCms.ImageCmsProfile(io.BytesIO(im.info["icc_profile"]))
            srgb = ImageCms.createProfile("sRGB")
            im = ImageCms.profileToProfile(im, source, srgb, outputMode="RGB")
        except (OSError, ValueError, ImageCms.PyCMSError):
            pass  # a profile LittleCMS cannot use: Pillow's formula, as convcli then
    alpha = im.mode in ("PA", "RGBa", "La") or "transparency" in im.info
    if alpha and im.mode in ("1", "L", "RGB"):
        # A transparent grey level or colour (a PNG's tRNS): alpha, as convcli reads it.
        im = im.convert("RGBA" if im.mode == "RGB" else "LA")
    elif im.mode not in ("L", "LA", "RGB", "RGBA", "I", "F", "I;16", "I;16B", "I;16L"):
        # Palette, bilevel, CMYK ...: grey or colour samples, as convcli reads them.
        im = im.convert("RGBA" if alpha else "L" if im.mode == "1" else "RGB")
    raw = np.asarray(im)
pixels = raw.astype(np.float32)  # the file's own scale: 0-255 for 8-bit, 0-65535 for 16-bit
if pixels.ndim == 2:
    pixels = pixels[:, :, None]
"""

_READ_OPENCV = """\
# IMREAD_UNCHANGED keeps 16-bit samples and alpha (it gives a CMYK TIFF's four channels:
# convert such files to RGB first; a CMYK JPEG without a colour profile it converts by its
# own formula, up to 2 levels from Pillow's that convcli uses: --as scipy matches it).
raw = cv2.imread(sys.argv[1], cv2.IMREAD_UNCHANGED)
if raw is None:
    sys.exit(f"cannot read {sys.argv[1]}")
# It does not apply the EXIF orientation, which IMREAD_COLOR does: the one of the eight turns
# and flips that gives that image turns the samples upright, as convcli reads them.
shown = cv2.imread(sys.argv[1], cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH)
base = raw if raw.ndim == 3 else raw[:, :, None]
base = base[:, :, :3] if base.shape[2] >= 3 else np.repeat(base[:, :, :1], 3, axis=2)
for turn in range(8 if isinstance(shown, np.ndarray) else 0):  # 4 to 7: mirrored first
    if np.array_equal(np.rot90(base[:, :: 1 - 2 * (turn // 4)], turn), shown):
        raw = np.rot90(raw[:, :: 1 - 2 * (turn // 4)], turn)
        break
with open(sys.argv[1], "rb") as file:
    data = file.read()
if data[:8] == b"\\x89PNG\\r\\n\\x1a\\n" and data[25:26] == b"\\x04" and raw.ndim == 3:
    raw = raw[:, :, [0, 3]]  # a PNG of grey and alpha: OpenCV gives BGRA
elif data[:8] == b"\\x89PNG\\r\\n\\x1a\\n" and data[25:26] == b"\\x00" and raw.ndim == 2:
    # A grey PNG's transparent level (tRNS), which OpenCV drops: alpha, as convcli reads it.
    at, levels = 8, []
    while at + 8 <= len(data) and data[at + 4:at + 8] not in (b"IDAT", b"IEND"):
        size = int.from_bytes(data[at:at + 4], "big")
        if data[at + 4:at + 8] == b"tRNS":
            levels.append(int.from_bytes(data[at + 8:at + 10], "big"))
        at += 12 + size
    for level in levels[:1]:
        depth = data[24]  # OpenCV gives 1, 2 and 4-bit samples on 0-255
        level = level if depth >= 8 else level * 255 // (2 ** depth - 1)
        top = 255 if raw.dtype == np.uint8 else 65535
        raw = np.dstack([raw, np.where(raw == level, 0, top).astype(raw.dtype)])
pixels = raw.astype(np.float32)  # the file's own scale: 0-255 for 8-bit, 0-65535 for 16-bit
if pixels.ndim == 2:
    pixels = pixels[:, :, None]
if pixels.shape[2] >= 3:  # OpenCV's BGR(A) to convcli's RGB(A)
    pixels = pixels[:, :, [2, 1, 0, *range(3, pixels.shape[2])]]
"""

_IMPORTS = keyed_by(
    tuple(t for t in EXPLAIN_TARGETS if t != "magick"),
    {
        "scipy": "import numpy as np\nfrom PIL import Image, ImageOps\nfrom scipy import ndimage\n",
        "skimage": (
            "import numpy as np\nfrom PIL import Image, ImageOps\n"
            "from scipy import ndimage\nfrom skimage.util import view_as_windows\n"
        ),
        "opencv": "import cv2\nimport numpy as np\n",
        "torch": "import numpy as np\nimport torch\nimport torch.nn.functional as F\n"
        "from PIL import Image, ImageOps\n",
    },
    what="explain's imports of each Python tool",
)

INSTALL = keyed_by(
    EXPLAIN_TARGETS,
    {
        "scipy": "pip install numpy pillow scipy",
        "skimage": "pip install numpy pillow scipy scikit-image",
        "opencv": "pip install numpy opencv-python-headless",
        "torch": "pip install numpy pillow torch",
        "magick": "apt-get install imagemagick (version 6: `convert`) or brew install imagemagick",
    },
    what="how to install each tool explain writes for",
)

_CHANNELS = keyed_by(
    CHANNEL_MODES,
    {
        "sum": "# --channels sum: each kernel over all colour channels, summed (a kernel repeated\n"
        "# over the channels gives the correlation of their sum).\n"
        "planes = [colour.sum(axis=2, dtype=np.float32)]\n",
        "gray": '# --channels gray: luminance first, ITU-R 601-2 (as Pillow\'s convert("L"),\n'
        "# not rounded).\n"
        "planes = [colour @ np.float32([0.299, 0.587, 0.114]) if colour.shape[2] == 3\n"
        "          else colour[:, :, 0]]\n",
        "each": "# --channels each: every colour channel on its own (depthwise).\n"
        "planes = [colour[:, :, c] for c in range(colour.shape[2])]\n",
    },
    what="explain's channel modes",
)

_GRAY_OPENCV = (
    "# --channels gray: luminance first; cvtColor on float32 uses ITU-R 601-2 weights\n"
    "# (0.299, 0.587, 0.114) and does not round.\n"
    "planes = [cv2.cvtColor(colour, cv2.COLOR_RGB2GRAY) if colour.shape[2] == 3\n"
    "          else colour[:, :, 0]]\n"
)

_COMBINE = keyed_by(
    COMBINE_MODES,
    {
        "magnitude": "np.sqrt(np.square(stack).sum(axis=2))",
        "max": "stack.max(axis=2)",
        "sum": "stack.sum(axis=2)",
    },
    what="explain's --combine modes",
)


def _array(weights) -> str:
    """A kernel as a numpy literal with every digit (``repr`` of each float)."""
    rows = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in weights)
    return f"np.array([{rows}], dtype=np.float32)"


def _docstring_text(text: str) -> str:
    """`text` made safe inside a triple-quoted literal, where it reads back as `text`.

    Backslashes, control characters, line breaks and non-ASCII characters are
    escaped (``unicode_escape``), and so is every double quote.
    """
    return text.encode("unicode_escape").decode("ascii").replace('"', '\\"')


def _script(target: str, title: str, body: str) -> str:
    """The whole script: `title` (a command line, user text in it) as its docstring's first line."""
    reader = _READ_OPENCV if target == "opencv" else _READ_PILLOW
    head = (
        f'"""{_docstring_text(title)}\n\nNeeds: {INSTALL[target]}\n'
        'Usage: python THIS_SCRIPT IMAGE OUT.npy\n"""\n'
    )
    return (
        head
        + ("import io\nimport sys\n\n" if reader is _READ_PILLOW else "import sys\n\n")
        + _IMPORTS[target]
        + "\n"
        + reader
        + "\n"
        + body
        + "\n"
        + "np.save(sys.argv[2], np.ascontiguousarray(out, dtype=np.float32))\n"
    )


def _centred(op: ConvOp) -> bool:
    """Whether every kernel is odd and padded by half its size on each side (``--pad same``)."""
    spans = [op.span(k) for k in op.kernels]
    return all(
        h % 2 and w % 2 and op.pad_widths(k) == ((h - 1) // 2,) * 2 + ((w - 1) // 2,) * 2
        for k, (h, w) in zip(op.kernels, spans, strict=True)
    )


def kernel_taps(op: ConvOp, kernel) -> np.ndarray:
    """The kernel as the other tools take it: with ``dilation - 1`` zeros between its taps."""
    d = op.dilation
    if d == 1:
        return kernel.weights
    out = np.zeros(op.span(kernel), kernel.weights.dtype)
    out[::d, ::d] = kernel.weights
    return out


def _crop(stride: int) -> str:
    """Keep the positions where the whole kernel lies in the padded plane, every stride-th."""
    return (
        "    top, left = weights.shape[0] // 2, weights.shape[1] // 2  # the kernel's centre\n"
        "    rows = padded.shape[0] - weights.shape[0] + 1\n"
        "    cols = padded.shape[1] - weights.shape[1] + 1\n"
        f"    out = out[top:top + rows:{stride}, left:left + cols:{stride}]\n"
    )


_WIDTHS = ("widths[0]", "widths[1]", "widths[2]", "widths[3]")


def _np_pad(widths, border: str) -> str:
    """``np.pad`` of a plane by (top, bottom, left, right), given as code."""
    top, bottom, left, right = widths
    return f"np.pad(plane, (({top}, {bottom}), ({left}, {right})), {np_pad_mode(border)})"


def _correlate(op: ConvOp, target: str) -> str:
    """``def correlate(plane, weights, widths)``: one plane, one kernel, as conv_forward."""
    write = {
        "scipy": _correlate_ndimage,
        "skimage": _correlate_ndimage,
        "opencv": _correlate_opencv,
        "torch": _correlate_torch,
    }[target]
    return write(op, border_name(op.border, target))


def _correlate_ndimage(op: ConvOp, name: str) -> str:
    """:func:`_correlate` with ``ndimage.correlate`` (scipy, scikit-image)."""
    s, bias, border = op.stride, repr(float(op.bias)), op.border
    if _centred(op) and name is not None:
        return (
            "def correlate(plane, weights, widths):\n"
            "    # ndimage.correlate lays the kernel over the image as written "
            "(ndimage.convolve flips it);\n"
            f"    # convcli's border {border!r} is ndimage's mode {name!r}.\n"
            f"    out = ndimage.correlate(plane, weights, mode={name!r}, cval=0.0)\n"
            f"    return out[::{s}, ::{s}] + np.float32({bias})\n"
        )
    said = (
        f"numpy's mode {border!r} is ndimage's {name!r}"
        if name is not None
        else f"ndimage has no {border!r}"
    )
    return (
        "def correlate(plane, weights, widths):\n"
        f"    # Each side padded on its own ({said}), then\n"
        "    # the kernel laid over the padded plane as written (no flip).\n"
        f"    padded = {_np_pad(_WIDTHS, border)}\n"
        "    out = ndimage.correlate(padded, weights, mode='constant', cval=0.0)\n"
        + _crop(s)
        + f"    return out + np.float32({bias})\n"
    )


def _correlate_opencv(op: ConvOp, name: str) -> str:
    """:func:`_correlate` with ``cv2.filter2D``."""
    s, bias, border = op.stride, repr(float(op.bias)), op.border
    if name is None:
        return (
            "def correlate(plane, weights, widths):\n"
            f"    # OpenCV has no {border!r} border: numpy pads each side. Then filter2D.\n"
            f"    padded = {_np_pad(_WIDTHS, border)}\n"
            f"    out = cv2.filter2D(padded, cv2.CV_32F, weights, delta={bias},\n"
            "                       borderType=cv2.BORDER_CONSTANT)\n"
            + _crop(s)
            + "    return out\n"
        )
    if _centred(op) and border != "wrap":
        return (
            "def correlate(plane, weights, widths):\n"
            "    # filter2D correlates (no flip) about the kernel's centre; convcli's "
            f"border {border!r}\n    # is cv2.{name}.\n"
            f"    out = cv2.filter2D(plane, cv2.CV_32F, weights, delta={bias},\n"
            f"                       borderType=cv2.{name})\n"
            f"    return out[::{s}, ::{s}]\n"
        )
    return (
        "def correlate(plane, weights, widths):\n"
        f"    # Each side padded on its own: convcli's border {border!r} is cv2.{name}\n"
        "    # (filter2D cannot wrap: copyMakeBorder can). Then filter2D (no flip).\n"
        "    top, bottom, left, right = widths\n"
        "    padded = cv2.copyMakeBorder(plane, top, bottom, left, right, "
        f"cv2.{name}, value=0)\n"
        f"    out = cv2.filter2D(padded, cv2.CV_32F, weights, delta={bias},\n"
        "                       borderType=cv2.BORDER_CONSTANT)\n" + _crop(s) + "    return out\n"
    )


def _correlate_torch(op: ConvOp, name: str | None) -> str:
    """:func:`_correlate` with ``F.conv2d``, the plane padded by ``F.pad`` or numpy."""
    s, bias, border = op.stride, repr(float(op.bias)), op.border
    if name is None:
        pad = (
            f"    # PyTorch has no {border!r} border: numpy pads it.\n"
            f"    x = torch.from_numpy({_np_pad(('t', 'b', 'l', 'r'), border)})[None, None]\n"
        )
    else:
        pad = (
            "    x = torch.from_numpy(np.ascontiguousarray(plane))[None, None]\n"
            f"    # F.pad takes (left, right, top, bottom); convcli's {border!r} is {name!r}.\n"
            + _torch_padded(
                name,
                "plane",
                "    ",
                f"x = F.pad(x, (l, r, t, b), mode={name!r})\n",
                f"x = torch.from_numpy({_np_pad(('t', 'b', 'l', 'r'), border)})[None, None]\n",
            )
        )
    return (
        "def correlate(plane, weights, widths):\n"
        "    t, b, l, r = widths  # noqa: E741\n"
        + pad
        + "    # F.conv2d is cross-correlation (no flip), as conv_forward.\n"
        "    w = torch.from_numpy(weights)[None, None]\n"
        f"    out = F.conv2d(x, w, bias=torch.tensor([{bias}]), stride={s})\n"
        "    return out[0, 0].numpy()\n"
    )


def _torch_padded(name: str, array: str, indent: str, padded: str, numpy_padded: str) -> str:
    """Code that runs `padded` (lines, `indent` inside) where F.pad pads `array` (rows and
    columns first) by t, b, l, r in mode `name`, and `numpy_padded` where it cannot: a
    reflection as wide as a side or wider, a circle wider than it."""
    below = {"reflect": " < ", "circular": " <= "}.get(name)
    if below is None:
        return textwrap.indent(padded, indent)
    inner = indent + "    "
    return (
        f"{indent}# F.pad pads a side by less than its length"
        f"{' or as much' * (name == 'circular')}: numpy pads wider ones, as convcli.\n"
        f"{indent}if max(t, b){below}{array}.shape[0] and max(l, r){below}{array}.shape[1]:\n"
        + textwrap.indent(padded, inner)
        + f"{indent}else:\n"
        + textwrap.indent(numpy_padded, inner)
    )


def conv_script(op: ConvOp, target: str) -> str:
    dilated = f", its taps {op.dilation} apart (--dilation)" if op.dilation != 1 else ""
    kernels = "\n".join(
        f"    # {k.name!r}{dilated}\n    ({_array(kernel_taps(op, k))},\n     {op.pad_widths(k)}),"
        for k in op.kernels
    )
    channels = (
        _GRAY_OPENCV if target == "opencv" and op.channels == "gray" else _CHANNELS[op.channels]
    )
    weighted = ALPHA_CONV if alpha_weighted(op, ("R", "G", "B", "A")) else None
    body = [
        f"convcli conv {_conv_args(op)} --format npy, with {_TOOL_NAMES[target]}.",
        CONV_COLOUR + channels + (weighted[0] if weighted else ""),
        "# Each kernel, and its pad (top, bottom, left, right).",
        "KERNELS = [\n" + kernels + "\n]",
        "",
        "",
        _correlate(op, target),
        "# One map per kernel and plane, kernel-major (k0 on R, G, B, then k1 ...).",
        "maps = [correlate(plane, weights, widths) for weights, widths in KERNELS "
        "for plane in planes]",
        "out = np.stack(maps, axis=2)",
    ]
    if weighted:
        body += [weighted[1].replace("BIAS", repr(float(op.bias)))]
    if op.combine is not None:
        body += [
            f"# --combine {op.combine}: one map of all kernels, per plane.",
            "stack = out.reshape(out.shape[:2] + (len(KERNELS), len(planes)))",
            f"out = {_COMBINE[op.combine]}",
        ]
    if target == "skimage":
        body.insert(1, _SKIMAGE_NOTE)
    return _script(target, body[0], "\n".join(body[1:]))


_SKIMAGE_NOTE = """\
# scikit-image's filters run on scipy.ndimage, as here. Its named edge filters differ:
# skimage.filters.sobel_v(plane) is -1/4 of convcli's sobel-x (sobel_h: of sobel-y), with
# the border 'symmetric' (ndimage's "reflect"); skimage.color.rgb2gray uses other weights
# (0.2125, 0.7154, 0.0721) on a 0-1 scale.
"""

_TOOL_NAMES = keyed_by(
    EXPLAIN_TARGETS,
    {
        "scipy": "numpy and scipy.ndimage",
        "opencv": "OpenCV (cv2)",
        "torch": "PyTorch (torch.nn.functional)",
        "skimage": "scikit-image's tools (scipy.ndimage underneath)",
        "magick": "ImageMagick",
    },
    what="explain's tool names",
)


def _conv_args(op: ConvOp) -> str:
    specs = ",".join(k.name if k.source == "builtin" else k.source for k in op.kernels)
    args = ["-k " + shlex.quote(specs)]  # a shell word, whatever the file is called
    if op.stride != 1:
        args.append(f"--stride {op.stride}")
    if op.dilation != 1:
        args.append(f"--dilation {op.dilation}")
    pad = op.pad
    if pad != "same":
        args.append(f"--pad {pad_option(pad)}")
    if op.bias:
        args.append(f"--bias {op.bias!r}")
    if op.channels != "sum":
        args.append(f"--channels {op.channels}")
    if op.border != "reflect":
        args.append(f"--border {op.border}")
    if op.combine:
        args.append(f"--combine {op.combine}")
    return " ".join(args)


_CENTRED_WINDOWS = (
    "n_h = (pixels.shape[0] - F_SIZE) // STRIDE + 1\n"
    "n_w = (pixels.shape[1] - F_SIZE) // STRIDE + 1\n"
    "# The filter is centred on each pixel: the window starting at (i, j) is centred\n"
    "# at (i + F_SIZE // 2, j + F_SIZE // 2). Keep every STRIDE-th whole window.\n"
    "c = F_SIZE // 2\n"
    "out = filtered[c:c + (n_h - 1) * STRIDE + 1:STRIDE, "
    "c:c + (n_w - 1) * STRIDE + 1:STRIDE]\n"
)
"""After a filter centred on each pixel (``filtered``): the whole windows, every stride-th."""


def _pool_skimage(op: PoolOp) -> str:
    """Pooling with scikit-image's ``view_as_windows``."""
    return (
        "# F x F windows every STRIDE pixels (skimage.measure.block_reduce does the\n"
        "# same only when STRIDE == F_SIZE).\n"
        "windows = view_as_windows(pixels, (F_SIZE, F_SIZE, pixels.shape[2]), "
        "step=(STRIDE, STRIDE, 1))\n"
        f"out = windows.{'max' if op.mode == 'max' else 'mean'}(axis=(3, 4))"
        "[:, :, 0, :]\n"
    )


def _pool_ndimage(op: PoolOp) -> str:
    """Pooling with scipy's ``maximum_filter`` or ``uniform_filter``."""
    fn = "maximum_filter" if op.mode == "max" else "uniform_filter"
    return (
        f"filtered = ndimage.{fn}(pixels, size=(F_SIZE, F_SIZE, 1), mode='constant')\n"
        + _CENTRED_WINDOWS
    )


def _pool_opencv(op: PoolOp) -> str:
    """Pooling with ``cv2.dilate`` (max) or ``cv2.blur`` (average), channel by channel."""
    fn = (
        "cv2.dilate(plane, np.ones((F_SIZE, F_SIZE), np.uint8))"
        if op.mode == "max"
        else "cv2.blur(plane, (F_SIZE, F_SIZE))"
    )
    what = "the largest (dilate)" if op.mode == "max" else "the mean (blur)"
    return (
        f"# {what} over F x F windows, one channel at a time.\n"
        "filtered = np.stack(["
        + fn.replace("plane", "pixels[:, :, k]")
        + " for k in range(pixels.shape[2])], axis=2)\n"
        + _CENTRED_WINDOWS
    )


def _pool_torch(op: PoolOp) -> str:
    """Pooling with ``F.max_pool2d`` or ``F.avg_pool2d``, which pad and ceil themselves."""
    fn = "F.max_pool2d" if op.mode == "max" else "F.avg_pool2d"
    extra = ""
    if op.pad or op.ceil:
        extra = f", padding={op.pad}, ceil_mode={op.ceil}"
        extra += ", count_include_pad=False" if op.mode == "average" else ""
    return (
        "x = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))[None]\n"
        f"out = {fn}(x, kernel_size=F_SIZE, stride=STRIDE{extra})"
        "[0].numpy().transpose(1, 2, 0)\n"
    )


def pool_script(op: PoolOp, target: str) -> str:
    f, s = op.size, op.stride
    if (op.pad or op.ceil) and target != "torch":
        main = _padded_pool(op)
    else:
        main = {
            "scipy": _pool_ndimage,
            "skimage": _pool_skimage,
            "opencv": _pool_opencv,
            "torch": _pool_torch,
        }[target](op)
    options = f" --pad {op.pad}" if op.pad else ""
    options += " --ceil" if op.ceil else ""
    before, after = ALPHA_POOL[op.mode]
    body = [
        f"convcli pool --mode {op.mode} --size {f} --stride {s}{options} --format npy, with "
        f"{_TOOL_NAMES[target]}.",
        f"F_SIZE, STRIDE = {f}, {s}",
        before + main.rstrip("\n") + "\n" + after.rstrip("\n"),
    ]
    return _script(target, body[0], "\n".join(body[1:]))


def _padded_pool(op: PoolOp) -> str:
    """Pooling with ``--pad`` or ``--ceil`` in numpy: padding (NaN) is never part of a window."""
    reduce = "np.nanmax" if op.mode == "max" else "np.nanmean"
    size = (
        "n = (length + 2 * PAD - F_SIZE + (STRIDE - 1 if CEIL else 0)) // STRIDE + 1\n"
        "    if CEIL and (n - 1) * STRIDE >= length + PAD:  # the last window starts in the"
        " right padding\n"
        "        n -= 1\n"
        "    return n\n"
    )
    return (
        "# None of these tools pools with padding that is never part of a window (as\n"
        "# PyTorch's max_pool2d, and avg_pool2d with count_include_pad=False): numpy does it,\n"
        "# the padding NaN, left out of each window's max or mean.\n"
        f"PAD, CEIL = {op.pad}, {op.ceil}\n\n\n"
        "def windows(length):\n    " + size + "\n\n"
        "n_h, n_w = windows(pixels.shape[0]), windows(pixels.shape[1])\n"
        "bottom = max(0, (n_h - 1) * STRIDE + F_SIZE - pixels.shape[0] - 2 * PAD)\n"
        "right = max(0, (n_w - 1) * STRIDE + F_SIZE - pixels.shape[1] - 2 * PAD)\n"
        "padded = np.pad(pixels, ((PAD, PAD + bottom), (PAD, PAD + right), (0, 0)),\n"
        "                constant_values=np.nan)\n"
        "views = np.lib.stride_tricks.sliding_window_view(padded, (F_SIZE, F_SIZE), "
        "axis=(0, 1))\n"
        "views = views[:(n_h - 1) * STRIDE + 1:STRIDE, :(n_w - 1) * STRIDE + 1:STRIDE]\n"
        f"out = {reduce}(views, axis=(3, 4)).astype(np.float32)\n"
    )


def pad_script(op: PadOp, target: str) -> str:
    t, b, l, r = op.pad if isinstance(op.pad, tuple) else (op.pad,) * 4  # noqa: E741
    mode, value = op.mode, repr(float(op.value))
    name = border_name(mode, target)
    alpha = (
        "# Alpha is padded as the colour; in constant mode with full opacity (white).\n"
        "white = 255.0 if raw.dtype == np.uint8 else 65535.0\n"
        "n = 3 if pixels.shape[2] >= 3 else 1  # colour channels\n"
    )
    if target == "opencv" and name is not None:
        main = (
            f"# convcli's {mode!r} is cv2.{name}.\n"
            "def pad(channels, fill):\n"
            f"    out = cv2.copyMakeBorder(channels, {t}, {b}, {l}, {r}, cv2.{name}, "
            "value=[fill] * 4)\n"
            "    return out if out.ndim == 3 else out[:, :, None]\n"
        )
    elif target == "torch" and name is not None:
        extra = ", constant_values=fill" if mode == "constant" else ""
        main = (
            f"# F.pad takes (left, right, top, bottom); convcli's {mode!r} is {name!r}.\n"
            "def pad(channels, fill):\n"
            f"    t, b, l, r = {t}, {b}, {l}, {r}  # noqa: E741\n"
            + _torch_padded(
                name,
                "channels",
                "    ",
                "x = torch.from_numpy(np.ascontiguousarray(channels.transpose(2, 0, 1)))[None]\n"
                f"x = F.pad(x, (l, r, t, b), mode={name!r}"
                + (", value=fill" if mode == "constant" else "")
                + ")\n"
                "return x[0].numpy().transpose(1, 2, 0)\n",
                f"return np.pad(channels, ((t, b), (l, r), (0, 0)), {np_pad_mode(mode)}{extra})\n",
            )
        )
    else:
        why = (
            f"# {_TOOL_NAMES[target]} has no {mode!r} border: numpy pads it.\n"
            if target in ("torch", "opencv")
            else "# scipy has no padding of its own: numpy's np.pad is the one.\n"
        )
        extra = ", constant_values=fill" if mode == "constant" else ""
        main = (
            why + "def pad(channels, fill):\n"
            f"    return np.pad(channels, (({t}, {b}), ({l}, {r}), (0, 0)), {np_pad_mode(mode)}"
            f"{extra})\n"
        )
    body = [
        f"convcli pad --pad {t},{b},{l},{r} --mode {mode}"
        + (f" --value {op.value!r}" if mode == "constant" else "")
        + f" --format npy, with {_TOOL_NAMES[target]}.",
        alpha + main,
        f"parts = [pad(pixels[:, :, :n], {value})]",
        "if pixels.shape[2] > n:",
        "    parts.append(pad(pixels[:, :, n:], white))",
        "out = np.concatenate(parts, axis=2)",
    ]
    return _script(target, body[0], "\n".join(body[1:]))
