"""How the property tests (hypothesis) draw their examples: two profiles, registered by
tests/conftest.py.

- `ci`, the default (`./dev.sh test`, CI): derandomized, so every run draws the same
  examples (seeded per test) and a pass or a failure never depends on luck; no example
  database, so a clean clone and a warm checkout run the same cases.
- `random`: fresh random draws on every run, no database, and `RANDOM_SCALE` times the
  examples. Run it before a change to the core lands, several times:
  `./dev.sh test tests/core -m property --hypothesis-profile=random` (README, "Testing").
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

CI, RANDOM = "ci", "random"
RANDOM_SCALE = 5
_BASE = 100  # examples per test in the ci profile (hypothesis's own default)

settings.register_profile(
    CI,
    derandomize=True,
    database=None,
    max_examples=_BASE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    RANDOM,
    derandomize=False,
    database=None,
    max_examples=_BASE * RANDOM_SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def examples(n: int) -> int:
    """A test's own number of examples, scaled as the loaded profile scales the default."""
    return n * settings().max_examples // _BASE
