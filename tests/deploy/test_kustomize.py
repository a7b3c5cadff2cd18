"""Deploying without Helm (operators/): the kustomize base renders, grants exactly the
chart's ClusterRole rules and runs the image's `kai-ray operator`; KubeRay's values name
our scheduler; and on a real API server in RBAC mode, `kubectl apply -k` of the base and
KAI's default queues, then the operator run with the base's flags and its ServiceAccount's
token schedules a RayCluster that KubeRay's operator makes, and that account may do what
the operator needs and nothing more."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.api.operatorcommands import operator_options
from kai_ray.cli import build_parser
from kai_ray.testing.kuberay import kuberay_crds
from tests.helm.test_chart import CRD_SOURCE, REPO, render
from tests.helm.test_install import RELEASE_NS, account_kubeconfig, assert_least_privilege, run
from tests.helm.tools import tools
from tests.k8s.env import NS, K8sEnv, bound, group, raycluster

pytestmark = pytest.mark.k8s
OPERATORS = REPO / "operators"
BASE = OPERATORS / "base"
QUEUES = OPERATORS / "queues"


def kustomize(kubectl: str, path: Path) -> list[dict[str, Any]]:
    done = run(kubectl, "kustomize", str(path))
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def operator_argv(deployment: dict[str, Any]) -> list[str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return [*container["command"], *container.get("args", [])]


@pytest.fixture(scope="module")
def helm_kubectl() -> tuple[str, str]:
    return tools()


def test_the_base_renders_the_charts_rules_and_the_images_command(helm_kubectl: tuple[str, str]) -> None:
    helm, kubectl = helm_kubectl
    docs = kustomize(kubectl, BASE)
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted(
        [
            ("Namespace", RELEASE_NS),
            ("ServiceAccount", "kai-ray"),
            ("ClusterRole", "kai-ray"),
            ("ClusterRoleBinding", "kai-ray"),
            ("Role", "kai-ray-leader-election"),
            ("RoleBinding", "kai-ray-leader-election"),
            ("Deployment", "kai-ray"),
            *[("PriorityClass", c) for c in ("train", "build-preemptible", "build", "inference")],
            *[("CustomResourceDefinition", crd) for crd in crd_names()],
            ("ValidatingAdmissionPolicy", "kai-ray-queue-access"),
            ("ValidatingAdmissionPolicyBinding", "kai-ray-queue-access"),
        ]
    ), kinds

    # The same rules as the chart's (default values: no GPU sharing), so the same
    # least-privilege checks hold for both.
    assert one(docs, "ClusterRole")["rules"] == one(render(helm), "ClusterRole")["rules"]
    assert one(docs, "Role")["rules"] == one(render(helm), "Role")["rules"]  # the Lease kai-ray
    assert one(docs, "Role")["metadata"]["namespace"] == RELEASE_NS
    assert one(docs, "RoleBinding")["subjects"] == binding_subjects()
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == "kai-ray"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kai-ray", "namespace": RELEASE_NS}]
    assert one(docs, "ServiceAccount")["metadata"]["namespace"] == RELEASE_NS
    classes = {d["metadata"]["name"]: d["value"] for d in docs if d["kind"] == "PriorityClass"}
    assert classes == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}

    # The Deployment runs the operator with the account, as the image's command does,
    # with flags `kai-ray operator` accepts; one replica acting at a time (the Lease), an
    # upgrade rolling (the new pod waits for the Lease the old one hands back).
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["namespace"] == RELEASE_NS
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "RollingUpdate"
    assert spec["template"]["spec"]["serviceAccountName"] == "kai-ray"
    (container,) = spec["template"]["spec"]["containers"]
    (charts,) = one(render(helm), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == charts["image"]  # the chart's default image (its appVersion)
    argv = operator_argv(deployment)
    assert argv[:2] == ["kai-ray", "operator"]
    assert re.search(r'^CMD \["kai-ray", "operator"\]$', dockerfile(), flags=re.M)
    args = build_parser().parse_args(argv[1:])
    assert args.scheduler_names == ["kai-ray", "kai-scheduler"] and args.default_queue == "default-queue"
    assert not args.install_crds and not args.in_ray  # the account may not write CRDs
    assert args.leader_elect and args.leader_elect_name == "kai-ray"  # the Role's lease
    assert args.leader_elect_namespace is None  # the pod's own: the Role's namespace
    assert args.dashboard.startswith("127.0.0.1:")  # no Service, no token: port-forward only
    # No autoscaler assumed, and no wait for nodes: what the operator does without either.
    options = operator_options(args)
    assert not options.cluster_can_grow and options.config.preemption_delay_s == 0.0
    grown = operator_options(
        build_parser().parse_args([*argv[1:], "--cluster-can-grow", "--preemption-delay=2m"])
    )
    assert grown.cluster_can_grow and grown.config.preemption_delay_s == 120.0

    queues = kustomize(kubectl, QUEUES)
    assert {q["metadata"]["name"]: q["spec"].get("parentQueue") for q in queues} == {
        "default-parent-queue": None,
        args.default_queue: "default-parent-queue",
    }
    # KAI's default queues, as the chart makes them.
    chart_queues = {d["metadata"]["name"]: d["spec"] for d in render(helm) if d["kind"] == "Queue"}
    assert {q["metadata"]["name"]: q["spec"] for q in queues} == chart_queues


def binding_subjects() -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": "kai-ray", "namespace": RELEASE_NS}]


def crd_names() -> list[str]:
    return [yaml.safe_load(p.read_text())["metadata"]["name"] for p in sorted(CRD_SOURCE.glob("*.yaml"))]


def dockerfile() -> str:
    return (OPERATORS / "Dockerfile").read_text()


def test_the_dockerfile_builds_from_the_repository_root() -> None:
    assert not (REPO / "Dockerfile").exists()
    for line in dockerfile().splitlines():
        if line.startswith("COPY "):
            *sources, _ = line.split()[1:]
            for source in sources:
                assert (REPO / source).exists(), line
    assert "docker build -f operators/Dockerfile" in dockerfile()


def test_kuberays_values_name_our_scheduler(helm_kubectl: tuple[str, str]) -> None:
    values = yaml.safe_load((OPERATORS / "kuberay" / "values.yaml").read_text())
    assert values == {"batchScheduler": {"name": "kai-scheduler"}}  # not `enabled` with it
    argv = operator_argv(one(kustomize(helm_kubectl[1], BASE), "Deployment"))
    assert values["batchScheduler"]["name"] in build_parser().parse_args(argv[1:]).scheduler_names


def test_apply_the_base_and_schedule_with_its_account(rbac_cluster: K8sEnv, tmp_path: Path) -> None:
    k8s = rbac_cluster
    _, kubectl = tools()
    admin = k8s.api.kubeconfig
    run(kubectl, "--kubeconfig", admin, "apply", "-k", str(BASE))
    run(kubectl, "--kubeconfig", admin, "apply", "-k", str(QUEUES))  # once the base's CRD is there
    k8s.add_crds([yaml.safe_load(p.read_text()) for p in kuberay_crds()])  # as with KubeRay installed

    # What the base made: the Deployment is there, but with no controller or kubelet
    # for it here it never runs; the operator runs below as a process instead.
    deployment = k8s.get(f"/apis/apps/v1/namespaces/{RELEASE_NS}/deployments/kai-ray")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "kai-ray"
    assert [q["metadata"]["name"] for q in k8s.get("/apis/kai-ray.io/v2/queues")["items"]] == [
        "default-parent-queue",
        "default-queue",
    ]

    sa = account_kubeconfig(k8s, tmp_path / "sa.kubeconfig")
    assert_least_privilege(kubectl, sa)  # the chart's checks: what it needs, no Secrets

    # The operator with the Deployment's own flags (its dashboard off: no port taken
    # here) and the account's token, nothing more.
    flags = [a for a in operator_argv(deployment)[2:] if not a.startswith("--dashboard")]
    k8s.node("n0", gpus=4)
    values = yaml.safe_load((OPERATORS / "kuberay" / "values.yaml").read_text())
    k8s.start_fakes(batch_scheduler=values["batchScheduler"]["name"])  # KubeRay as its values set it
    k8s.start_operator(*flags, "--dashboard=off", kubeconfig=sa)
    k8s.create(
        f"/apis/ray.io/v1/namespaces/{NS}/rayclusters", raycluster("rc", group("gpu", replicas=2, gpus=1))
    )
    k8s.wait_for("the RayCluster bound", lambda: len(bound(k8s.cluster_pods("rc"))) == 3, timeout=60)
    assert {p["spec"]["schedulerName"] for p in k8s.cluster_pods("rc")} == {"kai-scheduler"}
    assert "Forbidden" not in k8s.log_tail(200)
