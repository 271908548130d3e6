"""Inputs and outputs on object storage (``s3://``, ``gs://``, ``memory://`` ...) through fsspec.

fsspec and its backends are imported when a URL is met, never before; a
missing one is a one-line :class:`convcli.errors.MissingExtra` naming the extra to
install. ``file://`` URLs are local paths (:func:`local_path`), written with
the local atomic rename. Credentials and endpoints come from the usual
environment (``AWS_*``, ``FSSPEC_S3_ENDPOINT_URL`` ...) and ``--storage-option``.

On object storage an object appears whole or not at all: each output is
written to a local staging folder first, then uploaded in one put
(:func:`upload`).

A failure of the store itself, rather than of one object (no credentials,
an endpoint that refuses connections or does not answer, options it does
not take, access denied), is a :class:`StoreError` with one line for the
user; a run stops at the first. On ``s3://`` the waits are bounded: unless
the options or the environment say otherwise, botocore tries a request 3
times (``standard`` retry mode) and gives up connecting after 5 s, reading
after 15 s (:data:`S3_CONFIG`).

A request stopped by Ctrl-C is cancelled where it runs, in fsspec's event
loop, and waited for (:data:`CANCEL_SECONDS` at most) before the interrupt
goes on: fsspec's own calls left it running, and an upload then finished
after the run had counted it out, an object in no manifest (:func:`_request`).
The requests of a stopped run's cleanup take a `timeout`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import re
import sys
import threading
import time

from ..errors import MissingExtra
from .formats import is_store_name

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")

# The package to install for each protocol, and the extra that brings it.
_BACKENDS = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
}


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
    return path[len("file://") :] if protocol(path) == "file" else path


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
_SECRET_NAME = (
    r"[\w.-]*(?:key|secret|token|passw(?:or)?d|pwd|credential|signature|auth)[\w.-]*"
    r"|sig"
)
_SECRET_PAIR = re.compile(rf"(?i)(?<![\w.-])({_SECRET_NAME})(\s*=\s*)([^\s&;,'\"]*)")
_SECRET_WHOLE = re.compile(rf"(?is)^(-[\w-]*=)?\s*({_SECRET_NAME})(\s*=).*$")
_SECRET_ITEM = re.compile(rf"""(?i)(["'])({_SECRET_NAME})\1(\s*:\s*)(["'])(?:(?!\4).)*\4""")
_URL_USER = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s@'\"]*)@")

REDACTED = "***"

# Secrets found in the command's own arguments (remember_secrets): hidden wherever they
# are quoted later, also in pieces, by a library's message ("Invalid bucket name 'KEY:...'").
_KNOWN_SECRETS: set[str] = set()
_SHORTEST_SECRET = 4  # shorter parts of a URL's user (a name such as "me") are not hunted
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def remember_secrets(arguments) -> None:
    """The secrets in the command's `arguments`, for :func:`redact` to hide anywhere.

    They are a URL's user and password (``s3://KEY:SECRET@bucket``) and the
    values of options whose names say they are secret. They replace those of
    an earlier call (one command's run at a time).
    """
    _KNOWN_SECRETS.clear()
    for text in map(str, arguments):
        for url in _URL_USER.finditer(text):
            _KNOWN_SECRETS.update(url.group(2).split(":") + [url.group(2)])
        whole = _SECRET_WHOLE.match(text)
        if whole:
            _KNOWN_SECRETS.add(text[whole.end(3) :].strip())
        _KNOWN_SECRETS.update(match.group(3) for match in _SECRET_PAIR.finditer(text))
    _KNOWN_SECRETS.difference_update({s for s in _KNOWN_SECRETS if len(s) < _SHORTEST_SECRET})


def for_terminal(text: str) -> str:
    """`text` as a line for the terminal: :func:`redact`, and control characters escaped.

    A file name holding ESC, CR or a newline would otherwise move the cursor,
    recolour the terminal or forge a line of its own; they are shown as
    ``\\x1b``, ``\\r`` and ``\\n`` (as git quotes such names).

    >>> for_terminal("a\\nFAKE.png: cannot decode")
    'a\\\\nFAKE.png: cannot decode'
    """
    text = redact(text)
    return _CONTROL.sub(lambda m: _CONTROL_NAMES.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


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
    for secret in sorted(_KNOWN_SECRETS, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    whole = _SECRET_WHOLE.match(text)
    if whole and "\n" not in text:  # one argument: the value is all the rest, spaces too
        return f"{whole.group(1) or ''}{whole.group(2)}{whole.group(3)}{REDACTED}"
    text = _URL_USER.sub(rf"\1{REDACTED}@", text)
    text = _SECRET_ITEM.sub(rf"\1\2\1\3\4{REDACTED}\4", text)
    return _SECRET_PAIR.sub(rf"\1\2{REDACTED}", text)


S3_CONFIG = {
    "connect_timeout": 5,
    "read_timeout": 15,
    "retries": {"total_max_attempts": 3, "mode": "standard"},
}
"""botocore's settings for ``s3://`` where ``--storage-option config_kwargs`` does not give them.

(botocore's own default, 5 tries in ``legacy`` mode, made each of 40 files
wait 2 to 4 s for an endpoint that refused connections.) ``retries`` is left
to botocore where ``AWS_MAX_ATTEMPTS`` or ``AWS_RETRY_MODE`` is set. s3fs
adds no tries of its own (:func:`_bound_waits`): an endpoint that does not
answer fails a request after 3 x 15 s.
"""


class StoreError(OSError):
    """The store failed, not one object: unreachable, no credentials, bad options, access denied.

    ``filename`` is the URL of the request that failed, ``strerror`` the
    reason, in one line. The run stops at the first (the other files would
    fail the same way, each after its own wait).
    """

    def __init__(self, url: str, reason: str):
        super().__init__(errno.EIO, reason, url)

    def __reduce__(self):  # through a process pool: the same arguments
        return type(self), (self.filename, self.strerror)


def _with_bounded_waits(name: str, options: dict | None) -> dict:
    """`options` with :data:`S3_CONFIG` under the ``config_kwargs`` given, for ``s3://``."""
    options = dict(options or {})
    if name not in ("s3", "s3a"):
        return options
    given = options.get("config_kwargs")
    config = dict(S3_CONFIG)
    if os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE"):
        del config["retries"]
    if isinstance(given, dict):
        config.update(given)
    elif given is not None:  # not a dict: s3fs says what is wrong with it
        return options
    options["config_kwargs"] = config
    return options


@contextlib.contextmanager
def store_errors(url: str, *, one_object: bool = False):
    """Raise a :class:`StoreError` for a failure of the store met in the block.

    A missing object (FileNotFoundError) and other errors of one object are
    left as they are; with `one_object` (reading one input), so is access
    denied: a bucket may hold objects that these credentials cannot read.
    """
    try:
        yield
    except StoreError:
        raise
    except FileNotFoundError as exc:
        if not _no_such_bucket(exc):
            raise
        bucket = url.split("://", 1)[-1].split("/", 1)[0]
        raise StoreError(url, f"the bucket {bucket!r} does not exist") from None
    except PermissionError:
        if one_object:
            raise
        raise StoreError(url, store_failure(sys.exc_info()[1])) from None
    except Exception as exc:  # noqa: BLE001 - sorted: the store's failures, or re-raised
        reason = store_failure(exc)
        if reason is None:
            raise
        raise StoreError(url, reason) from None


def _no_such_bucket(exc: BaseException) -> bool:
    """Whether s3fs' FileNotFoundError `exc` was raised from a NoSuchBucket answer (its cause)."""
    for _ in range(8):  # the chain of causes, not followed for ever
        error = getattr(exc, "response", None)
        if isinstance(error, dict) and error.get("Error", {}).get("Code") == "NoSuchBucket":
            return True
        exc = getattr(exc, "__cause__", None)
    return False


_UNKNOWN_KEYWORD = re.compile(r"unexpected keyword argument '([^']+)'")


def store_failure(exc: BaseException) -> str | None:
    """One line for a failure of the store itself from `exc`, or None for an object's own error.

    >>> store_failure(TypeError("AioSession.__init__() got an unexpected keyword argument 'foo'"))
    "the store does not take the option 'foo' (--storage-option)"
    >>> store_failure(PermissionError(13, "Access Denied")), store_failure(FileNotFoundError())
    ('access denied: Access Denied', None)
    """
    if isinstance(exc, PermissionError):  # s3fs: 403 AccessDenied, a bad key or signature
        return f"access denied: {exc.strerror or exc}"
    unknown = _UNKNOWN_KEYWORD.search(str(exc)) if isinstance(exc, TypeError) else None
    if unknown:  # an option that the backend's session does not take
        return f"the store does not take the option {unknown.group(1)!r} (--storage-option)"
    if isinstance(exc, ValueError) and "endpoint" in str(exc).lower():
        return f"{exc} (endpoint_url must be a URL such as http://127.0.0.1:9000)"
    if isinstance(exc, (TypeError, ValueError, AttributeError, LookupError)):
        # Raised inside fsspec and its backend: an option's value of the wrong kind
        # (config_kwargs=5, client_kwargs={"region_name": 5}).
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        return f"the storage options do not work ({detail}; see --storage-option)"
    module = type(exc).__module__.split(".")[0]
    if module == "botocore" or module == "aiohttp" or isinstance(exc, TimeoutError):
        return _network_failure(exc)
    return None


def _network_failure(exc: BaseException) -> str:
    """The reason of a botocore or aiohttp error (credentials, connection, timeout, HTTP status)."""
    name = type(exc).__name__
    endpoint = getattr(exc, "kwargs", {}).get("endpoint_url")
    if endpoint:
        endpoint = re.sub(r"^([a-z][a-z0-9+.-]*://[^/]*).*$", r"\1", str(endpoint))
    if "Credential" in name:
        return (
            f"{exc} (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, use a profile, or "
            "give --storage-option key and secret)"
        )
    if name == "EndpointConnectionError" or name.startswith("ClientConnector"):
        return f"cannot connect to {endpoint or getattr(exc, 'host', 'the endpoint')}"
    if "Timeout" in name or isinstance(exc, TimeoutError):
        return f"no answer from {endpoint or 'the endpoint'} in time ({name})"
    status = getattr(exc, "status", None)
    if status is not None:  # aiohttp: an HTTP error status
        return f"HTTP {status} {getattr(exc, 'message', '')}".rstrip()
    return " ".join(f"{exc}".split()) or name


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
        raise MissingExtra(
            f"{url}: {name}:// needs fsspec and a package for {name}://, "
            "which no convcli extra installs",
            None,
        ) from None
    try:
        fsspec.get_filesystem_class(name)
        with store_errors(url):  # options of the wrong kind
            fs, path = fsspec.core.url_to_fs(url, **_with_bounded_waits(name, options))
    except ImportError:
        if extra:
            raise MissingExtra(f"{url}: {name}:// needs {package}", extra) from None
        raise MissingExtra(f"{url}: {name}:// {_unknown_backend(name)}", None) from None
    except ValueError as exc:  # an unknown protocol
        raise MissingExtra(f"{url}: {exc}", None) from None
    _bound_waits(fs, name)
    return fs, path


def _bound_waits(fs, name: str) -> None:
    """No retries by s3fs on top of botocore's (see :data:`S3_CONFIG`); quiet orphaned tasks.

    s3fs tried each request 5 times, each of botocore's 3 tries waiting 15 s
    for an endpoint that accepted connections but did not answer: 4 minutes
    for one listing. When a connection is cut in the middle of a request,
    aiohttp leaves a task whose error asyncio prints with a traceback ("Task
    exception was never retrieved"); the request itself fails as it should.
    """
    if name in ("s3", "s3a") and isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1
    loop = getattr(fs, "loop", None)
    if loop is not None and loop.get_exception_handler() is None:
        loop.set_exception_handler(_orphaned_task_error)


def _orphaned_task_error(loop, context: dict) -> None:
    """asyncio's handler for errors nobody awaited: a connection's error is dropped."""
    exc = context.get("exception")
    if isinstance(exc, (ConnectionError, TimeoutError)) or type(exc).__module__.startswith(
        "aiohttp"
    ):
        return
    loop.default_exception_handler(context)


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


CANCEL_SECONDS = 2.0
"""How long a request stopped by Ctrl-C has to end once cancelled; a second Ctrl-C stops waiting."""


def _request(fs, name: str, *args, timeout: float | None = None, done=None):
    """``fs.name(*args)``, its coroutine run in the loop of an async file system (s3fs ...).

    A KeyboardInterrupt (or `timeout` seconds, a TimeoutError) cancels the
    request and waits up to :data:`CANCEL_SECONDS` for it to end, then goes
    on. `done` is called once the request has finished, also where it
    finished as it was stopped. Other file systems are called as they are.
    """
    loop = getattr(fs, "loop", None)
    if not getattr(fs, "async_impl", False) or loop is None or getattr(fs, "asynchronous", False):
        result = getattr(fs, name)(*args)
    else:
        result = _in_loop(loop, getattr(fs, "_" + name), args, timeout, done)
    if done is not None:
        done()
    return result


def _in_loop(loop, method, args: tuple, timeout: float | None, done):
    """:func:`_request` in the event loop `loop`. The task is made there, so a Ctrl-C
    that comes while it is handed over either finds it or stops it before it starts."""
    import concurrent.futures

    future, ended, state = concurrent.futures.Future(), threading.Event(), {}

    async def watched():
        try:
            future.set_result(await method(*args))
        except Exception as exc:  # noqa: BLE001 - raised where the result is asked for
            future.set_exception(exc)
        finally:
            ended.set()

    def start():
        if not state.get("stopped"):
            state["task"] = loop.create_task(watched())

    def stop():
        state["stopped"] = True
        if "task" in state:
            state["task"].cancel()
        else:
            ended.set()

    try:
        loop.call_soon_threadsafe(start)
        return _result(future, timeout)
    except (KeyboardInterrupt, TimeoutError):
        if not future.done():
            loop.call_soon_threadsafe(stop)
            ended.wait(CANCEL_SECONDS)  # a second Ctrl-C stops waiting
        if (
            future.done()
            and not future.cancelled()
            and future.exception() is None
            and done is not None
        ):
            done()
        raise


def _result(future, timeout: float | None):
    """The result of `future`, waited for in slices of a second (a Ctrl-C is seen within
    one, as in fsspec's own wait); TimeoutError after `timeout` seconds, if given."""
    import concurrent.futures

    deadline = None if timeout is None else time.monotonic() + timeout
    while not future.done():
        left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError(f"no answer in {timeout:g} s")
        concurrent.futures.wait([future], timeout=left)
    return future.result()


def list_names(folder: str, options: dict | None = None) -> set[str]:
    """The names of the objects directly in `folder`, and of the Zarr stores (prefixes named
    ``*.zarr``) there (one listing request); empty if none."""
    fs, path = filesystem(folder, options)
    try:
        with store_errors(folder):
            entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return set()
    return {
        basename(e["name"].rstrip("/"))
        for e in entries
        if e.get("type") != "directory" or is_store_name(e["name"])
    }


def remove_tree(
    url: str, options: dict | None = None, *, timeout: float | None = None, keep: str | None = None
) -> None:
    """Remove every object under the prefix `url` (none there: nothing to do), but the object
    named `keep` right under it, if given; `timeout` seconds at most a request, if given
    (a TimeoutError)."""
    fs, path = filesystem(url, options)
    try:
        if keep is None:
            _request(fs, "rm", path, True, timeout=timeout)
            return
        spared = posixpath.join(path.rstrip("/"), keep).lstrip("/")
        found = [p for p in _request(fs, "find", path, timeout=timeout) if p.lstrip("/") != spared]
        if found:
            _request(fs, "rm", found, timeout=timeout)
    except FileNotFoundError:
        pass


def download(url: str, local: str, options: dict | None = None) -> None:
    """Copy the object `url` to the local file `local`."""
    fs, path = filesystem(url, options)
    with store_errors(url, one_object=True):
        _request(fs, "get_file", path, local)


def read_bytes(url: str, options: dict | None = None, *, timeout: float | None = None) -> bytes:
    """The bytes of the object `url`; `timeout` seconds at most, if given."""
    fs, path = filesystem(url, options)
    with store_errors(url, one_object=True):
        return _request(fs, "cat_file", path, timeout=timeout)


def write_bytes(url: str, data: bytes, options: dict | None = None) -> None:
    """Write the object `url` holding `data`, in one put."""
    fs, path = filesystem(url, options)
    with store_errors(url):
        _request(fs, "pipe_file", path, data)


def remove_object(url: str, options: dict | None = None) -> None:
    """Remove the object `url` (none there: nothing to do)."""
    fs, path = filesystem(url, options)
    try:
        _request(fs, "rm_file", path)
    except FileNotFoundError:
        pass


def upload(local: str, url: str, options: dict | None = None, *, done=None) -> None:
    """Copy the local file `local` to the object `url`, in one put (a whole object or none).

    `done` is called once the object is whole, also where Ctrl-C came as
    the put finished: the caller then counts it as written.
    """
    fs, path = filesystem(url, options)
    with store_errors(url):
        _request(fs, "put_file", local, path, done=done)


def walk_visible(top: str, *, recursive: bool, options: dict | None = None):
    """Yield ``(relative folder, [file names])`` for the folder `top` and, if `recursive`, below it.

    Names are sorted; hidden names (starting with ``.``) and hidden folders are
    passed over, as on disk. Zarr stores (folders named ``*.zarr``) are among
    the files, and not walked. A `top` that is an object rather than a folder
    yields nothing; :func:`is_folder` tells them apart.
    """
    fs, root = filesystem(top, options)
    root = root.rstrip("/")
    with store_errors(top):
        yield from _walk(fs, root, recursive)


def _walk(fs, root: str, recursive: bool):
    """:func:`walk_visible` in the file system `fs`."""
    for folder, dirs, files in fs.walk(root, maxdepth=None if recursive else 1):
        stores = [d for d in dirs if is_store_name(d)]  # images, not walked
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in stores)
        rel = folder.rstrip("/")[len(root) :].strip("/") or "."
        if any(part.startswith(".") for part in rel.split("/") if part != "."):
            continue
        yield rel, sorted(n for n in [*files, *stores] if not n.startswith("."))
        # Listings are cached by the file system object: a bucket of millions would stay in memory.
        fs.invalidate_cache(folder)


def is_folder(url: str, options: dict | None = None) -> bool:
    fs, path = filesystem(url, options)
    try:
        with store_errors(url):
            return bool(fs.isdir(path))
    except FileNotFoundError:
        return False
