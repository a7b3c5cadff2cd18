"""KubeRay's own operator with live Ray heads: the fake kubelet runs real Ray for a
RayCluster's pods, each pod in a network namespace of its own, and KubeRay reaches a
head through its Service's name (kai_ray/testing/liveray.py). kai-ray schedules every
pod. A RayJob runs to SUCCEEDED, and preempted, is suspended, resumed and still
completes; a RayService's Serve application becomes healthy and answers; and the seeds'
story runs end to end from the example manifests."""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.testing.kubedemo import ask_model, serving, with_local_code
from kai_ray.testing.liveray import LiveRay, live_ray_possible
from tests.k8s.env import NS, K8sEnv, group, name_scheduler, named, raycluster, running

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(420)]
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
RJ = f"/apis/ray.io/v1/namespaces/{NS}/rayjobs"
RS = f"/apis/ray.io/v1/namespaces/{NS}/rayservices"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def live(k8s: K8sEnv) -> Iterator[LiveRay]:
    why = live_ray_possible()
    assert not why, f"live Ray cannot run here: {why}"
    # A short folder: Ray's sockets live under it, and a socket's path has 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="kr-", dir="/tmp"))
    ray = LiveRay(folder)
    try:
        yield ray
    finally:
        k8s.stop_operator()
        ray.close()
        shutil.rmtree(folder, ignore_errors=True)


def _rayjob(name: str, entrypoint: str, gpus: int, *, shutdown: bool = False) -> dict[str, Any]:
    """A RayJob of queue team at priority train; `shutdown`: its cluster deleted once it
    ends (KubeRay suspends only such a RayJob; kai-ray evicts the others' pods)."""
    worker = group("gpu", replicas=1, gpus=gpus)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kai.scheduler/queue": "team", "ray.io/priority-class-name": "train"},
        },
        "spec": {
            "entrypoint": entrypoint,
            "submissionMode": "HTTPMode",  # KubeRay's operator submits to the head's dashboard
            "shutdownAfterJobFinishes": shutdown,
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": named(group("h", replicas=0, gpus=0)["template"]),
                },
                "workerGroupSpecs": [{**worker, "template": named(worker["template"])}],
            },
        },
    }


def _job(k8s: K8sEnv, name: str) -> dict[str, Any]:
    return k8s.get(f"{RJ}/{name}").get("status") or {}


