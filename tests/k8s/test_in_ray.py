"""The operator inside the controller Ray cluster: `kai-ray operator --in-ray` starts the
detached actor (or finds it), which schedules pods; killed, Ray restarts it and it carries
on from the API server alone."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def _operator_in_ray(k8s: K8sEnv, address: str, *flags: str) -> str:
    env = {**os.environ, "RAY_ADDRESS": address}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kai_ray.cli",
            "operator",
            "--in-ray",
            "--kubeconfig",
            k8s.api.kubeconfig,
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


class Actor:
    """The operator actor as the test reads it: its status, and its recent log for every
    failure message (from the actor; from Ray's worker log files when it does not answer)."""

    def __init__(self) -> None:
        from kai_ray.api.operator_actor import NAMESPACE, OPERATOR_ACTOR

        self.handle = ray.get_actor(OPERATOR_ACTOR, namespace=NAMESPACE)

    def status(self) -> dict[str, Any]:
        try:
            status: dict[str, Any] = ray.get(self.handle.status.remote(), timeout=5)
        except (ray.exceptions.RayError, TimeoutError) as exc:  # killed, restarting
            return {"error": repr(exc)}
        return status

    def explain(self) -> str:
        try:
            status = ray.get(self.handle.status.remote(), timeout=10)
            lines = ray.get(self.handle.log_tail.remote(60), timeout=10)
        except Exception as exc:
            return f"the operator actor did not answer ({exc!r}); its worker logs:\n{_worker_logs()}"
        return f"operator actor status: {status}\noperator actor log:\n" + "\n".join(lines)


def _worker_logs(lines: int = 60) -> str:
    """The tails of the Ray worker log files that kai-ray's operator wrote to (the killed
    instance's and the restarted one's), newest last."""
    try:
        logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    except AttributeError:
        logs = Path("/tmp/ray/session_latest/logs")
    out = []
    for f in sorted(logs.glob("worker-*.err"), key=lambda f: f.stat().st_mtime):
        text = f.read_text(errors="replace")
        if "kai_ray" in text:
            out.append(f"== {f.name}\n" + "\n".join(text.splitlines()[-lines:]))
    return "\n".join(out[-3:]) or f"(no worker log of the operator under {logs})"


def _summary(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}api/v1/summary", timeout=5) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def test_the_operator_runs_as_a_ray_actor_and_survives_its_death(k8s: K8sEnv, local_ray: str) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("team", gpu=4)
    k8s.start_fakes()
    started = _operator_in_ray(k8s, local_ray)
    assert "started in this Ray cluster as actor kai-ray-operator" in started, started
    assert "already runs" in _operator_in_ray(k8s, local_ray)  # found, not started twice
    actor = Actor()
    k8s.create(RC, raycluster("first", group("gpu", replicas=1, gpus=1), queue="team"))
    k8s.wait_for(
        "first running",
        lambda: len(running(k8s.cluster_pods("first"))) == 2,
        timeout=60,
        explain=actor.explain,
    )
    before = k8s.wait_for("the operator scheduling", lambda: _scheduling(actor), explain=actor.explain)
    assert before["restarted"] is False and before["lease"]["leading"], before

    ray.kill(actor.handle, no_restart=False)  # Ray restarts it; it starts itself and lists everything again
    # The restarted actor is a new process, so a new identity: it says that it waits for
    # the killed one's lease, naming it, then that it schedules again. The second cluster
    # comes once the killed one is gone for sure: its pods are the restarted one's to bind.
    killed = before["lease"]["identity"]
    waiting = k8s.wait_for(
        "the restarted operator waiting for the lease",
        lambda: _phase(actor, "waiting-for-lease", before["pid"]),
        timeout=30,
        explain=actor.explain,
    )
    assert waiting["lease"]["holder"] == killed and waiting["restarted"], waiting
    assert killed in waiting["detail"] and "may take it over in" in waiting["detail"], waiting
    assert waiting["listed"]["nodes"] == 1 and waiting["listed"]["RayClusters"] >= 1, waiting
    if waiting["dashboard"] and waiting["lease"]["wait_s"] > 3:  # the dashboard says why it waits
        shown = _summary(waiting["dashboard"])["status"]
        assert shown["phase"] == "waiting-for-lease" and killed in shown["detail"], shown
    k8s.create(RC, raycluster("second", group("gpu", replicas=1, gpus=1), queue="team"))
    k8s.wait_for(
        "second running",
        lambda: len(running(k8s.cluster_pods("second"))) == 2,
        timeout=60,
        explain=actor.explain,
    )
    assert len(running(k8s.cluster_pods("first"))) == 2
    after = k8s.wait_for("the operator scheduling again", lambda: _scheduling(actor), explain=actor.explain)
    assert after["pid"] != before["pid"] and after["lease"]["holder"] != killed and after["bound"] == 2, after
    status = _operator_in_ray(k8s, local_ray, "--status")
    assert "scheduling since" in status and "holder of lease" in status, status
    print(status)  # the restarted actor's own account (pytest -rP shows it)


def test_status_reads_the_actor_so_it_needs_in_ray(capsys: pytest.CaptureFixture[str]) -> None:
    from kai_ray.cli import main

    assert main(["operator", "--status"]) == 2
    assert "give --in-ray" in capsys.readouterr().err


def _phase(actor: Actor, phase: str, not_pid: int) -> dict[str, Any]:
    """The actor's status once in `phase` in another process than `not_pid` (else {})."""
    status = actor.status()
    return status if status.get("phase") == phase and status.get("pid") != not_pid else {}


def _scheduling(actor: Actor) -> dict[str, Any]:
    """The actor's status once it has scheduled (else {})."""
    status = actor.status()
    return status if status.get("scheduling") and status.get("cycles", 0) > 0 else {}
