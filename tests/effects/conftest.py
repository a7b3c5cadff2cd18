"""The feature-effect suite runs thousands of cycles per world: its cycles are not each
checked against a full rebuild (tests/conftest.py turns that on for the rest of the suite,
which checks the cycle cache on these same features: tests/sim, tests/core)."""

from __future__ import annotations

import pytest

from kai_ray.control.cycles import CHECK_INCREMENTAL_ENV


@pytest.fixture(autouse=True)
def _unchecked_cycles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHECK_INCREMENTAL_ENV, raising=False)
