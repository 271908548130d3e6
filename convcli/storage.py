"""Inputs and outputs on object storage (``s3://``, ``gs://``, ``memory://`` ...) through fsspec.

fsspec and its backends are imported when a URL is met, never before; a
missing one is a one-line :class:`convcli.errors.MissingExtra` naming the extra to
install. ``file://`` URLs are local paths (:func:`local_path`), written with
the local atomic rename. Credentials and endpoints come from the usual
environment (``AWS_*``, ``FSSPEC_S3_ENDPOINT_URL`` ...) and ``--storage-option``.

On object storage an object appears whole or not at all: each output is
written to a local staging folder first, then uploaded in one put
(:func:`upload`).
"""

from __future__ import annotations

import json
import re

from .errors import MissingExtra

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")

# The package to install for each protocol, and the extra that brings it.
_BACKENDS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"),
             "gcs": ("gcsfs", "gcs")}


def protocol(path) -> str | None:
    """The protocol of a URL (``"s3"``), or None for a local path.

    >>> protocol("s3://bucket/photos"), protocol("photos/a.png"), protocol("C:/x")
    ('s3', None, None)
    """
    match = _URL.match(str(path))
    return match.group(1).lower() if match else None


def is_url(path) -> bool:
    """Whether `path` is a URL other than ``file://`` (which is a local path)."""
    return protocol(path) not in (None, "file")


def local_path(path: str) -> str:
    """`path` with a ``file://`` prefix removed; other paths unchanged.

    >>> local_path("file:///data/photos"), local_path("s3://b/k")
    ('/data/photos', 's3://b/k')
    """
    return path[len("file://"):] if protocol(path) == "file" else path


