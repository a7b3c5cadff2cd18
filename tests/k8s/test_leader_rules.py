"""The Lease rules (kai_ray.k8s.leader) without a server: an in-memory Lease with
resourceVersions, and a clock the test moves. tests/k8s/test_leader.py runs the same
rules as real operators on a real API server."""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.k8s.client import ApiError, Kube
from kai_ray.k8s.leader import LeaderElector, LeadershipLost, LeaseOptions, NotLeading
from kai_ray.k8s.login import KubeConfig
from kai_ray.k8s.progress import Progress

OPTIONS = LeaseOptions(namespace="ns", lease_duration=15, renew_deadline=10, retry_period=2)


class FakeLeases:
    """One Lease, optimistic concurrency as the API server does it."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.version = 0
        self.down = False

    def put(self, spec: dict[str, Any]) -> None:
        self.version += 1
        self.obj = {"metadata": {"name": "kai-ray", "resourceVersion": str(self.version)}, "spec": spec}

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        if self.down:
            raise OSError("the server is away")
        if method == "GET":
            if self.obj is None:
                raise ApiError(404, "NotFound", "no lease")
            return copy.deepcopy(self.obj)
        if method == "POST" and self.obj is not None:
            raise ApiError(409, "AlreadyExists", "lease exists")
        if method == "PUT" and (self.obj is None or body["metadata"]["resourceVersion"] != str(self.version)):
            raise ApiError(409, "Conflict", "the object has been modified")
        self.put(copy.deepcopy(body["spec"]))
        assert self.obj is not None
        return copy.deepcopy(self.obj)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(
    leases: FakeLeases, clock: Clock, identity: str, options: LeaseOptions = OPTIONS
) -> LeaderElector:
    opts = LeaseOptions(
        namespace=options.namespace,
        identity=identity,
        lease_duration=options.lease_duration,
        renew_deadline=options.renew_deadline,
        retry_period=options.retry_period,
    )
    return LeaderElector(leases, opts, clock=clock)  # type: ignore[arg-type]


def attempt(e: LeaderElector) -> bool:
    return asyncio.run(e._attempt())


def test_the_first_takes_a_missing_lease_and_the_fence_closes_after_the_renew_deadline() -> None:
    leases, clock = FakeLeases(), Clock()
    a = elector(leases, clock, "a")
    assert attempt(a) and leases.obj is not None and leases.obj["spec"]["holderIdentity"] == "a"
    a.check()
    clock.now += 9.9
    a.check()
    clock.now += 0.2  # no renewal for the renew deadline: no more writes
    with pytest.raises(NotLeading):
        a.check()


def test_takeover_only_after_a_lease_duration_unchanged_by_the_observers_clock() -> None:
    leases, clock = FakeLeases(), Clock()
    # A holder that wrote long ago by the wall clock: the record's times are not trusted.
    leases.put(
        {"holderIdentity": "old", "leaseDurationSeconds": 15, "renewTime": "2000-01-01T00:00:00.000000Z"}
    )
    b = elector(leases, clock, "b")
    assert not attempt(b)
    clock.now += 14.9
    assert not attempt(b)
    clock.now += 0.2
    assert attempt(b)
    assert leases.obj is not None and leases.obj["spec"]["holderIdentity"] == "b"
    assert leases.obj["spec"]["leaseTransitions"] == 1


def test_a_waiting_replica_says_whom_it_waits_for_and_until_when() -> None:
    """What the operator's status and the dashboard show while a new identity (a restarted
    operator) waits out the lease of the process it replaces (kai_ray.k8s.progress)."""
    leases, clock = FakeLeases(), Clock()
    leases.put({"holderIdentity": "killed_41", "leaseDurationSeconds": 15})
    b, progress, touched = elector(leases, clock, "b"), Progress(), []
    progress.on_change = lambda: touched.append(progress.detail)
    assert not attempt(b)
    progress.waiting(b.standing())
    standing = b.standing()
    assert standing["holder"] == "killed_41" and not standing["leading"] and standing["wait_s"] == 15
    assert standing["until"] == pytest.approx(time.time() + 15, abs=2)
    clock.now += 10
    assert not attempt(b)
    progress.waiting(b.standing())
    status = progress.status(b.standing())
    assert status["phase"] == "waiting-for-lease" and not status["scheduling"]
    assert status["lease"]["wait_s"] == 5 and "held by killed_41" in status["detail"]
    assert "(b) may take it over in 5s" in status["detail"] and len(touched) == 2
    clock.now += 5.1
    assert attempt(b)
    assert b.standing() == {"lease": "ns/kai-ray", "identity": "b", "leading": True, "holder": "b"}


def test_a_renewing_holder_is_never_taken_over() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    assert attempt(a)
    for _ in range(20):
        assert not attempt(b)
        clock.now += 2
        assert attempt(a)  # renewed: b sees the record change and starts counting again
    assert leases.obj is not None and leases.obj["spec"]["holderIdentity"] == "a"
    assert leases.obj["spec"]["leaseTransitions"] == 0


def test_two_racing_for_an_expired_lease_one_wins() -> None:
    leases, clock = FakeLeases(), Clock()
    leases.put({"holderIdentity": "old", "leaseDurationSeconds": 15})
    b, c = elector(leases, clock, "b"), elector(leases, clock, "c")
    assert not attempt(b) and not attempt(c)
    clock.now += 16

    async def race() -> list[bool]:
        return list(await asyncio.gather(b._attempt(), c._attempt()))

    assert sorted(asyncio.run(race())) == [False, True]  # the loser's write had an old resourceVersion


def test_a_released_lease_is_taken_at_once() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    assert attempt(a) and not attempt(b)
    asyncio.run(a.release())
    assert not a.leading
    assert leases.obj is not None and leases.obj["spec"]["holderIdentity"] == ""
    assert attempt(b)


def test_another_holder_seen_while_leading_stops_at_once() -> None:
    leases, clock = FakeLeases(), Clock()
    a = elector(leases, clock, "a")
    assert attempt(a)
    leases.put({"holderIdentity": "intruder", "leaseDurationSeconds": 15})  # say, an admin's edit
    with pytest.raises(LeadershipLost, match="held by intruder"):
        attempt(a)
    assert not a.leading


def test_keep_gives_up_at_the_renew_deadline() -> None:
    leases = FakeLeases()
    fast = LeaseOptions(
        namespace="ns", identity="a", lease_duration=0.6, renew_deadline=0.4, retry_period=0.1
    )
    a = LeaderElector(leases, fast)  # type: ignore[arg-type]

    async def partitioned() -> float:
        assert await a._attempt()
        sent = time.monotonic()
        leases.down = True
        with pytest.raises(LeadershipLost, match="within the renew deadline"):
            await a.keep()
        return time.monotonic() - sent

    lost_after = asyncio.run(partitioned())
    assert 0.35 <= lost_after <= 0.4 + 0.15, lost_after
    assert not a.leading


def test_the_fence_refuses_writes_before_any_request() -> None:
    leases, clock = FakeLeases(), Clock()
    a = elector(leases, clock, "a")
    kube = Kube(KubeConfig(path="unused"))
    kube.fence = a.check

    async def write() -> None:
        await kube.request("POST", "/api/v1/namespaces/default/pods/p/binding", {})

    with pytest.raises(NotLeading):
        asyncio.run(write())
    with pytest.raises(RuntimeError, match="not open"):  # reads pass the fence (then need a session)
        asyncio.run(kube.request("GET", "/api/v1/pods"))
    with pytest.raises(RuntimeError, match="not open"):  # the lease's own writes are not fenced
        asyncio.run(kube.request("PUT", "/apis/coordination.k8s.io/v1/x", {}, fenced=False))


def test_the_settings_must_keep_the_fence() -> None:
    with pytest.raises(ValueError, match=r"renew deadline \(10s\) < lease duration"):
        LeaseOptions(namespace="ns", lease_duration=10, renew_deadline=10)


def test_the_flags(tmp_path: Path) -> None:
    from kai_ray.api.operatorcommands import leader_option
    from kai_ray.cli import build_parser
    from kai_ray.config.errors import ConfigError
    from kai_ray.k8s.login import load_kubeconfig

    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
                "current-context": "c",
            }
        )
    )
    config = load_kubeconfig(str(path))

    def parse(*flags: str) -> Any:
        return leader_option(build_parser().parse_args(["operator", *flags]), config)

    assert parse() == LeaseOptions(namespace="team")  # on by default, client-go's timings
    assert parse("--no-leader-elect") is None
    assert parse("--leader-elect-namespace", "ops", "--leader-elect-name", "x").namespace == "ops"
    with pytest.raises(ConfigError, match="--leader-elect-renew-deadline"):
        parse("--leader-elect-renew-deadline", "20")
