"""Writing output files safely: whole files or nothing, never a silent replace.

Also how paths are compared, so that no output is ever written over an input.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from .ownership import named_output, refusal

TEMP_PREFIX = ".convcli-"
TEMP_SUFFIX = ".part"


def make_output_folder(folder: str, root: str = "") -> None:
    """Create the output folder `folder` and its parents, never through a symbolic link.

    Each folder from `root` (the run's ``-o`` folder, itself taken as it
    is) down to `folder` that exists must be a real folder: a link there
    (``out/sub -> /elsewhere``) would send outputs and a manifest out of the
    output tree, and is refused with an OSError naming it.
    """
    if root:
        path = root
        for part in Path(os.path.relpath(folder, root)).parts:
            path = os.path.join(path, part)
            if part not in (".", "..") and os.path.islink(path):
                raise OSError(
                    errno.ELOOP,
                    "a symbolic link inside the output folder: convcli never writes through one",
                    path,
                )
    Path(folder).mkdir(parents=True, exist_ok=True)


def resolved(path) -> str:
    """`path` made absolute with its symbolic links followed as far as they go.

    Never raises for a path that cannot be resolved: a symbolic link that
    points to itself, or round a loop (which :meth:`pathlib.Path.resolve`
    reports with ``RuntimeError`` before Python 3.13), a missing file or a
    folder that cannot be read is left as far as it was resolved, so that the
    file itself fails later, on its own line, when it is opened.
    """
    try:
        return os.path.realpath(path)
    except (OSError, RuntimeError, ValueError):
        return os.path.abspath(path)


def path_key(path) -> str:
    """A path compared the way a case-insensitive file system would: resolved, case folded.

    Two inputs with the same key are one file; an output whose key is an
    input's would replace it.
    """
    return os.path.normcase(resolved(path)).casefold()


def path_order(path) -> tuple[str, str]:
    """Sorts paths by their resolved full path ignoring case, then with case."""
    return path_key(path), resolved(path)


DEFAULT_NAME_MAX = 255
"""Bytes in a file name where the file system does not say (``PC_NAME_MAX``)."""


def name_max(folder) -> int:
    """The longest file name, in bytes, that the file system of `folder` takes."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (AttributeError, ValueError, OSError):
        return DEFAULT_NAME_MAX


def random_hex(nbytes: int) -> str:
    """`nbytes` random bytes from the operating system, in hex: ``secrets.token_hex``'s
    value without importing secrets (its hmac and OpenSSL take about 4 ms to load).

    >>> token = random_hex(4)
    >>> len(token), set(token) <= set("0123456789abcdef")
    (8, True)
    """
    return os.urandom(nbytes).hex()


def temp_path_for(path: Path) -> Path:
    """A fresh hidden temporary name beside `path`.

    ``.convcli-<name>.<pid>-<random>.part``: easy to recognise, and tied to
    the process writing it, so that :func:`remove_temporaries` can clean up
    after a process that was stopped by force. Where that would be longer than
    the file system's limit (:func:`name_max`), ``<name>`` is cut short: the
    prefix, the ``.<pid>-<random>`` and the suffix are always kept.
    """
    token = f".{os.getpid()}-{random_hex(4)}{TEMP_SUFFIX}"
    room = name_max(path.parent if str(path.parent) else ".") - len(
        os.fsencode(TEMP_PREFIX + token)
    )
    name = path.name
    while name and len(os.fsencode(name)) > room:
        name = name[:-1]
    return path.with_name(f"{TEMP_PREFIX}{name}{token}")


STORE_MARK = ".zgroup"
"""The file that a folder output (a Zarr store written by convcli) holds at its top."""


def _is_temporary_store(path) -> bool:
    """Whether `path` is a folder output's temporary: a folder (not a link) with a Zarr group."""
    return (
        os.path.isdir(path)
        and not os.path.islink(path)
        and os.path.isfile(os.path.join(path, STORE_MARK))
    )


