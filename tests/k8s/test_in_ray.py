"""The operator inside the controller Ray cluster: `kai-ray operator --in-ray` starts the
detached actor (or finds it), which schedules pods; killed, Ray restarts it and it carries
on from the API server alone."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.env import NS, K8sEnv, group, raycluster, running

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.k8s, pytest.mark.ray]
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"


@pytest.fixture
def local_ray() -> Iterator[str]:
    """A local Ray instance of its own; or, when tests/ray's cluster is already
    connected in this process (tests/ray ran first), that one, with the operator actor
    stopped afterwards so that nothing of this test stays in it."""
    if ray.is_initialized():
        try:
            yield ray.get_runtime_context().gcs_address
        finally:
            _stop_operator()
        return
    context = ray.init(num_cpus=2, include_dashboard=False)
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


def _stop_operator() -> None:
    from kai_ray.api.operator_actor import NAMESPACE, OPERATOR_ACTOR

    with contextlib.suppress(ValueError):  # ValueError: never started
        ray.kill(ray.get_actor(OPERATOR_ACTOR, namespace=NAMESPACE), no_restart=True)


def _operator_in_ray(k8s: K8sEnv, address: str) -> str:
    env = {**os.environ, "RAY_ADDRESS": address}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        [sys.executable, "-m", "kai_ray.cli", "operator", "--in-ray", "--kubeconfig", k8s.api.kubeconfig],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_operator_runs_as_a_ray_actor_and_survives_its_death(k8s: K8sEnv, local_ray: str) -> None:
    from kai_ray.api.operator_actor import NAMESPACE, OPERATOR_ACTOR

    k8s.node("n0", gpus=4)
    k8s.queue("team", gpu=4)
    k8s.start_fakes()
    assert "started in this Ray cluster as actor kai-ray-operator" in _operator_in_ray(k8s, local_ray)
    assert "already runs" in _operator_in_ray(k8s, local_ray)  # found, not started twice
    k8s.create(RC, raycluster("first", group("gpu", replicas=1, gpus=1), queue="team"))
    k8s.wait_for("first running", lambda: len(running(k8s.cluster_pods("first"))) == 2, timeout=60)

    actor = ray.get_actor(OPERATOR_ACTOR, namespace=NAMESPACE)
    ray.kill(actor, no_restart=False)  # Ray restarts it; it starts itself and lists everything again
    k8s.create(RC, raycluster("second", group("gpu", replicas=1, gpus=1), queue="team"))
    k8s.wait_for("second running", lambda: len(running(k8s.cluster_pods("second"))) == 2, timeout=60)
    assert len(running(k8s.cluster_pods("first"))) == 2
