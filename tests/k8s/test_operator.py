"""The operator on a real API server: gangs, queues, priority, elastic workers, RayJobs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.k8s.env import NS, K8sEnv, bound, condition, group, raycluster, running

pytestmark = pytest.mark.k8s
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


def test_a_gang_is_bound_whole_and_a_gang_too_big_waits_whole_with_its_reason(k8s: K8sEnv) -> None:
    for i in range(2):
        k8s.node(f"n{i}", gpus=4)
    k8s.queue("team", gpu=8)
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, raycluster("fits", group("gpu", replicas=3, gpus=2), queue="team"))
    k8s.create(RC, raycluster("huge", group("gpu", replicas=2, gpus=8), queue="team"))

    pods = k8s.wait_for(
        "the fitting gang running",
        lambda: len(running(k8s.cluster_pods("fits"))) == 4 and k8s.cluster_pods("fits"),
    )
    assert {p["spec"]["nodeName"] for p in pods} <= {"n0", "n1"}
    huge = k8s.wait_for(
        "the big gang's reason",
        lambda: [
            p for p in k8s.cluster_pods("huge") if (condition(p) or {}).get("reason") == "Unschedulable"
        ],
    )
    assert bound(k8s.cluster_pods("huge")) == []  # not even the head
    assert len(huge) == 3
    message = condition(huge[0])["message"]
    assert "8" in message and "node" in message, message
    events = k8s.events("huge")
    assert any(e["reason"] == "Unschedulable" for e in events), events

    # `kai-ray explain` reads the same back from the API server.
    explained = subprocess.run(
        [
            sys.executable,
            "-m",
            "kai_ray.cli",
            "explain",
            "RayCluster/huge",
            "--kubeconfig",
            k8s.api.kubeconfig,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert explained.returncode == 0, explained.stderr
    assert "RayCluster default/huge: 0 of 3 pods bound" in explained.stdout
    assert "waits: Unschedulable:" in explained.stdout and message in explained.stdout
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "kai_ray.cli",
            "explain",
            "RayCluster/nope",
            "--kubeconfig",
            k8s.api.kubeconfig,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "RayCluster default/nope does not exist" in missing.stderr


def test_gang_waits_until_the_whole_gang_fits_then_is_bound_at_once(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("team", gpu=8)
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, raycluster("first", group("gpu", replicas=2, gpus=2), queue="team"))
    k8s.wait_for("first running", lambda: len(running(k8s.cluster_pods("first"))) == 3)
    k8s.create(RC, raycluster("second", group("gpu", replicas=2, gpus=2), queue="team"))
    k8s.wait_for("second waiting", lambda: any(condition(p) for p in k8s.cluster_pods("second")))
    assert bound(k8s.cluster_pods("second")) == []
    k8s.node("n1", gpus=4)
    k8s.wait_for("second bound whole", lambda: len(bound(k8s.cluster_pods("second"))) == 3)


def test_reclaim_between_queues_by_fair_share(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("a", gpu=2)
    k8s.queue("b", gpu=2)
    k8s.start_fakes()
    k8s.start_operator()
    # Queue a takes the whole node while b has nothing waiting.
    k8s.create(RC, raycluster("a1", group("gpu", replicas=4, min_replicas=1, gpus=1), queue="a"))
    k8s.wait_for("a1 on all four GPUs", lambda: len(running(k8s.cluster_pods("a1"))) == 5)
    # b asks for its quota: a's workers over its share are reclaimed.
    k8s.create(RC, raycluster("b1", group("gpu", replicas=2, gpus=1), queue="b"))
    k8s.wait_for("b1 running", lambda: len(running(k8s.cluster_pods("b1"))) == 3, timeout=60)
    a_gpus = sum(1 for p in bound(k8s.cluster_pods("a1")) if p["metadata"]["labels"]["ray.io/group"] == "gpu")
    assert a_gpus == 2
    assert any(e["reason"] == "Reclaimed" for e in _all_events(k8s))


def test_pods_of_other_schedulers_count_as_used(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("team", gpu=4)
    k8s.create(
        f"/api/v1/namespaces/{NS}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "outsider"},
            "spec": {
                "nodeName": "n0",
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "resources": {"requests": {"nvidia.com/gpu": "3"}, "limits": {"nvidia.com/gpu": "3"}},
                    }
                ],
            },
        },
    )
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, raycluster("rc", group("gpu", replicas=1, gpus=2), queue="team"))
    waiting = k8s.wait_for("rc waiting", lambda: [p for p in k8s.cluster_pods("rc") if condition(p)])
    assert "1" in condition(waiting[0])["message"]  # one GPU free
    assert bound(k8s.cluster_pods("rc")) == []


def test_work_held_by_its_queue_does_not_ask_for_nodes(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("capped", gpu=1, gpu_limit=1)
    k8s.queue("open", gpu=2)
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, raycluster("held", group("gpu", replicas=2, gpus=1), queue="capped"))
    k8s.create(RC, raycluster("roomless", group("gpu", replicas=1, gpus=8), queue="open"))
    held = k8s.wait_for(
        "held's condition", lambda: [c for p in k8s.cluster_pods("held") if (c := condition(p))]
    )
    roomless = k8s.wait_for(
        "roomless's condition", lambda: [c for p in k8s.cluster_pods("roomless") if (c := condition(p))]
    )
    assert held[0]["reason"] == "QueueLimit", held
    assert roomless[0]["reason"] == "Unschedulable", roomless


def test_bad_queues_get_a_condition_and_the_others_keep_working(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("good", gpu=2)
    k8s.queue("orphan", gpu=1, parent="nowhere")
    k8s.queue("inverted", gpu=3, gpu_limit=1)
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, raycluster("rc", group("gpu", replicas=1, gpus=1), queue="good"))
    k8s.wait_for("rc running", lambda: len(running(k8s.cluster_pods("rc"))) == 2)

    def ready(name: str) -> dict | None:
        status = k8s.get(f"/apis/kai-ray.io/v2/queues/{name}").get("status", {})
        return next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)

    orphan = k8s.wait_for("orphan's condition", lambda: ready("orphan"))
    inverted = k8s.wait_for("inverted's condition", lambda: ready("inverted"))
    assert orphan["status"] == "False" and "parent 'nowhere' does not exist" in orphan["message"]
    assert inverted["status"] == "False" and "limit" in inverted["message"] and "quota" in inverted["message"]
    assert ready("good")["status"] == "True"
    good = k8s.wait_for(
        "good's allocation",
        lambda: k8s.get("/apis/kai-ray.io/v2/queues/good").get("status", {}).get("allocated"),
    )
    assert good["gpu"] == 1
    assert any(e["reason"] == "InvalidQueue" for e in k8s.events("orphan"))


def test_kai_queue_objects_are_read_as_they_are(k8s: K8sEnv) -> None:
    k8s.install(kuberay=False, kai_queue=True)
    k8s.node("n0", gpus=4)
    k8s.queue("kai-team", gpu=2, api="scheduling.run.ai/v2")
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, raycluster("rc", group("gpu", replicas=1, gpus=1), queue="kai-team"))
    k8s.wait_for("rc running", lambda: len(running(k8s.cluster_pods("rc"))) == 2)


def _spec(*groups: dict) -> dict:
    from tests.k8s.env import cluster_spec

    return cluster_spec(*groups)


def _all_events(k8s: K8sEnv) -> list[dict]:
    return k8s.get(f"/api/v1/namespaces/{NS}/events")["items"]


def test_a_plain_pod_without_a_queue_label_runs_in_the_default_queue(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=1)
    k8s.start_fakes(kuberay=False)
    k8s.start_operator("--install-crds")  # on a cluster without queues: KAI's defaults
    k8s.create(
        f"/api/v1/namespaces/{NS}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "plain"},
            "spec": {
                "schedulerName": "kai-ray",
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
        },
    )
    k8s.wait_for("the plain pod running", lambda: running(k8s.pods()))
    queues = {q["metadata"]["name"]: q for q in k8s.get("/apis/kai-ray.io/v2/queues")["items"]}
    assert queues["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    k8s.wait_for(
        "default-queue's allocation",
        lambda: (
            k8s.get("/apis/kai-ray.io/v2/queues/default-queue")
            .get("status", {})
            .get("allocated", {})
            .get("gpu")
            == 1
        ),
    )


def test_a_batch_job_with_kais_min_member_waits_until_all_its_pods_exist(k8s: K8sEnv) -> None:
    """KAI's `kai.scheduler/batch-min-member` on a Job: its pods are one gang of that many,
    which waits while fewer exist (as KAI's podgrouper makes its PodGroup's minMember)."""
    k8s.node("n0", gpus=8)
    k8s.queue("team", gpu=8)
    k8s.start_operator()
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    job = k8s.create(
        f"/apis/batch/v1/namespaces/{NS}/jobs",
        {
            "metadata": {
                "name": "dist",
                "labels": {"kai.scheduler/queue": "team"},
                "annotations": {"kai.scheduler/batch-min-member": "3"},
            },
            "spec": {"parallelism": 3, "completions": 3, "template": template},
        },
    )
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "dist",
        "uid": job["metadata"]["uid"],
        "controller": True,
    }

    def pod(i: int) -> dict[str, object]:
        limits = {"limits": {"nvidia.com/gpu": "1"}}
        return {
            "metadata": {
                "name": f"dist-{i}",
                "ownerReferences": [owner],
                "labels": {"batch.kubernetes.io/job-name": "dist"},
            },
            "spec": {
                "schedulerName": "kai-ray",
                "containers": [{"name": "c", "image": "x", "resources": limits}],
            },
        }

    for i in range(2):
        k8s.create(f"/api/v1/namespaces/{NS}/pods", pod(i))
    told = k8s.wait_for(
        "the two pods told the gang is short",
        lambda: all(condition(p) for p in k8s.pods()) and [condition(p) for p in k8s.pods()],
    )
    assert bound(k8s.pods()) == []
    assert {c["reason"] for c in told if c} == {"GangIncomplete"}, told
    k8s.create(f"/api/v1/namespaces/{NS}/pods", pod(2))
    k8s.wait_for("the whole gang bound", lambda: len(bound(k8s.pods())) == 3)
