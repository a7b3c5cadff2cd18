"""Queues of hundreds behind a full cluster: waiting costs no Ray worker process (every way
of submitting), cancelling works from a handle and from `ray.cancel`, and what waited
runs, with its arguments and results intact, once room frees up."""

from __future__ import annotations

import time
from typing import Any

import pytest

import kai_ray
from kai_ray.api.dispatch import dispatcher
from kai_ray.ray.benchqueue import ray_processes

from .conftest import GPU_NODES, GPUS_PER_NODE, Gate, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

QUEUE = [{"name": "a", "resources": {"gpu": {"quota": -1}, "cpu": {"quota": -1}}}]
EACH = 150  # queued per way of submitting
KEPT = 4  # of those, left to run once the cluster frees up


def hold(gate: Any) -> str:
    while not ray.get(gate.is_open.remote("blocker")):
        time.sleep(0.05)
    return "held"


def double(x: int) -> int:
    return 2 * x


def queued(sched: Any) -> int:
    return sum(1 for w in sched.list(include_finished=False) if w["state"] == "Queued")


def full_cluster() -> tuple[Any, Any, Any]:
    """A gate, a workload holding every GPU until the gate opens, and a one-GPU
    workload function to queue behind it."""
    gate = Gate.remote()
    blocker = kai_ray.workload(queue="a", workers=GPU_NODES, num_gpus=GPUS_PER_NODE, num_cpus=0)(hold)
    held = blocker.submit(gate)
    assert held.wait_admitted(30)["state"] == "Running"
    return gate, held, kai_ray.workload(queue="a", num_gpus=1, num_cpus=0)(double)


def test_hundreds_wait_without_a_process_then_run(start_scheduler: Any) -> None:
    sched = start_scheduler(QUEUE)
    gate, held, work = full_cluster()
    time.sleep(2)  # the blocker's body process is up; the pool settles
    before = ray_processes()

    refs = [work.remote(ray.put(i)) for i in range(EACH)]  # ObjectRef arguments are resolved
    handles = [work.submit(EACH + i) for i in range(EACH)]
    mapped = work.map(range(2 * EACH, 3 * EACH))
    wait_until(lambda: queued(sched) == 3 * EACH, what=lambda: f"{queued(sched)} queued")
    time.sleep(2)  # a process per workload, as before, would show by now
    after = ray_processes()
    assert after["ray_worker_processes"] <= before["ray_worker_processes"], (before, after)

    with pytest.raises(TimeoutError, match=r"has no result after 0\.2s"):
        handles[0].result(timeout=0.2)
    # Ray drops a cancelled call that has not started, unheard: cancel once the dispatcher
    # has started every ref's call (a slow machine may take seconds for hundreds).
    _, disp = dispatcher(sched.handle)
    wait_until(lambda: ray.get(disp.asking.remote()) == 2 * EACH, what="the refs' calls started")
    # Cancel all but a few of each: from the handle, and through Ray's own ray.cancel.
    for ref in refs[KEPT:] + mapped[KEPT:]:
        ray.cancel(ref)
    sched.cancel_many([h.id for h in handles[KEPT:]])
    wait_until(lambda: queued(sched) == 3 * KEPT, what=lambda: f"{queued(sched)} queued")
    with pytest.raises(kai_ray.WorkloadCancelled):
        handles[-1].result(30)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(refs[-1], timeout=30)

    ray.get(gate.release.remote("blocker"))
    assert held.result(30) == "held"
    assert ray.get(refs[:KEPT], timeout=90) == [2 * i for i in range(KEPT)]
    assert [h.result(90) for h in handles[:KEPT]] == [2 * (EACH + i) for i in range(KEPT)]
    assert ray.get(mapped[:KEPT], timeout=90) == [2 * (2 * EACH + i) for i in range(KEPT)]
    assert all(h.done() and h.status() == "Succeeded" for h in handles[:KEPT])


def test_what_waits_survives_a_scheduler_restart(start_scheduler: Any) -> None:
    """The dispatcher hears of admissions through a long poll; a scheduler killed and
    restarted loses the reports it had not sent, and the dispatcher asks again."""
    from .test_recovery import scheduler_pid

    sched = start_scheduler(QUEUE)
    gate, held, work = full_cluster()
    ref, handle = work.remote(1), work.submit(2)
    wait_until(lambda: queued(sched) == 2)

    old = scheduler_pid()
    assert old is not None
    import os
    import signal

    os.kill(old, signal.SIGKILL)
    wait_until(lambda: scheduler_pid() not in (None, old), what="the scheduler restarted")
    ray.get(gate.release.remote("blocker"))
    assert ray.get(ref, timeout=60) == 2
    assert handle.result(60) == 4
    assert held.result(30) == "held"


def test_a_dispatcher_that_died_has_what_it_held_cancelled_and_comes_back(start_scheduler: Any) -> None:
    """What it held died with it (the bodies waiting, the one running): their workloads
    are cancelled, saying why, rather than admitted with nobody to run them; the
    driver's next submissions work."""

    sched = start_scheduler(QUEUE)
    _, held, work = full_cluster()
    handles = work.submit_many([1, 2, 3])
    ref = work.remote(4)
    wait_until(lambda: queued(sched) == 4)
    _, disp = dispatcher(sched.handle)
    ray.kill(disp, no_restart=False)  # as its process dying would: Ray restarts it

    def cancelled() -> bool:
        return all(sched.info(h.id)["state"] == "Cancelled" for h in handles)

    wait_until(cancelled, timeout=30, what=lambda: [sched.info(h.id)["reason"] for h in handles])
    assert "dispatcher restarted" in sched.info(handles[0].id)["reason"]
    with pytest.raises(kai_ray.WorkloadFailed, match="dispatcher restarted"):
        handles[0].result(30)
    # The ref's call died with the process, or reached the restarted one, which knows
    # the workload was cancelled: either way the caller hears of it.
    with pytest.raises((ray.exceptions.RayActorError, kai_ray.WorkloadFailed)) as raised:
        ray.get(ref, timeout=30)
    assert isinstance(raised.value, ray.exceptions.RayActorError) or "dispatcher restarted" in str(
        raised.value
    )
    # The body it had started died with it too (Ray ends what a dead process owned).
    wait_until(lambda: held.status() == "Cancelled", timeout=30, what=held.reason)
    assert work.submit(5).result(60) == 10  # the same dispatcher, back
