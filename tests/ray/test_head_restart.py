"""The scheduler actor's own node (the head) is lost and started again, under Ray's GCS
fault tolerance: the gangs that ran keep running (same attempt, same one placement
group), a submission made while the head was down lands once, and every gang still runs
to its end, never more at once than the GPUs hold. The cluster is the script's own
(tests/ray/head_restart.py), run in a process of its own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(420)]

SCRIPT = Path(__file__).with_name("head_restart.py")


def test_head_node_restart_keeps_running_gangs_and_admits_nothing_twice() -> None:
    assert shutil.which("redis-server"), "install Debian's redis-server (./dev.sh test does)"
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=400, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    # The scheduler actor came back on the new head, and answered.
    assert seen["new_head"] != seen["old_head"]
    assert seen["scheduler_node"] == seen["new_head"]
    assert seen["answered_after_restart_s"] < 60, seen
    # What ran before still runs, untouched: same attempt, the same single group.
    for wid, now in seen["survived"].items():
        assert now["state"] == "Running", (wid, now)
        assert now["attempt"] == seen["attempts_before"][wid]
        assert now["groups"] == seen["groups_before"][wid]
    # Every gang, the late submission included, ran once and to its end.
    assert seen["late"] in seen["states"]
    assert set(seen["states"].values()) == {"Succeeded"}, seen["states"]
    assert set(seen["times_running"].values()) == {1}, seen["times_running"]
    assert seen["most_running"] <= 2  # 4 GPUs, gangs of 2
    assert seen["doubled"] == []
