"""KubeRay's own operator for the tests and `kai-ray bench k8s`: built from its Go module
(github.com/ray-project/kuberay/ray-operator, by build-components.sh), its CRDs from the
same module, run as KubeRay's users run it under kai-ray: with its batch scheduler set
to `kai-scheduler`, so that the pods it makes name kai-ray's scheduler and carry their
owner's queue label."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kai_ray.testing.apiserver import components

__all__ = ["kuberay_crds", "kuberay_version", "start_kuberay"]


def kuberay_crds() -> list[Path]:
    """KubeRay's CRDs (RayCluster, RayJob, RayService), full schemas."""
    return sorted(Path(components()["kuberay-crds"]).glob("*.yaml"))


def kuberay_version() -> str:
    return Path(components()["kuberay-operator"]).name.rsplit("-v", 1)[-1]


def start_kuberay(
    kubeconfig: str, log: Path, *, batch_scheduler: str | None = "kai-scheduler", hosts: Path | None = None
) -> subprocess.Popen[bytes]:
    """KubeRay's operator, watching every namespace, without leader election, metrics or
    probes (no ports to share between tests), and with room to make pods quickly.
    `hosts`: a hosts file it resolves names with (bound over /etc/hosts in a mount
    namespace of its own: liveray.LiveRay keeps the heads' Service names there)."""
    argv = [
        components()["kuberay-operator"],
        "--kubeconfig",
        kubeconfig,
        "--enable-leader-election=false",
        "--metrics-addr=0",
        "--health-probe-bind-address=0",
        "--qps=1000",
        "--burst=2000",
        "--reconcile-concurrency=4",
        "--log-stdout-encoder=console",
    ]
    if batch_scheduler:
        argv.append(f"--batch-scheduler={batch_scheduler}")
    if hosts is not None:
        bind = 'mount --bind "$0" /etc/hosts && exec "$@"'
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", bind, str(hosts), *argv]
    out = open(log, "ab")  # noqa: SIM115 - the process keeps it
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
