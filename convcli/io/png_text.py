"""A PNG's text chunks (``tEXt``, ``zTXt``, ``iTXt``: a title, an author, a copyright, a
comment, a generator's parameters), as PNG outputs keep them.

They are read from Pillow's image and written again as chunks: Latin-1 text as ``tEXt``,
other text as ``iTXt`` (UTF-8), an ``iTXt``'s language and translated keyword kept, and
text of :data:`COMPRESSED_FROM` bytes or more compressed (``zTXt``, or a compressed ``iTXt``).
Not kept: the keywords convcli writes itself (``Software``, the XMP packet's, the IPTC
raw profile's), ImageMagick's other raw profiles (``Raw profile type exif``, ...) and its
properties (``exif:PixelXDimension``, ``date:create``, ...): copies of an EXIF or a
profile that the pixels written would no longer match (an EXIF's orientation, its size),
and the dates of the file read.
"""

from __future__ import annotations

import zlib

from .iptc import PNG_IPTC_KEYWORD

WRITTEN_BY_CONVCLI = ("Software", "XML:com.adobe.xmp", PNG_IPTC_KEYWORD)
"""The keywords whose text convcli writes from what it reads (its marker, XMP, IPTC)."""
RAW_PROFILE = "Raw profile type "
"""The start of ImageMagick's keywords for a profile's bytes in hex."""
MAGICK_PROPERTIES = ("date", "exif", "tiff", "xmp", "icc", "iptc", "8bim", "jpeg", "png")
"""The namespaces of ImageMagick's properties that it writes as PNG text (``date:create``,
``exif:PixelXDimension``, ``tiff:XResolution``): the file's dates and copies of its
metadata, which the pixels written would no longer match."""
COMPRESSED_FROM = 1024
"""Text of this many bytes or more is written compressed."""
TIFF_TAGS = {"Description": 270, "Author": 315, "Copyright": 33432}
"""The keywords whose text a TIFF holds in a tag of its own, as exiftool maps them
(ImageDescription, Artist, Copyright)."""


def pillow_text(im) -> tuple[tuple[tuple[bytes, bytes], ...] | None, tuple[str, ...]]:
    """The text chunks that PNGs of the Pillow image `im` keep (None for none), and what they
    do not keep, said as ``PNG text (Raw profile type exif)``: () for other formats."""
    if im.format != "PNG":
        return None, ()
    # An animation's text before its frames: Pillow's `text` would decode every frame first.
    animated = getattr(im, "is_animated", False)
    chunks, unkept = text_chunks(im.info if animated else getattr(im, "text", {}))
    return chunks, (f"PNG text ({', '.join(unkept)})",) if unkept else ()


def text_chunks(texts: dict) -> tuple[tuple[tuple[bytes, bytes], ...] | None, tuple[str, ...]]:
    """The chunks (kind, data) that keep a PNG's `texts` (Pillow's ``text``: keyword ->
    ``str``, or ``PngImagePlugin.iTXt`` with its ``lang`` and ``tkey``), None for none; and
    the keywords not kept, other than those convcli writes itself.

    >>> chunks, unkept = text_chunks({"Author": "Jane", "Raw profile type exif": "..."})
    >>> chunks, unkept
    (((b'tEXt', b'Author\\x00Jane'),), ('Raw profile type exif',))
    """
    chunks, unkept = [], []
    for keyword, value in texts.items():
        if not isinstance(keyword, str) or not isinstance(value, str):
            continue
        if keyword in WRITTEN_BY_CONVCLI:
            continue
        namespace = keyword.partition(":")[0] if ":" in keyword else None
        if namespace in MAGICK_PROPERTIES:
            said = f"{namespace}:*"  # said once for all of its namespace
            unkept += [said] if said not in unkept else []
            continue
        chunk = None if keyword.startswith(RAW_PROFILE) else _chunk(keyword, value)
        if chunk is None:
            unkept.append(keyword)
        else:
            chunks.append(chunk)
    return tuple(chunks) or None, tuple(unkept)


