"""`kai-ray bench cycle --scenario FILE`: cycles timed on any scenario file's state, with
its own settings, and what the cycle decided (so a figure is read beside its decisions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCENARIO = (
    Path(__file__).parents[1] / "scenarios" / "reclaim" / "sibling-inside-department-over-its-share.yaml"
)


def _bench(*extra: str) -> dict[str, object]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kai_ray.cli",
            "bench",
            "cycle",
            "--scenario",
            str(SCENARIO),
            "--repeat",
            "2",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_scenario_is_timed_with_its_own_actions_and_decisions() -> None:
    result = _bench()
    assert result["scenario"] == "reclaim: a queue takes from its sibling inside a department over its share"
    assert result["actions"] == ["reclaim"]  # the file's own
    assert (result["nodes"], result["jobs"], result["queues"]) == (1, 7, 5)
    assert (result["placements"], result["evictions"]) == (1, 1)  # the file expects one reclaim
    assert float(str(result["reclaim_ms_p50"])) >= 0


def test_actions_given_override_the_files() -> None:
    result = _bench("--actions", "allocate")
    assert result["actions"] == ["allocate"]
    assert (result["placements"], result["evictions"]) == (0, 0)  # allocate alone: nothing free
