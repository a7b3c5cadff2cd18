"""One leader: real `kai-ray operator` processes, each logging in as a user of its own, on
a real API server that audits every binding and Lease write. The audit log, not the
operators' word, says who bound what, and when."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kai_ray.testing.apiserver import ApiServer
from kai_ray.testing.blackhole import BlackHole
from tests.k8s.burst import by_gang, gang_pod, partial
from tests.k8s.env import FAST_LEASE, NS, K8sEnv, bound, cluster_spec, group
from tests.k8s.test_login import ACCOUNT_NS, account, bound_token, gpu_pod, kubeconfig

pytestmark = pytest.mark.k8s
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kai-ray"
LEASE_S, RENEW_S, RETRY_S = (float(flag.split("=")[1]) for flag in FAST_LEASE)
PODS_PER_GANG, GPUS = 4, 8


class Replicas:
    """Two operators, a and b, each with its own token (the audit log's user) and log."""

    def __init__(self, k8s: K8sEnv, tmp: Path) -> None:
        self.k8s, self.tmp = k8s, tmp
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, *users: str, args: tuple[str, ...] = (), server: str | None = None) -> None:
        for user in users:
            config = self.k8s.api.kubeconfig_as(user, self.tmp / f"{user}.kubeconfig", server)
            self.procs[user] = self.k8s.spawn_operator(
                "-v", "--dashboard=off", *args, kubeconfig=config, log=self.log_path(user)
            )

    def log_path(self, user: str) -> Path:
        return self.tmp / f"{user}.log"

    def log(self, user: str) -> str:
        return self.log_path(user).read_text(errors="replace")

    def holder(self) -> str | None:
        """The user whose process holds the Lease now."""
        try:
            holder = self.k8s.get(LEASE)["spec"].get("holderIdentity") or ""
        except Exception:  # not created yet
            return None
        pid = holder.rpartition("_")[2]
        return next((u for u, p in self.procs.items() if str(p.pid) == pid), None)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def audited(installed_etcd: Path) -> Iterator[K8sEnv]:
    with ApiServer(users=("a", "b"), audit=True, etcd_data=installed_etcd) as api:
        env = K8sEnv(api)
        env.install(kuberay=True)  # KubeRay's CRDs: the gangs' owners
        try:
            yield env
        finally:
            env.close()


@pytest.fixture
def replicas(audited: K8sEnv, tmp_path: Path) -> Iterator[Replicas]:
    r = Replicas(audited, tmp_path)
    try:
        yield r
    finally:
        r.stop()


def _cluster(k8s: K8sEnv, nodes: int) -> None:
    for i in range(nodes):
        k8s.node(f"n{i:02d}", gpus=GPUS)
    k8s.queue("default-parent-queue", gpu=-1)
    k8s.queue("default-queue", gpu=-1, parent="default-parent-queue")


def _owners(k8s: K8sEnv, count: int) -> list[tuple[str, str]]:
    """RayClusters of 1 head + 3 workers (nobody makes their pods: the test does)."""
    made = []
    for i in range(count):
        rc = k8s.create(
            f"/apis/ray.io/v1/namespaces/{NS}/rayclusters",
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {"name": f"g{i:02d}", "namespace": NS},
                "spec": cluster_spec(group("w", replicas=PODS_PER_GANG - 1)),
            },
        )
        made.append((rc["metadata"]["name"], rc["metadata"]["uid"]))
    return made


def _submit(k8s: K8sEnv, owners: list[tuple[str, str]], pause: float = 0.0) -> None:
    for name, uid in owners:
        for j in range(PODS_PER_GANG):
            k8s.create(f"/api/v1/namespaces/{NS}/pods", gang_pod(name, uid, j))
        time.sleep(pause)


def _bindings(k8s: K8sEnv) -> list[dict[str, Any]]:
    return [
        e
        for e in k8s.api.audit_events()
        if e["objectRef"].get("subresource") == "binding" and e["verb"] == "create"
    ]


def _lease_writes(k8s: K8sEnv, ns: str = NS) -> list[dict[str, Any]]:
    """The writes of our Lease that the server took (not a rival's refused create)."""
    return [
        e
        for e in k8s.api.audit_events()
        if e["objectRef"]["resource"] == "leases"
        and e["objectRef"].get("name") in ("kai-ray", None)
        and e["objectRef"].get("namespace") == ns
        and e["responseStatus"]["code"] < 300
    ]