def _chunk(keyword: str, value: str) -> tuple[bytes, bytes] | None:
    """One text chunk (kind, data) for `value` under `keyword`; None where the keyword is no
    PNG keyword (1 to 79 printable Latin-1 characters, no spaces at its ends)."""
    try:
        key = keyword.encode("latin-1")
    except UnicodeEncodeError:
        return None
    printable = all(32 <= c <= 126 or c >= 161 for c in key)  # PNG's keyword characters
    if not 1 <= len(key) <= 79 or not printable or key != key.strip(b" "):
        return None
    lang, tkey = getattr(value, "lang", None), getattr(value, "tkey", None)
    if lang is None and tkey is None:
        try:
            latin = value.encode("latin-1")
        except UnicodeEncodeError:
            latin = None
        if latin is not None:
            if len(latin) < COMPRESSED_FROM:
                return b"tEXt", key + b"\0" + latin
            return b"zTXt", key + b"\0\0" + zlib.compress(latin)
    text = str(value).encode("utf-8")
    compressed = len(text) >= COMPRESSED_FROM
    head = key + b"\0" + bytes([compressed, 0])
    head += (lang or "").encode("ascii", "ignore") + b"\0" + (tkey or "").encode("utf-8") + b"\0"
    return b"iTXt", head + (zlib.compress(text) if compressed else text)


def comment_chunks(comments: tuple[bytes, ...]) -> tuple[tuple[bytes, bytes], ...]:
    """``Comment`` text chunks for a JPEG's `comments`, as exiftool and ImageMagick carry a
    JPEG's comment to a PNG: UTF-8 where the bytes are, else Latin-1.

    >>> comment_chunks((b"Caf\\xc3\\xa9", b"\\xe2\\x9c\\x93"))[0]
    (b'tEXt', b'Comment\\x00Caf\\xe9')
    >>> comment_chunks((b"Caf\\xc3\\xa9", b"\\xe2\\x9c\\x93"))[1]
    (b'iTXt', b'Comment\\x00\\x00\\x00\\x00\\x00\\xe2\\x9c\\x93')
    """
    chunks = []
    for comment in comments:
        try:
            text = comment.decode("utf-8")
        except UnicodeDecodeError:
            text = comment.decode("latin-1")
        chunks.append(_chunk("Comment", text))
    return tuple(chunks)


def keywords(chunks) -> list[str]:
    """The keywords of text `chunks` (kind, data), in order."""
    return [data.split(b"\0", 1)[0].decode("latin-1") for _, data in chunks or ()]


def tiff_tags(chunks) -> dict[int, bytes]:
    """The TIFF tags (code -> UTF-8 text) that hold the text of `chunks` (kind, data, as
    :func:`text_chunks` makes them) under the keywords of :data:`TIFF_TAGS`.

    >>> tiff_tags(((b"tEXt", b"Author\\0Jos\\xe9"), (b"tEXt", b"Title\\0Dawn")))
    {315: b'Jos\\xc3\\xa9'}
    """
    found = {}
    for kind, data in chunks or ():
        keyword, _, rest = data.partition(b"\0")
        code = TIFF_TAGS.get(keyword.decode("latin-1"))
        if code is None:
            continue
        if kind == b"tEXt":
            text = rest.decode("latin-1")
        elif kind == b"zTXt":  # a compression method, then the text deflated
            text = zlib.decompress(rest[1:]).decode("latin-1")
        else:  # iTXt: compressed or not, a method, a language and a translated keyword
            body = rest[2:].split(b"\0", 2)[2]
            text = (zlib.decompress(body) if rest[0] else body).decode("utf-8")
        if text.strip() and "\0" not in text:  # a TIFF's text ends at its first NUL
            found[code] = text.encode("utf-8")
    return found
