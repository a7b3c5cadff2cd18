"""Tenants by token (kai_ray.control.tenants): whom a token names, the spec stamped with
its tenant, who may cancel and change what, and the tenants kept across a restart."""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest

from kai_ray.config import ConfigError
from kai_ray.control import SubmitError, Workload, WorkloadSpec
from kai_ray.control.memory import MemoryStore
from kai_ray.control.store import Records
from kai_ray.control.tenants import (
    TOKEN_ENV,
    Principal,
    TenantGate,
    Tenants,
    TokenRefused,
    new_token,
    token_hash,
)
from kai_ray.core import QueueAccess, QueueInfo

from .harness import make

TEAM_A, TEAM_B, OPS = new_token(), new_token(), new_token()


def document(*extra: tuple[str, str]) -> dict[str, Any]:
    """team-a (labels team=a), team-b, any `extra` (name, hash) tenants; admin ops."""
    tenants = [
        {"name": "team-a", "tokenHash": TEAM_A[1], "labels": {"team": "a"}},
        {"name": "team-b", "tokenHash": TEAM_B[1]},
    ] + [{"name": n, "tokenHash": h} for n, h in extra]
    return {"tenants": tenants, "admins": [{"name": "ops", "tokenHash": OPS[1]}]}


def gate(initial: dict[str, Any] | None = None, store: MemoryStore | None = None) -> TenantGate:
    return TenantGate(Records(store if store is not None else MemoryStore()), initial)


def workload(wid: str, tenant: str | None) -> Workload:
    return Workload(id=wid, spec=WorkloadSpec(queue="a", tenant=tenant), created_at=0.0)


# ---------------------------------------------------------------- tokens


def test_a_new_token_is_random_and_its_hash_is_the_files_form() -> None:
    token, digest = new_token()
    assert len(token) >= 40 and token != new_token()[0]
    assert digest == token_hash(token) and digest.startswith("sha256:") and len(digest) == 7 + 64


def test_no_token_begins_with_a_dash_which_a_command_line_would_read_as_an_option() -> None:
    # One urlsafe token in 64 begins with "-": in 2,000, some would (1 - (63/64)^2000).
    assert not [t for t, _ in (new_token() for _ in range(2000)) if t.startswith("-")]


def test_a_token_names_its_tenant_or_admin() -> None:
    from kai_ray.config.tenants import parse_tenants

    tenants = Tenants(parse_tenants(document()))
    assert tenants.who(TEAM_A[0]) == Principal("team-a", False, {"team": "a"})
    assert tenants.who(OPS[0]) == Principal("ops", True, {})


@pytest.mark.parametrize(
    ("token", "code"), [(None, "token-missing"), ("", "token-missing"), ("x", "token-unknown")]
)
def test_a_missing_or_wrong_token_is_refused_saying_how_to_present_one(token: str | None, code: str) -> None:
    with pytest.raises(TokenRefused) as caught:
        gate(document()).caller(token)
    assert caught.value.code == code
    assert TOKEN_ENV in str(caught.value) and "kai_ray.init(token=...)" in str(caught.value)


def test_the_check_costs_the_same_for_one_tenant_or_ten_thousand() -> None:
    """One hash and one dict lookup per call, whatever the number of tenants."""
    many = [(f"t{i}", token_hash(f"token-{i}")) for i in range(10_000)]
    small, large = gate(document()), gate(document(*many))

    def per_call(g: TenantGate) -> float:
        """The best of 5 runs: a busy machine only ever adds time."""
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(1000):
                g.caller(TEAM_B[0])
            runs.append((time.perf_counter() - t0) / 1000)
        return min(runs)

    assert large.caller("token-9999").name == "t9999"
    assert per_call(large) < 3 * per_call(small) + 5e-6  # a ratio: no machine's speed in it


def test_refusals_keep_their_code_across_pickling() -> None:
    """They travel from the scheduler to its caller pickled."""
    again = pickle.loads(pickle.dumps(TokenRefused("not yours", "not-owner")))
    assert isinstance(again, PermissionError) and again.code == "not-owner" and str(again) == "not yours"


# ---------------------------------------------------------------- what a call may do


def test_without_tenants_every_call_passes_and_no_spec_names_a_tenant() -> None:
    g = gate()
    assert g.caller(None) is None and g.caller("anything") is None
    spec = g.stamp(None, WorkloadSpec(queue="a", tenant="team-a", tenant_labels={"team": "a"}))
    assert (spec.tenant, spec.tenant_labels) == (None, {})  # a caller never names its own
    g.require_admin(None, "queue apply")
    g.check_owner(None, [workload("w", "team-b")], "cancel")


