"""Level-triggered: the operator keeps nothing the API server does not hold. Killed in
the middle of binding, a new one leaves no partial gang and binds no pod twice."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from kai_ray.k8s.suspension import SUSPENDED_BY
from tests.k8s.burst import GPUS, NODES, PODS_PER_GANG, by_gang, gang_pod, gpus_per_node, make_gangs, partial
from tests.k8s.env import NS, K8sEnv, bound, cluster_spec, group

pytestmark = pytest.mark.k8s


def test_operator_killed_while_binding_leaves_no_partial_gang(k8s: K8sEnv) -> None:
    for i in range(NODES):
        k8s.node(f"n{i:02d}", gpus=GPUS, cpu="64")
    k8s.queue("default-parent-queue", gpu=-1)
    k8s.queue("default-queue", gpu=-1, parent="default-parent-queue")
    make_gangs(k8s)
    k8s.start_fakes(kuberay=False)
    k8s.start_operator()
    k8s.wait_for("the first bindings", lambda: bound(k8s.pods()), timeout=60)
    k8s.stop_operator(signal.SIGKILL)  # in the middle of the first cycle's bindings
    at_kill = k8s.pods()
    partial_at_kill = partial(at_kill)
    print(f"at the kill: {len(bound(at_kill))} pods bound, {len(partial_at_kill)} gangs partly bound")

    k8s.start_operator()
    fits = NODES * GPUS // PODS_PER_GANG
    k8s.wait_for(
        "every gang that fits bound whole",
        lambda: len(bound(k8s.pods())) == fits * PODS_PER_GANG and not partial(k8s.pods()),
        timeout=90,
    )
    time.sleep(2)  # a few more cycles: nothing changes
    pods = k8s.pods()
    assert partial(pods) == []
    assert max(gpus_per_node(pods).values()) <= GPUS  # no node holds more than it has: nothing bound twice
    assert len(bound(pods)) == fits * PODS_PER_GANG

    # Room returns: every remaining gang is bound once it fits.
    done = [g for g, ps in by_gang(pods).items() if bound(ps)]
    for gang in done:
        for p in by_gang(pods)[gang]:
            k8s.delete(f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}")
    k8s.wait_for("the next gangs bound", lambda: len(bound(k8s.pods())) == fits * PODS_PER_GANG, timeout=90)
    assert partial(k8s.pods()) == []


def test_a_partly_bound_gang_that_no_longer_fits_is_suspended_whole(k8s: K8sEnv, tmp_path: Path) -> None:
    """As a crash can leave it: half a gang bound, and the room for the rest taken since."""
    k8s.node("n0", gpus=4)
    k8s.queue("default-parent-queue", gpu=-1)
    k8s.queue("default-queue", gpu=-1, parent="default-parent-queue")
    rc = k8s.create(
        f"/apis/ray.io/v1/namespaces/{NS}/rayclusters",
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "half", "namespace": NS},
            "spec": cluster_spec(group("w", replicas=3)),
        },
    )
    for j in range(4):
        k8s.create(f"/api/v1/namespaces/{NS}/pods", gang_pod("half", rc["metadata"]["uid"], j))
    for j in range(2):  # the operator died after binding two of the four
        k8s.run(k8s.kube.bind(NS, f"half-{j}", "n0"))
    k8s.create(
        f"/api/v1/namespaces/{NS}/pods",
        {  # and another scheduler took the rest
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "squatter"},
            "spec": {
                "nodeName": "n0",
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
                    }
                ],
            },
        },
    )
    config = tmp_path / "scheduler.yaml"
    config.write_text("staleGangGracePeriod: 2s\n")
    k8s.start_fakes(kuberay=False)
    k8s.start_operator("--config", str(config))
    # A RayCluster is stopped the way KubeRay expects: suspended (KubeRay, not run here,
    # then deletes its pods and makes none until kai-ray resumes it).
    half = k8s.wait_for(
        "the half gang suspended",
        lambda: (
            (o := k8s.get(f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/half"))["spec"].get("suspend") and o
        ),
        timeout=60,
    )
    assert "stale" in half["metadata"]["annotations"][SUSPENDED_BY].lower()
    # The operator tells why after it suspends (the patch, then the Events): wait for it.
    k8s.wait_for(
        "the StaleGang event",
        lambda: any(e["reason"] == "StaleGang" for e in k8s.get(f"/api/v1/namespaces/{NS}/events")["items"]),
    )
