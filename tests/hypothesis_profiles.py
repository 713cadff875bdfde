"""Hypothesis profiles for the suite, chosen by the HYPOTHESIS_PROFILE environment variable:

- `ci` (the default): every test runs its own example count, as `make test` always has, under
  whatever profile hypothesis itself picked (its `default`, or its own `ci` profile when it
  detects a CI environment, which is derandomized).
- `deep`: every count times DEEP_FACTOR, no deadlines, random seeds (`make test-deep`).

A test's own `max_examples` is a base that the profile scales, not a ceiling: tests give their
settings through `scaled(...)` instead of `hypothesis.settings(...)`. Tests with no settings of
their own get the profile's default (hypothesis's 100, scaled the same way).
"""
from __future__ import annotations

import os

from hypothesis import settings

DEEP_FACTOR = 20
FACTORS = {"ci": 1, "deep": DEEP_FACTOR}

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in FACTORS:
    raise RuntimeError(f"HYPOTHESIS_PROFILE={PROFILE!r}: the suite's profiles are {sorted(FACTORS)}")
FACTOR = FACTORS[PROFILE]
if PROFILE == "deep":
    settings.register_profile("deep", parent=settings.default, max_examples=settings.default.max_examples * FACTOR,
                              deadline=None, derandomize=False)
    settings.load_profile("deep")
# "ci" loads nothing: hypothesis's own choice stays, so `make test` runs exactly as before


def scaled(max_examples: int, **kwargs) -> settings:
    """hypothesis.settings with `max_examples` scaled by the active profile (deep: no deadline)."""
    if FACTOR > 1:
        kwargs["deadline"] = None
    return settings(max_examples=max_examples * FACTOR, **kwargs)
