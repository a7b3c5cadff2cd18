"""What the operator tells waiting pods, on a real API server: a pod's place in line is
in its message, and a line that grows does not rewrite every waiting pod at once."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kai_ray.k8s.report import PLACE_REFRESH_S
from tests.k8s.env import NS, K8sEnv, condition, running

pytestmark = pytest.mark.k8s
PODS = f"/api/v1/namespaces/{NS}/pods"


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kai.scheduler/queue": "team"}},
        "spec": {
            "schedulerName": "kai-ray",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def _told(k8s: K8sEnv, name: str) -> tuple[str, str]:
    """The pod's PodScheduled message and the resourceVersion it was read at."""
    pod = k8s.get(f"{PODS}/{name}")
    return (condition(pod) or {}).get("message", ""), pod["metadata"]["resourceVersion"]


def _told_with(k8s: K8sEnv, name: str, words: str) -> tuple[str, str] | None:
    told = _told(k8s, name)
    return told if words in told[0] else None


def test_a_new_job_in_line_does_not_rewrite_the_pods_ahead_until_the_refresh(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=1)
    k8s.queue("team", gpu=1)
    k8s.start_fakes(kuberay=False)
    k8s.start_operator()
    k8s.create(PODS, _pod("runs"))
    k8s.wait_for("the first pod running", lambda: running(k8s.pods()))
    for name in ("w1", "w2"):
        k8s.create(PODS, _pod(name))
    k8s.wait_for("w2 told its place", lambda: "(position 2 of 2 in queue team)" in _told(k8s, "w2")[0])
    first, version = k8s.wait_for("w1 told its place", lambda: _told_with(k8s, "w1", "(position 1 of 2 in"))
    written = time.monotonic()

    k8s.create(PODS, _pod("w3"))  # the line grows: w1's message would now say "of 3"
    k8s.wait_for("w3 told its place", lambda: "(position 3 of 3 in queue team)" in _told(k8s, "w3")[0])
    assert _told(k8s, "w1") == (first, version), "w1 written again for its place alone, too soon"
    assert time.monotonic() - written < PLACE_REFRESH_S  # the check above ran inside the refresh

    # Its place is not lost: written again once the refresh has passed.
    k8s.wait_for(
        "w1's new place",
        lambda: "(position 1 of 3 in queue team)" in _told(k8s, "w1")[0],
        PLACE_REFRESH_S + 20,
    )