def _remove_temporary(path) -> None:
    """Remove a temporary file, or a temporary folder output with all it holds."""
    if _is_temporary_store(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        os.unlink(path)


def remove_temporaries(folder, pids) -> None:
    """Remove the temporary files (and folder outputs) that processes `pids` left in `folder`."""
    folder = Path(folder)
    for pid in pids:
        for leftover in folder.glob(f"{TEMP_PREFIX}*.{pid}-*{TEMP_SUFFIX}"):
            try:
                _remove_temporary(leftover)
            except OSError:
                pass


# How old a temporary file of a process that is gone must be before it is removed.
STALE_SECONDS = 60.0


def remove_stale_temporaries(folder, *, min_age: float = STALE_SECONDS) -> int:
    """Remove the temporary files that killed writers left in `folder`; return how many.

    Only convcli's own temporaries (``.convcli-...<pid>-<hex>.part``: regular
    files, and folders holding a Zarr group, a folder output's, changed when
    any folder in it last was) are considered, and one is removed only if it was last changed
    more than `min_age` seconds ago and the process that wrote it is gone:
    no process has its id on this machine, or the process that has it now
    started after the file was last changed (the id was reused). A writer
    still at work keeps changing its file, and one on another machine
    sharing the folder keeps it recent, so neither loses it.
    """
    pattern = re.compile(
        re.escape(TEMP_PREFIX) + r".*[.-](\d+)-[0-9a-f]+" + re.escape(TEMP_SUFFIX) + "$", re.DOTALL
    )
    removed = 0
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        match = pattern.match(entry.name)
        if not match:
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                changed = entry.stat(follow_symlinks=False).st_mtime
            elif _is_temporary_store(entry.path):
                changed = _last_change_of_folders(entry.path)
            else:
                continue
            if now - changed <= min_age or _writer_may_live(int(match.group(1)), changed):
                continue
            _remove_temporary(entry.path)
            removed += 1
        except OSError:
            continue
    return removed


STAGING_PREFIX = "convcli-staging-"
"""The start of the name of a staging folder (:func:`staging_folder`), before its process id."""


def staging_folder() -> tempfile.TemporaryDirectory:
    """A new folder in the system's temporary folder, for a file on its way to or from
    object storage; named with this process's id, so that one a killed run left is found
    (:func:`remove_stale_staging`)."""
    return tempfile.TemporaryDirectory(prefix=f"{STAGING_PREFIX}{os.getpid()}-")


def remove_stale_staging(min_age: float = STALE_SECONDS) -> int:
    """Remove the staging folders that killed runs left in the temporary folder; how many.

    As :func:`remove_stale_temporaries`: only convcli's, unchanged for
    `min_age` seconds, of a process that is gone.
    """
    pattern = re.compile(re.escape(STAGING_PREFIX) + r"(\d+)-[^/]+$")
    removed, now = 0, time.time()
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return 0
    for entry in entries:
        match = pattern.match(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            changed = _last_change_of_folders(entry.path)
            if now - changed <= min_age or _writer_may_live(int(match.group(1)), changed):
                continue
            shutil.rmtree(entry.path)
            removed += 1
        except OSError:
            continue
    return removed


def _last_change_of_folders(top: str) -> float:
    """When a file was last added to `top` or a folder below it (folder times only)."""
    newest = os.stat(top).st_mtime
    for folder, _, _ in os.walk(top):
        try:
            newest = max(newest, os.stat(folder).st_mtime)
        except OSError:
            continue
    return newest


def _writer_may_live(pid: int, changed: float) -> bool:
    """Whether process `pid` may be the one that last changed a file at time `changed`."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        pass  # it exists (another user's process) or cannot be asked: keep the file
    started = _process_start_time(pid)
    return started is None or started <= changed + 2  # /proc's boot time is in whole seconds


def _process_start_time(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), where Linux's /proc says."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        ticks = int(stat.rsplit(b")", 1)[1].split()[19])  # field 22: starttime
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def write_atomic(
    path,
    write: Callable[[Path], None],
    *,
    overwrite: bool = False,
    replaceable: Callable[[Path], bool] | None = None,
) -> bool:
    """Write a file through a temporary file in the same folder, then rename it.

    Parameters
    ----------
    path : path-like
        The final file name.
    write : callable
        ``write(temp_path)`` writes the whole content to `temp_path`.
    overwrite : bool
        Replace an existing `path`. Without it an existing file is left as it
        is and nothing is written.
    replaceable : callable, optional
        ``replaceable(path)`` tells whether an existing `path` may be replaced
        with `overwrite` (a file convcli wrote itself); if it says no,
        ``FileExistsError`` is raised and the file is kept.

    Returns
    -------
    bool
        True if `path` was written, False if it existed and was kept.

    Notes
    -----
    A final name longer than the file system takes (:func:`name_max`) raises
    ``OSError`` (``ENAMETOOLONG``) before anything is written.

    Readers never see a half-written file: the content appears under its
    final name in one rename. Without `overwrite`, the final step is a hard
    link, which fails if the name appeared meanwhile (another process), so
    an existing file is never replaced. On any error, or an interrupt, the
    temporary file is removed.
    """
    with atomic_output(path, overwrite=overwrite, replaceable=replaceable) as output:
        if output.temporary is not None:
            write(output.temporary)
    return output.written


def _name_the_output(exc: OSError, temporary: Path, path: Path) -> None:
    """Make `exc`, raised while `path`'s temporary (file or folder) was written, name `path`."""
    for key in ("filename", "filename2"):
        name = getattr(exc, key, None)
        if isinstance(name, str) and name.startswith(str(temporary)):
            setattr(exc, key, str(path) + name[len(str(temporary)) :])


@dataclass
class AtomicOutput:
    """The file an :func:`atomic_output` block writes: under `temporary`, None if kept."""

    path: Path
    temporary: Path | None
    written: bool = False


@contextmanager
def atomic_output(
    path,
    *,
    overwrite: bool = False,
    replaceable: Callable[[Path], bool] | None = None,
    folder: bool = False,
) -> Iterator[AtomicOutput]:
    """:func:`write_atomic` for content written over time: the block writes ``.temporary``.

    The checks come first (an existing file kept without `overwrite`: ``.temporary`` is None,
    nothing is to be written); a block that ends normally gives the temporary file its final
    name (``.written`` says whether it did); one that raises leaves no file behind, and its
    OSError names the output, not the temporary.

    With `folder`, the output is a folder (a Zarr store) that the block makes at ``.temporary``;
    it is renamed into place whole. Replacing an existing one (`overwrite`) takes two renames:
    the old folder is moved aside, the new one put in its place, then the old one removed.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with atomic_output(Path(folder) / "out.txt") as output:
    ...         _ = output.temporary.write_text("rows")
    ...     output.written, (Path(folder) / "out.txt").read_text()
    (True, 'rows')
    """
    path = Path(path)
    if not _may_write(path, overwrite, replaceable, folder):
        yield AtomicOutput(path, None)
        return
    output = AtomicOutput(path, temp_path_for(path))
    try:
        yield output
        move = _move_folder_into_place if folder else _move_into_place
        for check in _PUBLISH_CHECKS:
            check()
        identity = file_identity(output.temporary)  # a rename keeps it
        output.written = move(output.temporary, path, overwrite)
        if output.written:
            _published(path, identity)
    except OSError as exc:  # said of the output, not of its temporary name
        _name_the_output(exc, output.temporary, path)
        raise
    finally:
        if folder:
            shutil.rmtree(output.temporary, ignore_errors=True)
        else:  # never written (a read-only disk): the write's own error is raised
            with suppress(OSError):
                os.unlink(output.temporary)


_PUBLISH_CHECKS: list[Callable[[], None]] = []


@contextmanager
def publishing_checked(check: Callable[[], None]) -> Iterator[None]:
    """Inside the block, ``check()`` is called before every output is put in place
    (:func:`atomic_output`); what it raises (a stop asked for) leaves no output."""
    _PUBLISH_CHECKS.append(check)
    try:
        yield
    finally:
        _PUBLISH_CHECKS.remove(check)


_PUBLISHED: dict[str, tuple[int, ...] | None] = {}
_PUBLISHED_KEPT = 4096  # the identities of the latest outputs, until they are asked for


def file_identity(path) -> tuple[int, ...] | None:
    """What tells the file (or folder) at `path` from one written later under its name:
    its device and inode, and for a file its size and time of change; None if it is gone.

    A rename keeps it, so the identity of a temporary file is that of the output it
    becomes; an output replaced by another run's has another.
    """
    try:
        stat = os.lstat(path)
    except OSError:
        return None
    if os.path.isdir(path):
        return stat.st_dev, stat.st_ino
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _published(path: Path, identity: tuple[int, ...] | None) -> None:
    _PUBLISHED[str(path)] = identity
    while len(_PUBLISHED) > _PUBLISHED_KEPT:
        del _PUBLISHED[next(iter(_PUBLISHED))]


def published_identity(path) -> tuple[int, ...] | None:
    """The :func:`file_identity` that the output `path` had when this process put it in
    place (:func:`atomic_output`), taken once; None where it did not (or it was asked for).

    The manifest records it, so that a line is only appended while the file is still the
    one it describes (:mod:`convcli.app.manifest`).
    """
    return _PUBLISHED.pop(str(path), None)


def check_kept(path, replaceable: Callable[[Path], bool], *, folder: bool = False) -> None:
    """Raise, as :func:`write_atomic` with ``overwrite`` would, where the existing `path` is
    not an output convcli may take as its own (`replaceable`): a file another program
    wrote, a folder where a file goes, a link to nothing."""
    _may_write(Path(path), True, replaceable, folder)


def _may_write(
    path: Path, overwrite: bool, replaceable: Callable[[Path], bool] | None, folder: bool = False
) -> bool:
    """:func:`write_atomic`'s checks before writing: False where an existing `path` is kept.

    Raises OSError where the name is too long or a folder has it (a file, for
    a `folder` output), and FileExistsError where `replaceable` refuses an
    existing file.
    """
    if len(os.fsencode(path.name)) > name_max(path.parent):
        raise OSError(errno.ENAMETOOLONG, "output name too long for the file system", str(path))
    if not folder and path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "a folder has the output's name", str(path))
    there = os.path.lexists(path)  # a symbolic link is there, even one that names nothing
    if folder and there and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file has the output's name", str(path))
    if not overwrite and there:
        return False
    if overwrite and replaceable is not None and there:
        refused = refusal(path, replaceable, *named_output())
        if refused is not None:
            raise refused
    return True


def _move_folder_into_place(tmp: Path, path: Path, overwrite: bool) -> bool:
    """:func:`_move_into_place` for a folder: False where `path` appeared meanwhile.

    Without `overwrite` a rename, which fails on a folder that has files; with
    it, an existing `path` is first renamed aside, and removed once `tmp` has
    its name (put back if that fails).
    """
    if not overwrite or not path.exists():
        if path.exists():
            return False
        try:
            os.rename(tmp, path)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise
        return True
    aside = temp_path_for(path)
    with signals_held():  # a stop request between the renames would lose both folders
        os.rename(path, aside)
        try:
            os.rename(tmp, path)
        except BaseException:
            os.rename(aside, path)
            raise
    shutil.rmtree(aside, ignore_errors=True)
    return True


_HELD_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, name)
)


@contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and the stop-at-once signal wait until the block ends (POSIX).

    For the few steps that must happen together (two renames, a file
    descriptor swapped and restored): the signal is handled when the block
    ends. Elsewhere than POSIX, nothing is held.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _move_into_place(tmp: Path, path: Path, overwrite: bool) -> bool:
    """Give the written `tmp` its final name `path`; False where `path` appeared meanwhile.

    With `overwrite` a rename replaces `path`; without it a hard link, which
    fails if `path` exists (a plain rename after a check where the file
    system has no hard links). `tmp` is left for the caller to remove.
    """
    if overwrite:
        os.replace(tmp, path)
        return True
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError:
        # File systems without hard links: a plain rename after the check.
        if path.exists():
            return False
        os.replace(tmp, path)
    return True
