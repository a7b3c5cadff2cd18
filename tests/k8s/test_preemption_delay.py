"""The preemption delay on a real API server: with `--cluster-can-grow`, a gang that could
start only by evicting others first waits for new nodes, with a condition and an Event
that say so (`Unschedulable`, which a cluster-autoscaler acts on); after the delay it
evicts; and a node that comes during the delay takes it with nobody evicted."""

from __future__ import annotations

import time

import pytest

from tests.k8s.env import NS, K8sEnv, bound, condition, group, raycluster, running

pytestmark = pytest.mark.k8s
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
WAITING = "for new nodes before preempting (an autoscaler may add them)"


def _training_on_the_only_node(k8s: K8sEnv, delay: str) -> list[str]:
    """One node of 4 GPUs, all held by a training gang; the operator told an autoscaler
    may add nodes. The training pods' names."""
    k8s.node("n0", gpus=4, cpu="8")
    k8s.queue("team", gpu=4)
    k8s.start_fakes()
    k8s.start_operator("--cluster-can-grow", "--preemption-delay", delay)
    k8s.create(RC, raycluster("train", group("gpu", replicas=1, gpus=4), queue="team", priority="train"))
    pods = k8s.wait_for(
        "training running", lambda: len(running(k8s.cluster_pods("train"))) == 2 and k8s.cluster_pods("train")
    )
    return sorted(p["metadata"]["name"] for p in pods)


def _waiting_for_nodes(k8s: K8sEnv, name: str) -> list[dict]:
    """The gang's unbound pods once they say they wait for nodes."""
    return [
        p
        for p in k8s.cluster_pods(name)
        if WAITING in ((condition(p) or {}).get("message") or "")
        and condition(p)["reason"] == "Unschedulable"  # type: ignore[index]
    ]


def test_it_waits_for_nodes_then_evicts(k8s: K8sEnv) -> None:
    training = _training_on_the_only_node(k8s, "4s")
    created = time.monotonic()
    k8s.create(RC, raycluster("urgent", group("gpu", replicas=1, gpus=4), queue="team", priority="inference"))

    waiting = k8s.wait_for("urgent waiting for nodes", lambda: _waiting_for_nodes(k8s, "urgent"))
    # Within the delay: the training gang keeps running, untouched.
    assert sorted(p["metadata"]["name"] for p in bound(k8s.cluster_pods("train"))) == training
    assert "waiting up to 4s " + WAITING in condition(waiting[0])["message"]  # type: ignore[index]
    events = k8s.wait_for(
        "urgent's Event", lambda: [e for e in k8s.events("urgent") if WAITING in e.get("message", "")]
    )
    assert events[0]["reason"] == "Unschedulable" and events[0]["type"] == "Normal"

    # After it: the training gang is evicted, and the urgent one runs in its place.
    k8s.wait_for("training evicted", lambda: not bound(k8s.cluster_pods("train")), timeout=30)
    waited = time.monotonic() - created
    # Creation timestamps are whole seconds: the delay counts from up to 1 s earlier.
    assert waited >= 3.0, waited
    k8s.wait_for("urgent running", lambda: len(running(k8s.cluster_pods("urgent"))) == 2, timeout=60)
    preempted = [e for e in k8s.get(f"/api/v1/namespaces/{NS}/events")["items"] if e["reason"] == "Preempted"]
    assert preempted, "no Preempted event"


def test_a_node_added_during_the_delay_takes_it_and_nobody_is_evicted(k8s: K8sEnv) -> None:
    training = _training_on_the_only_node(k8s, "10m")
    k8s.create(RC, raycluster("urgent", group("gpu", replicas=1, gpus=4), queue="team", priority="inference"))
    k8s.wait_for("urgent waiting for nodes", lambda: _waiting_for_nodes(k8s, "urgent"))
    k8s.node("n1", gpus=4, cpu="8")  # what the autoscaler adds
    pods = k8s.wait_for(
        "urgent running", lambda: len(running(k8s.cluster_pods("urgent"))) == 2 and k8s.cluster_pods("urgent")
    )
    workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert [p["spec"]["nodeName"] for p in workers] == ["n1"]
    assert sorted(p["metadata"]["name"] for p in bound(k8s.cluster_pods("train"))) == training
    assert not [e for e in k8s.get(f"/api/v1/namespaces/{NS}/events")["items"] if e["reason"] == "Preempted"]
