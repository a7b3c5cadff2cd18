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
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
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
        self.spawned: list[Any] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.spawned.append(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        for future in self.spawned:
            future.cancel()
        self.run(asyncio.sleep(0.2))  # the cancelled tasks wind down on the loop
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


def run_kubernetes_demo(quick: bool = False, port: int = 8270, ray: bool = True) -> int:
    from kai_ray.testing.apiserver import ApiServer, components
    from kai_ray.testing.liveray import LiveRay, live_ray_possible

    tl = Timeline()
    try:
        tl.say("building kube-apiserver, etcd, KubeRay and kube-controller-manager (first use: minutes)")
        built = time.time()
        components()
        tl.say(f"components ready in {time.time() - built:.1f}s (cached under ~/.cache/kai-ray)")
        with ExitStack() as stack:
            # A short folder: live Ray's sockets live under it (a socket's path has 107 bytes).
            work = stack.enter_context(tempfile.TemporaryDirectory(prefix="krd-"))
            api = stack.enter_context(ApiServer(workdir=work))
            procs = stack.enter_context(_processes())
            why = live_ray_possible() if ray else "--no-ray"
            live = None if why else LiveRay(Path(work))
            if live is not None:
                stack.callback(live.close)
            else:
                tl.say(f"without live Ray ({why}): the pods run nothing")
            loop = _Loop()
            stack.callback(loop.stop)
            return _story(_Demo(api, loop, procs, tl, Path(work), quick, port, live))
    except KeyboardInterrupt:
        tl.say("interrupted: everything this demo started is stopped")
        return 130
    return 1  # pragma: no cover - the with block returns


@dataclass
class _Demo:
    api: Any
    loop: _Loop
    procs: list[subprocess.Popen[bytes]]
    tl: Timeline
    work: Path
    quick: bool
    port: int
    live: Any  # a LiveRay, or None


def _start(demo: _Demo) -> Any:
    from kai_ray.k8s.client import Kube, load_kubeconfig
    from kai_ray.k8s.install import install_crds
    from kai_ray.testing.controllers import start_controller_manager
    from kai_ray.testing.fakes import FakeKubelet, make_node
    from kai_ray.testing.kuberay import kuberay_crds, kuberay_version, start_kuberay

    api, loop, procs, work, port = demo.api, demo.loop, demo.procs, demo.work, demo.port
    kube = Kube(load_kubeconfig(api.kubeconfig))
    loop.run(kube.open())
    loop.run(install_crds(kube))
    for crd in (yaml.safe_load(f.read_text()) for f in kuberay_crds()):
        loop.run(kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd))
    _wait(lambda: loop.run(kube.exists("/apis/ray.io/v1/rayclusters")), 30, "KubeRay's CRDs served")
    for i in range(2):
        loop.run(make_node(kube, f"gpu-{i}", gpus=4, cpu="16", memory="64Gi"))
    loop.spawn(FakeKubelet(kube, ray=demo.live).run())
    hosts = demo.live.hosts if demo.live is not None else None
    procs.append(start_kuberay(api.kubeconfig, work / "kuberay.log", hosts=hosts))
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


