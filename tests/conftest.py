"""Shared pytest configuration: a deterministic hypothesis profile, and shared fixtures.

The default profile ``convcli`` runs 50 derandomized examples per property
test with no deadline; set ``CONVCLI_HYPOTHESIS_PROFILE=thorough`` for 1000.

Every test begins with the PNG encoder's backend chosen afresh (``deflate_backend``, asked
once a process): one chosen while a test turned the fast codecs off
(``CONVCLI_FAST_CODECS=0``) is not left to the tests after it.

Fixtures: ``photo`` (an RGB picture written to ``tmp_path``, drawn with
``photo_seed``, which a module overrides to draw another picture), ``out``
(the output folder ``tmp_path / "out"``, not yet made), ``cluster`` (a Dask
scheduler and two workers on 127.0.0.1, shared by a module's tests),
``own_cluster`` (the same, for one test that kills its workers), ``s3_server``
(an S3 server, moto, on 127.0.0.1 for the whole run) and ``s3_bucket`` (a fresh
bucket on it for one test).
"""

from __future__ import annotations

import hashlib
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
    """Strips of at least 4 MiB of work (not 8 MiB) and the convolution engine's row tiles
    of 32K values (not 512K): a test image of a few megabytes under ``--memory 1M`` is then
    cut into several strips, as a large image is (a strip holds whole row tiles).

    In this process only (runs through :func:`helpers.run`).
    """
    from convcli.app import streamed
    from convcli.layers._engine import correlate, depthwise, separable

    monkeypatch.setattr(streamed, "MIN_STRIP_WORK", 4 << 20)
    for engine in (correlate, depthwise, separable):
        monkeypatch.setattr(engine, "TILE_VALUES", 1 << 15)
    return "1M"


@pytest.fixture
def numpy_engine():
    """The layers run their numpy engines (the native engine set aside) during the test."""
    from convcli.layers._engine import native

    before = native.use_engine("numpy")
    yield
    native.use_engine(before)


@pytest.fixture
def native_engine():
    """The native engine is active during the test, whatever CONVCLI_ENGINE says."""
    from convcli.layers._engine import native

    before = native.use_engine("native")
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


@pytest.fixture(scope="session")
def s3_server():
    """An S3 server (moto) on 127.0.0.1 for the whole run: the fsspec options that reach it
    (``endpoint_url``, ``key``, ``secret``). Skips where moto or s3fs is missing."""
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield {"endpoint_url": f"http://{host}:{port}", "key": "testing", "secret": "testing"}
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, request):
    """The name of a fresh, empty bucket on ``s3_server``, its own to the test."""
    import s3fs

    name = "b-" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:12]
    s3fs.S3FileSystem(**s3_server).mkdir(name)
    return name


@pytest.fixture(autouse=True)
def _deflate_backend_chosen_afresh():
    from convcli.io import png

    png.deflate_backend.cache_clear()
    yield
    png.deflate_backend.cache_clear()
