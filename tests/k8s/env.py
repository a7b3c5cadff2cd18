"""A Kubernetes test cluster: a real kube-apiserver and etcd, a fake kubelet (with live
Ray in a RayCluster's pods where a test asks), KubeRay's own operator, and `kai-ray
operator` run as a user runs it (a process of its own, which a test may SIGKILL). Tests
are synchronous; the fakes and the client run on an asyncio loop in a thread of their
own, reached through `env.run(coro)`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kai_ray.k8s.client import ApiError, Kube, load_kubeconfig
from kai_ray.k8s.install import install_crds
from kai_ray.testing.apiserver import ApiServer
from kai_ray.testing.controllers import start_controller_manager
from kai_ray.testing.fakes import CRD_STAND_INS, FakeKubelet, make_node
from kai_ray.testing.kuberay import kuberay_crds, start_kuberay
from kai_ray.testing.liveray import LiveRay

T = TypeVar("T")
CRDS = CRD_STAND_INS
NS = "default"
# Leader election as the operator runs it by default, on short leases: an operator
# started after one was SIGKILLed takes over in seconds, not in 15.
FAST_LEASE = (
    "--leader-elect-lease-duration=4",
    "--leader-elect-renew-deadline=3",
    "--leader-elect-retry-period=0.5",
)


class K8sEnv:
    def __init__(self, api: ApiServer) -> None:
        self.api = api
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.kube = Kube(load_kubeconfig(api.kubeconfig))
        self.run(self.kube.open())
        self.operator: subprocess.Popen[bytes] | None = None
        self.operator_log = Path(api.dir) / "operator.log"
        self._fakes: list[asyncio.Future[Any]] = []
        self.kuberay_operator: subprocess.Popen[bytes] | None = None
        self.controller_manager: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------ plumbing

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.stop_operator()
        for process in (self.kuberay_operator, self.controller_manager):
            if process is not None:
                process.terminate()
                process.wait(timeout=10)
        for f in self._fakes:
            f.cancel()
        self.run(self.kube.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    def install(self, *, kuberay: bool = True, kai_queue: bool = False) -> None:
        """kai-ray's CRDs, KubeRay's own (from its Go module: full schemas), and a stand-in
        of KAI's Queue CRD when asked."""
        self.run(install_crds(self.kube))
        crds = [yaml.safe_load(f.read_text()) for f in kuberay_crds()] if kuberay else []
        if kai_queue:
            crds += list(yaml.safe_load_all((CRDS / "kai-queue.yaml").read_text()))
        self.add_crds(crds)

    def add_crds(self, crds: list[dict[str, Any]]) -> None:
        """Create the CRDs (each one not there yet: the server may have started from etcd
        data that holds them) and wait until each one's objects are served."""
        for crd in crds:
            try:
                self.run(self.kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd))
            except ApiError as exc:
                if exc.status != 409:
                    raise
        for crd in crds:
            self.wait_for(f"CRD {crd['metadata']['name']} served", lambda crd=crd: self._served(crd))

    def _served(self, crd: dict[str, Any]) -> bool:
        """Established, and its objects' path answers (a new resource's storage starts a
        moment after the condition says so)."""
        name = crd["metadata"]["name"]
        got = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = (got.get("status") or {}).get("conditions") or []
        if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return False
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served", True))
        return self.run(self.kube.exists(f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"))

    def start_controllers(self) -> None:
        """Kubernetes' garbage collector and Job controller (kube-controller-manager)."""
        log = Path(self.api.dir) / "controller-manager.log"
        self.controller_manager = start_controller_manager(self.api.kubeconfig, log)

    def start_fakes(
        self,
        kuberay: bool = True,
        batch_scheduler: str | None = "kai-scheduler",
        live_ray: LiveRay | None = None,
    ) -> None:
        """The fake kubelet, and KubeRay: its real operator (True), with its batch
        scheduler set to kai-scheduler as KubeRay's users set it (None: unset, as for
        RayJobs, which KubeRay v1.5's kai-scheduler plugin refuses: their templates name
        the scheduler themselves); False: none (the test makes the pods). With
        `live_ray`, RayCluster pods run real Ray, and KubeRay resolves the heads' Service
        names to them."""
        kubelet = FakeKubelet(self.kube, ray=live_ray)
        self._fakes.append(asyncio.run_coroutine_threadsafe(kubelet.run(), self.loop))
        if kuberay:
            self.kuberay_operator = start_kuberay(
                self.api.kubeconfig,
                Path(self.api.dir) / "kuberay.log",
                batch_scheduler=batch_scheduler,
                hosts=live_ray.hosts if live_ray is not None else None,
            )

    def start_operator(self, *args: str, kubeconfig: str | None = None) -> None:
        self.operator = self.spawn_operator(*args, kubeconfig=kubeconfig, log=self.operator_log)

    def spawn_operator(self, *args: str, kubeconfig: str | None = None, log: Path) -> subprocess.Popen[bytes]:
        """`kai-ray operator` as a process of its own, its output appended to `log`."""
        # A crash below Python (an abort in an extension) still leaves a traceback in the log.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
        lease = () if any("leader-elect" in a for a in args) else FAST_LEASE
        out = open(log, "ab")  # noqa: SIM115 - the process keeps it
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kai_ray.cli",
                "operator",
                "--kubeconfig",
                kubeconfig or self.api.kubeconfig,
                *lease,
                *args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def stop_operator(self, sig: int = signal.SIGTERM) -> None:
        if self.operator is not None and self.operator.poll() is None:
            self.operator.send_signal(sig)
            try:
                self.operator.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.operator.kill()
        self.operator = None

    def wait_for(
        self,
        what: str,
        check: Callable[[], T],
        timeout: float = 30.0,
        explain: Callable[[], str] | None = None,
    ) -> T:
        """`check()` once truthy; else an AssertionError with the operator's log tail, or
        what `explain()` says (an operator that is not this env's process)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self.operator is not None and self.operator.poll() is not None:
                raise AssertionError(f"the operator exited ({self.operator.returncode}):\n{self.log_tail()}")
            last = check()
            if last:
                return last  # type: ignore[no-any-return]
            time.sleep(0.1)
        tail = explain() if explain is not None else self.log_tail()
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})\n{tail}")

    def log_tail(self, lines: int = 40) -> str:
        if not self.operator_log.exists():
            return ""
        return "\n".join(self.operator_log.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------ objects

    def node(
        self,
        name: str,
        *,
        gpus: int = 8,
        cpu: str = "64",
        memory: str = "512Gi",
        labels: dict[str, str] | None = None,
    ) -> None:
        self.run(make_node(self.kube, name, gpus=gpus, cpu=cpu, memory=memory, labels=labels))

    def queue(
        self,
        name: str,
        *,
        gpu: float = 0,
        gpu_limit: float = -1,
        parent: str | None = None,
        priority: int = 100,
        weight: float = 1,
        api: str = "kai-ray.io/v2",
        gpu_types: dict[str, Any] | None = None,
        **spec: Any,
    ) -> None:
        """A Queue; `gpu_types`: its resources.gpuTypes (kai-ray's extension)."""
        body: dict[str, Any] = {
            "apiVersion": api,
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {
                "priority": priority,
                "resources": {
                    "gpu": {"quota": gpu, "limit": gpu_limit, "overQuotaWeight": weight},
                    "cpu": {"quota": -1},
                    "memory": {"quota": -1},
                    **({"gpuTypes": gpu_types} if gpu_types else {}),
                },
                **({"parentQueue": parent} if parent else {}),
                **spec,
            },
        }
        self.run(self.kube.create(f"/apis/{api}/queues", body))

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.run(self.kube.create(path, body))

    def get(self, path: str) -> dict[str, Any]:
        return self.run(self.kube.get(path))

    def delete(self, path: str) -> None:
        try:
            self.run(self.kube.delete(path, grace=0))
        except ApiError as exc:
            if exc.status != 404:
                raise

    def pods(self, selector: str = "", ns: str = NS) -> list[dict[str, Any]]:
        params = {"labelSelector": selector} if selector else {}
        return self.run(self.kube.get(f"/api/v1/namespaces/{ns}/pods", **params))["items"]

    def cluster_pods(self, cluster: str) -> list[dict[str, Any]]:
        return [
            p for p in self.pods(f"ray.io/cluster={cluster}") if not p["metadata"].get("deletionTimestamp")
        ]

    def events(self, name: str, ns: str = NS) -> list[dict[str, Any]]:
        items = self.run(self.kube.get(f"/api/v1/namespaces/{ns}/events"))["items"]
        return [e for e in items if e["involvedObject"]["name"] == name]


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p.get("status", {}).get("phase") == "Running"]


def condition(pod: dict[str, Any], kind: str = "PodScheduled") -> dict[str, Any] | None:
    for c in pod.get("status", {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return None


def group(
    name: str,
    *,
    replicas: int,
    gpus: float = 1,
    min_replicas: int = 0,
    hosts: int = 1,
    cpu: str = "1",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A worker group of a RayCluster spec, each worker asking for `gpus`."""
    return {
        "groupName": name,
        "rayStartParams": {},
        "replicas": replicas,
        "minReplicas": min_replicas,
        "maxReplicas": max(replicas, min_replicas),
        "numOfHosts": hosts,
        "template": _template(cpu, gpus, annotations),
    }


def _template(cpu: str, gpus: float, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpus >= 1:
        resources["requests"]["nvidia.com/gpu"] = str(int(gpus))
        resources["limits"] = {"nvidia.com/gpu": str(int(gpus))}
    return {
        "metadata": {"annotations": annotations or {}},
        "spec": {"containers": [{"name": "ray", "image": "rayproject/ray", "resources": resources}]},
    }


def cluster_spec(*groups: dict[str, Any], head_cpu: str = "1") -> dict[str, Any]:
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": _template(head_cpu, 0)},
        "workerGroupSpecs": list(groups),
    }


def raycluster(
    name: str, *groups: dict[str, Any], queue: str | None = None, priority: str | None = None, ns: str = NS
) -> dict[str, Any]:
    labels = {
        **({"kai.scheduler/queue": queue} if queue else {}),
        **({"ray.io/priority-class-name": priority} if priority else {}),
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": cluster_spec(*groups),
    }


def named(template: dict[str, Any]) -> dict[str, Any]:
    """A pod template naming kai-ray's scheduler itself: where KubeRay runs without a
    batch scheduler (its v1.5 kai-scheduler plugin refuses RayJobs), as KAI's users do."""
    return {**template, "spec": {**template["spec"], "schedulerName": "kai-scheduler"}}


def name_scheduler(cluster: dict[str, Any]) -> dict[str, Any]:
    """A RayCluster whose head and worker templates all name kai-ray's scheduler."""
    spec = cluster["spec"]
    for group_spec in (spec["headGroupSpec"], *spec["workerGroupSpecs"]):
        group_spec["template"] = named(group_spec["template"])
    return cluster


def requiring(cluster: dict[str, Any], *values: str, key: str = "gpu-type") -> dict[str, Any]:
    """The cluster with its workers' template requiring `key In [values]`, in that order
    (the head has none: it may go anywhere)."""
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    for worker in cluster["spec"]["workerGroupSpecs"]:
        worker["template"]["spec"]["affinity"] = affinity
    return cluster


def workers(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
