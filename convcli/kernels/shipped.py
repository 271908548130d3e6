"""The kernels that ship with convcli: listed, and looked up by name or alias.

They are the TOML files of the package ``convcli.kernel_files`` (the project's
``kernels/`` folder), read as :mod:`convcli.kernels.files` reads any kernel file
but more strictly: each needs a name equal to its file's stem and a description,
and names and aliases are unique across the files.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from .files import _parse_toml
from .kernel import Kernel, KernelError

# The package the shipped kernel files are installed as (the project's kernels/ folder).
_PACKAGE = "convcli.kernel_files"


def _build_registry(files: Iterable) -> tuple[tuple[Kernel, ...], dict[str, Kernel]]:
    """Load kernel files (Paths) into a lookup table.

    Each must be a TOML file with a name equal to its stem and a description;
    names and aliases must be unique across the files.
    """
    kernels, lookup, owner = [], {}, {}
    for file in sorted(files, key=lambda f: f.name):
        shown = f"kernels/{file.name}"
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise KernelError(f"{shown}: cannot read the shipped kernel file ({exc})") from None
        stem = file.name.rsplit(".", 1)[0]
        kernel = _parse_toml(text, shown, stem, strict=True)
        if kernel.name != stem:
            raise KernelError(f"{shown}: name {kernel.name!r} differs from the file name")
        for key in (kernel.name, *kernel.aliases):
            if key in lookup:
                raise KernelError(f"{shown}: the name {key!r} is already used by {owner[key]}")
            lookup[key], owner[key] = kernel, shown
        kernels.append(kernel)
    return tuple(sorted(kernels, key=lambda k: k.name)), lookup


def _kernel_folder() -> Path:
    """The folder of the shipped kernel files.

    Found from the package's import spec, not ``importlib.resources`` (15 ms of
    every run's start to load): the files are installed as plain files.
    """
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    # convcli imported straight from a source tree (not installed, or shadowing a
    # non-editable install): there the files are in the project's kernels/ folder.
    folder = Path(__file__).resolve().parents[2] / "kernels"
    if folder.is_dir():
        return folder
    raise ModuleNotFoundError(f"No module named {_PACKAGE!r}", name=_PACKAGE)


@lru_cache(maxsize=1)
def _registry() -> tuple[tuple[Kernel, ...], dict[str, Kernel]]:
    folder = _kernel_folder()
    files = [f for f in folder.iterdir() if f.name.endswith(".toml") and f.is_file()]
    return _build_registry(files)


def list_kernels() -> list[Kernel]:
    """All shipped kernels, sorted by name.

    Examples
    --------
    >>> [k.name for k in list_kernels()][:3]
    ['box-blur', 'edge', 'emboss']
    """
    return list(_registry()[0])


def _registered(name: str) -> Kernel | None:
    """The shipped kernel named or aliased `name` (any case), or None.

    A kernel's own name is its file's stem: that file alone is read (a run
    with ``-k vertical`` reads one file, not all of them: 8 ms of its start);
    an alias needs them all.
    """
    key = name.strip().lower()
    if _registry.cache_info().currsize == 0 and _KERNEL_NAME.fullmatch(key):
        kernel = _shipped_file(key)
        if kernel is not None:
            return kernel
    return _registry()[1].get(key)


_KERNEL_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


@lru_cache(maxsize=32)
def _shipped_file(name: str) -> Kernel | None:
    """The shipped kernel of file ``<name>.toml``, named `name`; None where there is none."""
    file = _kernel_folder() / f"{name}.toml"
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    kernel = _parse_toml(text, f"kernels/{name}.toml", name, strict=True)
    return kernel if kernel.name == name else None


def get_kernel(name: str) -> Kernel:
    """Look up a shipped kernel by name or alias, ignoring case.

    Raises
    ------
    KernelError
        For an unknown name, listing close matches.

    Examples
    --------
    >>> get_kernel("Laplacian8").name
    'edge'
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    kernel = _registered(name)
    if kernel is not None:
        return kernel
    key = name.strip().lower()
    kernels, lookup = _registry()
    import difflib  # only for an unknown name

    close = difflib.get_close_matches(key, lookup, n=4, cutoff=0.6)
    close += [k for k in sorted(lookup) if key and k.startswith(key) and k not in close]
    if close:
        hint = f"did you mean {', '.join(close[:5])}?"
    else:
        hint = f"known kernels: {', '.join(k.name for k in kernels)}"
    raise KernelError(f"unknown kernel {name!r}; {hint}")
