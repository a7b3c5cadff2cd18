"""GPU sharing on a real API server: the mutating webhook (served over TLS by the
operator, called by the API server) gives a sharing pod its ConfigMap; the operator holds
the device with a reservation pod, tells the pod which device and what portion, keeps
whole-GPU pods off the device, and lets the reservation go with the last sharing pod."""

from __future__ import annotations

import base64
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kai_ray.k8s.sharing import RESERVATION_NS, SHARE_ANNOTATION
from tests.k8s.env import NS, K8sEnv, bound, condition

pytestmark = pytest.mark.k8s
PODS = f"/api/v1/namespaces/{NS}/pods"


def _certificate(tmp: Path) -> tuple[str, str]:
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=kai-ray-webhook",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _register(k8s: K8sEnv, port: int, cert: str) -> None:
    k8s.create(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kai-ray-gpu-sharing"},
            "webhooks": [
                {
                    "name": "gpu-sharing.kai-ray.io",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/mutate",
                        "caBundle": base64.b64encode(Path(cert).read_bytes()).decode(),
                    },
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                        }
                    ],
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 5,
                }
            ],
        },
    )


def _pod(
    name: str, *, fraction: str | None = None, gpus: int = 0, scheduler: str = "kai-ray"
) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"gpu-fraction": fraction} if fraction else {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "x", "resources": resources}],
        },
    }


def test_pods_share_a_gpu_held_by_a_reservation_pod(k8s: K8sEnv, tmp_path: Path) -> None:
    k8s.node("n0", gpus=1)
    k8s.queue("default-parent-queue", gpu=-1)
    k8s.queue("default-queue", gpu=-1, parent="default-parent-queue")
    cert, key = _certificate(tmp_path)
    port = _free_port()
    k8s.start_fakes(kuberay=False)
    k8s.start_operator("--gpu-sharing", "kai-ray:test", "--webhook", str(port), cert, key)
    _register(k8s, port, cert)

    # Through the webhook: the first create may race the operator's start; retry until it answers.
    first = k8s.wait_for("the webhook answering", lambda: _try_create(k8s, _pod("half-a", fraction="0.5")))
    assert first["metadata"]["annotations"][SHARE_ANNOTATION]
    (source,) = first["spec"]["containers"][0]["envFrom"]
    share = first["metadata"]["annotations"][SHARE_ANNOTATION]
    assert source == {"configMapRef": {"name": f"kai-ray-gpu-share-{share}"}}
    plain = k8s.create(PODS, _pod("whole", gpus=1, scheduler="default-scheduler"))  # not ours: untouched
    assert "envFrom" not in plain["spec"]["containers"][0]
    k8s.delete(f"{PODS}/whole")

    k8s.create(PODS, _pod("half-b", fraction="0.5"))
    k8s.wait_for("both halves bound", lambda: len(bound([_get(k8s, "half-a"), _get(k8s, "half-b")])) == 2)
    reservations = k8s.pods(ns=RESERVATION_NS)
    assert [r["spec"]["nodeName"] for r in reservations] == ["n0"]
    assert reservations[0]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"

    for name in ("half-a", "half-b"):
        share = _get(k8s, name)["metadata"]["annotations"][SHARE_ANNOTATION]
        data = k8s.wait_for(f"{name}'s ConfigMap", lambda s=share: _config(k8s, s))
        assert data == {"NVIDIA_VISIBLE_DEVICES": "GPU-fake-n0.0", "GPU_PORTION": "0.5"}

    # The device is shared out: a whole-GPU pod of ours waits for room.
    k8s.create(PODS, _pod("whole-ours", gpus=1))
    waiting = k8s.wait_for("the whole-GPU pod's reason", lambda: condition(_get(k8s, "whole-ours")))
    assert waiting["reason"] == "Unschedulable" and not _get(k8s, "whole-ours")["spec"].get("nodeName")

    # The last sharing pod gone, the reservation goes too, and only then does the whole-GPU
    # pod get the device (a reservation still there holds it, as the device plugin would).
    k8s.delete(f"{PODS}/half-a")
    k8s.delete(f"{PODS}/half-b")
    k8s.wait_for("whole-ours bound", lambda: _get(k8s, "whole-ours")["spec"].get("nodeName"), timeout=60)
    left = [r for r in k8s.pods(ns=RESERVATION_NS) if not r["metadata"].get("deletionTimestamp")]
    assert left == [], "bound while the reservation still held the device"


def _get(k8s: K8sEnv, name: str) -> dict[str, Any]:
    return k8s.get(f"{PODS}/{name}")


def _try_create(k8s: K8sEnv, pod: dict[str, Any]) -> dict[str, Any] | None:
    from kai_ray.k8s.client import ApiError

    try:
        return k8s.create(PODS, pod)
    except ApiError as exc:
        if "webhook" in exc.message or exc.status >= 500:
            return None
        raise


def _config(k8s: K8sEnv, share: str) -> dict[str, str] | None:
    from kai_ray.k8s.client import ApiError

    try:
        return k8s.get(f"/api/v1/namespaces/{NS}/configmaps/kai-ray-gpu-share-{share}")["data"]
    except ApiError:
        return None
