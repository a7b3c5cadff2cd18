"""Required node affinity on a real API server, with KubeRay's own operator making the pods
from the RayCluster's templates: workers bound only on the nodes their affinity admits; a
gang no node admits waits, its Event and pod condition naming the pod and the affinity,
until a node with the label joins."""

from __future__ import annotations

import pytest

from tests.k8s.env import NS, K8sEnv, bound, condition, group, raycluster, requiring, running, workers

pytestmark = pytest.mark.k8s
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


def test_workers_are_bound_only_on_the_nodes_their_affinity_admits(k8s: K8sEnv) -> None:
    # Binpack alone would stack the workers on "plain", the first node with room.
    k8s.node("plain", gpus=8)
    k8s.node("a100", gpus=4, labels={"gpu-type": "a100"})
    k8s.queue("team", gpu=12)
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, requiring(raycluster("rc", group("gpu", replicas=3, gpus=1), queue="team"), "a100"))
    pods = k8s.wait_for(
        "the cluster running", lambda: len(running(k8s.cluster_pods("rc"))) == 4 and k8s.cluster_pods("rc")
    )
    assert {p["spec"]["nodeName"] for p in workers(pods)} == {"a100"}


def test_a_gang_no_node_admits_waits_with_its_reason_until_a_labelled_node_joins(k8s: K8sEnv) -> None:
    k8s.node("a100", gpus=4, labels={"gpu-type": "a100"})
    k8s.queue("team", gpu=8)
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, requiring(raycluster("rc", group("gpu", replicas=2, gpus=1), queue="team"), "h100"))
    waiting = k8s.wait_for(
        "the gang's reason",
        lambda: [p for p in k8s.cluster_pods("rc") if (condition(p) or {}).get("reason") == "Unschedulable"],
    )
    assert bound(k8s.cluster_pods("rc")) == []  # not even the head, which the node could hold
    message = condition(waiting[0])["message"]
    worker = workers(k8s.cluster_pods("rc"))[0]["metadata"]["name"]
    assert f"no schedulable node meets the required node affinity of pod {NS}/" in message, message
    assert ": gpu-type In [h100]" in message, message
    assert any(w["metadata"]["name"] in message for w in workers(k8s.cluster_pods("rc"))), (worker, message)
    events = k8s.wait_for(
        "the Event", lambda: [e for e in k8s.events("rc") if "node affinity" in e["message"]]
    )
    assert events[0]["reason"] == "Unschedulable", events

    k8s.node("h100", gpus=4, labels={"gpu-type": "h100"})
    pods = k8s.wait_for(
        "the cluster bound", lambda: len(bound(k8s.cluster_pods("rc"))) == 3 and k8s.cluster_pods("rc")
    )
    assert {p["spec"]["nodeName"] for p in workers(pods)} == {"h100"}
