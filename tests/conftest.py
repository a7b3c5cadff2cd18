"""Settings for the whole suite."""

from __future__ import annotations

import os

import pytest
from hypothesis import is_hypothesis_test, settings

from kai_ray.control.cycles import CHECK_INCREMENTAL_ENV
from tests.properties import CI

# Every Controller in the suite (the Ray scheduler actors too: their processes inherit
# this environment) checks each incremental cycle against the full rebuild, so the real
# backends' sequences of changes test the cycle cache as well as the random ones do.
os.environ.setdefault(CHECK_INCREMENTAL_ENV, "1")

# Property tests draw the same examples on every run unless told otherwise
# (tests/properties.py); `--hypothesis-profile=random` draws fresh ones.
settings.load_profile(CI)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every hypothesis test carries the `property` mark (`-m property` runs them alone)."""
    for item in items:
        if isinstance(item, pytest.Function) and is_hypothesis_test(item.obj):
            item.add_marker(pytest.mark.property)
