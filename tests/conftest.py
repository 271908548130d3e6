"""Shared pytest configuration: a deterministic hypothesis profile.

The default profile ``convcli`` runs 50 derandomized examples per property
test with no deadline; set ``CONVCLI_HYPOTHESIS_PROFILE=thorough`` for 1000.
"""

from __future__ import annotations

import os
import warnings

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
