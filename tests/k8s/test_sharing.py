"""The GPU-sharing webhook's answer and the reservations' bookkeeping, as pure functions."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kai_ray.k8s.sharing import SHARE_ANNOTATION, idle_reservations, mutate, reservation_pod


def review(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "object": pod},
    }


def pod(
    scheduler: str = "kai-ray", annotations: dict[str, str] | None = None, env_from: bool = False
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c"}
    if env_from:
        container["envFrom"] = [{"secretRef": {"name": "s"}}]
    return {
        "metadata": {"annotations": annotations or {}},
        "spec": {"schedulerName": scheduler, "containers": [container, {"name": "d"}]},
    }


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    response = answer["response"]
    assert response["allowed"] is True and response["uid"] == "u1"
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


@pytest.mark.parametrize(
    ("obj", "changed"),
    [
        pytest.param(pod(annotations={"gpu-fraction": "0.5"}), True, id="ours-sharing"),
        pytest.param(pod(annotations={"gpu-memory": "2000"}), True, id="ours-memory-slice"),
        pytest.param(pod(), False, id="ours-whole"),
        pytest.param(pod("default-scheduler", {"gpu-fraction": "0.5"}), False, id="not-ours"),
        pytest.param(
            pod(annotations={"gpu-fraction": "0.5", SHARE_ANNOTATION: "x"}), False, id="already-given"
        ),
    ],
)
def test_which_pods_the_webhook_changes(obj: dict[str, Any], changed: bool) -> None:
    assert bool(patch_of(mutate(review(obj), {"kai-ray"}))) is changed


def test_every_container_gets_the_configmap_and_keeps_its_own_env_from() -> None:
    ops = patch_of(mutate(review(pod(annotations={"gpu-fraction": "0.5"}, env_from=True)), {"kai-ray"}))
    share = ops[0]["value"]
    assert ops[0]["path"] == "/metadata/annotations/kai-ray.io~1gpu-share"
    source = {"configMapRef": {"name": f"kai-ray-gpu-share-{share}"}}
    assert ops[1] == {"op": "add", "path": "/spec/containers/0/envFrom/-", "value": source}
    assert ops[2] == {"op": "add", "path": "/spec/containers/1/envFrom", "value": [source]}


def test_a_reservation_is_idle_once_no_sharing_pod_is_bound_to_its_device() -> None:
    reservation = reservation_pod("n0", 1, "img", "kai-ray")
    sharer = {
        "metadata": {"uid": "p", "annotations": {"kai-ray.io/gpu-group": "1"}},
        "spec": {"nodeName": "n0"},
    }
    assert idle_reservations([reservation, sharer], {}) == []
    unbound = {**sharer, "spec": {}}
    assert idle_reservations([reservation, unbound], {}) == [reservation]
    assert idle_reservations([reservation, unbound], {"p": "n0"}) == []  # its binding was sent
    other_device = {**sharer, "metadata": {"uid": "q", "annotations": {"kai-ray.io/gpu-group": "0"}}}
    assert idle_reservations([reservation, other_device], {}) == [reservation]
