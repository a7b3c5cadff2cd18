"""GPU types on a real API server, with KubeRay's own operator making the pods: nodes of
two products (nvidia.com/gpu.product), RayClusters whose workers select one product or
accept two in order, and a queue with a limit of one product (docs/gpu-types.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.k8s.env import NS, K8sEnv, bound, condition, group, raycluster, requiring, running, workers

pytestmark = pytest.mark.k8s
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
PRODUCT = "nvidia.com/gpu.product"


def selecting(cluster: dict[str, Any], product: str) -> dict[str, Any]:
    """The workers' template with a nodeSelector on the product label."""
    for worker in cluster["spec"]["workerGroupSpecs"]:
        worker["template"]["spec"]["nodeSelector"] = {PRODUCT: product}
    return cluster


def test_workers_go_to_the_product_they_select_and_a_gang_to_one_product(k8s: K8sEnv) -> None:
    k8s.node("h100", gpus=4, labels={PRODUCT: "H100"})
    k8s.node("a100", gpus=4, labels={PRODUCT: "A100"})
    k8s.queue("team", gpu=16)
    k8s.start_fakes()
    k8s.start_operator()
    # Binpack by nodes alone would put these two on either node; they select H100.
    k8s.create(RC, selecting(raycluster("h", group("gpu", replicas=2, gpus=1), queue="team"), "H100"))
    pods = k8s.wait_for(
        "h running", lambda: len(running(k8s.cluster_pods("h"))) == 3 and k8s.cluster_pods("h")
    )
    assert {p["spec"]["nodeName"] for p in workers(pods)} == {"h100"}
    # A gang of 4 that prefers H100 and accepts A100: 2 H100s are left, so it runs on A100
    # whole, rather than across the two products.
    k8s.create(
        RC,
        requiring(
            raycluster("g", group("gpu", replicas=4, gpus=1), queue="team"), "H100", "A100", key=PRODUCT
        ),
    )
    pods = k8s.wait_for(
        "g running", lambda: len(running(k8s.cluster_pods("g"))) == 5 and k8s.cluster_pods("g")
    )
    assert {p["spec"]["nodeName"] for p in workers(pods)} == {"a100"}


def test_a_queues_limit_of_one_product_keeps_a_gang_waiting_with_its_reason(k8s: K8sEnv) -> None:
    k8s.node("h100", gpus=8, labels={PRODUCT: "H100"})
    k8s.node("a100", gpus=8, labels={PRODUCT: "A100"})
    k8s.queue("team", gpu=16, gpu_types={"H100": {"quota": 4, "limit": 4}})
    k8s.start_fakes()
    k8s.start_operator()
    k8s.create(RC, selecting(raycluster("first", group("gpu", replicas=4, gpus=1), queue="team"), "H100"))
    k8s.wait_for("first running", lambda: len(running(k8s.cluster_pods("first"))) == 5)
    k8s.create(RC, selecting(raycluster("more", group("gpu", replicas=2, gpus=1), queue="team"), "H100"))
    waiting = k8s.wait_for(
        "more's reason",
        lambda: [
            p for p in workers(k8s.cluster_pods("more")) if (condition(p) or {}).get("reason") == "QueueLimit"
        ],
    )
    message = condition(waiting[0])["message"]
    assert "queue team is at its H100 limit of 4 (holds 4)" in message, message
    assert "this job accepts H100 only; 8 A100 GPUs are free" in message, message
    assert bound(k8s.cluster_pods("more")) == []


def test_a_queues_fungibility_sends_a_gang_to_the_product_within_its_quota(k8s: K8sEnv) -> None:
    """whenCanBorrow TryNextType on a kai-ray.io/v2 Queue: the API server keeps the key
    (the CRD's schema has it) and a gang that prefers H100 takes A100s, within the
    queue's A100 quota, rather than H100s over its H100 quota of none."""
    k8s.node("h100", gpus=8, labels={PRODUCT: "H100"})
    k8s.node("a100", gpus=8, labels={PRODUCT: "A100"})
    fungibility = {"whenCanBorrow": "TryNextType"}
    k8s.queue("team", gpu=16, gpu_types={"A100": {"quota": 4}}, gpuTypeFungibility=fungibility)
    assert k8s.get("/apis/kai-ray.io/v2/queues/team")["spec"]["gpuTypeFungibility"] == fungibility
    k8s.start_fakes()
    k8s.start_operator()
    gang = raycluster("g", group("gpu", replicas=4, gpus=1), queue="team")
    k8s.create(RC, requiring(gang, "H100", "A100", key=PRODUCT))
    pods = k8s.wait_for(
        "g running", lambda: len(running(k8s.cluster_pods("g"))) == 5 and k8s.cluster_pods("g")
    )
    assert {p["spec"]["nodeName"] for p in workers(pods)} == {"a100"}
