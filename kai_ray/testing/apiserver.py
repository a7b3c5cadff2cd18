"""A real kube-apiserver and etcd on 127.0.0.1, for the operator's tests and for
`kai-ray bench k8s`. Nothing here is a stand-in for the API server: it is Kubernetes'
own (v1.34), built from its Go modules once per machine with the etcd it supports
(build-components.sh, cached under ~/.cache/kai-ray), and started with a fresh etcd
per server.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ApiServer", "apiserver_binary", "components"]

_BUILD = Path(__file__).with_name("build-components.sh")


@functools.cache
def components() -> dict[str, str]:
    """The real components, built first when this machine has none: kube-apiserver, etcd,
    kuberay-operator (paths) and kuberay-crds (a folder of KubeRay's CRDs)."""
    done = subprocess.run(["bash", str(_BUILD), "all"], check=True, stdout=subprocess.PIPE, text=True)
    found = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines())
    return {name: path.strip() for name, path in found.items()}


def apiserver_binary() -> str:
    """The cached kube-apiserver ($KAI_RAY_APISERVER names another one explicitly)."""
    return os.environ.get("KAI_RAY_APISERVER") or components()["kube-apiserver"]


def _post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One call of etcd's JSON gateway (the v3 API over HTTP)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Audited when asked: every binding and every write of a Lease, who sent it, the answer.
_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "resources": [{"group": "", "resources": ["pods/binding"]}]},
        {
            "level": "Metadata",
            "verbs": ["create", "update"],
            "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
        },
        {"level": "None"},
    ],
}


