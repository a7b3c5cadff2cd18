"""Tenants by token on a real multi-node Ray cluster (docs/ray.md, "Tenants"): refusals
that say what to fix, the queues' access rules at the door, cancels that are the
owner's, queues and tenants that are the admins', and the tenants kept across a restart
of the scheduler; nothing admitted before is lost on the way.

One scheduler serves the whole module (its tests use workloads of their own): starting
one per test would cost more than the tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kai_ray
from kai_ray.api.client import Scheduler
from kai_ray.cli import main
from kai_ray.control import SubmitError
from kai_ray.control.tenants import TOKEN_ENV, TokenRefused, new_token
from kai_ray.ray.client import make_spec

from .conftest import groups_of, reset_scheduler, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

TEAM_A, TEAM_B, TEAM_C, OPS = new_token(), new_token(), new_token(), new_token()
QUEUES = [
    {"name": "team-a", "resources": {"cpu": {"quota": -1}}, "access": {"tenants": ["team-a"]}},
    {
        "name": "team-b",
        "resources": {"cpu": {"quota": -1}},
        "access": {"tenantSelector": {"matchLabels": {"team": "b"}}, "maxPriority": "build"},
    },
]


def tenants_yaml(*extra: tuple[str, str]) -> str:
    rows = [("team-a", TEAM_A[1], "{team: a}"), ("team-b", TEAM_B[1], "{team: b}")]
    rows += [(name, digest, "{}") for name, digest in extra]
    tenants = "".join(f"- name: {n}\n  tokenHash: {h}\n  labels: {labels}\n" for n, h, labels in rows)
    return (
        "apiVersion: kai-ray.io/v1\nkind: Tenants\n"
        f"tenants:\n{tenants}admins:\n- name: ops\n  tokenHash: {OPS[1]}\n"
    )


@pytest.fixture(scope="module")
def admin(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scheduler]:
    """The scheduler, started with the queues and the tenants file, as its admin sees it."""
    reset_scheduler()
    path = tmp_path_factory.mktemp("tenants") / "tenants.yaml"
    path.write_text(tenants_yaml())
    yield kai_ray.init(queues=QUEUES, tenants=path, token=OPS[0])
    reset_scheduler()


@pytest.fixture(scope="module")
def first(admin: Scheduler) -> str:
    """A workload of team-a's admitted before the tests: no refusal may disturb it."""
    team_a = as_tenant(admin, TEAM_A)
    wid = team_a.submit(block("team-a"))
    assert team_a.wait(wid, ["Running"], 30)["state"] == "Running"
    return wid


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def as_tenant(sched: Scheduler, token: tuple[str, str] | None) -> Scheduler:
    return Scheduler(sched.handle, token[0] if token else None)


def block(queue: str, priority: str = "train") -> Any:
    return make_spec(queue, priority, kind="block", resources_per_worker={"CPU": 0.1})


def first_still_runs(admin: Scheduler, first: str) -> None:
    info = admin.info(first)
    assert info["state"] == "Running" and info["tenant"] == "team-a"
    assert len(groups_of(info["id"])) == 1


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- at the door


def test_a_missing_or_wrong_token_is_refused_saying_how_to_fix_it(admin: Scheduler, first: str) -> None:
    with pytest.raises(TokenRefused) as missing:
        as_tenant(admin, None).submit(block("team-a"))
    assert missing.value.code == "token-missing"
    assert TOKEN_ENV in str(missing.value) and "kai_ray.init(token=...)" in str(missing.value)
    with pytest.raises(TokenRefused) as wrong:
        as_tenant(admin, new_token()).submit_many([block("team-a")] * 3)
    assert wrong.value.code == "token-unknown" and "kai-ray tenant token" in str(wrong.value)
    with pytest.raises(TokenRefused):
        as_tenant(admin, None).cancel(first)
    first_still_runs(admin, first)


