"""An animated PNG's frames, composited as the APNG specification says.

Pillow composites an APNG's frames itself, with two faults (Pillow 13): where a frame
was loaded before the next one is sought, a ``dispose_op`` of "previous" reverts its
region to the canvas with that frame on it, not to the canvas before it; and a
``blend_op`` of "over" pastes the frame through its alpha instead of compositing it,
so that half-transparent pixels come out wrong in colour and alpha. Here Pillow
decodes each frame's own pixels alone, from a PNG made of the frame's chunks (the
file's header at the frame's size, its palette and transparency, the frame's data),
and the frames are composited with numpy on a canvas of transparent black, as the
specification says: each frame blended where its ``fcTL`` puts it, the canvas
shown, then the frame's region disposed of before the next. A file of 16-bit samples
is composited at 16 bits where its frames can be read so: grey by Pillow, colour and
grey + alpha by imagecodecs (the ``deep`` extra); without it, at Pillow's 8 bits, said.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator

import numpy as np
from PIL import Image

from .decoders import (
    KEY_NOT_READ,
    deep_codecs_missing,
    frame_loss_note,
    grey_key,
    narrow_note,
    to_array,
    transparency_lost_note,
)
from .png import write_chunk

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_DECODING = (b"PLTE", b"tRNS")  # the chunks a frame's own PNG takes from the file
_DISPOSE_BACKGROUND, _DISPOSE_PREVIOUS = 1, 2
_BLEND_OVER = 1
_MAX_CHUNK = 1 << 31  # the PNG specification's largest chunk length


def composited_frames(
    path: str, *, deep: bool = False, keyless: bool = False
) -> Iterator[tuple[np.ndarray, float]]:
    """The frames of the APNG `path` as a viewer shows them: an (H, W, 4) uint8 RGBA
    canvas, uint16 with `deep` (a file of 16-bit samples; the canvas itself: valid until
    the next frame is drawn) and the frame's duration in milliseconds, in order.
    `keyless`: the file's transparent colour (tRNS) is left out. The
    default image is a frame only where the file makes it the first (an ``fcTL`` before
    ``IDAT``). A file that ends after a whole frame without its IEND chunk gives the
    frames before its end, as Pillow reads it.

    Raises
    ------
    ValueError
        The file is no PNG, ends inside a chunk, or a frame is empty or does not fit its
        canvas (checked before its data is decoded).
    """
    with open(path, "rb") as fh:
        if fh.read(len(_SIGNATURE)) != _SIGNATURE:
            raise ValueError("not a PNG file")
        chunks = _chunks(fh)
        kind, header = next(chunks, (b"", b""))
        if kind != b"IHDR" or len(header) != 13:
            raise ValueError("a PNG file without its header")
        width, height = struct.unpack(">II", header[:8])
        canvas = np.zeros((height, width, 4), np.uint16 if deep else np.uint8)
        decoding: list[tuple[bytes, bytes]] = []
        control, data, shown = None, [], 0
        for kind, body in _ended(chunks):
            if kind in _DECODING and not (keyless and kind == b"tRNS"):
                decoding.append((kind, body))
            elif kind in (b"IDAT", b"fdAT") and control is not None:
                data.append(body if kind == b"IDAT" else body[4:])  # fdAT: a sequence number
            elif kind in (b"fcTL", b"IEND") and control is not None:
                pixels = _frame(header, decoding, control, data, deep=deep)
                yield from _drawn(canvas, control, pixels, first=shown == 0)
                control, data, shown = None, [], shown + 1
            if kind == b"fcTL":
                control = _control(body, width, height)
            if kind == b"IEND":
                return


def _ended(chunks: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """`chunks`, then an IEND chunk where the file ends without one."""
    yield from chunks
    yield b"IEND", b""


def _control(body: bytes, width: int, height: int) -> tuple:
    """A frame control chunk's size, place, delay and operations, checked against the
    canvas (`width` x `height`) before any of the frame's data is decoded."""
    if len(body) < 26:
        raise ValueError("a frame control chunk too short")
    control = struct.unpack(">IIIIHHBB", body[4:26])
    w, h, x, y = control[:4]
    if not (0 < w and 0 < h and x + w <= width and y + h <= height):
        raise ValueError(f"a frame of {w}x{h} at ({x}, {y}) on a canvas of {width}x{height}")
    return control