def _at(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _assert_bound_once(k8s: K8sEnv, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod bound by exactly one successful binding, and no binding ever refused
    (a second try on a bound pod is answered 409); the bindings."""
    bindings = _bindings(k8s)
    ok = Counter(e["objectRef"]["name"] for e in bindings if e["responseStatus"]["code"] < 300)
    refused = [
        (e["objectRef"]["name"], e["responseStatus"]["code"])
        for e in bindings
        if e["responseStatus"]["code"] >= 300
    ]
    assert refused == []
    assert ok == Counter(p["metadata"]["name"] for p in pods)
    per_node = Counter(p["spec"]["nodeName"] for p in bound(pods))
    assert max(per_node.values()) <= GPUS  # one GPU a pod: no node holds more than it has
    return bindings


def _no_consolidation(tmp_path: Path) -> tuple[str, ...]:
    """Operator flags without consolidation: it may move a gang a dead leader placed,
    evicting its pods, which only KubeRay (not run here: the test makes the pods) would
    make again."""
    settings = tmp_path / "scheduler.yaml"
    settings.write_text("actions: [allocate, reclaim, preempt, stalegangeviction]\n")
    return ("--config", str(settings))


def _binding_times(bindings: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per user, when the server received each of its bindings."""
    by_user: dict[str, list[float]] = {}
    for e in bindings:
        by_user.setdefault(e["user"]["username"], []).append(_at(e["requestReceivedTimestamp"]))
    return by_user


def _bound_whole(k8s: K8sEnv, owners: list[tuple[str, str]], timeout: float) -> None:
    try:
        k8s.wait_for(
            "every gang bound whole", lambda: len(bound(k8s.pods())) == len(owners) * PODS_PER_GANG, timeout
        )
    except AssertionError:
        pods = k8s.pods()
        waiting = sorted(p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName"))
        reasons = Counter(e["reason"] for e in k8s.get(f"/api/v1/namespaces/{NS}/events")["items"])
        made = {f"{n}-{j}" for n, _ in owners for j in range(PODS_PER_GANG)}
        gone = sorted(made - {p["metadata"]["name"] for p in pods})
        raise AssertionError(
            f"{len(pods)} pods, not bound: {waiting}, gone: {gone}, events: {reasons}"
        ) from None


def test_two_operators_started_together_one_binds(audited: K8sEnv, replicas: Replicas) -> None:
    k8s = audited
    _cluster(k8s, nodes=2)
    replicas.start("a", "b")
    leader = k8s.wait_for("a leader", replicas.holder, timeout=30)
    standby = "b" if leader == "a" else "a"
    _submit(k8s, _owners(k8s, 4))
    k8s.wait_for("every gang bound", lambda: len(bound(k8s.pods())) == 16, timeout=60)
    time.sleep(3 * RETRY_S)  # a few renewals and standby tries more: nothing changes

    bindings = _assert_bound_once(k8s, k8s.pods())
    assert {e["user"]["username"] for e in bindings} == {leader}
    assert replicas.holder() == leader
    assert {e["user"]["username"] for e in _lease_writes(k8s)} == {leader}
    # The standby waited, warm: it listed the cluster but never acted.
    assert "waiting for lease" in replicas.log(standby) and "leading:" not in replicas.log(standby)
    assert "binding default/" not in replicas.log(standby)
    assert "binding default/" in replicas.log(leader)
    assert all(p.poll() is None for p in replicas.procs.values())


def test_the_leader_killed_in_a_burst_the_standby_finishes_it(
    audited: K8sEnv, replicas: Replicas, tmp_path: Path
) -> None:
    k8s = audited
    gangs = 30
    _cluster(k8s, nodes=gangs * PODS_PER_GANG // GPUS + 1)  # room for every gang
    k8s.start_fakes(kuberay=False)
    owners = _owners(k8s, gangs)
    replicas.start("a", "b", args=_no_consolidation(tmp_path))
    leader = k8s.wait_for("a leader", replicas.holder, timeout=30)
    standby = "b" if leader == "a" else "a"

    # The gangs arrive over a few seconds; the leader dies once it has bound some.
    burst = threading.Thread(target=_submit, args=(k8s, owners, 0.1))
    burst.start()
    k8s.wait_for("a few gangs bound", lambda: len(bound(k8s.pods())) >= 3 * PODS_PER_GANG, timeout=60)
    replicas.procs[leader].send_signal(signal.SIGKILL)
    killed_at = time.time()
    at_kill = k8s.pods()
    partly = len(partial(at_kill))
    print(f"at the kill: {len(bound(at_kill))} of {len(at_kill)} pods bound, {partly} gangs partly")
    assert 0 < len(bound(at_kill)) < gangs * PODS_PER_GANG

    taken = k8s.wait_for("the standby leading", lambda: replicas.holder() == standby, timeout=2 * LEASE_S)
    lease = k8s.get(LEASE)["spec"]
    failover = _at(lease["acquireTime"]) - killed_at
    print(f"failover: {failover:.2f}s (lease {LEASE_S:g}s, retry {RETRY_S:g}s)")
    # Not before the dead leader's lease ran out by the standby's clock, and within one
    # retry period after.
    assert LEASE_S - RETRY_S - 0.2 <= failover <= LEASE_S + RETRY_S, failover
    assert taken and lease["leaseTransitions"] == 1
    burst.join(timeout=60)

    _bound_whole(k8s, owners, timeout=90)
    pods = k8s.pods()
    assert partial(pods) == [] and len(by_gang(pods)) == gangs
    by_user = _binding_times(_assert_bound_once(k8s, pods))
    # The dead leader's bindings all before its death; the standby's all after it led.
    assert max(by_user[leader]) <= killed_at
    assert min(by_user[standby]) >= _at(lease["acquireTime"])


def test_a_black_holed_leader_stops_and_the_standby_finishes_the_burst(
    audited: K8sEnv, replicas: Replicas, tmp_path: Path
) -> None:
    """The leader's connection to the API server starts dropping everything (its
    requests hang; nothing is refused or reset) while gangs arrive and a standby runs:
    the leader stops within its renew deadline, the standby takes over once the lease
    runs out, and every gang is bound whole, each pod once."""
    k8s = audited
    gangs = 30
    _cluster(k8s, nodes=gangs * PODS_PER_GANG // GPUS + 1)
    k8s.start_fakes(kuberay=False)
    owners = _owners(k8s, gangs)
    args = _no_consolidation(tmp_path)
    with BlackHole("127.0.0.1", k8s.api.port) as hole:
        replicas.start("a", args=args, server=hole.url)
        k8s.wait_for("a leading", lambda: replicas.holder() == "a", timeout=30)
        replicas.start("b", args=args)
        burst = threading.Thread(target=_submit, args=(k8s, owners, 0.1))
        burst.start()
        k8s.wait_for("a few gangs bound", lambda: len(bound(k8s.pods())) >= 3 * PODS_PER_GANG, timeout=60)
        hole.hang()
        cut_at = time.time()
        at_cut = k8s.pods()
        print(f"at the cut: {len(bound(at_cut))} of {len(at_cut)} pods bound, {len(partial(at_cut))} partly")

        code = replicas.procs["a"].wait(timeout=RENEW_S + 2 * RETRY_S + 5)
        stopped_in = time.time() - cut_at
        k8s.wait_for("b leading", lambda: replicas.holder() == "b", timeout=2 * LEASE_S)
        lease = k8s.get(LEASE)["spec"]
        burst.join(timeout=60)
        _bound_whole(k8s, owners, timeout=90)
        recovered = time.time() - cut_at
    print(
        f"black hole: the leader stopped {stopped_in:.2f}s after the cut; the standby led "
        f"{_at(lease['acquireTime']) - cut_at:.2f}s after it; every gang bound {recovered:.2f}s after it"
    )
    assert code == 1 and stopped_in <= RENEW_S + 2 * RETRY_S + 1, (code, stopped_in)
    assert "could not renew lease default/kai-ray within the renew deadline" in replicas.log("a")
    pods = k8s.pods()
    assert partial(pods) == [] and len(by_gang(pods)) == gangs
    by_user = _binding_times(_assert_bound_once(k8s, pods))
    assert max(by_user["a"]) <= cut_at + 0.5  # nothing of a's reached the server after the cut
    assert min(by_user["b"]) >= _at(lease["acquireTime"])
    assert lease["leaseTransitions"] == 1


def test_a_paused_leader_acts_no_more_when_it_wakes(audited: K8sEnv, replicas: Replicas) -> None:
    """A leader frozen past its renew deadline (a long pause, a partition: it cannot
    renew) must not write when it wakes, though its informers bring it pods to bind: the
    standby has taken over meanwhile. It says so and exits."""
    k8s = audited
    _cluster(k8s, nodes=2)
    owners = _owners(k8s, 4)
    replicas.start("a", "b")
    leader = k8s.wait_for("a leader", replicas.holder, timeout=30)
    standby = "b" if leader == "a" else "a"
    _submit(k8s, owners[:1])
    k8s.wait_for("the first gang bound", lambda: len(bound(k8s.pods())) == PODS_PER_GANG, timeout=30)

    replicas.procs[leader].send_signal(signal.SIGSTOP)
    k8s.wait_for("the standby leading", lambda: replicas.holder() == standby, timeout=2 * LEASE_S)
    woken_at = time.time()
    _submit(k8s, owners[1:])  # pods for both to see, the paused one once it wakes
    replicas.procs[leader].send_signal(signal.SIGCONT)
    code = replicas.procs[leader].wait(timeout=10)
    exited_in = time.time() - woken_at
    k8s.wait_for("every gang bound", lambda: len(bound(k8s.pods())) == 16, timeout=60)

    assert code == 1 and exited_in < 5, (code, exited_in)
    assert "could not renew lease default/kai-ray within the renew deadline" in replicas.log(leader)
    assert "stopping at once so that no two operators act" in replicas.log(leader)
    bindings = _assert_bound_once(k8s, k8s.pods())
    assert all(
        _at(e["requestReceivedTimestamp"]) < woken_at for e in bindings if e["user"]["username"] == leader
    )
    assert all(
        _at(e["requestReceivedTimestamp"]) < woken_at
        for e in _lease_writes(k8s)
        if e["user"]["username"] == leader
    )


@pytest.fixture
def audited_rbac(apiserver_built: str) -> Iterator[K8sEnv]:
    with ApiServer(rbac=True, audit=True) as api:
        env = K8sEnv(api)
        env.install(kuberay=False)
        try:
            yield env
        finally:
            env.close()


def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline(
    audited_rbac: K8sEnv, tmp_path: Path
) -> None:
    """The leader's right to renew is taken away (its Lease RoleBinding deleted) while it
    runs and binds: it binds nothing later than a renew deadline after its last renewal,
    and exits saying why."""
    k8s = audited_rbac
    account(k8s)
    user = f"system:serviceaccount:{ACCOUNT_NS}:kai-ray"
    token = {"token": bound_token(k8s, "operator")}
    _cluster(k8s, nodes=2)
    k8s.start_operator(kubeconfig=kubeconfig(k8s.api, tmp_path / "sa.kubeconfig", token))
    k8s.wait_for("leading", lambda: "leading:" in k8s.log_tail())
    operator = k8s.operator
    assert operator is not None

    k8s.delete(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ACCOUNT_NS}/rolebindings/kai-ray-leader-election"
    )
    revoked_at = time.time()
    for i in range(60):  # work all along: one pod every 0.1 s, until it stops
        if operator.poll() is not None:
            break
        gpu_pod(k8s, f"p{i}")
        time.sleep(0.1)
    code = operator.wait(timeout=10)
    exited_in = time.time() - revoked_at
    k8s.operator = None
    print(f"exited {exited_in:.2f}s after its right to renew was taken")

    assert code == 1 and exited_in <= RENEW_S + 2 * RETRY_S + 1, (code, exited_in)
    renewals = [e for e in _lease_writes(k8s, ACCOUNT_NS) if e["user"]["username"] == user]
    last_renewal = max(_at(e["requestReceivedTimestamp"]) for e in renewals)
    bindings = [e for e in _bindings(k8s) if e["user"]["username"] == user]
    assert bindings and max(_at(e["requestReceivedTimestamp"]) for e in bindings) <= last_renewal + RENEW_S
    assert "could not renew lease kai-ray/kai-ray within the renew deadline" in k8s.log_tail(400)
    assert "Forbidden" in k8s.log_tail(400)  # said once, as the tries began failing
