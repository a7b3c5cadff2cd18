"""Settings for the whole suite."""

from __future__ import annotations

import os

from kai_ray.control.cycles import CHECK_INCREMENTAL_ENV

# Every Controller in the suite (the Ray scheduler actors too: their processes inherit
# this environment) checks each incremental cycle against the full rebuild, so the real
# backends' sequences of changes test the cycle cache as well as the random ones do.
os.environ.setdefault(CHECK_INCREMENTAL_ENV, "1")
