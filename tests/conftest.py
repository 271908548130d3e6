"""Shared pytest configuration: a deterministic hypothesis profile, and shared fixtures.

The default profile ``convcli`` runs 50 derandomized examples per property
test with no deadline; set ``CONVCLI_HYPOTHESIS_PROFILE=thorough`` for 1000.

Fixtures: ``photo`` (an RGB picture written to ``tmp_path``, drawn with
``photo_seed``, which a module overrides to draw another picture), ``out``
(the output folder ``tmp_path / "out"``, not yet made), ``cluster`` (a Dask
scheduler and two workers on 127.0.0.1, shared by a module's tests) and
``own_cluster`` (the same, for one test that kills its workers).
"""

from __future__ import annotations

import os
import warnings

import pytest
from helpers import DaskProcesses, make_image
from hypothesis import settings

settings.register_profile(
    "convcli", max_examples=50, deadline=None, derandomize=True, database=None
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, derandomize=True, database=None
)
settings.load_profile(os.environ.get("CONVCLI_HYPOTHESIS_PROFILE", "convcli"))

# When a property test fails, hypothesis's pytest plugin imports its patch
# writer, which imports libcst; some libcst releases emit a DeprecationWarning
# on import, and `filterwarnings = error` would turn the failure report into an
# INTERNALERROR that stops the whole run. Import it here, warnings silenced.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import hypothesis.extra._patching  # noqa: F401
    except ImportError:
        pass


@pytest.fixture
def photo_seed() -> int:
    """The seed of the ``photo`` fixture's picture; override it in a module for another one."""
    return 0


@pytest.fixture
def photo(tmp_path, photo_seed):
    """An RGB picture of 40x30 seeded pixels with a bright square: ``tmp_path / "photo.png"``."""
    return make_image(tmp_path / "photo.png", "RGB", seed=photo_seed)


@pytest.fixture
def small_strips(monkeypatch):
    """Strips of at least 4 MiB of work (not 8 MiB): a test image of a few megabytes
    under ``--memory 1M`` is then cut into several strips, as a large image is.

    In this process only (runs through :func:`helpers.run`).
    """
    from convcli.app import streamed

    monkeypatch.setattr(streamed, "MIN_STRIP_WORK", 4 << 20)
    return "1M"


@pytest.fixture
def numpy_engine():
    """The layers run their numpy engines (the native engine set aside) during the test."""
    from convcli.layers._engine import native

    before = native.use_engine("numpy")
    yield
    native.use_engine(before)


@pytest.fixture
def out(tmp_path):
    """The output folder ``tmp_path / "out"`` (not made: the command line makes it)."""
    return tmp_path / "out"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Dask scheduler and two workers (:class:`helpers.DaskProcesses`) for a module's tests.

    Tests that kill workers take ``own_cluster``: the workers their nannies
    start again join later, while the module's next tests already run.
    """
    processes = DaskProcesses(tmp_path_factory.mktemp("cluster"), 2)
    yield processes
    processes.close()


@pytest.fixture
def own_cluster(tmp_path_factory):
    """A Dask scheduler and two workers as ``cluster``'s, for one test alone."""
    processes = DaskProcesses(tmp_path_factory.mktemp("own-cluster"), 2)
    yield processes
    processes.close()
