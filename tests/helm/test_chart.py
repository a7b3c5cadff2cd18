"""The Helm chart (helm/kai-ray): lint and render with several value sets, then install
into a real API server in RBAC mode, schedule with the chart's own ServiceAccount, check
it may do what it needs and nothing more, and uninstall."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.tools import tools

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "kai-ray"


@pytest.fixture(scope="module")
def helm_kubectl() -> tuple[str, str]:
    return tools()


def render(helm: str, *sets: str) -> list[dict[str, Any]]:
    argv = [helm, "template", "kai-ray", str(CHART), "--namespace", "kai-ray"]
    for s in sets:
        argv += ["--set", s]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def kinds(docs: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d["metadata"]["name"])
    return out


def test_the_chart_lints(helm_kubectl: tuple[str, str]) -> None:
    done = subprocess.run([helm_kubectl[0], "lint", str(CHART)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# The CRDs' one source is the operator's package data (what `--install-crds` installs); the
# chart and the kustomize base carry copies (neither Helm nor kustomize reads outside its root).
CRD_SOURCE = REPO / "kai_ray" / "k8s" / "crds"
CRD_COPIES = [CHART / "crds", REPO / "operators" / "base" / "crds"]


@pytest.mark.parametrize("copy", CRD_COPIES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_crd_is_the_operators_own(copy: Path) -> None:
    ours = {p.name: p.read_text() for p in sorted(CRD_SOURCE.glob("*.yaml"))}
    assert ours and {p.name: p.read_text() for p in sorted(copy.glob("*.yaml"))} == ours


POLICY = REPO / "operators" / "base" / "queue-access-policy.yaml"


def test_the_queue_access_policy_is_the_bases_own() -> None:
    assert (CHART / "files" / POLICY.name).read_text() == POLICY.read_text()


@pytest.mark.parametrize(
    ("sets", "policy", "closed"),
    [((), True, False), (("queueAccess.admissionPolicy=false", "queueAccess.closed=true"), False, True)],
    ids=["defaults", "no-policy-closed"],
)
def test_queue_access_values(
    helm_kubectl: tuple[str, str], sets: tuple[str, ...], policy: bool, closed: bool
) -> None:
    docs = render(helm_kubectl[0], *sets)
    found = sorted(d["kind"] for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy"))
    want = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    assert found == (want if policy else [])
    if policy:
        assert [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"] == [
            d for d in yaml.safe_load_all(POLICY.read_text()) if d["kind"] == "ValidatingAdmissionPolicy"
        ]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    script = deployment["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert ("--closed-queues" in script) is closed


@pytest.mark.parametrize(
    ("sets", "expect"),
    [
        pytest.param(
            (), {"Deployment": ["kai-ray"], "Queue": ["default-parent-queue", "default-queue"]}, id="defaults"
        ),
        pytest.param(("controller.mode=kuberay",), {"RayCluster": ["kai-ray"]}, id="kuberay"),
        pytest.param(
            ("defaultQueues.create=false", "priorityClasses.create=false"), {}, id="no-queues-no-classes"
        ),
        pytest.param(("dashboard.service.enabled=false",), {}, id="no-service"),
    ],
)
def test_rendered_objects(
    helm_kubectl: tuple[str, str], sets: tuple[str, ...], expect: dict[str, list[str]]
) -> None:
    docs = kinds(render(helm_kubectl[0], *sets))
    for kind, names in expect.items():
        assert sorted(docs.get(kind, [])) == sorted(names), (kind, docs)
    assert docs["ClusterRole"] == ["kai-ray"] and docs["ServiceAccount"] == ["kai-ray"]
    assert ("Deployment" in docs) != ("RayCluster" in docs)
    if "defaultQueues.create=false" in sets:
        assert "Queue" not in docs and "PriorityClass" not in docs
    else:
        assert sorted(docs["PriorityClass"]) == ["build", "build-preemptible", "inference", "train"]
    assert ("Service" in docs) is ("dashboard.service.enabled=false" not in sets)


def test_values_reach_the_operator(helm_kubectl: tuple[str, str]) -> None:
    docs = render(helm_kubectl[0], "schedulerNames={only-me}", "defaultQueue=ml", "metrics.port=9100")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    script = deployment["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--scheduler-name only-me" in script and "kai-scheduler" not in script
    assert "--default-queue ml" in script and "--metrics-export-port=9100" in script
    (child,) = [d for d in docs if d["kind"] == "Queue" and d["metadata"]["name"] == "ml"]
    assert child["spec"]["parentQueue"] == "default-parent-queue"
    classes = {d["metadata"]["name"]: d["value"] for d in docs if d["kind"] == "PriorityClass"}
    assert classes == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


@pytest.mark.parametrize("mode", ["deployment", "kuberay"])
def test_autoscaling_values_reach_the_operator(
    helm_kubectl: tuple[str, str], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kai_ray.api.operatorcommands import operator_options
    from kai_ray.cli import build_parser

    monkeypatch.setenv("KAI_RAY_DASHBOARD_TOKEN", "t")  # what the chart's Secret gives the pod
    sets = (f"controller.mode={mode}",)
    grows = (*sets, "autoscaling.clusterCanGrow=true", "autoscaling.preemptionDelay=2m")
    for values, can_grow, delay in ((sets, False, 0.0), (grows, True, 120.0)):
        argv = _operator_argv(render(helm_kubectl[0], *values))
        options = operator_options(build_parser().parse_args(argv))
        assert (options.cluster_can_grow, options.config.preemption_delay_s) == (can_grow, delay)
    done = subprocess.run(
        [helm_kubectl[0], "template", "x", str(CHART), "--set", "autoscaling.preemptionDelay=soon"],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and 'autoscaling.preemptionDelay is "soon": write a duration' in done.stderr


def test_the_reservation_wait_reaches_the_operator(
    helm_kubectl: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kai_ray.api.operatorcommands import operator_options
    from kai_ray.cli import build_parser

    monkeypatch.setenv("KAI_RAY_DASHBOARD_TOKEN", "t")
    for values, after in (((), 0.0), (("reservations.reserveAfter=30m",), 1800.0)):
        argv = _operator_argv(render(helm_kubectl[0], *values))
        options = operator_options(build_parser().parse_args(argv))
        assert options.config.reserve_after_s == after
    done = subprocess.run(
        [helm_kubectl[0], "template", "x", str(CHART), "--set", "reservations.reserveAfter=later"],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and 'reservations.reserveAfter is "later": write a duration' in done.stderr


def _operator_argv(docs: list[dict[str, Any]]) -> list[str]:
    """`kai-ray operator ...` as the chart runs it: in the Deployment's script, or in the
    RayCluster head's postStart."""
    (head,) = [d for d in docs if d["kind"] in ("Deployment", "RayCluster")]
    spec = (
        head["spec"]["template"]
        if head["kind"] == "Deployment"
        else head["spec"]["headGroupSpec"]["template"]
    )
    container = spec["spec"]["containers"][0]
    script = (
        container["command"][2]
        if "command" in container
        else container["lifecycle"]["postStart"]["exec"]["command"][2]
    )
    (line,) = [ln for ln in script.splitlines() if "kai-ray operator" in ln]
    return line.removesuffix("&&").split()[1:]


