"""Kubernetes' own kube-controller-manager, for the tests that need some of its
controllers: the garbage collector (a RayJob's suspension deletes its RayCluster and
counts on it to delete the pods, as in any real cluster) and the Job controller (it
makes a RayJob's submitter pod). Built from its Go module by build-components.sh."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from kai_ray.testing.apiserver import components

__all__ = ["start_controller_manager"]


def start_controller_manager(
    kubeconfig: str, log: Path, controllers: Sequence[str] = ("garbagecollector", "job")
) -> subprocess.Popen[bytes]:
    """Only `controllers`, without leader election or a serving port (no ports to share
    between tests), acting with the kubeconfig's own credentials."""
    argv = [
        components()["kube-controller-manager"],
        "--kubeconfig",
        kubeconfig,
        f"--controllers={','.join(controllers)}",
        "--leader-elect=false",
        "--secure-port=0",
        "--use-service-account-credentials=false",
        "--kube-api-qps=500",
        "--kube-api-burst=1000",
    ]
    out = open(log, "ab")  # noqa: SIM115 - the process keeps it
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