def _head_address(k8s: K8sEnv, cluster: str) -> str:
    (head,) = [p for p in k8s.cluster_pods(cluster) if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    return str(head["status"]["podIP"])


def _http(url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


PRINT_GPUS = "python -c \"import ray; ray.init(); print('GPUS', ray.cluster_resources().get('GPU'))\""


def test_a_rayjob_runs_to_succeeded_on_a_live_ray_head(k8s: K8sEnv, live: LiveRay) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("team", gpu=4)
    k8s.start_fakes(batch_scheduler=None, live_ray=live)
    k8s.start_operator()
    k8s.create(RJ, _rayjob("count", PRINT_GPUS, gpus=2))
    status = k8s.wait_for(
        "SUCCEEDED", lambda: (s := _job(k8s, "count")).get("jobStatus") == "SUCCEEDED" and s, 180
    )
    assert status["jobDeploymentStatus"] == "Complete"
    cluster = status["rayClusterName"]
    pods = k8s.cluster_pods(cluster)
    assert len(running(pods)) == 2 and all(p["spec"]["nodeName"] == "n0" for p in pods)
    logs = _http(f"http://{_head_address(k8s, cluster)}:8265/api/jobs/{status['jobId']}/logs")["logs"]
    assert "GPUS 2.0" in logs  # the worker joined the head with the GPUs its pod asked for


def test_a_preempted_rayjob_is_suspended_resumed_and_still_completes(k8s: K8sEnv, live: LiveRay) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("team", gpu=4)
    k8s.start_controllers()  # the garbage collector: a deleted cluster's pods go
    k8s.start_fakes(batch_scheduler=None, live_ray=live)
    k8s.start_operator()
    steps = "python -c \"import time; [print('step', i, flush=True) or time.sleep(1) for i in range(12)]\""
    k8s.create(RJ, _rayjob("train", steps, gpus=4, shutdown=True))
    k8s.wait_for("the job running", lambda: _job(k8s, "train").get("jobStatus") == "RUNNING", 180)

    urgent = raycluster("urgent", group("gpu", replicas=1, gpus=4), queue="team", priority="inference")
    k8s.create(RC, name_scheduler(urgent))
    k8s.wait_for(
        "the job suspended", lambda: _job(k8s, "train").get("jobDeploymentStatus") == "Suspended", 90
    )
    assert k8s.get(f"{RJ}/train")["spec"]["suspend"] is True
    k8s.wait_for("urgent running", lambda: len(running(k8s.cluster_pods("urgent"))) == 2, 90)

    k8s.delete(f"{RC}/urgent")
    status = k8s.wait_for(
        "the job resumed and SUCCEEDED",
        lambda: (s := _job(k8s, "train")).get("jobStatus") == "SUCCEEDED" and s,
        240,
    )
    assert k8s.get(f"{RJ}/train")["spec"].get("suspend") is False
    assert any(e["reason"] == "Resumed" for e in k8s.events("train"))
    assert status["jobDeploymentStatus"] == "Complete"


def test_the_seeds_story_with_kuberays_operator_and_live_ray(k8s: K8sEnv, live: LiveRay) -> None:
    """A training RayCluster (priority train) holds the queue's GPUs; an inference
    RayService of the same queue arrives: the training is suspended, the service serves,
    is deleted, and the training resumes. From the example manifests as users apply them."""
    for i in range(2):
        k8s.node(f"gpu-{i}", gpus=4, cpu="16", memory="64Gi")
    k8s.start_controllers()
    k8s.start_fakes(live_ray=live)  # KubeRay with --batch-scheduler=kai-scheduler
    k8s.start_operator()
    (queue,) = yaml.safe_load_all((EXAMPLES / "kubernetes" / "queues.yaml").read_text())
    k8s.create("/apis/kai-ray.io/v2/queues", queue)
    (train,) = yaml.safe_load_all((EXAMPLES / "train" / "raycluster.yaml").read_text())
    k8s.create(RC, train)
    k8s.wait_for("training running", lambda: len(running(k8s.cluster_pods("train"))) == 3, 120)
    # Its Ray: the head and both workers joined, with the GPUs their pods asked for.
    k8s.wait_for("the training's Ray with 8 GPUs", lambda: _ray_gpus(k8s, "train") == 8.0, 90)

    (service,) = yaml.safe_load_all((EXAMPLES / "serve" / "rayservice.yaml").read_text())
    k8s.create(RS, with_local_code(service, EXAMPLES / "serve"))
    k8s.wait_for("training suspended", lambda: k8s.get(f"{RC}/train")["spec"].get("suspend"), 90)
    address = k8s.wait_for("the service's application RUNNING", lambda: serving(k8s.get, "serve"), 240)
    assert len(ask_model(address)) == 8
    assert k8s.cluster_pods("train") == []

    k8s.delete(f"{RS}/serve")
    k8s.wait_for("training resumed", lambda: len(running(k8s.cluster_pods("train"))) == 3, 180)
    assert k8s.get(f"{RC}/train")["spec"].get("suspend") is False
    k8s.wait_for("the training's Ray again", lambda: _ray_gpus(k8s, "train") == 8.0, 90)


def _ray_gpus(k8s: K8sEnv, cluster: str) -> float | None:
    """The GPUs of the cluster's live Ray, as its head's dashboard counts them (None:
    not answering yet)."""
    try:
        got = _http(f"http://{_head_address(k8s, cluster)}:8265/api/cluster_status")
    except (OSError, ValueError):
        return None
    usage = got["data"]["clusterStatus"]["loadMetricsReport"]["usage"]
    return float(usage["GPU"][1]) if "GPU" in usage else 0.0