def test_a_tenants_token_stamps_its_name_and_labels_over_what_the_client_sent() -> None:
    g = gate(document())
    spec = g.stamp(g.caller(TEAM_A[0]), WorkloadSpec(queue="a", tenant="team-b", tenant_labels={"team": "b"}))
    assert (spec.tenant, spec.tenant_labels) == ("team-a", {"team": "a"})
    admin = g.stamp(g.caller(OPS[0]), WorkloadSpec(queue="a", tenant="team-b"))
    assert (admin.tenant, admin.tenant_labels) == (None, {})  # no tenant rule binds an admin


def test_a_tenant_acts_on_its_own_workloads_only_and_an_admin_on_any() -> None:
    g = gate(document())
    own, other, admins = workload("own", "team-a"), workload("other", "team-b"), workload("adm", None)
    team_a = g.caller(TEAM_A[0])
    g.check_owner(team_a, [own], "cancel")
    with pytest.raises(TokenRefused, match="workload 'other' belongs to tenant 'team-b'") as caught:
        g.check_owner(team_a, [own, other], "cancel")
    assert caught.value.code == "not-owner" and "an admin may" in str(caught.value)
    with pytest.raises(TokenRefused, match="belongs to an admin"):
        g.check_owner(team_a, [admins], "cancel")
    g.check_owner(g.caller(OPS[0]), [own, other, admins], "cancel")
    assert [w.id for w in g.owned(team_a, [own, other, admins])] == ["own"]
    assert len(g.owned(g.caller(OPS[0]), [own, other, admins])) == 3


def test_queues_and_tenants_are_an_admins_to_change() -> None:
    g = gate(document())
    with pytest.raises(
        TokenRefused, match="queue apply needs an admin's token, and tenant 'team-a'"
    ) as caught:
        g.require_admin(TEAM_A[0], "queue apply")
    assert caught.value.code == "admin-required"
    with pytest.raises(TokenRefused) as missing:
        g.require_admin(None, "queue apply")
    assert missing.value.code == "token-missing"
    assert g.require_admin(OPS[0], "queue apply") == Principal("ops", True, {})
    with pytest.raises(TokenRefused):
        g.apply(None, TEAM_B[0])  # a tenant cannot switch the checks off
    assert g.tenants is not None


# ---------------------------------------------------------------- kept with the scheduler's state


def test_the_tenants_survive_a_restart_and_win_over_those_it_started_with() -> None:
    store = MemoryStore()
    first = gate(document(), store)
    newer = document(("team-c", token_hash("c")))
    assert first.apply(newer, OPS[0])["tenants"] == ["team-a", "team-b", "team-c"]
    restarted = gate(document(), store)  # started again with the first file
    assert restarted.caller("c").name == "team-c"


def test_switched_off_stays_off_across_a_restart() -> None:
    store = MemoryStore()
    gate(document(), store).apply(None, OPS[0])
    restarted = gate(document(), store)
    assert restarted.tenants is None and restarted.caller(None) is None
    assert restarted.summary()["configured"] is False


def test_a_bad_document_changes_nothing() -> None:
    g = gate(document())
    broken = document()
    broken["admins"] = []
    with pytest.raises(ConfigError, match="names no admin"):
        g.apply(broken, OPS[0])
    assert g.caller(TEAM_A[0]).name == "team-a"
    assert gate(None, g.records.store).summary()["admins"] == ["ops"]  # the stored file too


def test_the_listing_never_shows_a_hash() -> None:
    summary = gate(document()).summary()
    assert summary["tenants"] == ["team-a", "team-b"] and summary["admins"] == ["ops"]
    assert "sha256" not in repr(summary)


# ---------------------------------------------------------------- with the controller's door


def test_a_stamped_spec_meets_its_queues_access_rule_at_the_door() -> None:
    """The gate says who; the controller's check at the door (control.validate) says
    whether that tenant may use the queue, with the rule's code."""
    queues = [
        QueueInfo("a", quota=(-1, -1, -1), access=QueueAccess(tenants=("team-a",))),
        QueueInfo("b", quota=(-1, -1, -1), access=QueueAccess(tenants=("team-b",), max_priority=50)),
    ]
    h, g = make(queues=queues), gate(document())

    def submit(wid: str, token: str, queue: str, priority: int = 50) -> None:
        spec = WorkloadSpec(queue=queue, priority=priority, resources_per_worker={"GPU": 1, "CPU": 1})
        h.controller.submit(wid, g.stamp(g.caller(token), spec))

    submit("own", TEAM_A[0], "a")
    assert h.w("own").spec.tenant == "team-a"
    with pytest.raises(SubmitError) as wrong_queue:
        submit("sneaky", TEAM_A[0], "b")
    assert wrong_queue.value.code == "queue-tenant"
    with pytest.raises(SubmitError) as too_high:
        submit("urgent", TEAM_B[0], "b", priority=125)
    assert too_high.value.code == "priority-ceiling"
    submit("by-admin", OPS[0], "b")  # no tenant rule binds an admin's workload
    assert set(h.controller.workloads) == {"own", "by-admin"}