def test_a_bad_controller_mode_is_refused_by_name(helm_kubectl: tuple[str, str]) -> None:
    done = subprocess.run(
        [helm_kubectl[0], "template", "x", str(CHART), "--set", "controller.mode=vm"],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and 'controller.mode is "vm": use deployment or kuberay' in done.stderr


def test_least_privilege(helm_kubectl: tuple[str, str]) -> None:
    (role,) = [d for d in render(helm_kubectl[0]) if d["kind"] == "ClusterRole"]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"], (
            rule
        )
        assert "secrets" not in rule["resources"], rule
    verbs = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert verbs[("", "pods/binding")] == {"create"} and verbs[("", "pods/eviction")] == {"create"}
    assert "delete" not in verbs[("", "pods")] and "create" not in verbs[("", "pods")]


def test_gpu_sharing_renders_a_tls_webhook_and_only_what_it_needs(helm_kubectl: tuple[str, str]) -> None:
    import base64

    docs = render(helm_kubectl[0], "gpuSharing.enabled=true")
    by_kind = kinds(docs)
    assert by_kind["MutatingWebhookConfiguration"] == ["kai-ray-gpu-sharing"]
    (hook,) = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    (webhook,) = hook["webhooks"]
    assert webhook["clientConfig"]["service"] == {
        "name": "kai-ray-webhook",
        "namespace": "kai-ray",
        "path": "/mutate",
        "port": 443,
    }
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]).startswith(b"-----BEGIN CERTIFICATE-----")
    assert webhook["failurePolicy"] == "Ignore"
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "webhook-tls", "secret": {"secretName": "kai-ray-webhook-tls"}}]
    script = pod["containers"][0]["command"][2]
    assert "--gpu-sharing ghcr.io/kai-ray/kai-ray:0.1.0 --webhook 9443 /etc/kai-ray/webhook/tls.crt" in script
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert "configmaps" in resources and "secrets" not in resources
    (reservations,) = [
        d for d in docs if d["kind"] == "Role" and "leader-election" not in d["metadata"]["name"]
    ]
    assert reservations["metadata"]["namespace"] == "kai-ray-reservation"
    default_role = next(d for d in render(helm_kubectl[0]) if d["kind"] == "ClusterRole")
    assert "configmaps" not in {r for rule in default_role["rules"] for r in rule["resources"]}