def parse_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` from ``--storage-option``; JSON values (true, 3, {...}) are decoded.

    >>> parse_option("anon=true"), parse_option("endpoint_url=http://127.0.0.1:9000")
    (('anon', True), ('endpoint_url', 'http://127.0.0.1:9000'))
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        # The text is not echoed: it may be a secret given without its name.
        raise ValueError("expected a name, '=' and a value")
    try:
        decoded = json.loads(value)
    except ValueError:
        decoded = value
    return key.strip(), decoded


# Option and parameter names whose values are secrets (fsspec, s3fs, gcsfs, adlfs, presigned URLs).
_SECRET_NAME = (r"[\w.-]*(?:key|secret|token|passw(?:or)?d|pwd|credential|signature|auth)[\w.-]*"
                r"|sig")
_SECRET_PAIR = re.compile(rf"(?i)(?<![\w.-])({_SECRET_NAME})(\s*=\s*)([^\s&;,'\"]*)")
_SECRET_WHOLE = re.compile(rf"(?is)^(-[\w-]*=)?\s*({_SECRET_NAME})(\s*=).*$")
_SECRET_ITEM = re.compile(rf"""(?i)(["'])({_SECRET_NAME})\1(\s*:\s*)(["'])(?:(?!\4).)*\4""")
_URL_USER = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]*@")

REDACTED = "***"


def redact(text: str) -> str:
    """`text` with its secrets replaced by ``***``, for a manifest, a message or a log.

    Hidden are the values of options whose names say they are secret
    (``key``, ``secret``, ``token``, ``password``, ``aws_session_token`` ...)
    as ``NAME=VALUE`` (a whole ``--storage-option`` argument, or in a URL's
    query) or as a JSON or Python dict item, and the user and password in a
    URL. Everything else is kept.

    >>> redact("--storage-option secret=abc anon=true")
    '--storage-option secret=*** anon=true'
    >>> redact("s3://AKIA:pw@bucket/a.png: not found")
    's3://***@bucket/a.png: not found'
    >>> redact('client_kwargs={"aws_session_token": "x y"}')
    'client_kwargs={"aws_session_token": "***"}'
    """
    text = str(text)
    whole = _SECRET_WHOLE.match(text)
    if whole and "\n" not in text:  # one argument: the value is all the rest, spaces too
        return f"{whole.group(1) or ''}{whole.group(2)}{whole.group(3)}{REDACTED}"
    text = _URL_USER.sub(rf"\1{REDACTED}@", text)
    text = _SECRET_ITEM.sub(rf"\1\2\1\3\4{REDACTED}\4", text)
    return _SECRET_PAIR.sub(rf"\1\2{REDACTED}", text)


def filesystem(url: str, options: dict | None = None):
    """``(fs, path)`` for `url`: the fsspec file system and the path within it.

    Raises
    ------
    MissingExtra
        fsspec or the protocol's backend is not installed, or fsspec does not
        know the protocol.
    """
    name = protocol(url) or "file"
    package, extra = _BACKENDS.get(name, ("fsspec", None))
    try:
        import fsspec.core
    except ImportError:
        if name in _BACKENDS or name in ("file", "memory"):
            raise MissingExtra(f"{url}: {name}:// needs fsspec", extra or "s3") from None
        raise MissingExtra(f"{url}: {name}:// needs fsspec and a package for {name}://, "
                           "which no convcli extra installs", None) from None
    try:
        return fsspec.core.url_to_fs(url, **(options or {}))
    except ImportError:
        if extra:
            raise MissingExtra(f"{url}: {name}:// needs {package}", extra) from None
        raise MissingExtra(f"{url}: {name}:// {_unknown_backend(name)}", None) from None
    except ValueError as exc:  # an unknown protocol
        raise MissingExtra(f"{url}: {exc}", None) from None


def _unknown_backend(name: str) -> str:
    """What the protocol `name`, which no convcli extra installs, needs; fsspec's own hint.

    >>> _unknown_backend("hdfs")
    'needs a package that no convcli extra installs (fsspec: pyarrow and local java libraries required for HDFS)'
    """  # noqa: E501
    from fsspec.registry import known_implementations

    known = known_implementations.get(name, {})
    package = known.get("class", "fsspec").split(".")[0]
    if package == "fsspec":  # built in, needing another package
        line = "needs a package that no convcli extra installs"
    else:
        line = f"needs {package}, which no convcli extra installs"
    return line + (f" (fsspec: {known['err']})" if known.get("err") else "")


def join(folder: str, *names: str) -> str:
    """A URL folder joined with names by ``/``.

    >>> join("s3://b/out", "sub", "a.png"), join("s3://b/out/", "a.png")
    ('s3://b/out/sub/a.png', 's3://b/out/a.png')
    """
    parts = [folder.rstrip("/"), *(n.strip("/") for n in names if n and n != ".")]
    return "/".join(parts)


def basename(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def dirname(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[0]


def list_names(folder: str, options: dict | None = None) -> set[str]:
    """The names of the objects directly in `folder`, and of the Zarr stores (prefixes named
    ``*.zarr``) there (one listing request); empty if none."""
    fs, path = filesystem(folder, options)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return set()
    return {basename(e["name"].rstrip("/")) for e in entries if e.get("type") != "directory"
            or e["name"].rstrip("/").lower().endswith(".zarr")}


def remove_tree(url: str, options: dict | None = None) -> None:
    """Remove every object under the prefix `url` (none there: nothing to do)."""
    fs, path = filesystem(url, options)
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


def download(url: str, local: str, options: dict | None = None) -> None:
    """Copy the object `url` to the local file `local`."""
    fs, path = filesystem(url, options)
    fs.get_file(path, local)


def upload(local: str, url: str, options: dict | None = None) -> None:
    """Copy the local file `local` to the object `url`, in one put (a whole object or none)."""
    fs, path = filesystem(url, options)
    fs.put_file(local, path)


def walk_visible(top: str, *, recursive: bool, options: dict | None = None):
    """Yield ``(relative folder, [file names])`` for the folder `top` and, if `recursive`, below it.

    Names are sorted; hidden names (starting with ``.``) and hidden folders are
    passed over, as on disk. Zarr stores (folders named ``*.zarr``) are among
    the files, and not walked. A `top` that is an object rather than a folder
    yields nothing; :func:`is_folder` tells them apart.
    """
    from .zarr_stores import is_store_name

    fs, root = filesystem(top, options)
    root = root.rstrip("/")
    for folder, dirs, files in fs.walk(root, maxdepth=None if recursive else 1):
        stores = [d for d in dirs if is_store_name(d)]  # images, not walked
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in stores)
        rel = folder.rstrip("/")[len(root):].strip("/") or "."
        if any(part.startswith(".") for part in rel.split("/") if part != "."):
            continue
        yield rel, sorted(n for n in [*files, *stores] if not n.startswith("."))
        # Listings are cached by the file system object: a bucket of millions would stay in memory.
        fs.invalidate_cache(folder)


def is_folder(url: str, options: dict | None = None) -> bool:
    fs, path = filesystem(url, options)
    try:
        return bool(fs.isdir(path))
    except FileNotFoundError:
        return False


def makedirs(url: str, options: dict | None = None) -> None:
    fs, path = filesystem(url, options)
    fs.makedirs(path, exist_ok=True)
