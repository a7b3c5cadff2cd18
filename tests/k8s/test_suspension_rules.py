"""The rules of preempting by suspension, without a server: which owners can be
suspended, the pods a suspended owner waits as, and KubeRay's scale-down patch."""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.gangs import build_gangs
from kai_ray.k8s.owners import epoch
from kai_ray.k8s.suspension import (
    SUSPENDED_AT,
    SUSPENDED_BY,
    cannot_suspend,
    resume_patch,
    scale_down,
    suspend_patch,
    virtual_pods,
)
from tests.k8s.env import cluster_spec, group


def _owner(kind: str, spec: dict[str, Any], *, suspended: bool = True) -> dict[str, Any]:
    annotations = {SUSPENDED_BY: "preempt: for ml/high"} if suspended else {}
    return {
        "metadata": {
            "name": "rc",
            "namespace": "ml",
            "uid": "u1",
            "creationTimestamp": "2026-11-25T08:00:00Z",
            "labels": {"kai.scheduler/queue": "team"},
            "annotations": annotations,
        },
        "spec": {**spec, "suspend": suspended},
        # KubeRay's word that its pods are gone (a RayJob's: jobDeploymentStatus Suspended)
        "status": {"state": "suspended"} if suspended else {},
    }


def test_rayjobs_kuberay_refuses_to_suspend_keep_pod_eviction() -> None:
    assert cannot_suspend("RayCluster", _owner("RayCluster", {})) == ""
    assert cannot_suspend("RayJob", _owner("RayJob", {"shutdownAfterJobFinishes": True})) == ""
    assert "shutdownAfterJobFinishes" in cannot_suspend("RayJob", _owner("RayJob", {}))
    assert "clusterSelector" in cannot_suspend(
        "RayJob", _owner("RayJob", {"shutdownAfterJobFinishes": True, "clusterSelector": {"a": "b"}})
    )
    assert cannot_suspend("RayService", _owner("RayService", {}))


def test_a_suspended_cluster_waits_as_the_pods_kuberay_makes_on_resume() -> None:
    spec = cluster_spec(
        group("gpu", replicas=3, min_replicas=1, gpus=2), group("cpu", replicas=1, gpus=0, hosts=2)
    )
    owner = _owner("RayCluster", spec)
    pods = virtual_pods("RayCluster", owner, "kai-scheduler")
    kinds = [
        (p["metadata"]["labels"]["ray.io/node-type"], p["metadata"]["labels"]["ray.io/group"]) for p in pods
    ]
    assert kinds == [("head", "head")] + [("worker", "gpu")] * 3 + [("worker", "cpu")] * 2
    assert {p["spec"]["schedulerName"] for p in pods} == {"kai-scheduler"}
    assert not any(p["spec"].get("nodeName") for p in pods)
    # Not yet suspended by KubeRay (its pods still going), not suspended, or suspended by
    # someone else: nothing stands in for it.
    going = _owner("RayCluster", spec)
    going["status"] = {}
    assert virtual_pods("RayCluster", going, "kai-scheduler") == []
    assert virtual_pods("RayCluster", _owner("RayCluster", spec, suspended=False), "kai-scheduler") == []
    by_user = _owner("RayCluster", spec)
    by_user["metadata"]["annotations"] = {}
    assert virtual_pods("RayCluster", by_user, "kai-scheduler") == []
    # The gang they make: the cluster's size by its minimums, its queue from the owner.
    [gang] = build_gangs(pods, {("RayCluster", "ml", "rc"): owner}, {}, scheduler_names=("kai-scheduler",))
    assert (gang.id, gang.min_member, gang.queue, len(gang.pods)) == ("ml/RayCluster/rc", 4, "team", 6)


def test_a_suspended_rayjob_waits_with_its_submitters_room() -> None:
    spec = {
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": cluster_spec(group("gpu", replicas=2, gpus=1)),
    }
    owner = _owner("RayJob", spec)
    owner["status"] = {"jobDeploymentStatus": "Suspended"}
    pods = virtual_pods("RayJob", owner, "kai-ray")
    [gang] = build_gangs(pods, {("RayJob", "ml", "rc"): owner}, {}, scheduler_names=("kai-ray",))
    assert gang.kind == "RayJob" and gang.min_member == 4  # head, 2 workers, the submitter
    assert gang.submitter is not None


def test_suspend_and_resume_patches() -> None:
    patch = suspend_patch("preempted", "2026-11-25T09:00:00Z")
    assert patch["spec"] == {"suspend": True}
    assert patch["metadata"]["annotations"] == {
        SUSPENDED_BY: "preempted",
        SUSPENDED_AT: "2026-11-25T09:00:00Z",
    }
    undone = resume_patch()
    assert undone["spec"] == {"suspend": False}
    assert set(undone["metadata"]["annotations"].values()) == {None}  # both annotations removed


def test_a_suspended_gang_waits_from_its_suspension_not_its_creation() -> None:
    owner = _owner("RayCluster", cluster_spec(group("gpu", replicas=1)))
    owner["metadata"]["annotations"][SUSPENDED_AT] = "2026-11-25T09:00:00Z"
    pods = virtual_pods("RayCluster", owner, "kai-ray")
    assert {p["metadata"]["creationTimestamp"] for p in pods} == {"2026-11-25T09:00:00Z"}
    [gang] = build_gangs(pods, {("RayCluster", "ml", "rc"): owner}, {}, scheduler_names=("kai-ray",))
    assert gang.created_at == epoch(owner)  # its place in line is its age, kept


def test_scale_down_names_the_workers_and_lowers_replicas() -> None:
    cluster = _owner("RayCluster", cluster_spec(group("gpu", replicas=4, min_replicas=1)), suspended=False)
    cluster["metadata"]["resourceVersion"] = "42"
    pods = [
        {"metadata": {"name": n, "labels": {"ray.io/node-type": "worker", "ray.io/group": "gpu"}}}
        for n in ("w1", "w2")
    ]
    patch = scale_down(cluster, pods)
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "42"}
    [g] = patch["spec"]["workerGroupSpecs"]
    assert g["replicas"] == 2 and g["scaleStrategy"] == {"workersToDelete": ["w1", "w2"]}
    head = {"metadata": {"name": "h", "labels": {"ray.io/node-type": "head"}}}
    assert scale_down(cluster, [head]) is None  # not a worker: evicted instead
    multi = _owner("RayCluster", cluster_spec(group("gpu", replicas=2, hosts=2)), suspended=False)
    assert scale_down(multi, pods[:1]) is None  # a multi-host replica has no per-host scale-down