class CompositedFrames:
    """The frames of the APNG `path` by number, in any order (:func:`composited_frames`
    again from the first where a frame before the last one given is asked for).

    `deep`: the canvas holds 16 bits a sample; `narrowed`: the file's 16-bit samples are
    composited at Pillow's 8 bits (colour without imagecodecs), where its 16-bit transparent
    colour cannot mark pixels exactly: then `keyless`, it is dropped, every pixel opaque."""

    def __init__(self, path: str, *, deep=False, narrowed=False, keyless=False):
        self.path, self.deep, self.narrowed, self.keyless = path, deep, narrowed, keyless
        self._frames: Iterator[tuple[np.ndarray, float]] = iter(())
        self._next = 0  # the number of the frame _frames gives next

    @classmethod
    def of(cls, path: str) -> CompositedFrames | None:
        """The frames of the PNG `path`, or None where its header is cut short."""
        with open(path, "rb") as fh:
            header = fh.read(len(_SIGNATURE) + 8 + 13)[len(_SIGNATURE) + 8 :]  # IHDR's data
        if len(header) != 13:
            return None
        sixteen, grey = header[8] == 16, header[9] == 0  # bit depth, colour type
        deep = sixteen and (grey or deep_codecs_missing() is None)
        narrowed = sixteen and not deep
        return cls(path, deep=deep, narrowed=narrowed, keyless=narrowed and _keyed(path))

    def frame(self, number: int) -> tuple[np.ndarray, float]:
        """Frame `number` (from 0) as an (H, W, 4) RGBA array (uint16 where :attr:`deep`),
        and its duration in milliseconds."""
        if number < self._next:
            self._frames, self._next = iter(()), 0
        if self._next == 0:
            self._frames = composited_frames(self.path, deep=self.deep, keyless=self.keyless)
        for canvas, duration in self._frames:
            self._next += 1
            if self._next > number:
                return canvas.copy(), duration
        raise ValueError(f"the animation has no frame {number}")

    def picture(self, number: int, channels: tuple[str, ...]) -> tuple:
        """Frame `number` read with a stack's `channels`: float32 pixels (H, W, C), the value
        of white, the bit depth, the notes of what it loses, and its duration (ms)."""
        canvas, duration = self.frame(number)
        if self.deep:  # every frame has the file's colour type: only the canvas's alpha is lost
            notes = _transparency_note(canvas, channels)
            pixels = canvas[..., _CANVAS_CHANNELS[channels]].astype(np.float32)
            return pixels, 65535.0, 16, notes, duration
        im = Image.fromarray(canvas, "RGBA")
        notes = (narrow_note(channels),) * self.narrowed + (KEY_NOT_READ,) * self.keyless
        notes += frame_loss_note(im, ("R", "G", "B", "A"), channels)
        return *to_array(im, channels), notes, duration


# The canvas's channels that hold a stack's channels (a grey file's canvas is grey in R, G, B).
_CANVAS_CHANNELS = {("L",): [0], ("L", "A"): [0, 3], ("R", "G", "B"): [0, 1, 2]}
_CANVAS_CHANNELS[("R", "G", "B", "A")] = [0, 1, 2, 3]


def _transparency_note(canvas: np.ndarray, channels: tuple[str, ...]) -> tuple[str, ...]:
    """:func:`~convcli.io.decoders.frame_loss_note` of a 16-bit canvas: its transparency,
    where `channels` have no alpha."""
    if "A" in channels or canvas[..., 3].min() == 65535:
        return ()
    return transparency_lost_note(channels)


def _keyed(path: str) -> bool:
    """Whether the PNG `path` has a transparent colour or level (tRNS: before its pixels);
    a file cut short says so later, where its frames are read."""
    with open(path, "rb") as fh:
        fh.seek(len(_SIGNATURE))
        try:
            for kind, _ in _chunks(fh):
                if kind in (b"tRNS", b"IDAT"):
                    return kind == b"tRNS"
        except ValueError:
            pass
    return False


def _chunks(fh) -> Iterator[tuple[bytes, bytes]]:
    """(kind, data) of each chunk of the open PNG `fh`, from after its signature."""
    while len(head := fh.read(8)) == 8:
        length, kind = struct.unpack(">I4s", head)
        body = fh.read(length) if length < _MAX_CHUNK else b""
        if len(body) != length or len(fh.read(4)) != 4:  # the data, then its CRC
            raise ValueError(f"the PNG file ends inside its {kind.decode('latin-1')} chunk")
        yield kind, body


