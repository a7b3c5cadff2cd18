"""Time-based fair share on a real API server: the operator keeps the queues' usage
history and feeds it to every cycle, as every backend does (kai_ray.control.cycles)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.k8s.env import NS, K8sEnv, bound, condition, group, raycluster, running

pytestmark = pytest.mark.k8s
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


def gpu_workers(k8s: K8sEnv, cluster: str) -> int:
    pods = running(k8s.cluster_pods(cluster))
    return sum(1 for p in pods if p["metadata"]["labels"]["ray.io/group"] == "gpu")


def remove(k8s: K8sEnv, cluster: str) -> None:
    k8s.delete(f"{RC}/{cluster}")
    for p in k8s.cluster_pods(cluster):
        k8s.delete(f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}")
    k8s.wait_for(f"{cluster} gone", lambda: not bound(k8s.cluster_pods(cluster)))


def contend_after_heavy_use(k8s: K8sEnv, tmp_path: Path, settings: str) -> None:
    """Two queues with equal quota (none) and weight on 4 GPUs. Queue heavy first holds
    all four for a few seconds and lets them go; then each asks for the whole cluster,
    a gang of head and 4 one-GPU workers (heavy first, so it holds everything when light
    comes). The same case through the controller: tests/control/test_time_fairness.py."""
    k8s.node("n0", gpus=4)
    k8s.queue("heavy")
    k8s.queue("light")
    config = tmp_path / "scheduler.yaml"
    config.write_text(settings)
    k8s.start_fakes()
    k8s.start_operator("--config", str(config))
    k8s.create(RC, raycluster("early", group("gpu", replicas=4), queue="heavy"))
    k8s.wait_for("early on all four GPUs", lambda: gpu_workers(k8s, "early") == 4)
    time.sleep(5)  # usage: heavy held the whole cluster
    remove(k8s, "early")
    k8s.create(RC, raycluster("heavy2", group("gpu", replicas=4), queue="heavy"))
    k8s.wait_for("heavy2 on all four GPUs", lambda: gpu_workers(k8s, "heavy2") == 4)
    k8s.create(RC, raycluster("light2", group("gpu", replicas=4), queue="light"))


def split(k8s: K8sEnv) -> tuple[int, int]:
    """GPUs held by (light, heavy)."""
    return gpu_workers(k8s, "light2"), gpu_workers(k8s, "heavy2")


def test_the_queue_that_used_more_gets_less_of_a_contended_cluster(k8s: K8sEnv, tmp_path: Path) -> None:
    contend_after_heavy_use(k8s, tmp_path, "usageWindow: 10m\n")
    # heavy used the whole cluster: its share of the over-quota room shrinks (KAI's
    # time-aware fairness, k = 1) below light's, and light reclaims the cluster.
    k8s.wait_for("light reclaims the cluster", lambda: split(k8s) == (4, 0), timeout=60)


def test_without_a_usage_window_the_same_queues_have_equal_shares(k8s: K8sEnv, tmp_path: Path) -> None:
    contend_after_heavy_use(k8s, tmp_path, "usageWindow: 0s\n")
    # Equal shares (2 GPUs each): light's gang of 4 would take it over its share, so it
    # waits, whole, and heavy keeps what it holds.
    k8s.wait_for(
        "light's reason",
        lambda: any(
            (condition(p) or {}).get("reason") == "Unschedulable" for p in k8s.cluster_pods("light2")
        ),
    )
    time.sleep(5)  # several cycles: still nothing taken back
    assert split(k8s) == (0, 4)
