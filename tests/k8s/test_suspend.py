"""Preemption the way KubeRay expects, with KubeRay's own operator: a preempted
RayCluster or RayJob is suspended (spec.suspend), no pod of it is made while it waits,
and it is resumed when the scheduler admits it again; surplus workers go through
KubeRay's scale-down."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kai_ray.k8s.suspension import SUSPENDED_BY
from tests.k8s.env import NS, K8sEnv, bound, group, name_scheduler, named, raycluster, running

pytestmark = pytest.mark.k8s
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
RJ = f"/apis/ray.io/v1/namespaces/{NS}/rayjobs"


def _uids(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def _pods_of(k8s: K8sEnv, owner: str) -> list[dict[str, Any]]:
    """Every pod KubeRay made for `owner` (its name starts with the owner's), going or not."""
    return [p for p in k8s.pods() if p["metadata"]["name"].startswith(f"{owner}-")]


def _no_pod_made_while(k8s: K8sEnv, owner: str, before: set[str], seconds: float) -> None:
    """Every pod of `owner` seen for `seconds` is one of `before` (going away)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        made = _uids(_pods_of(k8s, owner)) - before
        assert not made, f"pods made while suspended: {made}"
        time.sleep(0.1)


def test_a_preempted_raycluster_is_suspended_and_resumed_with_no_pod_made_in_between(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("team", gpu=4)
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, raycluster("low", group("gpu", replicas=2, gpus=2), queue="team", priority="train"))
    first = k8s.wait_for(
        "low running", lambda: len(running(k8s.cluster_pods("low"))) == 3 and _pods_of(k8s, "low")
    )

    k8s.create(RC, raycluster("high", group("gpu", replicas=1, gpus=4), queue="team", priority="inference"))
    low = k8s.wait_for(
        "low suspended", lambda: (o := k8s.get(f"{RC}/low"))["spec"].get("suspend") and o, timeout=60
    )
    assert "preempt" in low["metadata"]["annotations"][SUSPENDED_BY]
    k8s.wait_for("high running", lambda: len(running(k8s.cluster_pods("high"))) == 2, timeout=60)
    _no_pod_made_while(k8s, "low", _uids(first), seconds=3)
    assert _pods_of(k8s, "low") == []  # KubeRay took them all away, made none again
    assert any(e["reason"] == "Suspended" for e in k8s.events("low"))

    _delete_cluster(k8s, "high")
    k8s.wait_for("low resumed and running", lambda: len(running(k8s.cluster_pods("low"))) == 3, timeout=60)
    low = k8s.get(f"{RC}/low")
    assert low["spec"].get("suspend") is False
    assert SUSPENDED_BY not in (low["metadata"].get("annotations") or {})
    assert any(e["reason"] == "Resumed" for e in k8s.events("low"))


def _delete_cluster(k8s: K8sEnv, name: str) -> None:
    """The RayCluster and its pods (no garbage collector runs here to delete them)."""
    k8s.delete(f"{RC}/{name}")
    for pod in k8s.cluster_pods(name):
        k8s.delete(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}")


def _rayjob(name: str, *, shutdown: bool = True) -> dict[str, Any]:
    """A RayJob whose pods name kai-ray's scheduler in their templates: KubeRay v1.5's
    kai-scheduler plugin refuses RayJobs, so it runs without one, as KAI's users run it."""
    cluster = {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": named(group("h", replicas=0, gpus=0)["template"]),
        },
        "workerGroupSpecs": [
            {
                **group("gpu", replicas=2, gpus=2),
                "template": named(group("gpu", replicas=2, gpus=2)["template"]),
            }
        ],
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kai.scheduler/queue": "team", "ray.io/priority-class-name": "train"},
        },
        "spec": {
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": shutdown,
            "rayClusterSpec": cluster,
            "submitterPodTemplate": named(_submitter()),
        },
    }


def _submitter() -> dict[str, Any]:
    container = {"name": "submitter", "image": "rayproject/ray", "resources": {"requests": {"cpu": "500m"}}}
    return {"spec": {"restartPolicy": "Never", "containers": [container]}}


def _status(k8s: K8sEnv, name: str) -> dict[str, Any]:
    return k8s.get(f"{RJ}/{name}").get("status") or {}


def test_a_preempted_rayjob_is_suspended_then_running_again_with_no_pod_made_in_between(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=4, cpu="8")
    k8s.queue("team", gpu=4)
    k8s.start_controllers()  # the garbage collector deletes a suspended job's pods, as in any cluster
    k8s.start_fakes(batch_scheduler=None)
    k8s.start_operator()
    k8s.create(RJ, _rayjob("train"))
    k8s.wait_for(
        "the job running", lambda: _status(k8s, "train").get("jobDeploymentStatus") == "Running", timeout=60
    )
    cluster = _status(k8s, "train")["rayClusterName"]
    assert len(running(k8s.cluster_pods(cluster))) == 3
    before = _uids(_pods_of(k8s, "train"))

    serve = raycluster("serve", group("gpu", replicas=1, gpus=4), queue="team", priority="inference")
    k8s.create(RC, name_scheduler(serve))  # no batch scheduler names it here
    k8s.wait_for(
        "the job suspended",
        lambda: _status(k8s, "train").get("jobDeploymentStatus") == "Suspended",
        timeout=60,
    )
    assert k8s.get(f"{RJ}/train")["spec"]["suspend"] is True
    k8s.wait_for("serving running", lambda: len(running(k8s.cluster_pods("serve"))) == 2, timeout=60)
    _no_pod_made_while(k8s, "train", before, seconds=3)
    assert bound(_pods_of(k8s, "train")) == []

    _delete_cluster(k8s, "serve")
    k8s.wait_for(
        "the job running again",
        lambda: _status(k8s, "train").get("jobDeploymentStatus") == "Running",
        timeout=90,
    )
    again = _status(k8s, "train")["rayClusterName"]
    assert len(running(k8s.cluster_pods(again))) == 3
    assert not _uids(k8s.cluster_pods(again)) & before  # a new cluster, made after the resume


def test_elastic_workers_are_placed_beyond_the_gang_and_taken_back_through_kuberays_scale_down(
    k8s: K8sEnv,
) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("team", gpu=4)
    k8s.start_fakes()
    k8s.start_operator()
    # The gang is head + 1 worker; 3 more workers are elastic surplus.
    k8s.create(
        RC,
        raycluster(
            "elastic", group("gpu", replicas=4, min_replicas=1, gpus=1), queue="team", priority="train"
        ),
    )
    first = k8s.wait_for(
        "all 4 workers placed",
        lambda: len(running(k8s.cluster_pods("elastic"))) == 5 and _pods_of(k8s, "elastic"),
    )
    k8s.create(RC, raycluster("urgent", group("gpu", replicas=1, gpus=2), queue="team", priority="inference"))
    k8s.wait_for("urgent running", lambda: len(running(k8s.cluster_pods("urgent"))) == 2, timeout=60)
    spec = k8s.get(f"{RC}/elastic")["spec"]
    assert spec.get("suspend") is not True  # the gang itself keeps running
    worker_group = spec["workerGroupSpecs"][0]
    assert worker_group["replicas"] == 2
    taken = set(worker_group["scaleStrategy"]["workersToDelete"])
    assert len(taken) == 2 and taken <= {p["metadata"]["name"] for p in first}
    _no_pod_made_while(k8s, "elastic", _uids(first), seconds=2)
    assert len(running(k8s.cluster_pods("elastic"))) == 3
    left = bound(k8s.cluster_pods("elastic"))
    assert [p["metadata"]["labels"]["ray.io/node-type"] for p in left].count("head") == 1
