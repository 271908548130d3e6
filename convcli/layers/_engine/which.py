"""Which engine the layers run: the native C kernels or the numpy engines (no numpy here).

``--version`` names the engine without importing numpy: this module loads the
compiled module ``_native`` (built from ``_native.c`` where a C compiler was
at hand at install) and reads ``CONVCLI_ENGINE`` from the environment.
"""

from __future__ import annotations

import os

try:
    from . import _native
except ImportError:  # not built: no C compiler at install, or a platform without one
    _native = None

ENGINE_VARIABLE = "CONVCLI_ENGINE"
ENGINES = ("native", "numpy")


def _setting() -> str:
    """``CONVCLI_ENGINE`` as the environment gives it, any case and spaces ignored."""
    return os.environ.get(ENGINE_VARIABLE, "").strip().lower()


def setting_problem() -> str | None:
    """What is wrong with ``CONVCLI_ENGINE`` in the environment, if anything (the command
    line refuses it; the library then runs the default, ``native``)."""
    value = _setting()
    if value and value not in ENGINES:
        return f"{ENGINE_VARIABLE} must be native or numpy, got {value!r}"
    return None


def _chosen() -> str:
    """The engine the environment asks for: ``native`` (the default) or ``numpy``."""
    value = _setting()
    return value if value in ENGINES else "native"


_engine = _chosen()


def active() -> bool:
    """Whether the layers run the C kernels."""
    return _native is not None and _engine == "native"


def use_engine(name: str) -> str:
    """Run ``"native"`` or ``"numpy"`` from now on in this process; returns the engine before.

    ``"native"`` where the extension was not built leaves the numpy engines
    running (:func:`active` says which).
    """
    global _engine
    if name not in ENGINES:
        raise ValueError(f"engine must be native or numpy, got {name!r}")
    before, _engine = _engine, name
    return before


def description() -> str:
    """Which engine runs, in words: ``native avx2``, or ``numpy (...)`` and why.

    >>> description().split()[0] in ("native", "numpy")
    True
    """
    if _native is None:
        return "numpy (no compiled extension: it was not built at install, e.g. no C compiler)"
    if _engine != "native":
        return f"numpy ({ENGINE_VARIABLE}={_engine})"
    return f"native {_native.vector_level()}"


def vector_levels() -> tuple[str, ...]:
    """The vector levels the C kernels can run at on this CPU (none without the extension)."""
    return _native.vector_levels() if _native is not None else ()


def set_vector_level(level: str) -> str:
    """Run the C kernels at `level` (one of :func:`vector_levels`); returns the level before."""
    before = _native.vector_level()
    _native.set_vector_level(level)
    return before
