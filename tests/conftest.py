"""Shared pytest configuration: a deterministic hypothesis profile.

The default profile ``convcli`` runs 50 derandomized examples per property
test with no deadline; set ``CONVCLI_HYPOTHESIS_PROFILE=thorough`` for 1000.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile(
    "convcli", max_examples=50, deadline=None, derandomize=True, database=None
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, derandomize=True, database=None
)
settings.load_profile(os.environ.get("CONVCLI_HYPOTHESIS_PROFILE", "convcli"))
