"""The scheduler's process is killed in the middle of a burst of submissions: it restarts,
reconciles with the live placement groups, and no workload is lost or admitted twice."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest
from ray.util.placement_group import placement_group_table

import kai_ray
from kai_ray.api.workloads import make_spec
from kai_ray.ray.actor import SCHEDULER_NAME

from .conftest import Gate, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

BURST = 36


def scheduler_pid() -> int | None:
    for a in ray._private.state.state.actor_table(None).values():
        if a["Name"] == SCHEDULER_NAME and a["State"] == "ALIVE":
            return int(a["Pid"])
    return None


def live_groups() -> dict[str, str]:
    """workload id -> its live group name (a duplicate would be overwritten: count too)."""
    out: dict[str, str] = {}
    for info in placement_group_table().values():
        if info["name"].startswith("kai-ray/") and info["state"] != "REMOVED":
            wid = info["name"].split("/")[1]
            assert wid not in out, f"two live groups for {wid}"
            out[wid] = info["name"]
    return out


def body(gate: Any) -> str:
    gate.record.remote("ran", os.getpid())
    while not ray.get(gate.is_open.remote("body")):
        time.sleep(0.05)
    return "done"


def test_kill_during_burst_loses_nothing_and_admits_nothing_twice(start_scheduler: Any) -> None:
    sched = start_scheduler([{"name": "a", "resources": {"gpu": {"quota": -1}}}])
    gate = Gate.remote()
    # A function workload runs across the crash; its driver must not notice.
    runner = kai_ray.workload(queue="a", resources_per_worker={"GPU": 1, "CPU": 0.1})(body)
    h_body = runner.submit(gate)
    assert h_body.wait_admitted(30)["state"] == "Running"

    spec = make_spec("a", kind="block", resources_per_worker={"GPU": 1, "CPU": 0.1})
    ids: list[str] = []

    def burst() -> None:
        for i in range(BURST):
            ids.append(sched.submit(spec))
            if i == BURST // 3:
                time.sleep(0.3)  # let some be admitted before the crash

    old_pid = scheduler_pid()
    assert old_pid is not None
    thread = threading.Thread(target=burst)
    thread.start()
    wait_until(lambda: len(ids) > BURST // 2, what="burst under way")
    os.kill(old_pid, signal.SIGKILL)
    at_kill = len(ids)
    thread.join(timeout=90)
    assert not thread.is_alive() and len(ids) == BURST  # every submission was answered
    assert at_kill < BURST  # the kill really fell inside the burst

    wait_until(lambda: scheduler_pid() not in (None, old_pid), what="restarted")

    # The cluster has 12 GPUs: the body + 11 reservations run, the rest wait in line.
    def settled() -> bool:
        states = [w["state"] for w in sched.list() if w["id"] in ids]
        return len(states) == BURST and states.count("Running") == 11

    wait_until(settled, timeout=30, what="11 reservations running after the restart")
    workloads = {w["id"]: w for w in sched.list()}
    assert set(ids) <= workloads.keys()  # nothing lost
    groups = live_groups()
    running = {i for i, w in workloads.items() if w["state"] == "Running"}
    assert set(groups) == running  # one live group per running workload, no orphans
    for wid in running:
        assert groups[wid] == f"kai-ray/{wid}/{workloads[wid]['attempt']}"

    # Drain the line: each finish frees a GPU for the next; each workload runs exactly once.
    done: set[str] = set()
    while len(done) < BURST:
        for wid in [w for w in ids if w not in done and sched.info(w)["state"] == "Running"]:
            sched.finish(wid, sched.info(wid)["attempt"], True)
            done.add(wid)
        time.sleep(0.05)
    for wid in ids:
        history = [h[2] for h in sched.info(wid)["history"]]
        assert history.count("Running") == 1, (wid, history)
        assert history[-1] == "Succeeded"

    ray.get(gate.release.remote("body"))
    assert h_body.result(30) == "done"
    assert len([v for k, v in ray.get(gate.entries.remote()) if k == "ran"]) == 1
    assert [h[2] for h in h_body.info()["history"]].count("Running") == 1
    assert live_groups() == {}


def test_a_thousand_batched_submissions_across_kills_lose_nothing(start_scheduler: Any) -> None:
    """Batches are durable before their ids return: submissions in flight when the
    scheduler is killed (twice) are retried by Ray against the restarted one, and every
    id a batch returned is there afterwards, once."""
    sched = start_scheduler([{"name": "a", "resources": {"gpu": {"quota": -1}}}])
    spec = make_spec("a", kind="block", resources_per_worker={"GPU": 1, "CPU": 0.1})
    ids: list[str] = []

    def batches() -> None:
        for _ in range(20):
            ids.extend(sched.submit_many([spec] * 50))
            # Paced: a restarted scheduler takes the rest in well under a second, which
            # could all land before the second kill (found flaky in a full run).
            time.sleep(0.25)

    thread = threading.Thread(target=batches)
    thread.start()
    at_kills = []
    for kill in range(2):
        old = scheduler_pid()
        assert old is not None
        wait_until(lambda kill=kill: len(ids) >= 300 * (kill + 1), timeout=90, what="batches under way")
        os.kill(old, signal.SIGKILL)
        at_kills.append(len(ids))
        wait_until(lambda old=old: scheduler_pid() not in (None, old), timeout=60, what="restarted")
    thread.join(timeout=120)
    assert at_kills[-1] < 1000  # both kills fell inside the submissions
    assert not thread.is_alive() and len(ids) == 1000 and len(set(ids)) == 1000
    known = {w["id"]: w["state"] for w in sched.list()}
    assert set(ids) <= known.keys()  # nothing lost
    assert sorted(set(known.values())) == ["Queued", "Running"]
    assert sum(1 for s in known.values() if s == "Running") == 12  # the cluster's GPUs, once each
    assert len(live_groups()) == 12
