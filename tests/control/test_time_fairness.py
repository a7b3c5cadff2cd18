"""Time-based fair share through the controller: KAI's documented effect."""

from __future__ import annotations

import itertools

from kai_ray.control import State
from kai_ray.core import QueueInfo, SchedulerConfig
from tests.control.harness import make

RUN_FOR = 100.0  # seconds each 16-GPU job runs before it finishes


def admissions(config: SchedulerConfig, until: float = 2000.0) -> list[str]:
    """Two queues, equal weights, no quota; each always has a 16-GPU job waiting on a
    16-GPU cluster (4 nodes of 4). Returns the queues in the order their jobs ran."""
    h = make(nodes=4, queues=[QueueInfo("a"), QueueInfo("b")], config=config)
    submitted = {"a": 0, "b": 0}

    def submit(queue: str) -> None:
        submitted[queue] += 1
        h.submit(f"{queue}{submitted[queue]}", queue=queue, workers=4)

    submit("a")
    submit("b")
    started: dict[str, float] = {}
    order: list[str] = []
    t = 0.0
    while t < until:
        t += 5.0
        h.at(t).step()
        for w in list(h.controller.workloads.values()):
            if w.state is State.RUNNING and w.id not in started:
                started[w.id] = t
                order.append(w.spec.queue)
            elif w.state is State.RUNNING and t - started[w.id] >= RUN_FOR:
                h.controller.finish(w.id, w.attempt, True)
                submit(w.spec.queue)  # endless demand: the next job waits at once
    return order


def test_without_history_the_tie_break_gives_one_queue_everything() -> None:
    order = admissions(SchedulerConfig())
    assert len(order) >= 15 and set(order) == {"a"}


def test_with_history_the_two_queues_take_turns() -> None:
    order = admissions(SchedulerConfig(usage_window_s=1000.0))
    assert len(order) >= 15
    assert all(x != y for x, y in itertools.pairwise(order)), order
    # The same with decay, and with a tumbling window (a fresh window is a tie: a wins
    # it, and b has used less in the window that follows).
    for config in (
        SchedulerConfig(usage_window_s=600.0, usage_half_life_s=300.0),
        SchedulerConfig(usage_window_s=600.0, usage_window_type="tumbling"),
    ):
        order = admissions(config)
        assert all(x != y for x, y in itertools.pairwise(order)), (config, order)


def holders(config: SchedulerConfig, until: float = 4000.0) -> list[tuple[float, str]]:
    """Jobs that never end, one per queue: when the cluster changed hands, and to whom."""
    h = make(nodes=4, queues=[QueueInfo("a"), QueueInfo("b")], config=config)
    h.submit("a1", queue="a", workers=4)
    h.submit("b1", queue="b", workers=4)
    changes: list[tuple[float, str]] = []
    for t in range(5, int(until), 5):
        h.at(t).step()
        running = [w.id for w in h.controller.workloads.values() if w.state is State.RUNNING]
        if running and (not changes or changes[-1][1] != running[0]):
            changes.append((t, running[0]))
    return changes


def test_with_history_endless_jobs_alternate_by_reclaim() -> None:
    assert [who for _, who in holders(SchedulerConfig())] == ["a1"]  # forever
    changes = holders(SchedulerConfig(usage_window_s=1000.0))
    # b reclaims once a's usage over the recorded window nears the whole cluster, then
    # the cluster changes hands about every window.
    assert [who for _, who in changes] == ["a1", "b1", "a1", "b1", "a1"]
    turns = [t1 - t0 for (t0, _), (t1, _) in itertools.pairwise(changes[1:])]
    assert all(900 <= turn <= 1100 for turn in turns), changes


def contend_after_heavy_use(config: SchedulerConfig) -> dict[str, State]:
    """tests/k8s/test_time_fairness.py's case through the controller (the Ray backend's
    and the simulator's): on 4 GPUs, queue heavy holds all four for 5 s and lets them go;
    then heavy and light each ask for a whole-cluster gang, heavy first."""
    h = make(nodes=1, queues=[QueueInfo("heavy"), QueueInfo("light")], config=config)
    one_gpu = {"GPU": 1, "CPU": 1}
    h.submit("early", queue="heavy", workers=4, resources_per_worker=one_gpu)
    h.at(1.0).step()
    h.at(6.0).step()
    h.controller.cancel("early")
    h.at(7.0).step()
    h.submit("heavy2", queue="heavy", workers=4, resources_per_worker=one_gpu)
    h.at(8.0).step()
    h.submit("light2", queue="light", workers=4, resources_per_worker=one_gpu)
    for t in range(9, 120):  # past any grace period
        h.at(float(t)).step()
    return {w: h.w(w).state for w in ("heavy2", "light2")}


def test_the_queue_that_used_more_gives_way_as_on_kubernetes() -> None:
    states = contend_after_heavy_use(SchedulerConfig(usage_window_s=600.0))
    assert states == {"heavy2": State.QUEUED, "light2": State.RUNNING}
    # Without a window the shares are equal, and light's gang would take it over its own.
    states = contend_after_heavy_use(SchedulerConfig())
    assert states == {"heavy2": State.RUNNING, "light2": State.QUEUED}
