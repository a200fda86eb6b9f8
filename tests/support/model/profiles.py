"""The Hypothesis settings of the model tests, chosen by QGEN_HYPOTHESIS_PROFILE.

``ci`` (the default) keeps the whole model suite within about five minutes on a 2-core
machine: 60 sequences per stateful test, each about a hundred round trips, over every form
on every engine; ``thorough`` runs many more and longer operation sequences:
``QGEN_HYPOTHESIS_PROFILE=thorough pytest -m model``. The profiles are registered under
``qgen-model-<name>`` and handed to each test explicitly, so importing this module changes
no other test's settings.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

ENV = "QGEN_HYPOTHESIS_PROFILE"

_COMMON = {
    # one step is a round trip to a real server: a deadline would only measure the server
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}

PROFILES: dict[str, settings] = {
    # one failure, fully shrunk, is what a CI log should show
    "ci": settings(max_examples=60, stateful_step_count=30, report_multiple_bugs=False, **_COMMON),
    "thorough": settings(max_examples=1000, stateful_step_count=60, **_COMMON),
}

for _name, _profile in PROFILES.items():
    settings.register_profile(f"qgen-model-{_name}", _profile)


def profile_name() -> str:
    name = os.environ.get(ENV, "ci").strip() or "ci"
    if name not in PROFILES:
        raise ValueError(f"{ENV}={name!r}: use one of {', '.join(PROFILES)}")
    return name


def model_settings() -> settings:
    """The settings of the profile QGEN_HYPOTHESIS_PROFILE names (default ``ci``)."""
    return PROFILES[profile_name()]