def test_leader_election_renders_a_lease_role_and_a_rolling_deployment(helm_kubectl: tuple[str, str]) -> None:
    helm = helm_kubectl[0]
    docs = render(helm, "controller.replicas=2", "leaderElection.leaseDuration=30")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    script = deployment["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--leader-elect-name kai-ray --leader-elect-lease-duration 30 " in script
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "kai-ray-leader-election"]
    assert role["metadata"]["namespace"] == "kai-ray"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["kai-ray"],
            "verbs": ["get", "update"],
        },
    ]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kai-ray", "namespace": "kai-ray"}]

    off = render(helm, "leaderElection.enabled=false")
    (deployment,) = [d for d in off if d["kind"] == "Deployment"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"} and deployment["spec"]["replicas"] == 1
    assert "--no-leader-elect" in deployment["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert not [d for d in off if d["kind"] in ("Role", "RoleBinding")]
    done = subprocess.run(
        [
            helm,
            "template",
            "x",
            str(CHART),
            "--set",
            "controller.replicas=2",
            "--set",
            "leaderElection.enabled=false",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "controller.replicas > 1 needs leaderElection.enabled=true" in done.stderr


@pytest.mark.parametrize("mode", ["deployment", "kuberay"])
def test_the_dashboard_listens_wide_only_behind_its_token(helm_kubectl: tuple[str, str], mode: str) -> None:
    docs = render(helm_kubectl[0], f"controller.mode={mode}")
    (secret,) = [
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "kai-ray-dashboard-token"
    ]
    assert len(secret["data"]["token"]) >= 40
    (service,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "kai-ray-dashboard"]
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}["kai-ray"] == 8267
    text = json.dumps([d for d in docs if d["kind"] in ("Deployment", "RayCluster")])
    assert "--dashboard 0.0.0.0:8267" in text
    assert '"secretKeyRef": {"name": "kai-ray-dashboard-token", "key": "token"}' in text
    hidden = render(helm_kubectl[0], f"controller.mode={mode}", "dashboard.service.enabled=false")
    assert not [d for d in hidden if d["kind"] == "Secret" and "dashboard" in d["metadata"]["name"]]
    assert "--dashboard 127.0.0.1:8267" in json.dumps(hidden) and "KAI_RAY_DASHBOARD_TOKEN" not in json.dumps(
        hidden
    )
