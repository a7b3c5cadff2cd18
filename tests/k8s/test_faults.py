"""The operator under API-server faults, each with a burst of gangs in flight (burst.py,
200 gangs here):
kube-apiserver killed and started again, etcd killed and started again, a watch resumed
from a version compacted away (410 Gone) while pods change. After each: no partial gang,
no node holding more GPUs than it has, and every gang that fits bound whole within
RECOVERY_S of the fault's end. Each prints its recovery time (docs/benchmarks-history.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.k8s.burst import GPUS, PODS_PER_GANG, by_gang, gpus_per_node, make_gangs, partial
from tests.k8s.conftest import ReadyServers, server_with
from tests.k8s.env import NS, K8sEnv, bound

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]
RECOVERY_S = 15.0  # every pending gang that fits is bound whole within this, after the fault
# The operator's Lease as it runs by default (the Helm chart's): an outage shorter than
# the renew deadline (10 s) leaves it leading. A longer one makes it exit, for its
# Deployment to start it again as a standby (test_leader.py).
DEFAULT_LEASE = (
    "--leader-elect-lease-duration=15",
    "--leader-elect-renew-deadline=10",
    "--leader-elect-retry-period=2",
)
# 200 gangs of 4 one-GPU pods on 50 nodes of 8 GPUs: half fit, and binding the 400 pods
# that do takes long enough that the fault strikes while they are being bound.
GANGS, NODES = 200, 50
FITS = NODES * GPUS // PODS_PER_GANG  # gangs the nodes hold


@pytest.fixture
def k8s_few_writers(ready_servers: ReadyServers) -> Iterator[K8sEnv]:
    """A server that serves few writes at once: the operator's 400 bindings queue, so a
    fault strikes while many are on the wire (their answers lost with the connection)."""
    yield from server_with(ready_servers, "--max-mutating-requests-inflight=2", "--max-requests-inflight=20")


def _burst(k8s: K8sEnv) -> None:
    """The nodes, the queues and the 100 gangs; the operator binding them."""
    for i in range(NODES):
        k8s.node(f"n{i:02d}", gpus=GPUS, cpu="64")
    k8s.queue("default-parent-queue", gpu=-1)
    k8s.queue("default-queue", gpu=-1, parent="default-parent-queue")
    make_gangs(k8s, GANGS)
    k8s.start_fakes(kuberay=False)
    k8s.start_operator(*DEFAULT_LEASE)
    # The fault strikes at the first binding seen (one bound pod asked for, not 800).
    any_bound = f"/api/v1/namespaces/{NS}/pods?fieldSelector=spec.nodeName!%3D&limit=1"
    deadline = time.monotonic() + 60
    while not k8s.get(any_bound)["items"]:
        assert time.monotonic() < deadline, f"no binding in 60s\n{k8s.log_tail()}"
        time.sleep(0.01)


def _all_that_fit_bound(k8s: K8sEnv) -> bool:
    try:
        pods = k8s.pods()
    except Exception:  # the server is still coming back
        return False
    return len(bound(pods)) == FITS * PODS_PER_GANG and not partial(pods)


def _recovered(k8s: K8sEnv, fault: str, since: float) -> float:
    """Seconds from `since` until every gang that fits is bound whole; then the
    invariants, a few cycles later; then work goes on: two gangs finish, and the next
    two that fit are bound in their room."""
    try:
        print(f"{fault}: as it ended, {len(bound(k8s.pods()))} of {FITS * PODS_PER_GANG} pods that fit bound")
    except Exception as exc:  # the server is still coming back
        print(f"{fault}: as it ended, the server did not answer yet ({exc})")
    k8s.wait_for(
        f"every gang that fits bound whole after {fault}",
        lambda: _all_that_fit_bound(k8s),
        timeout=RECOVERY_S,
        explain=lambda: _explain(k8s),
    )
    took = time.monotonic() - since
    print(f"{fault}: recovered in {took:.1f}s")
    time.sleep(2)  # a few more cycles: nothing changes
    pods = k8s.pods()
    assert partial(pods) == []
    assert max(gpus_per_node(pods).values()) <= GPUS  # nothing bound twice, no node over its GPUs
    assert len(bound(pods)) == FITS * PODS_PER_GANG
    assert k8s.operator is not None and k8s.operator.poll() is None, "the operator kept running"
    freed = time.monotonic()
    _finish_two(k8s)
    k8s.wait_for("the next gangs bound in the room freed", lambda: _all_that_fit_bound(k8s), RECOVERY_S)
    print(f"{fault}: then two gangs ended, and the next two were bound {time.monotonic() - freed:.1f}s later")
    return took


def _explain(k8s: K8sEnv) -> str:
    """Where the bindings stand, and the operator's last words other than failed calls."""
    pods = k8s.pods()
    lines = [
        ln
        for ln in k8s.operator_log.read_text(errors="replace").splitlines()
        if "failed" not in ln and "Cannot connect" not in ln
    ]
    return (
        f"{len(bound(pods))} pods bound, gangs bound in part: {partial(pods)}, "
        f"GPUs per node: {dict(gpus_per_node(pods))}\n" + "\n".join(lines[-30:])
    )


def _finish_two(k8s: K8sEnv) -> list[str]:
    """Two bound gangs end: their pods are deleted."""
    gangs = by_gang(k8s.pods())
    done = [g for g, ps in gangs.items() if bound(ps)][:2]
    for gang in done:
        for p in gangs[gang]:
            k8s.delete(f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}")
    return done


def test_kube_apiserver_killed_and_started_again(k8s_few_writers: K8sEnv) -> None:
    k8s = k8s_few_writers
    _burst(k8s)
    k8s.api.kill("apiserver")  # in the middle of the first cycle's bindings
    time.sleep(3)
    k8s.api.restart("apiserver")
    _recovered(k8s, "kube-apiserver killed for 3s", time.monotonic())


def test_etcd_killed_and_started_again(k8s_few_writers: K8sEnv) -> None:
    k8s = k8s_few_writers
    _burst(k8s)
    k8s.api.kill("etcd")
    time.sleep(3)
    k8s.api.restart("etcd")
    _recovered(k8s, "etcd killed for 3s", time.monotonic())


def test_kube_apiserver_hanging_every_request(k8s_few_writers: K8sEnv) -> None:
    """The server frozen (SIGSTOP) for 5 s: every request of the operator hangs, its
    bindings' answers with them, and its Lease is not renewed meanwhile (within the
    renew deadline of 10 s: it keeps leading)."""
    k8s = k8s_few_writers
    _burst(k8s)
    k8s.api.freeze("apiserver")
    time.sleep(5)
    k8s.api.freeze("apiserver", frozen=False)
    _recovered(k8s, "kube-apiserver frozen for 5s", time.monotonic())


def test_a_watch_expired_while_pods_change_is_listed_again(k8s_compacting: K8sEnv) -> None:
    """The server keeps no watch cache: the operator's watches, cut by a restart of the
    server, resume from versions that etcd compacted away meanwhile (410 Gone), and the
    operator lists again while pods change."""
    k8s = k8s_compacting
    _burst(k8s)
    k8s.api.kill("apiserver")
    k8s.api.compact()  # every version the watches last saw is gone
    k8s.api.restart("apiserver")
    since = time.monotonic()
    k8s.wait_for(
        "a watch answered 410 Gone, and listed again",
        lambda: "is gone (410); listing again" in k8s.operator_log.read_text(),
        timeout=30,
        explain=k8s.log_tail,
    )
    _recovered(k8s, "watches expired (410 Gone)", since)
