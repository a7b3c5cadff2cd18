"""`kai-ray demo --kubernetes`: the seeds' KubeRay story on a local Kubernetes cluster.

A real kube-apiserver and etcd, KubeRay's own operator (its batch scheduler set to
kai-scheduler), Kubernetes' garbage collector, a fake kubelet (bound pods go Running: no
container runs) and `kai-ray operator`, all started here and stopped on exit, Ctrl-C
included. The example manifests are applied as `kubectl apply -f` would: queue `team`,
a training RayCluster holding its 8 GPUs, then an inference RayService of the same
queue, which preempts the training (suspended whole); the service is deleted and the
training resumes. The components are built from their Go modules on first use.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kai_ray.api.demo import Timeline

__all__ = ["run_kubernetes_demo"]

T = TypeVar("T")
NS = "default"
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
RS = f"/apis/ray.io/v1/namespaces/{NS}/rayservices"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MANIFESTS = ("kubernetes/queues.yaml", "train/raycluster.yaml", "serve/rayservice.yaml")


class _Loop:
    """An asyncio loop in a thread of its own: the fakes and the client live there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


def _manifests() -> dict[str, list[dict[str, Any]]]:
    return {name: list(yaml.safe_load_all((EXAMPLES / name).read_text())) for name in MANIFESTS}


def _path(obj: dict[str, Any]) -> str:
    kind = obj["kind"]
    if kind == "Queue":
        return "/apis/kai-ray.io/v2/queues"
    return {"RayCluster": RC, "RayService": RS}[kind]


@contextmanager
def _processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def run_kubernetes_demo(quick: bool = False, port: int = 8270) -> int:
    from kai_ray.testing.apiserver import ApiServer, components

    tl = Timeline()
    tl.say("building kube-apiserver, etcd, KubeRay and kube-controller-manager (first use: minutes)")
    built = time.time()
    components()
    tl.say(f"components ready in {time.time() - built:.1f}s (cached under ~/.cache/kai-ray)")
    with ExitStack() as stack:
        work = stack.enter_context(tempfile.TemporaryDirectory(prefix="kai-ray-demo-"))
        api = stack.enter_context(ApiServer(workdir=work))
        procs = stack.enter_context(_processes())
        loop = _Loop()
        stack.callback(loop.stop)
        return _story(api, loop, procs, tl, Path(work), quick, port)
    return 1  # pragma: no cover - the with block returns


def _start(api: Any, loop: _Loop, procs: list[subprocess.Popen[bytes]], work: Path, port: int) -> Any:
    from kai_ray.k8s.client import Kube, load_kubeconfig
    from kai_ray.k8s.install import install_crds
    from kai_ray.testing.controllers import start_controller_manager
    from kai_ray.testing.fakes import FakeKubelet, make_node
    from kai_ray.testing.kuberay import kuberay_crds, kuberay_version, start_kuberay

    kube = Kube(load_kubeconfig(api.kubeconfig))
    loop.run(kube.open())
    loop.run(install_crds(kube))
    for crd in (yaml.safe_load(f.read_text()) for f in kuberay_crds()):
        loop.run(kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd))
    _wait(lambda: loop.run(kube.exists("/apis/ray.io/v1/rayclusters")), 30, "KubeRay's CRDs served")
    for i in range(2):
        loop.run(make_node(kube, f"gpu-{i}", gpus=4, cpu="16", memory="64Gi"))
    loop.spawn(FakeKubelet(kube).run())
    procs.append(start_kuberay(api.kubeconfig, work / "kuberay.log"))
    procs.append(start_controller_manager(api.kubeconfig, work / "controller-manager.log"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    operator_log = open(work / "operator.log", "ab")  # noqa: SIM115 - the process keeps it
    procs.append(
        subprocess.Popen(
            [sys.executable, "-m", "kai_ray.cli", "operator", "--kubeconfig", api.kubeconfig,
             "--dashboard", f"127.0.0.1:{port}"],
            stdout=operator_log, stderr=subprocess.STDOUT, env=env,
        )
    )  # fmt: skip
    print(f"  kubeconfig:  {api.kubeconfig}   (kubectl --kubeconfig {api.kubeconfig} get pods)")
    print(f"  dashboard:   http://127.0.0.1:{port}/")
    print(f"  KubeRay:     its own operator v{kuberay_version()}; logs in {work}")
    return kube


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise RuntimeError(f"demo: timed out after {timeout:g}s waiting for {what}")


def _story(
    api: Any, loop: _Loop, procs: list[subprocess.Popen[bytes]], tl: Timeline, work: Path, quick: bool, port: int
) -> int:
    tl.say("starting: API server and etcd up; KubeRay, the garbage collector, a fake kubelet, kai-ray")
    kube = _start(api, loop, procs, work, port)
    seen: dict[str, str] = {}
    limit = 90.0

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = loop.run(kube.get(f"/api/v1/namespaces/{NS}/pods"))["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def report() -> list[dict[str, Any]]:
        now = pods()
        for p in now:
            name, node = p["metadata"]["name"], p["spec"].get("nodeName") or "-"
            state = f"{(p.get('status') or {}).get('phase', 'Pending')} on {node}"
            if seen.get(name) != state:
                seen[name] = state
                tl.say(f"  pod {name:<34} {state}")
        for gone in set(seen) - {p["metadata"]["name"] for p in now}:
            tl.say(f"  pod {gone:<34} gone")
            del seen[gone]
        return now

    def running(prefix: str, count: int) -> Callable[[], bool]:
        def check() -> bool:
            now = report()
            mine = [p for p in now if p["metadata"]["name"].startswith(prefix)]
            return sum(1 for p in mine if (p.get("status") or {}).get("phase") == "Running") >= count

        return check

    manifests = _manifests()
    for name in MANIFESTS[:2]:
        for obj in manifests[name]:
            loop.run(kube.create(_path(obj), obj))
    tl.say("applied queue team (8 GPUs) and RayCluster train (priority train: head + 2 workers x 4 GPUs)")
    _wait(running("train-", 3), limit, "the training's pods running")
    tl.say("training runs: its gang holds all 8 GPUs of the queue")
    time.sleep(0.5 if quick else 2)

    for obj in manifests["serve/rayservice.yaml"]:
        loop.run(kube.create(_path(obj), obj))
    tl.say("applied RayService serve (priority inference, same queue: head + 1 worker x 4 GPUs)")
    _wait(lambda: report() and loop.run(kube.get(f"{RC}/train"))["spec"].get("suspend"), limit, "suspension")
    tl.say("kai-ray preempted the training: RayCluster train suspended whole (spec.suspend: true)")
    _wait(running("serve-", 2), limit, "the service's pods running")
    tl.say(
        "the service's pods are bound and Running; with a container runtime, Ray Serve would "
        "answer now (the fake kubelet starts no Ray: KubeRay waits on the head for its health)"
    )
    time.sleep(0.5 if quick else 2)

    loop.run(kube.delete(f"{RS}/serve"))
    tl.say("deleted RayService serve: KubeRay removes its cluster, the garbage collector its pods")
    _wait(running("train-", 3), limit, "the training resumed")
    tl.say("the training resumed: kai-ray lifted the suspension once its gang fit again")
    loop.run(kube.close())
    tl.say("done; stopping everything this demo started")
    return 0
