"""Logging in as users do, on a real API server: an exec credential plugin (as EKS, GKE
and AKS kubeconfigs have), a token file replaced under a running operator, a pod's
service-account token as it rotates, contexts and tls-server-name. Revocable tokens are
ServiceAccount tokens from the TokenRequest API bound to a Secret: deleting the Secret
invalidates the token at once, as a rotated-out credential."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from kai_ray.k8s.client import ApiError, Kube
from kai_ray.k8s.login import KubeConfig, Login, default_namespace, load_kubeconfig
from kai_ray.testing.apiserver import ApiServer
from tests.helm.test_chart import REPO
from tests.k8s.env import NS, K8sEnv, bound

pytestmark = pytest.mark.k8s
ACCOUNT_NS = "kai-ray"  # the account's namespace: where the operator takes its Lease
BASE = REPO / "operators" / "base"


@pytest.fixture
def rbac_k8s(apiserver_built: str) -> Iterator[K8sEnv]:
    with ApiServer(rbac=True) as api:
        env = K8sEnv(api)
        env.install(kuberay=False)
        try:
            yield env
        finally:
            env.close()


# ------------------------------------------------------------ helpers


def ca_file(api: ApiServer, path: Path) -> str:
    """The server's own CA: the second certificate of the chain it wrote."""
    chain = (Path(api.dir) / "certs" / "apiserver.crt").read_text()
    certs = re.findall(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n?", chain, flags=re.S)
    path.write_text(certs[-1])
    return str(path)


def kubeconfig(api: ApiServer, path: Path, user: dict[str, Any], namespace: str = ACCOUNT_NS) -> str:
    """Logging in as `user`; the context's namespace is where the operator takes its Lease."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": api.url, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


def account(k8s: K8sEnv) -> None:
    """The operator's ServiceAccount with the kustomize base's RBAC (the chart's rules)."""
    k8s.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ACCOUNT_NS}}
    )
    k8s.create(
        f"/api/v1/namespaces/{ACCOUNT_NS}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kai-ray"}},
    )
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for name in ("rbac.yaml", "leader-election.yaml"):
        for doc in yaml.safe_load_all((BASE / name).read_text()):
            kind = doc["kind"].lower() + "s"
            path = (
                f"{rbac}/{kind}" if kind.startswith("cluster") else f"{rbac}/namespaces/{ACCOUNT_NS}/{kind}"
            )
            k8s.create(path, doc)


def bound_token(k8s: K8sEnv, secret: str) -> str:
    """A token of the account bound to a Secret of its own: valid until that is deleted."""
    made = k8s.create(
        f"/api/v1/namespaces/{ACCOUNT_NS}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}, "type": "Opaque"},
    )
    answer = k8s.create(
        f"/api/v1/namespaces/{ACCOUNT_NS}/serviceaccounts/kai-ray/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "kind": "Secret",
                    "apiVersion": "v1",
                    "name": secret,
                    "uid": made["metadata"]["uid"],
                },
            },
        },
    )
    return str(answer["status"]["token"])


def accepted(api: ApiServer, token: str) -> bool:
    """Whether the server takes this token now (any answer but 401)."""
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(f"{api.url}/version", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=5):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code != 401


def revoke(k8s: K8sEnv, secret: str, token: str) -> float:
    """Delete the Secret the token is bound to; when the server refuses the token."""
    k8s.delete(f"/api/v1/namespaces/{ACCOUNT_NS}/secrets/{secret}")
    k8s.wait_for(f"the token of {secret} refused", lambda: not accepted(k8s.api, token), timeout=30)
    return time.monotonic()


def replace(path: Path, text: str) -> None:
    """As a kubelet or a credential helper does: a new file renamed over the old one."""
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    tmp.replace(path)


def gpu_pod(k8s: K8sEnv, name: str) -> None:
    k8s.create(
        f"/api/v1/namespaces/{NS}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "schedulerName": "kai-ray",
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )


def is_bound(k8s: K8sEnv, name: str) -> bool:
    return bool(bound([k8s.get(f"/api/v1/namespaces/{NS}/pods/{name}")]))


def cluster(k8s: K8sEnv) -> None:
    k8s.node("n0", gpus=4)
    k8s.queue("default-parent-queue", gpu=-1)
    k8s.queue("default-queue", gpu=-1, parent="default-parent-queue")


def plugin(tmp: Path, token_file: Path, ttl: float | None) -> Path:
    """An exec credential plugin: prints the token in `token_file` as an ExecCredential,
    valid for `ttl` seconds (None: no expirationTimestamp), and counts its runs (one line
    each: the KUBERNETES_EXEC_INFO it was given)."""
    expiry = (
        f',"expirationTimestamp":"\'$(date -u -d "+{ttl:g} seconds" +%Y-%m-%dT%H:%M:%SZ)\'"' if ttl else ""
    )
    script = tmp / "credential-plugin"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$KUBERNETES_EXEC_INFO" >> {tmp / "runs"}\n'
        f'printf \'%s\\n\' \'{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
        f'"status":{{"token":"\'$(cat {token_file})\'"{expiry}}}}}\'\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def exec_user(script: Path) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(script),
            "interactiveMode": "Never",
        }
    }


