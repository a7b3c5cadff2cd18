"""Time-based fair share through the simulator: the case tests/k8s/test_time_fairness.py
runs on a real API server and tests/control/test_time_fairness.py through the
controller, decided the same here (the simulator steps the same loop)."""

from __future__ import annotations

from kai_ray.core import QueueInfo, SchedulerConfig
from kai_ray.sim.cluster import parse_cluster
from kai_ray.sim.engine import Options, Simulation
from kai_ray.sim.policies import make_policy
from tests.sim.helpers import job


def contend_after_heavy_use(window_s: float) -> Simulation:
    """On 4 GPUs, queue heavy holds all four for 5 s and lets them go; then heavy and
    light each ask for a whole-cluster gang, heavy first (heavy's gets the free room).
    While something waits, a step every second, as the operator's tick."""
    jobs = [
        job("early", 0.0, 5.0, 1.0, queue="heavy", workers=4),
        job("heavy2", 7.0, 1000.0, 1.0, queue="heavy", workers=4),
        job("light2", 8.0, 1000.0, 1.0, queue="light", workers=4),
    ]
    policy = make_policy("default", SchedulerConfig(usage_window_s=window_s))
    queues = [QueueInfo("heavy"), QueueInfo("light")]
    sim = Simulation(jobs, parse_cluster("1x4"), queues, policy, Options(checkpoint_s=0.0, wait_step_s=1.0))
    sim.run()
    return sim


def test_the_queue_that_used_more_gives_way_as_on_kubernetes() -> None:
    sim = contend_after_heavy_use(600.0)
    light, heavy = sim.runs["light2"], sim.runs["heavy2"]
    # heavy used the whole cluster: as its usage grows its share of the over-quota room
    # shrinks below light's, and light reclaims the cluster within the minute the
    # Kubernetes test waits for it.
    # (Later the two take turns, as heavy's usage fades and light's grows.)
    assert light.first_start is not None and 8.0 < light.first_start <= 68.0 and heavy.preemptions >= 1
    # Without a window the shares are equal, and light waits for heavy's gang to end.
    sim = contend_after_heavy_use(0.0)
    light, heavy = sim.runs["light2"], sim.runs["heavy2"]
    assert heavy.first_start == 7.0 and heavy.preemptions == 0
    assert light.first_start == heavy.finished
