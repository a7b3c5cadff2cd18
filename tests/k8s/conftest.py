"""A fresh API server per test (about 6 s): tests share nothing, not even nodes. The
kube-apiserver binary is built once per machine and cached (see
kai_ray/testing/build-components.sh); the first test on a fresh machine pays that."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kai_ray.testing.apiserver import ApiServer, apiserver_binary
from tests.k8s.env import K8sEnv


@pytest.fixture(scope="session")
def apiserver_built() -> str:
    return apiserver_binary()


def _env(*extra_args: str) -> Iterator[K8sEnv]:
    with ApiServer(extra_args=extra_args) as api:
        env = K8sEnv(api)
        env.install()
        try:
            yield env
        finally:
            env.close()


@pytest.fixture
def k8s(apiserver_built: str) -> Iterator[K8sEnv]:
    yield from _env()


@pytest.fixture
def k8s_compacting(apiserver_built: str) -> Iterator[K8sEnv]:
    """A server without its watch cache that compacts etcd every second: an old version
    is soon gone, and a watch from it is answered 410 Gone, as after a long disconnect."""
    yield from _env("--watch-cache=false", "--etcd-compaction-interval=1s")