def runs(tmp: Path) -> int:
    path = tmp / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def kai_ray(*argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "kai_ray.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


# ------------------------------------------------------------ exec plugins


def test_an_exec_plugin_logs_the_operator_and_the_commands_in(k8s: K8sEnv, tmp_path: Path) -> None:
    """A plugin whose credential expires in 3 s: run again once it has, not per request."""
    (tmp_path / "token").write_text(k8s.api.token)
    ttl = 3.0
    config = kubeconfig(
        k8s.api, tmp_path / "exec.kubeconfig", exec_user(plugin(tmp_path, tmp_path / "token", ttl)), NS
    )
    cluster(k8s)
    k8s.start_fakes(kuberay=False)
    started = time.monotonic()
    k8s.start_operator(kubeconfig=config)
    gpu_pod(k8s, "first")
    k8s.wait_for("the first pod bound", lambda: is_bound(k8s, "first"), timeout=30)
    time.sleep(ttl + 1)  # the credential has expired
    gpu_pod(k8s, "second")
    k8s.wait_for("the second pod bound", lambda: is_bound(k8s, "second"), timeout=30)
    elapsed = time.monotonic() - started
    # Run again after each expiry (the operator renews its Lease twice a second): at
    # least twice, and about once per credential, not once per request.
    assert 2 <= runs(tmp_path) <= elapsed / (ttl - 1) + 3, (runs(tmp_path), elapsed)  # whole seconds
    assert '"kind": "ExecCredential"' in (tmp_path / "runs").read_text()  # KUBERNETES_EXEC_INFO

    explained = kai_ray("explain", "Pod/first", "--kubeconfig", config).stdout
    assert "Pod default/first: 1 of 1 pods bound" in explained
    snapshot = tmp_path / "snapshot.json"
    saved = kai_ray("snapshot", "save", str(snapshot), "--kubeconfig", config).stdout
    assert "1 nodes" in saved and snapshot.exists()


def test_a_plugin_without_expiry_runs_once_and_again_on_a_401(rbac_k8s: K8sEnv, tmp_path: Path) -> None:
    k8s = rbac_k8s
    account(k8s)
    token = tmp_path / "token"
    token.write_text(old := bound_token(k8s, "old"))
    config = kubeconfig(k8s.api, tmp_path / "exec.kubeconfig", exec_user(plugin(tmp_path, token, None)))
    cluster(k8s)
    k8s.start_fakes(kuberay=False)
    k8s.start_operator(kubeconfig=config)
    gpu_pod(k8s, "first")
    k8s.wait_for("the first pod bound", lambda: is_bound(k8s, "first"), timeout=30)
    time.sleep(2)  # Lease renewals and status writes: the one credential serves them all
    assert runs(tmp_path) == 1

    replace(token, bound_token(k8s, "new"))
    revoked = revoke(k8s, "old", old)
    gpu_pod(k8s, "second")
    k8s.wait_for("the second pod bound", lambda: is_bound(k8s, "second"), timeout=20)
    assert time.monotonic() - revoked < 20
    assert runs(tmp_path) == 2  # once more, for the many requests refused together
    assert "Forbidden" not in k8s.log_tail(400) and "could not renew" not in k8s.log_tail(400)


# ------------------------------------------------------------ token files


def test_a_token_file_replaced_under_the_operator(rbac_k8s: K8sEnv, tmp_path: Path) -> None:
    """tokenFile: the operator binds with token A; B replaces it in the file and A is
    revoked; the first 401 makes the operator read the file again (no minute's wait)."""
    k8s = rbac_k8s
    account(k8s)
    token = tmp_path / "token"
    token.write_text(a := bound_token(k8s, "a"))
    config = kubeconfig(k8s.api, tmp_path / "file.kubeconfig", {"tokenFile": str(token)})
    cluster(k8s)
    k8s.start_fakes(kuberay=False)
    k8s.start_operator(kubeconfig=config)
    gpu_pod(k8s, "with-a")
    k8s.wait_for("a pod bound with token A", lambda: is_bound(k8s, "with-a"), timeout=30)
    lease = k8s.get(f"/apis/coordination.k8s.io/v1/namespaces/{ACCOUNT_NS}/leases/kai-ray")["spec"]

    replace(token, bound_token(k8s, "b"))
    revoked = revoke(k8s, "a", a)
    for name in ("with-b", "with-b-again"):
        gpu_pod(k8s, name)
        k8s.wait_for(f"{name} bound", lambda n=name: is_bound(k8s, n), timeout=20)
    assert time.monotonic() - revoked < 30  # well before the minute's re-read
    # The Lease renewed through the swap, by the same holder: it never stopped leading.
    after = k8s.get(f"/apis/coordination.k8s.io/v1/namespaces/{ACCOUNT_NS}/leases/kai-ray")["spec"]
    assert after["holderIdentity"] == lease["holderIdentity"] and after["leaseTransitions"] == 0
    assert "Forbidden" not in k8s.log_tail(400) and "could not renew" not in k8s.log_tail(400)


def test_a_pods_service_account_token_rotates(
    k8s: K8sEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod: the server from the environment, the CA and the token from the service
    account's files, the token read again as the kubelet rotates it."""
    account(k8s)
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(a := bound_token(k8s, "a"))
    (sa / "namespace").write_text(ACCOUNT_NS)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(k8s.api.port))
    config = KubeConfig(
        in_cluster=True, token_file=str(sa / "token"), ca_file=ca_file(k8s.api, sa / "ca.crt")
    )
    assert default_namespace(config) == ACCOUNT_NS  # where the operator takes its Lease

    async def whoami(kube: Kube) -> str:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        answer = await kube.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
        return str(answer["status"]["userInfo"]["username"])

    kube = Kube(config)
    k8s.run(kube.open())
    try:
        assert k8s.run(whoami(kube)) == f"system:serviceaccount:{ACCOUNT_NS}:kai-ray"
        replace(sa / "token", bound_token(k8s, "b"))
        revoke(k8s, "a", a)
        assert k8s.run(whoami(kube)) == f"system:serviceaccount:{ACCOUNT_NS}:kai-ray"  # 401, read again
    finally:
        k8s.run(kube.close())


def test_in_cluster_login_reads_the_rotated_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No server: the token is read again after a minute, or at once after a 401."""
    (tmp_path / "token").write_text("one")
    (tmp_path / "ca.crt").write_text("a CA")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config = KubeConfig(in_cluster=True, token_file=str(tmp_path / "token"), ca_file=str(tmp_path / "ca.crt"))

    async def check() -> None:
        login = await Login.open(config)
        assert login.server == "https://10.0.0.1:443"
        assert await login.authorization() == "Bearer one"
        (tmp_path / "token").write_text("two")
        assert await login.authorization() == "Bearer one"  # kept for a minute
        await login.renew("Bearer one")
        assert await login.authorization() == "Bearer two"

    asyncio.run(check())
    assert default_namespace(config) == "default"  # no namespace file beside the token


# ------------------------------------------------------------ contexts, certificates


def test_contexts_and_tls_server_name(k8s: K8sEnv, tmp_path: Path) -> None:
    """The server's certificate names 127.0.0.1 and kubernetes.default.svc, not localhost:
    reached as localhost it is trusted only with tls-server-name saying which name to check."""
    ca = ca_file(k8s.api, tmp_path / "ca.crt")
    port = k8s.api.port
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "ip", "cluster": {"server": f"https://127.0.0.1:{port}", "certificate-authority": ca}},
            {
                "name": "named",
                "cluster": {
                    "server": f"https://localhost:{port}",
                    "certificate-authority": ca,
                    "tls-server-name": "kubernetes.default.svc",
                },
            },
            {
                "name": "unnamed",
                "cluster": {"server": f"https://localhost:{port}", "certificate-authority": ca},
            },
        ],
        "users": [
            {"name": "admin", "user": {"token": k8s.api.token}},
            {"name": "stranger", "user": {"token": "x"}},
        ],
        "contexts": [
            {"name": "by-ip", "context": {"cluster": "ip", "user": "admin"}},
            {"name": "by-name", "context": {"cluster": "named", "user": "admin"}},
            {"name": "wrong-name", "context": {"cluster": "unnamed", "user": "admin"}},
            {"name": "stranger", "context": {"cluster": "ip", "user": "stranger"}},
        ],
        "current-context": "wrong-name",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))

    async def version(context: str | None) -> str:
        async with Kube(load_kubeconfig(str(path), context)) as kube:
            return str((await kube.get("/version"))["gitVersion"])

    assert k8s.run(version("by-ip")).startswith("v1.")
    assert k8s.run(version("by-name")).startswith("v1.")
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        k8s.run(version(None))  # the current context: localhost is not in the certificate
    with pytest.raises(ApiError) as refused:
        k8s.run(version("stranger"))
    assert refused.value.status == 401
    with pytest.raises(ValueError, match="by-ip, by-name, wrong-name, stranger"):
        load_kubeconfig(str(path), "nowhere")

    cluster(k8s)
    snapshot = tmp_path / "snapshot.json"
    saved = kai_ray(
        "snapshot", "save", str(snapshot), "--kubeconfig", str(path), "--context", "by-name"
    ).stdout
    assert "1 nodes" in saved
