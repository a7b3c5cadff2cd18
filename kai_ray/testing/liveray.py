"""Live Ray for the fake kubelet: a RayCluster's pods run real Ray processes, each pod in
a network namespace of its own, so that KubeRay's operator reaches a head's dashboard
and GCS as it does in a real cluster.

Each pod gets an address on a bridge (10.245.0.0/16 by default) and its own ports, as a
pod has: the head runs `ray start --head` (GCS on 6379, dashboard on 8265, Serve's proxy
on 8000 when an application asks), a worker `ray start --address HEAD:6379`, each with
the CPUs and GPUs its pod asks for (logical: nothing is reserved). The head Service's
name resolves through a hosts file that the caller gives KubeRay's operator (bound over
/etc/hosts in a mount namespace of its own: `kuberay.start_kuberay(hosts=...)`); lines
are added as heads start and taken away as they stop, in place (the bind keeps the file).

Needs root (network namespaces, bridges, bind mounts) and `ip` (iproute2).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LiveRay", "live_ray_possible"]

log = logging.getLogger(__name__)
CLUSTER_DOMAIN = "cluster.local"
GCS_PORT, DASHBOARD_PORT = 6379, 8265


def live_ray_possible() -> str:
    """Why live Ray cannot run here ("" when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not _ray_program().exists():
        return "Ray is not installed beside this Python (pip install 'kai-ray[ray]')"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"`ip netns` does not work here: {exc}"
    return ""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class _Pod:
    netns: str
    address: str
    process: subprocess.Popen[bytes]
    hosts_line: str = ""


class LiveRay:
    def __init__(self, workdir: Path, subnet: str = "10.245") -> None:
        self.workdir, self.subnet = workdir, subnet
        # Names of this instance's own (a namespace or link left by another is not ours).
        self.tag = secrets.token_hex(2)
        self.bridge = f"kb{self.tag}"
        self.closed = False
        self.hosts = workdir / "hosts"
        self.hosts.write_text("127.0.0.1 localhost\n")
        self._lock = threading.Lock()
        self._next = 2
        self._pods: dict[str, _Pod] = {}  # pod uid -> its Ray
        self._heads: dict[tuple[str, str], str] = {}  # (namespace, cluster) -> head address
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{subnet}.0.1/16", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    # ------------------------------------------------------------ pods

    def start(self, pod: dict[str, Any], timeout: float = 60.0) -> str | None:
        """Ray for a pod of a RayCluster (None for any other pod): its address. A worker
        waits for its cluster's head to have an address first."""
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        kind, cluster = labels.get("ray.io/node-type"), labels.get("ray.io/cluster")
        if kind not in ("head", "worker") or not cluster:
            return None
        key = (meta["namespace"], cluster)
        head = None
        if kind == "worker":
            head = self._head_serving(key, meta["name"], timeout)
        with self._lock:
            n = self._next
            self._next += 1
        address = f"{self.subnet}.{n // 250}.{n % 250 + 2}"
        netns = f"kr{self.tag}n{n}"
        with self._lock:
            if self.closed:
                return None
            self._network(netns, n, address)
            mine = _Pod(netns, address, self._ray(pod, netns, address, head))
            self._pods[meta["uid"]] = mine
        # As a kubelet restarts a container that exits (Ray's start can time out on a
        # busy machine): while the pod lives, its Ray is started again.
        threading.Thread(target=self._keep, args=(meta["uid"], pod, head), daemon=True).start()
        if kind == "head":
            svc = f"{cluster}-head-svc"
            ns = meta["namespace"]
            mine.hosts_line = f"{address} {svc}.{ns}.svc.{CLUSTER_DOMAIN} {svc}.{ns}.svc {svc}.{ns}\n"
            with self._lock:
                self._heads[key] = address
                with self.hosts.open("a") as f:
                    f.write(mine.hosts_line)
        log.info("live Ray: %s %s of %s at %s", kind, meta["name"], cluster, address)
        return address

    def _head_serving(self, key: tuple[str, str], name: str, timeout: float) -> str:
        """The address of the cluster's head once its GCS takes connections."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            head = self._heads.get(key)
            if head is not None:
                try:
                    socket.create_connection((head, GCS_PORT), timeout=1).close()
                    return head
                except OSError:
                    pass
            time.sleep(0.2)
        raise TimeoutError(f"worker {name}: the head of {key[1]} did not take connections in {timeout:g}s")

    def _keep(self, uid: str, pod: dict[str, Any], head: str | None) -> None:
        while True:
            mine = self._pods.get(uid)
            if mine is None:
                return
            if mine.process.poll() is None:
                time.sleep(0.5)
                continue
            log.warning(
                "live Ray of pod %s exited (%s): starting it again; it said:\n%s",
                pod["metadata"]["name"],
                mine.process.returncode,
                self._said(pod),
            )
            _kill_all_in(mine.netns)
            with self._lock:
                if self._pods.get(uid) is mine:
                    mine.process = self._ray(pod, mine.netns, mine.address, head)

    def _said(self, pod: dict[str, Any], lines: int = 15) -> str:
        """The last lines its `ray start` wrote (why it exited, for a test's log)."""
        try:
            said = (self.workdir / f"{pod['metadata']['name']}.log").read_text(errors="replace")
        except OSError:
            return "(no output)"
        return "".join(said.splitlines(keepends=True)[-lines:])

    def stop(self, uid: str) -> None:
        with self._lock:
            pod = self._pods.pop(uid, None)
            if pod is None:
                return
            if pod.hosts_line:
                self._heads = {k: a for k, a in self._heads.items() if a != pod.address}
                lines = [
                    line
                    for line in self.hosts.read_text().splitlines(keepends=True)
                    if line != pod.hosts_line
                ]
                with self.hosts.open("r+") as f:  # in place: the bind mount keeps this inode
                    f.write("".join(lines))
                    f.truncate()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pod.process.pid, signal.SIGKILL)
        pod.process.wait(timeout=10)
        _kill_all_in(pod.netns)
        subprocess.run(["ip", "netns", "del", pod.netns], capture_output=True)

    def close(self) -> None:
        with self._lock:
            self.closed = True  # a start under way makes nothing more
        for uid in list(self._pods):
            self.stop(uid)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listed.splitlines():  # anything of ours a failed start left
            name = line.split(" ", 1)[0]
            if name.startswith(f"kr{self.tag}n"):
                _kill_all_in(name)
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    # ------------------------------------------------------------ plumbing

    def _network(self, netns: str, n: int, address: str) -> None:
        host, inside = f"v{self.tag}h{n}", f"v{self.tag}p{n}"  # at most 15 characters
        _ip("netns", "add", netns)
        _ip("link", "add", host, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", netns)
        _ip("link", "set", host, "master", self.bridge, "up")
        inns = ("netns", "exec", netns, "ip")
        _ip(*inns, "addr", "add", f"{address}/16", "dev", inside)
        _ip(*inns, "link", "set", inside, "up")
        _ip(*inns, "link", "set", "lo", "up")
        _ip(*inns, "route", "add", "default", "via", f"{self.subnet}.0.1")

    def _ray(
        self, pod: dict[str, Any], netns: str, address: str, head: str | None
    ) -> subprocess.Popen[bytes]:
        cpus, gpus = _asks(pod)
        ray = str(_ray_program())
        # A temp folder of the pod's own, as a pod has its own filesystem: by default a
        # worker takes the head's, where Ray names a node's sockets by the first free name;
        # two workers starting at once took the same one, and one never came up (its
        # `ray start` gave up after 60 s).
        argv = [
            "ip", "netns", "exec", netns, ray, "start", "--block", "--disable-usage-stats",
            f"--node-ip-address={address}", f"--num-cpus={cpus}", f"--num-gpus={gpus}",
            "--object-store-memory=100000000", f"--temp-dir={self.workdir / ('ray-' + netns)}",
        ]  # fmt: skip
        if head is None:
            argv += [
                "--head", f"--port={GCS_PORT}", "--dashboard-host=0.0.0.0",
                f"--dashboard-port={DASHBOARD_PORT}",
            ]  # fmt: skip
        else:
            argv += [f"--address={head}:{GCS_PORT}"]
        env = {
            **os.environ,
            # Ray 2.60 turns token auth on for a dashboard open beyond localhost; KubeRay
            # sends a token only where the RayCluster asks for auth (spec.authOptions).
            "RAY_AUTH_MODE": "disabled",
            **_container_env(pod),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_raylet_start_wait_time_s": "60",  # a busy 2-core machine starts slowly
            "PATH": f"{Path(ray).parent}:{os.environ['PATH']}",
        }
        out = open(self.workdir / f"{pod['metadata']['name']}.log", "ab")  # noqa: SIM115 - the process keeps it
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _ray_program() -> Path:
    """The `ray` command of this Python's environment (the pods run this Ray)."""
    return Path(sys.executable).with_name("ray")


def _asks(pod: dict[str, Any]) -> tuple[int, int]:
    """The CPUs (at least 1) and GPUs its Ray container asks for."""
    from kai_ray.control.podrequests import pod_request

    asked = pod_request(pod)
    return max(1, int(asked.cpu)), int(asked.gpu)


def _container_env(pod: dict[str, Any]) -> dict[str, str]:
    """The Ray container's environment as its pod gives it (plain values; KubeRay's own
    settings among them)."""
    container = pod["spec"]["containers"][0]
    return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}


def _kill_all_in(netns: str) -> None:
    """Whatever still runs in the namespace (a process Ray started in a session of its own)."""
    found = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    for pid in found.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
