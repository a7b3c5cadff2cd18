"""List + watch caches: the operator's whole view of the cluster, rebuilt from the API
server at every start (level-triggered: nothing the operator knows is stored anywhere
else).

Each `Informer` lists its resource, then watches from the list's resourceVersion. A
watch that the server ends is resumed from the last version seen (bookmarks keep it
fresh); one answered 410 Gone (the version was compacted away) relists. A resource whose
API does not exist (RayCluster without KubeRay's CRDs, KAI's Queue without KAI) is
looked for again now and then, so installing the CRD later needs no restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kai_ray.k8s.client import ApiError, Kube

__all__ = ["Informer", "Key", "key_of"]

log = logging.getLogger(__name__)
Key = tuple[str, str]
ABSENT_RETRY = 15.0  # seconds between looks for an API that does not exist (yet)


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace", ""), meta["name"])


class Informer:
    def __init__(
        self,
        kube: Kube,
        path: str,
        *,
        changed: asyncio.Event,
        optional: bool = False,
        on_change: Callable[[str, dict[str, Any]], None] | None = None,
        on_relist: Callable[[], None] | None = None,
    ) -> None:
        self.kube, self.path, self.optional = kube, path, optional
        self.items: dict[Key, dict[str, Any]] = {}
        self.changed = changed
        self.on_change = on_change  # each watch event: (type, object)
        self.on_relist = on_relist  # after each list: everything may have changed
        self.synced = asyncio.Event()  # set once the first list is in
        self.present = False  # whether the API exists
        self.relists = 0
        self._version = ""

    async def run(self) -> None:
        """List, then watch; after a dropped watch, resume from the last version seen;
        list again only when the server says that version is gone (410)."""
        while True:
            try:
                if not self._version and not await self._list():
                    await asyncio.sleep(ABSENT_RETRY)
                    continue
                await self._watch_until_gone()
                log.info("watch of %s: version %s is gone (410); listing again", self.path, self._version)
                self._version = ""  # 410 Gone: what happened since is lost; list again
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a dropped connection, a restarting server
                log.warning("watch of %s failed (%s); resuming", self.path, exc)
                await asyncio.sleep(1.0)

    async def _list(self) -> bool:
        try:
            data = await self.kube.get(self.path)
        except ApiError as exc:
            if exc.status == 404 and self.optional:
                self.present = False
                self.synced.set()  # nothing to wait for: the API is not installed
                return False
            raise
        self.present = True
        fresh = {key_of(o): o for o in data.get("items", [])}
        if fresh != self.items:
            self.items = fresh
            if self.on_relist is not None:
                self.on_relist()
            self.changed.set()
        self._version = data["metadata"]["resourceVersion"]
        self.relists += 1
        self.synced.set()
        return True

    async def _watch_until_gone(self) -> None:
        """Watch calls back to back from the last version seen; returns on 410 Gone."""
        while True:
            try:
                async for events in self.kube.watch_batches(self.path, self._version):
                    for event in events:
                        if not self._apply(event):
                            return
            except ApiError as exc:
                if exc.status == 410:
                    return
                raise

    def _apply(self, event: dict[str, Any]) -> bool:
        kind, obj = event.get("type"), event.get("object", {})
        if kind == "ERROR":
            if obj.get("code") == 410:
                return False
            raise ApiError(int(obj.get("code", 500)), str(obj.get("reason", "")), str(obj.get("message", "")))
        self._version = obj.get("metadata", {}).get("resourceVersion", self._version)
        if kind == "BOOKMARK":
            return True
        key = key_of(obj)
        if kind == "DELETED":
            self.items.pop(key, None)
        else:
            self.items[key] = obj
        if self.on_change is not None:
            self.on_change(str(kind), obj)
        self.changed.set()
        return True
