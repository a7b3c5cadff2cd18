"""The rendered chart on a real API server in RBAC mode: installed by Helm, the operator
run with the chart's ServiceAccount token schedules a RayCluster; the account may do what
the operator needs and nothing more; uninstalling leaves only the CRDs."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kai_ray.testing.apiserver import ApiServer, apiserver_binary
from tests.helm.test_chart import CHART
from tests.helm.tools import tools
from tests.k8s.env import NS, K8sEnv, bound, group, raycluster

pytestmark = pytest.mark.k8s
RELEASE_NS = "kai-ray"
ACCOUNT = f"system:serviceaccount:{RELEASE_NS}:kai-ray"


@pytest.fixture
def rbac_cluster() -> Iterator[K8sEnv]:
    apiserver_binary()
    with ApiServer(rbac=True) as api:
        env = K8sEnv(api)
        try:
            yield env
        finally:
            env.close()


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done


def account_kubeconfig(k8s: K8sEnv, path: Path) -> str:
    """A kubeconfig with a token of the chart's ServiceAccount (TokenRequest API)."""
    answer = k8s.run(
        k8s.kube.create(
            f"/api/v1/namespaces/{RELEASE_NS}/serviceaccounts/kai-ray/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
    )
    config = yaml.safe_load(Path(k8s.api.kubeconfig).read_text())
    config["users"] = [{"name": "admin", "user": {"token": answer["status"]["token"]}}]
    # The account's own namespace, as in its pod: where the operator takes its Lease.
    config["contexts"][0]["context"]["namespace"] = RELEASE_NS
    path.write_text(yaml.safe_dump(config))
    return str(path)


# What the operator does with its account, and what it must not be able to do.
NEEDED = [
    ("list", "nodes"),
    ("watch", "pods"),
    ("create", "pods/binding"),
    ("create", "pods/eviction"),
    ("patch", "pods/status"),
    ("create", "events"),
    ("list", "queues.kai-ray.io"),
    ("patch", "queues.kai-ray.io/status"),
    ("list", "rayclusters.ray.io"),
    ("patch", "rayclusters.ray.io"),
    ("patch", "rayjobs.ray.io"),
    ("patch", "jobs.batch"),  # a Job past its max runtime is suspended
    ("watch", "priorityclasses"),
    ("watch", "namespaces"),  # the tenants: labels select them, name their default queue
]
NOT_NEEDED = [
    ("update", "namespaces"),
    ("patch", "queues.kai-ray.io"),  # a queue's rules are the admin's (docs/tenants.md)
    ("get", "secrets"),
    ("list", "secrets"),
    ("create", "pods"),
    ("delete", "pods"),
    ("delete", "nodes"),
    ("create", "queues.kai-ray.io"),
    ("patch", "rayservices.ray.io"),
    ("delete", "rayclusters.ray.io"),
    ("*", "*"),
    ("create", "clusterrolebindings"),
]


def can(kubectl: str, kubeconfig: str, verb: str, resource: str, *extra: str) -> bool:
    """`kubectl auth can-i` as the kubeconfig's user."""
    resource, _, sub = resource.partition("/")  # kubectl reads "pods/x" as the pod named x
    subresource = [f"--subresource={sub}"] if sub else []
    argv = [kubectl, "--kubeconfig", kubeconfig, "auth", "can-i", verb, resource, *subresource, *extra]
    done = run(*argv, check=False)
    return done.stdout.strip() == "yes"


# Leader election: its Lease, in the release namespace only ("leases.x/NAME": by name).
NEEDED_IN_NAMESPACE = [("create", "leases"), ("get", "leases/kai-ray"), ("update", "leases/kai-ray")]
NOT_NEEDED_IN_NAMESPACE = [("update", "leases/another"), ("delete", "leases/kai-ray"), ("list", "leases")]


def assert_least_privilege(kubectl: str, kubeconfig: str) -> None:
    for verb, resource in NEEDED:
        assert can(kubectl, kubeconfig, verb, resource, "--all-namespaces"), (verb, resource)
    for verb, resource in NOT_NEEDED:
        assert not can(kubectl, kubeconfig, verb, resource, "--all-namespaces"), (verb, resource)
    for verb, lease in NEEDED_IN_NAMESPACE:
        assert can_lease(kubectl, kubeconfig, verb, lease, RELEASE_NS), (verb, lease)
    for verb, lease in NOT_NEEDED_IN_NAMESPACE:
        assert not can_lease(kubectl, kubeconfig, verb, lease, RELEASE_NS), (verb, lease)
    assert not can_lease(kubectl, kubeconfig, "create", "leases", "default")
    assert not can_lease(kubectl, kubeconfig, "update", "leases/kai-ray", "default")


def can_lease(kubectl: str, kubeconfig: str, verb: str, lease: str, namespace: str) -> bool:
    resource = lease.replace("leases", "leases.coordination.k8s.io", 1)
    argv = [kubectl, "--kubeconfig", kubeconfig, "auth", "can-i", verb, resource, "-n", namespace]
    return run(*argv, check=False).stdout.strip() == "yes"


def test_install_schedule_with_its_account_and_uninstall(rbac_cluster: K8sEnv, tmp_path: Path) -> None:
    k8s = rbac_cluster
    helm, kubectl = tools()
    admin = k8s.api.kubeconfig
    k8s.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NS}}
    )
    run(helm, "install", "kai-ray", str(CHART), "--namespace", RELEASE_NS, "--kubeconfig", admin)
    k8s.install(kuberay=True)  # KubeRay's CRDs, as a cluster with KubeRay has them

    sa = account_kubeconfig(k8s, tmp_path / "sa.kubeconfig")
    assert_least_privilege(kubectl, sa)

    # The operator as the chart runs it: with the account's token, nothing more.
    k8s.node("n0", gpus=4)
    k8s.start_fakes()
    k8s.start_operator(kubeconfig=sa)
    k8s.create(
        f"/apis/ray.io/v1/namespaces/{NS}/rayclusters", raycluster("rc", group("gpu", replicas=2, gpus=1))
    )
    k8s.wait_for("the RayCluster bound", lambda: len(bound(k8s.cluster_pods("rc"))) == 3, timeout=60)
    assert "Forbidden" not in k8s.log_tail(200)
    k8s.stop_operator()

    run(helm, "uninstall", "kai-ray", "--namespace", RELEASE_NS, "--kubeconfig", admin)
    left = {
        "clusterroles": k8s.get("/apis/rbac.authorization.k8s.io/v1/clusterroles")["items"],
        "clusterrolebindings": k8s.get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings")["items"],
        "serviceaccounts": k8s.get(f"/api/v1/namespaces/{RELEASE_NS}/serviceaccounts")["items"],
        "deployments": k8s.get(f"/apis/apps/v1/namespaces/{RELEASE_NS}/deployments")["items"],
        "services": k8s.get(f"/api/v1/namespaces/{RELEASE_NS}/services")["items"],
        "queues": k8s.get("/apis/kai-ray.io/v2/queues")["items"],
        "priorityclasses": [
            p
            for p in k8s.get("/apis/scheduling.k8s.io/v1/priorityclasses")["items"]
            if p["metadata"]["name"] in ("train", "build-preemptible", "build", "inference")
        ],
    }
    ours = {
        kind: [
            o["metadata"]["name"]
            for o in objs
            if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == "kai-ray"
            or o["metadata"]["name"] == "kai-ray"
        ]
        for kind, objs in left.items()
    }
    assert all(not names for names in ours.values()), ours
    assert not left["queues"] and not left["priorityclasses"]
    assert k8s.get(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/queues.kai-ray.io"
    )  # kept, as Helm does


