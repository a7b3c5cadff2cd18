"""Logging in to an API server as users do, through kubernetes_asyncio's loaders (a
maintained library, not a hand-written subset):

- a kubeconfig file (`--kubeconfig`, $KUBECONFIG with its `:`-separated list, or
  ~/.kube/config) and its context: client certificates, tokens and token files, exec
  credential plugins (EKS's `aws eks get-token`, GKE's `gke-gcloud-auth-plugin`, AKS's
  `kubelogin`: run again when their credential expires or the server answers 401),
  `certificate-authority`, `insecure-skip-tls-verify`, `tls-server-name`, `proxy-url`;
- a pod's service account, when no kubeconfig exists and the pod runs in a cluster: its
  projected token is read again as it rotates (every minute, and after a 401).

`load_kubeconfig` only checks that what was named exists (a bad file or context fails at
once, naming the fix); a Kube opens the login (`Login.open`), which may run a plugin.

A plugin's credential is kept until its expirationTimestamp (or, without one, until the
server answers 401), and one run serves every request waiting for it: the library alone
runs the plugin again for each request in the last five minutes of a credential, and for
every request when the plugin names no expiry (`aws eks get-token` takes a second).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_PORT_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)
from kubernetes_asyncio.config.kube_config import KubeConfigLoader, KubeConfigMerger

__all__ = ["KubeConfig", "Login", "default_namespace", "load_kubeconfig"]

TOKEN_FILE_REREAD_S = 60.0  # a kubeconfig's tokenFile is read again at most this often


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Where the API server is and how to log in, as named (picklable: a Ray actor
    running the operator on the same node opens it again)."""

    path: str | None = None  # a kubeconfig file (or a $KUBECONFIG list)
    context: str | None = None  # None: the file's current-context
    in_cluster: bool = False  # the pod's service account
    token_file: str = SERVICE_TOKEN_FILENAME
    ca_file: str = SERVICE_CERT_FILENAME

    @property
    def server(self) -> str:
        """The API server's address, for messages (opening the login resolves it)."""
        if self.in_cluster:
            return f"https://{os.environ.get(SERVICE_HOST_ENV_NAME)}:{os.environ.get(SERVICE_PORT_ENV_NAME)}"
        loader = _loader(self)
        cluster = getattr(loader, "_cluster", None)
        return str(cluster["server"]) if cluster is not None and "server" in cluster else "?"


def load_kubeconfig(path: str | None = None, context: str | None = None) -> KubeConfig:
    """The kubeconfig at `path` (else $KUBECONFIG, else ~/.kube/config), or the pod's own
    service account when none exists and we run inside a cluster. Raises ValueError (a
    context or user that does not exist) or FileNotFoundError, saying what to fix."""
    candidate = path or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if any(Path(p).expanduser().exists() for p in candidate.split(os.pathsep) if p):
        config = KubeConfig(path=candidate, context=context)
        _loader(config)  # a missing context fails here, before anything runs
        return config
    if path:
        raise FileNotFoundError(f"kubeconfig {path} does not exist; pass an existing file to --kubeconfig")
    if os.environ.get(SERVICE_HOST_ENV_NAME) and Path(SERVICE_TOKEN_FILENAME).exists():
        return KubeConfig(in_cluster=True)
    raise FileNotFoundError(
        "no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a pod"
    )


def default_namespace(config: KubeConfig) -> str:
    """The namespace a user means when naming none: the kubeconfig context's, else the
    pod's own (its service account's namespace file), else `default`."""
    if config.path is not None:
        context: Any = _loader(config).current_context or {}
        namespace = (context.get("context") or {}).get("namespace")
        if namespace:
            return str(namespace)
    pod_namespace = Path(config.token_file).with_name("namespace")
    if pod_namespace.is_file() and pod_namespace.read_text().strip():
        return pod_namespace.read_text().strip()
    return "default"


def _loader(config: KubeConfig) -> KubeConfigLoader:
    assert config.path is not None
    merged = KubeConfigMerger(config.path)
    try:
        return KubeConfigLoader(
            config_dict=merged.config, config_base_path=None, active_context=config.context
        )
    except (ConfigException, AssertionError, KeyError, TypeError) as exc:
        found = merged.config.safe_get("contexts") if merged.config is not None else None
        contexts = [c["name"] for c in (found or []) if "name" in c]
        named = f"context {config.context!r}" if config.context else "its current-context"
        raise ValueError(
            f"kubeconfig {config.path}: {named} cannot be used ({exc or 'not found'}); "
            f"name one of its contexts ({', '.join(contexts) or 'none'}) with --context"
        ) from None


