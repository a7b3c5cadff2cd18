"""The informers on a real API server: resume a dropped watch, relist on 410 Gone."""

from __future__ import annotations

import asyncio

import pytest

from kai_ray.k8s.client import gather_limited
from kai_ray.k8s.informer import Informer
from tests.k8s.env import NS, K8sEnv

pytestmark = pytest.mark.k8s
PATH = f"/api/v1/namespaces/{NS}/configmaps"


def test_a_watch_resumed_from_a_compacted_version_lists_again(k8s_compacting: K8sEnv) -> None:
    k8s = k8s_compacting

    async def scenario() -> tuple[int, int, int]:
        informer = Informer(k8s.kube, PATH, changed=asyncio.Event())
        task = asyncio.create_task(informer.run())
        await informer.synced.wait()
        await k8s.kube.create(PATH, {"metadata": {"name": "first"}, "data": {}})
        while ("default", "first") not in informer.items:
            await asyncio.sleep(0.01)
        task.cancel()  # the watch drops; meanwhile far more changes than the server keeps
        await asyncio.gather(task, return_exceptions=True)
        await gather_limited(
            [k8s.kube.create(PATH, {"metadata": {"name": f"cm{i}"}}) for i in range(300)], 32
        )
        relists = informer.relists
        await asyncio.sleep(2.5)  # compacted past the version the informer holds
        task = asyncio.create_task(informer.run())
        while len([k for k in informer.items if k[1].startswith("cm")]) < 300:
            await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return relists, informer.relists, len(informer.items)

    before, after, items = k8s.run(scenario(), timeout=60)
    assert before == 1
    assert after == 2  # resumed, was told 410 Gone, listed once more
    assert items >= 301


def test_a_dropped_watch_resumes_without_listing_when_its_version_is_kept(k8s: K8sEnv) -> None:
    async def scenario() -> tuple[int, bool]:
        informer = Informer(k8s.kube, PATH, changed=asyncio.Event())
        task = asyncio.create_task(informer.run())
        await informer.synced.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await k8s.kube.create(PATH, {"metadata": {"name": "while-away"}})
        task = asyncio.create_task(informer.run())
        for _ in range(200):
            if ("default", "while-away") in informer.items:
                break
            await asyncio.sleep(0.02)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return informer.relists, ("default", "while-away") in informer.items

    relists, seen = k8s.run(scenario(), timeout=30)
    assert seen and relists == 1
