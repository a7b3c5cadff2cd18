"""The preemption delay through the controller (Ray's and the simulator's loop), on
in-memory ports: a gang that could start only by preempting waits for new nodes while an
autoscaler may add them, says so, and asks for them; after the delay it preempts; a node
that comes in time takes it with nobody preempted."""

from __future__ import annotations

from kai_ray.control import State
from kai_ray.control.demand import autoscaler_bundles
from kai_ray.core import SchedulerConfig
from tests.control.harness import Harness, make, node

DELAY = 30.0


def _busy(grows: bool = True, delay: float = DELAY) -> Harness:
    """One node of 4 GPUs held by a preemptible job since t=2; at t=10 a job of a higher
    priority asks for the whole node."""
    h = make(nodes=1, config=SchedulerConfig(preemption_delay_s=delay))
    h.controller.cluster_grows = grows  # what Ray's upkeep sets when its autoscaler runs
    h.submit("low", grace_period=0)
    h.at(1).step().at(2).step()
    assert h.w("low").state is State.RUNNING
    h.at(10).submit("high", priority=125, preemptible=False)
    return h


def test_it_waits_for_nodes_says_so_and_asks_for_them() -> None:
    h = _busy()
    h.step()
    high, low = h.w("high"), h.w("low")
    assert low.state is State.RUNNING and high.state is State.QUEUED
    assert high.reason_code == "preemption-delay"
    assert high.reason == (
        "waiting up to 30s for new nodes before preempting (an autoscaler may add them); 30s left"
    )
    # Ray's autoscaler is asked for the waiting gang (and what runs, the whole request).
    assert sorted(b["GPU"] for b in autoscaler_bundles(h.controller.workloads.values())) == [4.0, 4.0]
    h.at(25).step()
    assert low.state is State.RUNNING and high.reason.endswith("; 15s left")


def test_after_the_delay_it_preempts() -> None:
    h = _busy()
    h.step().at(39).step()
    assert h.w("low").state is State.RUNNING  # 29 s waited
    h.at(40).step()  # 30 s: the delay is over, with no other change
    assert h.w("low").state in (State.PREEMPTING, State.QUEUED)
    h.at(41).step().at(42).step()
    assert h.w("high").state is State.RUNNING and h.w("low").state is State.QUEUED


def test_a_node_that_comes_in_time_takes_it_and_nobody_is_preempted() -> None:
    h = _busy()
    h.step()
    h.cluster.node_list.append(node("n1"))  # the autoscaler's node, 20 s later
    h.at(30).step().at(31).step()
    assert h.w("high").state is State.RUNNING and h.w("high").slots["w0"].node == "n1"
    assert h.w("low").state is State.RUNNING and h.w("low").preemptions == 0


def test_no_autoscaler_no_wait() -> None:
    h = _busy(grows=False)
    h.step()
    assert h.w("low").state in (State.PREEMPTING, State.QUEUED)


def test_a_delay_of_0_is_no_wait() -> None:
    h = _busy(delay=0.0)
    h.step()
    assert h.w("low").state in (State.PREEMPTING, State.QUEUED)


def test_a_preempted_workload_waits_again_from_its_return_to_the_queue() -> None:
    """The core counts from the latest `since` of the pending tasks: the controller gives
    a requeued workload's tasks the time it was queued again, not its submission."""
    h = _busy(grows=False)
    h.step().at(11).step()
    low = h.w("low")
    assert low.state is State.QUEUED and low.created_at == 0
    (task,) = h.controller.infos.get(low).tasks
    assert task.since == low.queued_at > 2