class ApiServer:
    """`with ApiServer() as api:` -> api.kubeconfig (a file), api.url, api.token.
    `rbac=True` authorises by RBAC (the admin token is in system:masters either way).
    `users`: more users of system:masters, each with a token of its own (`kubeconfig_as`),
    so that the audit log (`audit=True`: bindings and Lease writes, in `audit_log`) tells
    apart what each client did. `etcd_data`: a stopped etcd's data folder to start from (a
    copy: the folder is left as it is), such as one whose objects every test installs;
    starting from it spares the wait while the API server takes large CRDs in."""

    def __init__(
        self,
        *,
        rbac: bool = False,
        workdir: str | None = None,
        extra_args: tuple[str, ...] = (),
        users: tuple[str, ...] = (),
        audit: bool = False,
        etcd_data: Path | None = None,
    ) -> None:
        self.rbac = rbac
        self.etcd_data = etcd_data
        self.extra_args = extra_args
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="kai-ray-apiserver-"))
        self.token = secrets.token_hex(16)
        self.tokens = {"admin": self.token, **{u: secrets.token_hex(16) for u in users}}
        self.audit_log = self.dir / "audit.log" if audit else None
        self.port = _free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = str(self.dir / "kubeconfig")
        self._procs: list[subprocess.Popen[bytes]] = []
        # By name ("etcd", "apiserver"): the command each was started with, and its
        # process, so that a test may kill one and start it again (kill, restart).
        self._argv: dict[str, list[str]] = {}
        self._named: dict[str, subprocess.Popen[bytes]] = {}
        self.etcd_url = ""

    def __enter__(self) -> ApiServer:
        try:
            self.start()
        except BaseException:  # a failed or interrupted start (Ctrl-C) leaves nothing running
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        binary = apiserver_binary()
        etcd_client, etcd_peer = _free_port(), _free_port()
        self.etcd_url = f"http://127.0.0.1:{etcd_client}"
        etcd = components()["etcd"]
        if self.etcd_data is not None:
            # A single member keeps its data across ports: its stored peer address is
            # never dialled, and the new client address is what it answers on.
            shutil.copytree(self.etcd_data, self.dir / "etcd")
        self._spawn(
            "etcd",
            [
                etcd,
                "--data-dir",
                str(self.dir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",
            ],
        )
        self._keys()
        (self.dir / "tokens.csv").write_text(
            "".join(
                f'{token},{user},{i + 1},"system:masters"\n'
                for i, (user, token) in enumerate(self.tokens.items())
            )
        )
        self._spawn(
            "apiserver",
            [
                binary,
                f"--etcd-servers=http://127.0.0.1:{etcd_client}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                "--advertise-address=127.0.0.1",
                f"--cert-dir={self.dir / 'certs'}",
                f"--token-auth-file={self.dir / 'tokens.csv'}",
                f"--authorization-mode={'RBAC' if self.rbac else 'AlwaysAllow'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.dir / 'sa.pub'}",
                f"--service-account-signing-key-file={self.dir / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
                *self._audit_args(),
                *self.extra_args,
            ],
        )
        self._write_kubeconfig()
        self._wait_ready()

    def _audit_args(self) -> list[str]:
        if self.audit_log is None:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(_AUDIT_POLICY))
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-mode=blocking",  # an event is on disk when its answer is sent
        ]

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far (audit=True)."""
        assert self.audit_log is not None, "ApiServer(audit=True) keeps an audit log"
        if not self.audit_log.exists():
            return []
        lines = self.audit_log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def kubeconfig_as(self, user: str, path: Path, server: str | None = None) -> str:
        """A kubeconfig logging in with `user`'s token (one of `users`); `server`: another
        address that reaches this API server (a relay), with the same certificate."""
        config = yaml.safe_load(Path(self.kubeconfig).read_text())
        config["users"] = [{"name": "admin", "user": {"token": self.tokens[user]}}]
        if server is not None:
            for cluster in config["clusters"]:
                cluster["cluster"]["server"] = server
        path.write_text(yaml.safe_dump(config))
        return str(path)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self._procs.append(proc)
        self._argv[name], self._named[name] = argv, proc

    # ------------------------------------------------------------ faults (tests)

    def kill(self, name: str) -> None:
        """SIGKILL "etcd" or "apiserver", as a crash would, and wait for it to be gone."""
        proc = self._named[name]
        proc.kill()
        proc.wait(timeout=10)
        self._procs.remove(proc)

    def freeze(self, name: str, frozen: bool = True) -> None:
        """SIGSTOP "etcd" or "apiserver" (its connections stay open and every request on
        them hangs, as behind a black hole), or SIGCONT it (`frozen=False`)."""
        self._named[name].send_signal(signal.SIGSTOP if frozen else signal.SIGCONT)

    def restart(self, name: str) -> None:
        """Start "etcd" or "apiserver" again as it was started (same ports, same data),
        and wait until the API server answers ready."""
        self._spawn(name, self._argv[name])
        self._wait_ready()

    def compact(self) -> int:
        """Compact etcd up to its current revision (every older version is gone: a watch
        resumed from one is answered 410 Gone). Returns that revision."""
        head = _post_json(f"{self.etcd_url}/v3/kv/range", {"key": "AA=="})
        revision = int(head["header"]["revision"])
        _post_json(f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def _keys(self) -> None:
        key, pub = self.dir / "sa.key", self.dir / "sa.pub"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        subprocess.run(
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True
        )

    def _write_kubeconfig(self) -> None:
        config: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
            "current-context": "test",
        }
        Path(self.kubeconfig).write_text(yaml.safe_dump(config))

    def _wait_ready(self, timeout: float = 60.0) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.token}"}
        )
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args!r} exited ({proc.returncode}); see {self.dir}")
            try:
                with urllib.request.urlopen(request, context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver not ready after {timeout:g}s; see {self.dir}/apiserver.log")

    def save_etcd_data(self, to: Path) -> None:
        """Stop the API server, then etcd (cleanly: its data is whole), and copy etcd's data
        to `to`, for ApiServer(etcd_data=to)."""
        for name in ("apiserver", "etcd"):
            proc = self._named[name]
            proc.terminate()
            proc.wait(timeout=30)
            self._procs.remove(proc)
        shutil.copytree(self.dir / "etcd", to)

    def stop(self) -> None:
        for proc in reversed(self._procs):
            proc.terminate()
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
