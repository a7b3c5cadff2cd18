"""`kai-ray explain` on Kubernetes names the access rule that stops a gang: the queue whose
rule it is (a parent's when inherited), the field, what it allows, the fix. Run against
a stand-in for the API server that answers the reads explain makes (objects as the API
server returns them); the operator's own writing of the condition is tested with it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kai_ray.k8s import explain
from kai_ray.k8s.client import ApiError

NS = "ml"
CORE_WORDS = (
    "queue 'team''s parent 'org' admits tenant prod, not tenant 'ml'; submit to a queue that admits it, "
    "or an admin adds it to access.tenants of queue 'org'"
)


def _queue(name: str, parent: str | None = None, **access: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": -1}}}
    if parent:
        spec["parentQueue"] = parent
    if access:
        spec["access"] = access
    return {"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}


def _cluster(queue: str = "team") -> dict[str, Any]:
    meta = {"name": "big", "namespace": NS, "labels": {"kai.scheduler/queue": queue}}
    return {"metadata": meta, "spec": {}, "status": {}}


def _pod(reason: str, message: str, priority_class: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "kai-ray", "containers": [{"name": "ray", "resources": {}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    meta = {
        "name": "big-head",
        "namespace": NS,
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"ray.io/cluster": "big", "ray.io/node-type": "head", "ray.io/group": "headgroup"},
        "ownerReferences": [
            {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "big", "controller": True}
        ],
    }
    condition = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending", "conditions": [condition]}}


class FakeKube:
    """Answers GETs from a table of paths (404 for the rest), as Kube does."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers, self.asked = answers, list[str]()

    async def __aenter__(self) -> FakeKube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def get(self, path: str, **params: str) -> Any:
        self.asked.append(path)
        if path not in self.answers:
            raise ApiError(404, "NotFound", path)
        return self.answers[path]


def _explain(monkeypatch: pytest.MonkeyPatch, pod: dict[str, Any], queues: list[dict[str, Any]]) -> str:
    answers = {
        f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/big": _cluster(),
        f"/api/v1/namespaces/{NS}/pods": {"items": [pod]},
        f"/api/v1/namespaces/{NS}/events": {"items": []},
        f"/api/v1/namespaces/{NS}": {"metadata": {"name": NS, "labels": {"team": "ml"}}},
        "/apis/scheduling.k8s.io/v1/priorityclasses": {
            "items": [{"metadata": {"name": "inference"}, "value": 125}]
        },
        "/apis/kai-ray.io/v2/queues": {"items": queues},
    }
    kube = FakeKube(answers)
    monkeypatch.setattr(explain, "Kube", lambda config: kube)
    return asyncio.run(explain.explain_object(None, "RayCluster/big", NS))  # type: ignore[arg-type]


def test_a_tenant_refusal_names_the_parents_rule_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    queues = [_queue("org", tenants=["prod"]), _queue("team", "org")]
    text = _explain(monkeypatch, _pod("QueueTenant", CORE_WORDS), queues)
    assert f"waits: QueueTenant: {CORE_WORDS}" in text
    assert (
        "stopped by the access rule (queue-tenant): access.tenants of queue 'org' "
        "(a parent of 'team': its rule holds below it)"
    ) in text
    assert "it allows tenant prod" in text
    assert (
        "fix: submit to a queue that admits tenant 'ml', or an admin adds it to access.tenants of queue 'org'"
        in text
    )


def test_a_selector_refusal_names_the_selector(monkeypatch: pytest.MonkeyPatch) -> None:
    queues = [_queue("team", tenantSelector={"matchLabels": {"team": "web"}})]
    text = _explain(monkeypatch, _pod("QueueTenant", "queue 'team' admits ..."), queues)
    assert "access.tenantSelector of queue 'team'" in text and "(a parent" not in text
    assert "it allows tenants labelled team=web" in text
    assert "gives it labels that match access.tenantSelector of queue 'team'" in text


def test_a_priority_over_the_ceiling_names_max_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    queues = [_queue("team", maxPriority="build")]
    text = _explain(monkeypatch, _pod("PriorityCeiling", "priority 125 is over ...", "inference"), queues)
    assert "stopped by the access rule (priority-ceiling): access.maxPriority of queue 'team'" in text
    assert "it allows priorities up to 100 (build)" in text
    assert "fix: use a priority class of at most 100" in text


def test_a_class_not_listed_names_priority_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    queues = [_queue("org", priorityClasses=["train", "build"]), _queue("team", "org")]
    text = _explain(monkeypatch, _pod("PriorityCeiling", "priority 125 is not ...", "inference"), queues)
    assert "access.priorityClasses of queue 'org' (a parent of 'team'" in text
    assert "it allows the priority classes train (50), build (100)" in text


def test_closed_by_default_is_named_when_no_queue_names_a_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _explain(
        monkeypatch, _pod("QueueTenant", "queue 'team' is closed to tenants ..."), [_queue("team")]
    )
    assert "stopped by the access rule (queue-tenant): closedQueues (the scheduler's setting)" in text
    assert "fix: an admin names tenant 'ml' in access.tenants of queue 'team' or of a parent" in text


def test_other_reasons_read_no_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {
        f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/big": _cluster(),
        f"/api/v1/namespaces/{NS}/pods": {"items": [_pod("Unschedulable", "no node has 8 GPUs free")]},
        f"/api/v1/namespaces/{NS}/events": {"items": []},
    }
    kube = FakeKube(answers)
    monkeypatch.setattr(explain, "Kube", lambda config: kube)
    text = asyncio.run(explain.explain_object(None, "RayCluster/big", NS))  # type: ignore[arg-type]
    assert "waits: Unschedulable: no node has 8 GPUs free" in text and "access rule" not in text
    assert not any("queues" in path or "priorityclasses" in path for path in kube.asked)
