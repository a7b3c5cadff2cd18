"""A fresh API server per test: tests share nothing, not even nodes. The kube-apiserver
binary is built once per machine and cached (see kai_ray/testing/build-components.sh);
the first test on a fresh machine pays that.

Two things keep the fresh servers cheap. Each starts from etcd's data as it is once
every test's CRDs are in (kai-ray's and KubeRay's, made once per session): KubeRay's CRDs
are large, and a server took about 8 s to take them in, 4 s when they are there as it
starts. And the next test's server is made ready in a thread while the test before it
runs: most of a test is waiting for the operator, so the start costs little wall time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from kai_ray.testing.apiserver import ApiServer, apiserver_binary
from tests.k8s.env import K8sEnv


@pytest.fixture(scope="session")
def apiserver_built() -> str:
    return apiserver_binary()


@pytest.fixture(scope="session")
def installed_etcd(apiserver_built: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """etcd's data with kai-ray's and KubeRay's CRDs installed and served."""
    to = tmp_path_factory.mktemp("etcd-installed") / "etcd"
    with ApiServer() as api:
        env = K8sEnv(api)
        try:
            env.install()
        finally:
            env.close()
        api.save_etcd_data(to)
    return to


class ReadyServers:
    """Fresh API servers with every test's CRDs served, each made ready one test ahead."""

    def __init__(self, etcd_data: Path) -> None:
        self.etcd_data = etcd_data
        self._maker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="next-apiserver")
        self._next: Future[K8sEnv] | None = None

    def take(self) -> K8sEnv:
        """The server made ready ahead (or one made now), and the next one begun."""
        taken = self._next if self._next is not None else self._maker.submit(self.make)
        self._next = self._maker.submit(self.make)
        return taken.result()

    def make(self, *extra_args: str) -> K8sEnv:
        api = ApiServer(extra_args=extra_args, etcd_data=self.etcd_data)
        api.__enter__()
        try:
            env = K8sEnv(api)
            env.install()  # what the data holds already: waits until it is served
        except BaseException:
            api.stop()
            raise
        return env

    def close(self) -> None:
        if self._next is not None:
            with contextlib.suppress(Exception):  # one that failed to start left nothing running
                _close(self._next.result())
        self._maker.shutdown()


def _close(env: K8sEnv) -> None:
    try:
        env.close()
    finally:
        env.api.stop()


@pytest.fixture(scope="session")
def ready_servers(installed_etcd: Path) -> Iterator[ReadyServers]:
    servers = ReadyServers(installed_etcd)
    yield servers
    servers.close()


@pytest.fixture
def k8s(ready_servers: ReadyServers) -> Iterator[K8sEnv]:
    env = ready_servers.take()
    try:
        yield env
    finally:
        _close(env)


def server_with(servers: ReadyServers, *extra_args: str) -> Iterator[K8sEnv]:
    """A fresh server started with more arguments, made now (for a fixture to yield from)."""
    env = servers.make(*extra_args)
    try:
        yield env
    finally:
        _close(env)


@pytest.fixture
def k8s_compacting(ready_servers: ReadyServers) -> Iterator[K8sEnv]:
    """A server without its watch cache that compacts etcd every second: an old version
    is soon gone, and a watch from it is answered 410 Gone, as after a long disconnect."""
    yield from server_with(ready_servers, "--watch-cache=false", "--etcd-compaction-interval=1s")