class Login:
    """An opened KubeConfig: the server, how to trust it, and a credential kept fresh."""

    def __init__(self, config: KubeConfig, client: Configuration) -> None:
        self.config, self._client = config, client
        self._kube_loader: KubeConfigLoader | None = None
        self._pod_loader: InClusterConfigLoader | None = None
        self._token_file: str | None = None
        self._token_read_at = 0.0
        self._token: str | None = None
        self._exec_expiry: float | None = None  # epoch seconds; None: until the server says 401
        self._exec_lock = asyncio.Lock()

    @classmethod
    async def open(cls, config: KubeConfig) -> Login:
        client = Configuration()
        login = cls(config, client)
        if config.in_cluster:
            login._pod_loader = InClusterConfigLoader(config.token_file, config.ca_file)
            login._pod_loader.load_and_set(client)
        else:
            login._kube_loader = _loader(config)
            await login._kube_loader.load_and_set(client)
            login._token_file = _token_file(login._kube_loader)
            login._token = client.api_key.get("BearerToken")
            login._token_read_at = time.monotonic()
            if _uses_exec(login._kube_loader):
                login._plugin_ran()
        return login

    @property
    def server(self) -> str:
        return str(self._client.host).rstrip("/")

    @property
    def proxy(self) -> str | None:
        return self._client.proxy or None

    @property
    def server_hostname(self) -> str | None:
        """The name the server's certificate is checked against (kubeconfig's
        tls-server-name), when it is not the address's host."""
        return self._client.tls_server_name or None

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return False
        c = self._client
        ctx = ssl.create_default_context(cafile=c.ssl_ca_cert)
        if not c.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if c.cert_file:
            ctx.load_cert_chain(c.cert_file, c.key_file)
        return ctx

    async def authorization(self) -> str | None:
        """The Authorization header now: a plugin's credential is run for again when it
        expires, a token file read again every minute, the pod's token as it rotates."""
        if self._pod_loader is not None:
            return str(await self._client.get_api_key_with_prefix("BearerToken") or "") or None
        loader = self._kube_loader
        assert loader is not None
        if _uses_exec(loader):
            if self._exec_expiry is not None and time.time() >= self._exec_expiry:
                await self._run_plugin(self._token)
            return self._token
        if self._token_file and time.monotonic() - self._token_read_at > TOKEN_FILE_REREAD_S:
            self._read_token_file()
        return self._token

    async def renew(self, refused: str | None = None) -> None:
        """The server answered 401 to the credential `refused`: get a fresh one before
        trying again (once for the many requests refused together)."""
        if self._pod_loader is not None:
            self._pod_loader.token_expires_at = datetime.datetime.min
        elif self._kube_loader is not None and _uses_exec(self._kube_loader):
            await self._run_plugin(refused)
        elif self._token_file:
            self._read_token_file()

    async def _run_plugin(self, stale: str | None) -> None:
        """Run the exec plugin, unless another request ran it since `stale` was current."""
        loader = self._kube_loader
        assert loader is not None
        async with self._exec_lock:
            if stale is not None and self._token != stale:
                return
            loader.__dict__.pop("exec_plugin_expiry", None)  # else the library keeps the old one
            await loader.load_from_exec_plugin()
            self._plugin_ran()

    def _plugin_ran(self) -> None:
        loader = self._kube_loader
        assert loader is not None
        self._token = getattr(loader, "token", None) or self._token
        expiry = loader.__dict__.get("exec_plugin_expiry")
        self._exec_expiry = expiry.timestamp() if isinstance(expiry, datetime.datetime) else None

    def _read_token_file(self) -> None:
        assert self._token_file is not None
        try:
            self._token = "Bearer " + Path(self._token_file).read_text().strip()
        except OSError:  # being replaced: the last token serves until the next read
            return
        self._token_read_at = time.monotonic()


def _uses_exec(loader: KubeConfigLoader) -> bool:
    user: Any = getattr(loader, "_user", None)
    return user is not None and "exec" in user


def _token_file(loader: KubeConfigLoader) -> str | None:
    user: Any = getattr(loader, "_user", None)
    if user is None or "tokenFile" not in user or "token" in user:
        return None
    return str(Path(user.path or ".").parent / user["tokenFile"]) if user.path else str(user["tokenFile"])
