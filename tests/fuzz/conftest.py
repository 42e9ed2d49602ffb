"""Hypothesis profiles of the fuzz suite: "ci" (the default: a small, derandomized budget,
so every run of `scripts/test` tries the same examples in a few seconds) and "release"
(HYPOTHESIS_PROFILE=release: many more random examples, for a run before a release)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# No deadline: the machine is shared and a slow example is not a bug of the parser; the
# "too slow" health check is for strategies, and ours build large documents on purpose.
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow,
                                                       HealthCheck.data_too_large]}
settings.register_profile("ci", max_examples=60, derandomize=True, database=None, **_COMMON)
settings.register_profile("release", max_examples=5000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
