"""Time on a real kube-apiserver with KubeRay's own operator: a RayCluster past the max
runtime its annotation (or its queue) gives is stopped for good (suspended, marked, told
in an Event, never resumed); a waiting gang's pods say when it is expected to start;
a bad annotation is refused naming the object, the annotation and the fix."""

from __future__ import annotations

import calendar
import re
import time
from typing import Any

import pytest

from kai_ray.k8s.gangs import EXPECTED_RUNTIME, MAX_RUNTIME
from kai_ray.k8s.suspension import STOPPED
from tests.k8s.env import NS, K8sEnv, bound, group, raycluster, running

pytestmark = pytest.mark.k8s
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


def _annotated(body: dict[str, Any], **annotations: str) -> dict[str, Any]:
    body["metadata"]["annotations"] = {**(body["metadata"].get("annotations") or {}), **annotations}
    return body


def _waiting_message(k8s: K8sEnv, cluster: str) -> str:
    """The PodScheduled message of the cluster's unbound pods ("" while none has one)."""
    for pod in k8s.pods(f"ray.io/cluster={cluster}"):
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                return str(cond.get("message") or "")
    return ""


def _started(k8s: K8sEnv, gpus: int = 4, operator: tuple[str, ...] = (), **queue: str) -> None:
    """One node of `gpus` GPUs, the queue `team` (with `queue`'s keys), KubeRay and kai-ray
    (with `operator`'s flags)."""
    k8s.node("n0", gpus=gpus)
    k8s.queue("team", gpu=gpus, **queue)
    k8s.start_fakes()
    k8s.start_operator(*operator)


def _cluster(name: str, workers: int = 1, **annotations: str) -> dict[str, Any]:
    """A RayCluster of a head and `workers` 4-GPU workers in `team`."""
    body = raycluster(name, group("gpu", replicas=workers, gpus=4), queue="team", priority="train")
    return _annotated(body, **annotations)


def _suspended(k8s: K8sEnv, name: str) -> dict[str, Any]:
    return k8s.wait_for(
        f"{name} stopped", lambda: (o := k8s.get(f"{RC}/{name}"))["spec"].get("suspend") and o, timeout=60
    )


def test_a_raycluster_past_its_max_runtime_is_stopped_for_good(k8s: K8sEnv) -> None:
    _started(k8s)
    k8s.create(RC, _cluster("capped", **{MAX_RUNTIME: "6s"}))
    k8s.wait_for("capped running", lambda: len(running(k8s.cluster_pods("capped"))) == 2, timeout=60)
    started = time.monotonic()
    capped = _suspended(k8s, "capped")
    assert time.monotonic() - started >= 3.0  # not before its run time is spent (bind to running took some)
    why = "stopped: it ran past its max runtime of 6s"
    assert capped["metadata"]["annotations"][STOPPED] == why
    events = [e for e in k8s.events("capped") if e["reason"] == "Stopped"]
    assert [e["message"] for e in events] == [why]
    k8s.wait_for("its pods gone", lambda: not k8s.cluster_pods("capped"), timeout=60)
    # Stopped for good: room is free, yet nothing of it is made again or resumed.
    time.sleep(4)
    assert not k8s.cluster_pods("capped")
    assert k8s.get(f"{RC}/capped")["spec"]["suspend"] is True
    # The room it held goes to the next one.
    k8s.create(RC, _cluster("next"))
    k8s.wait_for("next running", lambda: len(running(k8s.cluster_pods("next"))) == 2, timeout=60)


def test_a_queues_max_runtime_stops_what_declares_none(k8s: K8sEnv) -> None:
    _started(k8s, maxRuntime="8s")
    k8s.create(RC, _cluster("plain"))
    k8s.wait_for("plain placed", lambda: len(bound(k8s.cluster_pods("plain"))) == 2, timeout=60)
    plain = _suspended(k8s, "plain")
    assert plain["metadata"]["annotations"][STOPPED] == "stopped: it ran past its max runtime of 8s"


