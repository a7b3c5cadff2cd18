"""Tenants on Kubernetes (docs/tenants.md), on a real API server in RBAC mode with
KubeRay's own operator: two teams, each a namespace with a ServiceAccount of its own
(a Role over its namespace's pods and Ray objects, nothing over Queues), and an admin.

- At the door: the ValidatingAdmissionPolicy of operators/base refuses team-a's pod,
  RayCluster and RayJob that name team-b's queue, or a priority over team-a's ceiling,
  saying what is allowed; RBAC refuses team-a in team-b's namespace and on Queues.
- An allowed RayCluster runs; the admin may do what the tenants may not.
- With the policy off, the scheduler alone refuses: the pods wait with the rule's
  reason, an Event says it, the Queue's status counts it, and no pod is bound.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.k8s.client import ApiError, Kube
from kai_ray.k8s.login import load_kubeconfig
from kai_ray.testing.apiserver import ApiServer
from tests.helm.test_chart import REPO
from tests.k8s.env import K8sEnv, bound, condition, group, raycluster
from tests.k8s.test_dashboard import free_port
from tests.k8s.test_login import kubeconfig

pytestmark = pytest.mark.k8s
POLICY = REPO / "operators" / "base" / "queue-access-policy.yaml"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
TEAMS = ("team-a", "team-b")
QUEUES = "/apis/kai-ray.io/v2/queues"


def rc_path(ns: str) -> str:
    return f"/apis/ray.io/v1/namespaces/{ns}/rayclusters"


# ------------------------------------------------------------ the cluster


@pytest.fixture(scope="module")
def tenancy(installed_etcd: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    with ApiServer(rbac=True, etcd_data=installed_etcd) as api:
        env = K8sEnv(api)
        try:
            env.install()
            tenancy = Tenancy(env, tmp_path_factory.mktemp("tenants"))
            yield tenancy
            for client in tenancy.clients.values():
                env.run(client.close())
        finally:
            env.close()


class Tenancy:
    """The admin's env, each team's namespace, account and client, the two queues, the
    admission policy, KubeRay and the operator."""

    def __init__(self, env: K8sEnv, tmp: Path) -> None:
        self.env = env
        for team in TEAMS:
            env.create(
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": team, "labels": {"team": team}},
                },
            )
        self.clients = {team: self._client(team, tmp) for team in TEAMS}
        env.node("n0", gpus=8)
        # team-a's queue names its namespace and caps priority at build; team-b's selects
        # namespaces by label.
        env.queue("team-a", gpu=4, access={"tenants": ["team-a"], "maxPriority": "build"})
        env.queue("team-b", gpu=4, access={"tenantSelector": {"matchLabels": {"team": "team-b"}}})
        for doc in yaml.safe_load_all(POLICY.read_text()):
            plural = (
                "validatingadmissionpolicies"
                if doc["kind"].endswith("Policy")
                else "validatingadmissionpolicybindings"
            )
            env.create(f"{ADMISSION}/{plural}", doc)
        env.start_fakes()
        self.dashboard = f"http://127.0.0.1:{free_port()}/"
        env.start_operator("--dashboard", self.dashboard.removeprefix("http://").rstrip("/"))
        for queue in TEAMS:  # the door is closed until the operator resolves each rule
            env.wait_for(f"queue {queue}'s rule resolved", lambda q=queue: self.access(q).get("tenants"))

    def _client(self, team: str, tmp: Path) -> Kube:
        env = self.env
        env.create(
            f"/api/v1/namespaces/{team}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}},
        )
        rules = [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete", "patch"]},
            {
                "apiGroups": ["ray.io"],
                "resources": ["rayclusters", "rayjobs", "rayservices"],
                "verbs": ["create", "get", "list", "delete", "patch"],
            },
        ]
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        meta = {"name": "tenant", "namespace": team}
        env.create(f"{rbac}/namespaces/{team}/roles", {"kind": "Role", "metadata": meta, "rules": rules})
        env.create(
            f"{rbac}/namespaces/{team}/rolebindings",
            {
                "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
                "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": team}],
            },
        )
        answer = env.create(
            f"/api/v1/namespaces/{team}/serviceaccounts/tenant/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
        path = kubeconfig(env.api, tmp / f"{team}.kubeconfig", {"token": answer["status"]["token"]}, team)
        kube = Kube(load_kubeconfig(path))
        env.run(kube.open())
        return kube

    def access(self, queue: str) -> dict[str, Any]:
        return dict((self.env.get(f"{QUEUES}/{queue}").get("status") or {}).get("access") or {})

    def as_team(self, team: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.env.run(self.clients[team].create(path, body))

    def refused(self, team: str, path: str, body: dict[str, Any]) -> ApiError:
        with pytest.raises(ApiError) as caught:
            self.as_team(team, path, body)
        return caught.value


def pod(name: str, ns: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "schedulerName": "kai-ray",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


def rayjob(name: str, ns: str, labels: dict[str, str]) -> dict[str, Any]:
    cluster = raycluster("unused", group("w", replicas=1), ns=ns)["spec"]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": cluster},
    }


# ------------------------------------------------------------ the tests


def test_a_tenant_cannot_get_work_into_another_teams_queue_by_any_path(tenancy: Tenancy) -> None:
    into_b = {"kai.scheduler/queue": "team-b"}
    for path, body in [
        ("/api/v1/namespaces/team-a/pods", pod("p", "team-a", into_b)),
        (rc_path("team-a"), raycluster("rc", group("w", replicas=1), queue="team-b", ns="team-a")),
        ("/apis/ray.io/v1/namespaces/team-a/rayjobs", rayjob("j", "team-a", into_b)),
    ]:
        error = tenancy.refused("team-a", path, body)
        assert error.status == 403, error
        assert "queue team-b does not admit namespace team-a (it admits: team-b)" in error.message, error
    # In team-b's own namespace, RBAC refuses team-a before any policy is asked.
    error = tenancy.refused("team-a", "/api/v1/namespaces/team-b/pods", pod("p", "team-b", into_b))
    assert error.status == 403 and "serviceaccount:team-a:tenant" in error.message, error
    # A tenant may not rewrite a queue's rule to let itself in.
    with pytest.raises(ApiError) as caught:
        tenancy.env.run(tenancy.clients["team-a"].patch(f"{QUEUES}/team-b", {"spec": {"access": None}}))
    assert caught.value.status == 403
    # A label changed after admission is checked like a new one.
    tenancy.as_team("team-a", "/api/v1/namespaces/team-a/pods", pod("moved", "team-a", {}))
    with pytest.raises(ApiError) as caught:
        tenancy.env.run(
            tenancy.clients["team-a"].patch(
                "/api/v1/namespaces/team-a/pods/moved", {"metadata": {"labels": into_b}}
            )
        )
    assert caught.value.status == 403 and "does not admit namespace team-a" in caught.value.message


def test_a_priority_over_the_queues_ceiling_is_refused_and_an_allowed_cluster_runs(tenancy: Tenancy) -> None:
    over = raycluster("loud", group("w", replicas=1), queue="team-a", priority="inference", ns="team-a")
    error = tenancy.refused("team-a", rc_path("team-a"), over)
    assert "allows priority classes build, build-preemptible, train, not inference" in error.message, error
    error = tenancy.refused(
        "team-a",
        "/api/v1/namespaces/team-a/pods",
        pod("loud", "team-a", {"kai.scheduler/queue": "team-a", "priorityClassName": "inference"}),
    )
    assert "not inference" in error.message, error

    tenancy.as_team(
        "team-a", rc_path("team-a"), raycluster("ok", group("w", replicas=2), queue="team-a", ns="team-a")
    )
    env = tenancy.env
    env.wait_for(
        "team-a's cluster bound whole",
        lambda: len(bound(env.pods("ray.io/cluster=ok", ns="team-a"))) == 3,
        timeout=60,
    )


def test_the_admin_may_do_what_tenants_may_not(tenancy: Tenancy) -> None:
    env = tenancy.env  # system:masters: any namespace, and the Queues themselves
    env.create(rc_path("team-b"), raycluster("ops", group("w", replicas=1), queue="team-b", ns="team-b"))
    env.wait_for(
        "the admin's cluster in team-b bound",
        lambda: len(bound(env.pods("ray.io/cluster=ops", ns="team-b"))) == 2,
        timeout=60,
    )
    env.run(env.kube.patch(f"{QUEUES}/team-b", {"spec": {"access": {"tenants": ["team-a", "team-b"]}}}))
    env.wait_for(
        "team-b's rule resolved again", lambda: tenancy.access("team-b").get("tenants") == list(TEAMS)
    )
    tenancy.as_team(
        "team-a", "/api/v1/namespaces/team-a/pods", pod("let-in", "team-a", {"kai.scheduler/queue": "team-b"})
    )
    env.wait_for(
        "the admitted pod bound", lambda: bound(env.pods(ns="team-a")) and _bound(env, "team-a", "let-in")
    )
    env.run(env.kube.patch(f"{QUEUES}/team-b", {"spec": {"access": {"tenants": None}}}))
    env.wait_for(
        "team-b closed to team-a again", lambda: tenancy.access("team-b").get("tenants") == ["team-b"]
    )
    # What runs in a queue that no longer admits it keeps running, and is told so.
    told = env.wait_for(
        "the running pod told",
        lambda: [e for e in env.events("let-in", ns="team-a") if e["reason"] == "QueueTenant"],
    )
    assert "it is not evicted for this" in told[0]["message"], told
    assert _bound(env, "team-a", "let-in")


def test_a_namespace_names_the_queue_of_work_that_names_none(tenancy: Tenancy) -> None:
    env = tenancy.env
    env.run(
        env.kube.patch(
            "/api/v1/namespaces/team-a", {"metadata": {"labels": {"kai.scheduler/queue": "team-a"}}}
        )
    )
    made = env.wait_for(  # the door reads the namespace's default as the queue named
        "a pod without a queue label admitted",
        lambda: _created(tenancy, "team-a", "/api/v1/namespaces/team-a/pods", pod("plain", "team-a", {})),
    )
    assert made
    env.wait_for("it bound, in team-a's queue", lambda: _bound(env, "team-a", "plain"))
    status = env.get(f"{QUEUES}/team-a")["status"]
    assert status["allocated"]["cpu"] >= 1000, status  # the head of 'ok' and this pod: KAI's millicores


def test_with_the_policy_off_the_scheduler_alone_refuses(tenancy: Tenancy) -> None:
    env = tenancy.env
    binding = f"{ADMISSION}/validatingadmissionpolicybindings/kai-ray-queue-access"
    kept = env.get(binding)
    env.delete(binding)
    try:
        sneak = raycluster("sneak", group("w", replicas=1), queue="team-b", ns="team-a")
        env.wait_for(
            "the door open", lambda: _created(tenancy, "team-a", rc_path("team-a"), sneak), timeout=30
        )
        pods = env.wait_for(
            "the sneaking cluster's reason",
            lambda: [p for p in env.pods("ray.io/cluster=sneak", ns="team-a") if condition(p)],
            timeout=60,
        )
        said = condition(pods[0])
        assert said is not None and said["reason"] == "QueueTenant", said
        assert "queue 'team-b' admits tenants labelled team=team-b, not tenant 'team-a'" in said["message"], (
            said
        )
        events = env.wait_for(
            "an Event on the RayCluster",
            lambda: [e for e in env.events("sneak", ns="team-a") if e["reason"] == "QueueTenant"],
        )
        assert "team-b" in events[0]["message"]
        env.wait_for(
            "team-b's status counting it",
            lambda: (env.get(f"{QUEUES}/team-b").get("status") or {}).get("refusedWorkloads") == 2,
        )
        assert bound(env.pods("ray.io/cluster=sneak", ns="team-a")) == []
        # Counted once, by queue and rule, on the operator's /metrics (the pod let in
        # earlier runs on: running work is reported, not counted as a refusal).
        counted = 'kai_ray_queue_access_refusals_total{queue="team-b",rule="queue-tenant"} 1'
        env.wait_for("the refusal counted", lambda: counted in _metrics(tenancy.dashboard))
    finally:
        kept["metadata"] = {"name": kept["metadata"]["name"]}
        env.create(f"{ADMISSION}/validatingadmissionpolicybindings", kept)


def _metrics(dashboard: str) -> str:
    with urllib.request.urlopen(dashboard + "metrics", timeout=10) as answer:
        return str(answer.read().decode())


def _bound(env: K8sEnv, ns: str, name: str) -> bool:
    return bool(env.get(f"/api/v1/namespaces/{ns}/pods/{name}")["spec"].get("nodeName"))


def _created(tenancy: Tenancy, team: str, path: str, body: dict[str, Any]) -> bool:
    """Created (the binding's removal reaches the server's admission a moment after)."""
    try:
        tenancy.as_team(team, path, body)
    except ApiError as exc:
        if exc.status == 403:
            return False
        raise
    return True