def _frame(header: bytes, decoding: list, control: tuple, data: list[bytes], *, deep: bool):
    """One frame's own pixels, (h, w, 4) RGBA, decoded from a PNG of its chunks: by Pillow at
    8 bits, or with `deep` at 16 (:func:`_deep_pixels`)."""
    width, height = control[:2]
    chunks = [(b"IHDR", struct.pack(">II", width, height) + header[8:]), *decoding]
    chunks += [(b"IDAT", part) for part in data] + [(b"IEND", b"")]
    png = io.BytesIO(_SIGNATURE)
    png.seek(len(_SIGNATURE))
    for kind, body in chunks:
        write_chunk(png, kind, body)
    png.seek(0)
    if deep:
        pixels = _deep_pixels(png, header[9], dict(decoding).get(b"tRNS"))
    else:
        with Image.open(png) as im:
            grey_key(im)  # a 2- or 4-bit level on Pillow's 0-255, as a still PNG's
            pixels = np.asarray(im.convert("RGBA"))
    if pixels.shape[:2] != (height, width):
        raise ValueError("a frame's pixels are not of its size")
    return pixels


def _deep_pixels(png: io.BytesIO, colour_type: int, key: bytes | None) -> np.ndarray:
    """A 16-bit frame's own PNG as (h, w, 4) uint16 RGBA: read by imagecodecs, which makes
    its transparent colour or level (tRNS) alpha, or a grey one without it by Pillow (which
    reads 16-bit grey whole), its level made alpha here."""
    if deep_codecs_missing() is None:
        import imagecodecs

        try:
            samples = np.asarray(imagecodecs.png_decode(png.getvalue()), np.uint16)
        except imagecodecs.PngError as exc:  # its message names the chunk it was given: IDAT
            reason = str(exc).removeprefix("IDAT: ")
            raise ValueError(f"the frame's image data is corrupt: {reason}") from None
    else:
        with Image.open(png) as im:
            samples = np.asarray(im, np.uint16)
        if colour_type == 0 and key is not None and len(key) >= 2:
            opaque = samples != int.from_bytes(key[:2], "big")
            samples = np.stack([samples, np.where(opaque, 65535, 0).astype(np.uint16)], axis=2)
    samples = samples.reshape(*samples.shape[:2], -1)
    grey = samples.shape[2] in (1, 2)
    colour = np.repeat(samples[..., :1], 3, axis=2) if grey else samples[..., :3]
    if samples.shape[2] in (2, 4):
        alpha = samples[..., -1:]
    else:
        alpha = np.full((*samples.shape[:2], 1), 65535, np.uint16)
    return np.concatenate([colour, alpha], axis=2)


def _drawn(canvas: np.ndarray, control: tuple, pixels: np.ndarray, *, first: bool):
    """Draw a frame on the canvas (blended as its ``fcTL`` says), yield the canvas shown and
    the frame's duration, then dispose of the frame's region: leave it, clear it
    to transparent black, or put back what was there before (a first frame's "previous"
    is "background", as the specification says)."""
    width, height, x, y, delay, per_second, dispose, blend = control
    region = canvas[y : y + height, x : x + width]
    before = region.copy() if dispose == _DISPOSE_PREVIOUS and not first else None
    region[...] = over(pixels, region) if blend == _BLEND_OVER else pixels
    yield canvas, 1000.0 * delay / (per_second or 100)
    if before is not None:
        region[...] = before
    elif dispose in (_DISPOSE_BACKGROUND, _DISPOSE_PREVIOUS):
        region[...] = 0


def over(source: np.ndarray, below: np.ndarray) -> np.ndarray:
    """8- or 16-bit RGBA `source` composited over `below` (neither premultiplied, both of one
    dtype), rounded, as the APNG specification's ``APNG_BLEND_OP_OVER`` says.

    >>> over(np.array([[0, 0, 255, 128]], np.uint8), np.array([[255, 0, 0, 128]], np.uint8))
    array([[ 85,   0, 170, 192]], dtype=uint8)
    """
    top = int(np.iinfo(source.dtype).max)  # opaque: 255 or 65535
    wide = np.int32 if top == 255 else np.int64  # colour * weight: up to 2 * top**3
    alpha, alpha_below = source[..., 3:].astype(wide), below[..., 3:].astype(wide)
    weight, weight_below = alpha * top, (top - alpha) * alpha_below
    total = weight + weight_below  # the result's alpha, times top
    colour = source[..., :3] * weight + below[..., :3] * weight_below
    colour = (colour + total // 2) // np.maximum(total, 1)
    return np.concatenate([colour, (total + top // 2) // top], axis=-1).astype(source.dtype)