def with_local_code(service: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A RayService whose applications import their code from `folder`, a folder every
    node has (here all of them run on this machine)."""
    config = yaml.safe_load(service["spec"]["serveConfigV2"])
    for app in config["applications"]:
        app["runtime_env"] = {"working_dir": f"local://{folder}"}
    return {**service, "spec": {**service["spec"], "serveConfigV2": yaml.safe_dump(config)}}


def serving(kube_get: Callable[[str], dict[str, Any]], name: str) -> str | None:
    """The address of the RayService's head once KubeRay reports every application
    RUNNING (None before)."""
    status = (kube_get(f"{RS}/{name}").get("status") or {}).get("activeServiceStatus") or {}
    apps = status.get("applicationStatuses") or {}
    if not apps or any(a.get("status") != "RUNNING" for a in apps.values()):
        return None
    pods = kube_get(f"/api/v1/namespaces/{NS}/pods?labelSelector=ray.io/cluster={status['rayClusterName']}")
    heads = [p for p in pods["items"] if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
    return str(heads[0]["status"]["podIP"]) if heads and heads[0].get("status", {}).get("podIP") else None


def ask_model(address: str) -> list[float]:
    """One request to the example model: 64 features in, 8 outputs back."""
    request = urllib.request.Request(
        f"http://{address}:8000/",
        data=json.dumps([1.0] * 64).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        out: list[float] = json.loads(resp.read())["output"]
    return out


def _story(demo: _Demo) -> int:
    tl, loop = demo.tl, demo.loop
    tl.say("starting: API server and etcd up; KubeRay, the garbage collector, a fake kubelet, kai-ray")
    kube = _start(demo)
    watch = _PodWatch(tl, lambda: loop.run(kube.get(f"/api/v1/namespaces/{NS}/pods"))["items"])
    limit = 240.0 if demo.live is not None else 90.0

    manifests = _manifests()
    for name in MANIFESTS[:2]:
        for obj in manifests[name]:
            loop.run(kube.create(_path(obj), obj))
    tl.say("applied queue team (8 GPUs) and RayCluster train (priority train: head + 2 workers x 4 GPUs)")
    _wait(watch.running("train-", 3), limit, "the training's pods running")
    tl.say("training runs: its gang holds all 8 GPUs of the queue")
    time.sleep(0.5 if demo.quick else 2)

    for obj in manifests["serve/rayservice.yaml"]:
        service = with_local_code(obj, EXAMPLES / "serve") if demo.live is not None else obj
        loop.run(kube.create(_path(service), service))
    tl.say("applied RayService serve (priority inference, same queue: head + 1 worker x 4 GPUs)")
    _wait(
        lambda: watch.report() and loop.run(kube.get(f"{RC}/train"))["spec"].get("suspend"),
        limit,
        "suspension",
    )
    tl.say("kai-ray preempted the training: RayCluster train suspended whole (spec.suspend: true)")
    _wait(watch.running("serve-", 2), limit, "the service's pods running")
    if demo.live is not None:
        tl.say("the service's pods run Ray; KubeRay deploys the Serve application through the head")
        address = _wait(
            lambda: watch.report() and serving(lambda p: loop.run(kube.get(p)), "serve"), limit, "Serve"
        )
        tl.say(f"the service's pods are bound and Running; its application is RUNNING at {address}:8000")
        tl.say(f"the service answers: POST / with 64 features -> {len(ask_model(address))} outputs")
    else:
        tl.say(
            "the service's pods are bound and Running (no Ray runs in them: the application is not deployed)"
        )
    time.sleep(0.5 if demo.quick else 2)

    loop.run(kube.delete(f"{RS}/serve"))
    tl.say("deleted RayService serve: KubeRay removes its cluster, the garbage collector its pods")
    _wait(watch.running("train-", 3), limit, "the training resumed")
    tl.say("the training resumed: kai-ray lifted the suspension once its gang fit again")
    loop.run(kube.close())
    tl.say("done; stopping everything this demo started")
    return 0


class _PodWatch:
    """Says each pod's change of state as the demo polls."""

    def __init__(self, tl: Timeline, list_pods: Callable[[], list[dict[str, Any]]]) -> None:
        self.tl, self.list_pods = tl, list_pods
        self.seen: dict[str, str] = {}

    def report(self) -> list[dict[str, Any]]:
        now = [p for p in self.list_pods() if not p["metadata"].get("deletionTimestamp")]
        for p in now:
            name, node = p["metadata"]["name"], p["spec"].get("nodeName") or "-"
            state = f"{(p.get('status') or {}).get('phase', 'Pending')} on {node}"
            if self.seen.get(name) != state:
                self.seen[name] = state
                self.tl.say(f"  pod {name:<34} {state}")
        for gone in set(self.seen) - {p["metadata"]["name"] for p in now}:
            self.tl.say(f"  pod {gone:<34} gone")
            del self.seen[gone]
        return now

    def running(self, prefix: str, count: int) -> Callable[[], bool]:
        def check() -> bool:
            mine = [p for p in self.report() if p["metadata"]["name"].startswith(prefix)]
            return sum(1 for p in mine if (p.get("status") or {}).get("phase") == "Running") >= count

        return check
