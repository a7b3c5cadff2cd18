"""Worker groups as sub-gangs, on a real API server with KubeRay's own operator: a
RayCluster starts only when its head and every worker group's minimum fit together;
a group's surplus never stands in for another group's minimum."""

from __future__ import annotations

from typing import Any

import pytest

from tests.k8s.env import NS, K8sEnv, bound, condition, group, raycluster

pytestmark = pytest.mark.k8s
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


def by_group(pods: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pods:
        labels = p["metadata"]["labels"]
        name = "head" if labels.get("ray.io/node-type") == "head" else labels["ray.io/group"]
        out[name] = out.get(name, 0) + 1
    return out


def test_a_cluster_waits_for_every_groups_minimum_then_binds_them_together(k8s: K8sEnv) -> None:
    # Group a: 3 workers of 1 GPU, minimum 1; group b: 2 workers of 2 GPUs, minimum 2.
    # On 4 GPUs the head and all of a fit (4 pods: the gang's total), but b's minimum
    # beside a's does not (5 GPUs): nothing is bound, and the reason names b.
    k8s.node("n0", gpus=4)
    k8s.queue("team", gpu=16)
    k8s.start_fakes()
    k8s.start_operator()
    a = group("a", replicas=3, min_replicas=1, gpus=1)
    b = group("b", replicas=2, min_replicas=2, gpus=2)
    k8s.create(RC, raycluster("two", a, b, queue="team"))

    waiting = k8s.wait_for(
        "the cluster's reason",
        lambda: (
            [p for p in k8s.cluster_pods("two") if condition(p)] if len(k8s.cluster_pods("two")) == 6 else []
        ),
    )
    assert bound(k8s.cluster_pods("two")) == []  # not the head, not a's workers
    message = condition(waiting[0])["message"]  # type: ignore[index]
    assert "subgroup b" in message, message

    # Room for every minimum: head, one of a and both of b are bound together; a's
    # surplus follows where room is left (8 GPUs: all of it).
    k8s.node("n1", gpus=4)
    placed = k8s.wait_for(
        "the minimums bound",
        lambda: by_group(bound(k8s.cluster_pods("two"))) if len(bound(k8s.cluster_pods("two"))) >= 4 else {},
    )
    assert placed["head"] == 1 and placed["b"] == 2 and placed["a"] >= 1, placed
    k8s.wait_for("a's surplus bound", lambda: len(bound(k8s.cluster_pods("two"))) == 6)