def test_a_waiting_gang_says_when_it_is_expected_to_start(k8s: K8sEnv) -> None:
    _started(k8s)
    k8s.create(RC, _cluster("busy", **{EXPECTED_RUNTIME: "2h"}))
    k8s.wait_for("busy running", lambda: len(running(k8s.cluster_pods("busy"))) == 2, timeout=60)
    k8s.create(RC, _cluster("next"))
    message = k8s.wait_for(
        "a forecast in next's pods",
        lambda: "expected to start about" in (m := _waiting_message(k8s, "next")) and m,
        timeout=60,
    )
    assert message.endswith("UTC (run times: declared)")
    said = re.search(r"expected to start about (\d{4}-\d\d-\d\d \d\d:\d\d) UTC", message)
    assert said is not None, message
    at = calendar.timegm(time.strptime(said.group(1), "%Y-%m-%d %H:%M"))
    assert abs(at - (time.time() + 7200)) < 600  # two hours from now (rounded to 5 minutes)
    said = k8s.wait_for(
        "an Event with the forecast",
        lambda: [e for e in k8s.events("next") if "expected to start about" in e["message"]],
        timeout=30,
    )
    assert said[0]["reason"] in ("Forecast", "Unschedulable") and said[0]["type"] == "Normal"


def test_a_gang_that_waited_reserves_its_room_and_only_quick_work_backfills(k8s: K8sEnv) -> None:
    """With --reserve-after, a big cluster that waits holds the room it will start on:
    its pods say so; a cluster with no run time waits for it, one that ends first runs."""
    _started(k8s, gpus=8, operator=("--reserve-after", "1s"))
    k8s.create(RC, _cluster("busy", **{EXPECTED_RUNTIME: "2h"}))
    k8s.wait_for("busy running", lambda: len(running(k8s.cluster_pods("busy"))) == 2, timeout=60)
    k8s.create(RC, _cluster("big", workers=2))
    message = k8s.wait_for(
        "big's reservation in its pods",
        lambda: "room is reserved for it on 1 node (n0)" in (m := _waiting_message(k8s, "big")) and m,
        timeout=60,
    )
    assert "gang of 2 tasks (4 GPUs" in message
    k8s.create(RC, _cluster("slow"))
    held = k8s.wait_for(
        "slow held back",
        lambda: "is reserved for gang" in (m := _waiting_message(k8s, "slow")) and m,
        timeout=60,
    )
    assert "only work expected to end by then may use it (backfill" in held
    k8s.create(RC, _cluster("quick", **{EXPECTED_RUNTIME: "10m"}))
    k8s.wait_for("quick backfills", lambda: len(bound(k8s.cluster_pods("quick"))) == 2, timeout=60)
    assert len(bound(k8s.cluster_pods("slow"))) < 2 and len(bound(k8s.cluster_pods("big"))) < 3


def test_a_bad_runtime_annotation_is_refused_naming_it_and_running_work_is_kept(k8s: K8sEnv) -> None:
    _started(k8s, gpus=8)
    k8s.create(RC, _cluster("fine"))
    k8s.wait_for("fine running", lambda: len(running(k8s.cluster_pods("fine"))) == 2, timeout=60)
    k8s.create(RC, _cluster("bad", **{MAX_RUNTIME: "soon"}))
    message = k8s.wait_for("bad refused", lambda: _waiting_message(k8s, "bad"), timeout=60)
    assert f"annotation {MAX_RUNTIME} on RayCluster {NS}/bad" in message
    assert "'soon' is not a duration" in message and "remove the annotation" in message
    assert len(running(k8s.cluster_pods("fine"))) == 2


def _batch_job(name: str, **annotations: str) -> dict[str, Any]:
    container = {
        "name": "work",
        "image": "busybox",
        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kai.scheduler/queue": "team"},
            "annotations": annotations,
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {
                "metadata": {"labels": {"job": name}},
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "restartPolicy": "Never",
                    "containers": [container],
                },
            },
        },
    }


def test_a_batch_job_past_its_max_runtime_is_suspended_for_good(k8s: K8sEnv) -> None:
    k8s.start_controllers()  # Kubernetes' Job controller makes the pods and takes them away
    _started(k8s)
    k8s.create(f"/apis/batch/v1/namespaces/{NS}/jobs", _batch_job("capped", **{MAX_RUNTIME: "6s"}))
    k8s.wait_for("its pod placed", lambda: bound(k8s.pods("job=capped")), timeout=60)
    job = k8s.wait_for(
        "the job suspended",
        lambda: (o := k8s.get(f"/apis/batch/v1/namespaces/{NS}/jobs/capped"))["spec"].get("suspend") and o,
        timeout=60,
    )
    why = "stopped: it ran past its max runtime of 6s"
    assert job["metadata"]["annotations"][STOPPED] == why
    assert [e["message"] for e in k8s.events("capped") if e["reason"] == "Stopped"] == [why]
    k8s.wait_for(
        "its pod gone",
        lambda: not [p for p in k8s.pods("job=capped") if not p["metadata"].get("deletionTimestamp")],
        timeout=60,
    )
