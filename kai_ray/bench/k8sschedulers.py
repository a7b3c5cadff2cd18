"""The schedulers `kai-ray bench k8s --shape` times, each a set of processes of its own
beside a real kube-apiserver (kai_ray.testing.apiserver):

- kai-ray: `kai-ray operator` as its users run it (`python -m kai_ray.cli operator`,
  leader election off, no dashboard), with a settings file for the shape's topology;
- KAI-Scheduler (`--kai-bin DIR`): the `scheduler`, `binder` and `podgrouper` binaries
  found in DIR, and KAI's CRDs in DIR/crds. kai-ray never builds KAI and holds no recipe
  for it: it runs what the user points it at. The three take their kubeconfig from
  $KUBECONFIG (the scheduler's flags have no --kubeconfig); each gets ports of its own
  for metrics and probes; leader election is off (their default); the tuning is that of
  KAI's own scale tests (hack/setup-scale-test-env.sh: consolidation off, the binder at
  100 concurrent reconciles, 500 QPS, burst 2000); everything else is KAI's default.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from kai_ray.k8s.client import ApiError, Kube
from kai_ray.k8s.install import install_crds
from kai_ray.testing.fakes import CRD_STAND_INS

__all__ = [
    "KAI_BINARIES",
    "KAI_CRDS",
    "KaiBinError",
    "KaiBinaries",
    "KaiRayOperator",
    "Scheduler",
    "kai_crds",
]

KAI_BINARIES = ("scheduler", "binder", "podgrouper")
# What the three read and write: KAI's own CRDs, from DIR/crds.
KAI_CRDS = (
    "queues.scheduling.run.ai",
    "podgroups.scheduling.run.ai",
    "bindrequests.scheduling.run.ai",
    "topologies.kai.scheduler",
)
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class KaiBinError(ValueError):
    """--kai-bin names a folder without what the bench runs; the message says what to put there."""


def kai_crds(folder: Path) -> list[dict[str, Any]]:
    """KAI's CRDs (KAI_CRDS) from `folder`/crds, or KaiBinError naming what is missing."""
    crds_dir = folder / "crds"
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(crds_dir.glob("*.yaml")) if crds_dir.is_dir() else ():
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                found[str(doc.get("metadata", {}).get("name"))] = doc
    missing = [name for name in KAI_CRDS if name not in found]
    if missing:
        raise KaiBinError(
            f"--kai-bin {folder}: {crds_dir} holds no CRD {', '.join(missing)}: copy KAI-Scheduler's "
            "CRDs there (the *.yaml of deployments/kai-scheduler/crds in KAI's source, of the same "
            "version as the binaries)"
        )
    return [found[name] for name in KAI_CRDS]


def check_kai_bin(folder: Path) -> list[dict[str, Any]]:
    """Every binary and CRD the bench runs KAI with, before anything starts; KaiBinError
    naming the first file missing and the fix. Returns KAI's CRDs."""
    if not folder.is_dir():
        raise KaiBinError(
            f"--kai-bin {folder}: no such folder: give a folder holding KAI-Scheduler's binaries "
            f"{', '.join(KAI_BINARIES)} and its CRDs in crds/"
        )
    for name in KAI_BINARIES:
        path = folder / name
        if not path.is_file():
            raise KaiBinError(
                f"--kai-bin {folder}: {path} not found: put KAI-Scheduler's `{name}` binary there "
                f"(built from cmd/{name} of KAI's source, the version you compare with); kai-ray "
                "never builds KAI"
            )
        if not os.access(path, os.X_OK):
            raise KaiBinError(f"--kai-bin {folder}: {path} is not executable: chmod +x {path}")
    return kai_crds(folder)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def install_crd_objects(kube: Kube, crds: list[dict[str, Any]], timeout: float = 30.0) -> None:
    """Create the CRDs and wait until each one's objects are served."""
    for crd in crds:
        try:
            await kube.create(CRD_PATH, crd)
        except ApiError as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + timeout
    for crd in crds:
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served", True))
        path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
        while not await kube.exists(path):  # served a moment after it is made
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {crd['metadata']['name']} not served within {timeout:g} s")
            await asyncio.sleep(0.1)


class Scheduler:
    """One scheduler's processes on one API server."""

    name = ""
    crds: list[dict[str, Any]]

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.flags: dict[str, list[str]] = {}

    async def install(self, kube: Kube) -> None:
        await install_crd_objects(kube, self.crds)

    def start(self, kubeconfig: str, workdir: Path, config: dict[str, Any]) -> None:
        raise NotImplementedError

    def _spawn(self, name: str, argv: list[str], workdir: Path, env: dict[str, str]) -> None:
        self.logs[name] = workdir / f"{self.name}-{name}.log"
        self.flags[name] = argv[1:]
        out = open(self.logs[name], "ab")  # noqa: SIM115 - the process keeps it
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def check(self) -> None:
        """RuntimeError with its log's tail when one of its processes has exited."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{self.name} {name} exited ({proc.returncode}):\n{self.tail(name)}")

    def tail(self, name: str | None = None, lines: int = 30) -> str:
        out = []
        for each in [name] if name else list(self.logs):
            path = self.logs[each]
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


class KaiRayOperator(Scheduler):
    """`kai-ray operator`. Queues are KAI's (scheduling.run.ai/v2): from KAI's own CRD
    when the run compares with KAI (`crds`), else the project's stand-in of it."""

    name = "kai-ray"

    def __init__(self, crds: list[dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.crds = crds or [yaml.safe_load((CRD_STAND_INS / "kai-queue.yaml").read_text())]

    async def install(self, kube: Kube) -> None:
        await install_crds(kube)  # kai-ray's own (its Queue), as `--install-crds` makes them
        await super().install(kube)

    def start(self, kubeconfig: str, workdir: Path, config: dict[str, Any]) -> None:
        settings = workdir / "kai-ray-settings.yaml"
        settings.write_text(yaml.safe_dump(config))
        argv = [sys.executable, "-m", "kai_ray.cli", "operator", "--kubeconfig", kubeconfig]
        argv += ["--no-leader-elect", "--dashboard", "off", "--config", str(settings)]
        self._spawn("operator", argv, workdir, {**os.environ, "PYTHONUNBUFFERED": "1"})


class KaiBinaries(Scheduler):
    """KAI-Scheduler's scheduler, binder and podgrouper from `folder` (checked first)."""

    name = "kai"

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.crds = check_kai_bin(folder)

    def start(self, kubeconfig: str, workdir: Path, config: dict[str, Any]) -> None:
        env = {**os.environ, "KUBECONFIG": kubeconfig}

        def port() -> str:
            return f"127.0.0.1:{_free_port()}"

        runs = {
            "scheduler": [
                f"--listen-address={port()}",
                f"--plugin-server-port={_free_port()}",
                "--max-consolidation-preemptees=0",
            ],
            "binder": [
                f"--metrics-bind-address={port()}",
                f"--health-probe-bind-address={port()}",
                "--max-concurrent-reconciles=100",
                "--qps=500",
                "--burst=2000",
            ],
            "podgrouper": [f"--metrics-bind-address={port()}", f"--health-probe-bind-address={port()}"],
        }
        for name, flags in runs.items():
            self._spawn(name, [str(self.folder / name), *flags], workdir, env)