def test_the_command_line_reads_the_token_from_the_environment(
    admin: Scheduler, first: str, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kai_ray.api.client._current", None)  # a fresh process's client
    code, _, err = run_cli(capsys, "job", "submit", "--queue", "team-a", "--cpus", "0.1", "--", "true")
    assert code == 2 and "call carried none" in err and TOKEN_ENV in err
    monkeypatch.setattr("kai_ray.api.client._current", None)
    monkeypatch.setenv(TOKEN_ENV, TEAM_A[0])
    code, out, err = run_cli(capsys, "tenant", "whoami")
    assert (code, out.strip()) == (0, "tenant team-a"), err
    first_still_runs(admin, first)


def test_a_queue_that_does_not_admit_the_tenant_refuses_it_at_the_door(admin: Scheduler, first: str) -> None:
    with pytest.raises(SubmitError) as caught:
        as_tenant(admin, TEAM_A).submit(block("team-b"))
    assert caught.value.code == "queue-tenant" and "team-b" in str(caught.value)
    # The client never chooses its tenant: naming team-b in the spec changes nothing.
    spec = dataclasses.replace(block("team-b"), tenant="team-b", tenant_labels={"team": "b"})
    with pytest.raises(SubmitError) as posing:
        as_tenant(admin, TEAM_A).submit(spec)
    assert posing.value.code == "queue-tenant"
    first_still_runs(admin, first)


def test_a_priority_over_the_queues_ceiling_is_refused_at_the_door(admin: Scheduler, first: str) -> None:
    team_b = as_tenant(admin, TEAM_B)
    with pytest.raises(SubmitError) as caught:
        team_b.submit(block("team-b", "inference"))
    assert caught.value.code == "priority-ceiling"
    first_still_runs(admin, first)


def test_an_allowed_submission_runs_as_its_tenants(admin: Scheduler, first: str) -> None:
    kai_ray.init(token=TEAM_B[0])  # the user API: this driver's workloads are team-b's
    try:

        @kai_ray.workload(queue="team-b", priority="build", resources_per_worker={"CPU": 0.1})
        def square(x: int) -> int:
            return x * x

        assert ray.get(square.remote(7), timeout=60) == 49
        handle = square.submit(3)
        assert handle.result(60) == 9 and handle.info()["tenant"] == "team-b"
    finally:
        kai_ray.init(token=OPS[0])
    first_still_runs(admin, first)


# ---------------------------------------------------------------- cancels are the owner's


def test_a_tenant_cannot_cancel_another_tenants_workload_and_an_admin_can(
    admin: Scheduler, first: str, capsys: Any
) -> None:
    team_a, team_b = as_tenant(admin, TEAM_A), as_tenant(admin, TEAM_B)
    mine, theirs = team_a.submit(block("team-a")), team_b.submit(block("team-b"))
    wait_until(lambda: team_a.info(mine)["state"] == "Running", what="team-a's workload running")
    with pytest.raises(TokenRefused) as caught:
        team_b.cancel(mine)
    assert caught.value.code == "not-owner" and "belongs to tenant 'team-a'" in str(caught.value)
    with pytest.raises(TokenRefused):
        team_b.cancel_many([theirs, mine])  # refused as a whole: theirs is not cancelled either
    code, _, err = run_cli(capsys, "cancel", mine, "--token", TEAM_B[0])
    assert code == 2 and "belongs to tenant 'team-a'" in err
    assert team_a.info(mine)["state"] == "Running" and team_b.info(theirs)["state"] != "Cancelled"

    assert team_b.cancel(theirs)["state"] == "Cancelled"  # its own
    assert admin.cancel(mine)["state"] == "Cancelled"  # an admin: anyone's
    assert groups_of(mine) == []
    first_still_runs(admin, first)


# ---------------------------------------------------------------- queues and tenants are the admins'


def test_queue_apply_and_delete_need_an_admins_token(
    admin: Scheduler, first: str, tmp_path: Path, capsys: Any
) -> None:
    extra = [{"name": "scratch", "resources": {"cpu": {"quota": 1}}}]
    with pytest.raises(TokenRefused) as by_tenant:
        as_tenant(admin, TEAM_A).apply_queues(extra)
    assert by_tenant.value.code == "admin-required" and "tenant 'team-a'" in str(by_tenant.value)
    with pytest.raises(TokenRefused) as by_nobody:
        as_tenant(admin, None).apply_queues(extra)
    assert by_nobody.value.code == "token-missing"
    file = tmp_path / "queues.yaml"
    file.write_text("- name: scratch\n  resources:\n    cpu: {quota: 1}\n")
    code, _, err = run_cli(capsys, "queue", "apply", "-f", str(file), "--token", TEAM_A[0])
    assert code == 2 and "queue apply needs an admin's token" in err
    assert "scratch" not in [q["name"] for q in admin.queues()]

    # A tenant's driver passing the queues as they are changes nothing, and is not refused.
    assert as_tenant(admin, TEAM_A).apply_queues(QUEUES[:1])["unchanged"] == ["team-a"]
    assert admin.apply_queues(extra)["added"] == ["scratch"]
    with pytest.raises(TokenRefused):
        as_tenant(admin, TEAM_B).delete_queues(["scratch"])
    assert admin.delete_queues(["scratch"])["removed"] == ["scratch"]
    first_still_runs(admin, first)


def test_tenants_change_at_run_time_by_an_admin_and_survive_a_restart(
    admin: Scheduler, first: str, tmp_path: Path, capsys: Any
) -> None:
    file = tmp_path / "tenants.yaml"
    file.write_text(tenants_yaml(("team-c", TEAM_C[1])))
    code, _, err = run_cli(capsys, "tenant", "apply", str(file), "--token", TEAM_A[0])
    assert code == 2 and "changing the tenants needs an admin's token" in err
    with pytest.raises(TokenRefused):
        as_tenant(admin, TEAM_C).whoami()
    code, out, err = run_cli(capsys, "tenant", "apply", str(file), "--token", OPS[0])
    assert code == 0 and "3 tenant(s) (team-a, team-b, team-c)" in out, err
    assert as_tenant(admin, TEAM_C).whoami()["name"] == "team-c"

    ray.kill(admin.handle, no_restart=False)  # the actor restarts from its stored state
    wait_until(lambda: _pings(admin), timeout=60, what="the scheduler back after its restart")
    assert as_tenant(admin, TEAM_C).whoami() == {
        "configured": True,
        "name": "team-c",
        "admin": False,
        "labels": {},
    }
    with pytest.raises(TokenRefused):
        as_tenant(admin, None).submit(block("team-a"))
    wait_until(lambda: admin.info(first)["state"] == "Running", what="the first workload")
    first_still_runs(admin, first)


def _pings(sched: Scheduler) -> bool:
    try:
        ray.get(sched.handle.ping.remote(), timeout=5)
        return True
    except (ray.exceptions.RayError, TimeoutError):
        return False