def test_gpu_sharing_works_with_the_accounts_the_chart_gives(rbac_cluster: K8sEnv, tmp_path: Path) -> None:
    """The operator, with the chart's ServiceAccount, holds a shared device with a
    reservation pod and writes the sharing pod's ConfigMap: RBAC allows exactly that."""
    k8s = rbac_cluster
    helm, _ = tools()
    k8s.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NS}}
    )
    run(
        helm,
        "install",
        "kai-ray",
        str(CHART),
        "--namespace",
        RELEASE_NS,
        "--kubeconfig",
        k8s.api.kubeconfig,
        "--set",
        "gpuSharing.enabled=true",
    )
    sa = account_kubeconfig(k8s, tmp_path / "sa.kubeconfig")
    k8s.node("n0", gpus=1)
    k8s.start_fakes(kuberay=False)
    k8s.start_operator("--gpu-sharing", "kai-ray:test", kubeconfig=sa)
    # As the webhook leaves it (its Service has no endpoints on this server).
    k8s.create(
        f"/api/v1/namespaces/{NS}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "half",
                "annotations": {"gpu-fraction": "0.5", "kai-ray.io/gpu-share": "abc"},
            },
            "spec": {"schedulerName": "kai-ray", "containers": [{"name": "c", "image": "x"}]},
        },
    )
    k8s.wait_for(
        "the share's ConfigMap",
        lambda: _exists(k8s, f"/api/v1/namespaces/{NS}/configmaps/kai-ray-gpu-share-abc"),
    )
    (reservation,) = k8s.pods(ns="kai-ray-reservation")
    assert reservation["spec"]["nodeName"] == "n0"
    assert "Forbidden" not in k8s.log_tail(200)


def _exists(k8s: K8sEnv, path: str) -> bool:
    from kai_ray.k8s.client import ApiError

    try:
        k8s.get(path)
    except ApiError:
        return False
    return True
