"""The Kubernetes backend's ClusterSource: the world patched from the watches' deltas.

Each informer tells the source what changed (a pod, a node, an owner, a class, a queue;
or, after a relist, everything it holds); `observe` then redoes only that:

- a pod: its place in kai_ray.k8s.podindex (its gang, its node, GPU sharing);
- an owner (RayCluster, RayJob, ...): the pods whose lineage looked it up;
- a gang whose pods or owners changed: the gang, its job, whether it is a problem
  (left out of the cycle; its pods then count as use outside on their nodes);
- a node: its NodeInfo, with what runs there outside the core's tasks.

Unchanged nodes and jobs keep their objects, which the incremental cycle reads as
"unchanged"; a steady cycle costs what changed, not the size of the cluster. The world
rebuilt from every object (kai_ray.k8s.reference) is the reference: with
KAI_RAY_CHECK_INCREMENTAL set, each observed world is compared with it (as in the tests).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from sortedcontainers import SortedDict

from kai_ray.control.cycles import CHECK_INCREMENTAL_ENV
from kai_ray.control.kubenodes import GPU_PRODUCT_LABEL
from kai_ray.control.observed import Facts
from kai_ray.control.runtime import Runtimes, max_runtime_reason, runtime_over_at
from kai_ray.control.snapshot import kept
from kai_ray.core import ClusterSnapshot, JobInfo, NodeInfo, TaskStatus
from kai_ray.k8s.gangs import Gang, GangContext, gang_of
from kai_ray.k8s.informer import Key
from kai_ray.k8s.owners import Lineage, Obj, OwnerKey
from kai_ray.k8s.podindex import PodIndex, Touched
from kai_ray.k8s.queues import QueueSet, read_queues
from kai_ray.k8s.reference import rebuild_world, same_world
from kai_ray.k8s.sharing import idle_reservations
from kai_ray.k8s.suspension import SUSPENDABLE_KINDS, is_virtual, virtual_pods, virtual_scheduler
from kai_ray.k8s.taints import Profile, Taint, blocking_taints
from kai_ray.k8s.tenancy import Namespaces, of_namespaces
from kai_ray.k8s.watches import OwnerObjects, Watches
from kai_ray.k8s.world import (
    World,
    gang_job,
    gang_profile,
    node_info,
    outside_node,
    outside_use,
    tolerated_labels,
)

__all__ = ["ASSUME_TTL", "KubeSource"]

ASSUME_TTL = 30.0  # seconds a sent binding is trusted before the pods' watch confirms it


class KubeSource:
    def __init__(
        self,
        watches: Watches,
        scheduler_names: tuple[str, ...],
        default_queue: str,
        *,
        can_grow: bool = False,
        gpu_type_label: str = GPU_PRODUCT_LABEL,
        closed_queues: bool = False,
    ) -> None:
        self.watches, self.names, self.default_queue = watches, frozenset(scheduler_names), default_queue
        self.can_grow = can_grow  # an autoscaler adds nodes (the operator's --cluster-can-grow)
        self.gpu_type_label = gpu_type_label  # the node label naming its GPU type (--gpu-type-label)
        self.check = bool(os.environ.get(CHECK_INCREMENTAL_ENV))
        self.owners = OwnerObjects(watches)
        self.index = PodIndex()
        self.gangs: dict[str, Gang] = {}  # usable gangs (in the cycle)
        self.problems: dict[str, Gang] = {}  # gangs left out, with why
        self.queue_set: QueueSet = read_queues([])
        self.assumed: dict[str, tuple[str, float]] = {}  # pod uid -> (node, when sent)
        self.placeholders: dict[str, str] = {}  # gang id -> node holding its submitter's room
        self.direct: list[tuple[str, str, str]] = []  # (gang, pod, node) to bind at once
        # The pods standing for owners kai-ray suspended (kai_ray.k8s.suspension), by key
        # and by owner: they wait in the world as the pods KubeRay makes on resume.
        self.virtual: dict[Key, dict[str, Any]] = {}
        self._virtual_of: dict[OwnerKey, set[Key]] = {}
        self._all_virtual = True
        self._jobs: SortedDict = SortedDict()  # (created_at, gang id) -> JobInfo, build_gangs' order
        self.timed: set[str] = set()  # gangs with a max runtime of their own
        self._job_keys: dict[str, tuple[float, str]] = {}
        self._infos: dict[str, NodeInfo] = {}
        self._taints: dict[str, tuple[Taint, ...]] = {}
        self._profiles: dict[str, tuple[Profile, int]] = {}  # label -> (tolerations, gangs)
        self._counted: set[str] = set()  # uids of ours that count as outside use
        self._idle: set[Key] = set()
        self._classes: dict[str, int] = {}
        self.namespaces = Namespaces(closed_queues)  # the tenants: their labels
        self._snapshot: ClusterSnapshot | None = None
        # What changed since the last observe.
        self._pods: set[Key] = set()
        self._owner_keys: set[OwnerKey] = set()
        self._touched = Touched(sharing=True)
        self._all_pods = self._all_nodes = self._all_gangs = self._queues = True
        self._nodes_moved = self._jobs_moved = True
        watches.subscribe(self)

    # ------------------------------------------------------------ deltas (the informers')

    def pod_changed(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata", {})
        self._pods.add((meta.get("namespace", ""), meta["name"]))

    def node_changed(self, kind: str, obj: dict[str, Any]) -> None:
        self._touched.nodes.add(obj["metadata"]["name"])
        if kind in ("ADDED", "DELETED"):
            self._nodes_moved = True

    def owner_changed(self, owner_kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata", {})
        self._owner_keys.add((owner_kind, meta.get("namespace", "default"), meta["name"]))

    def classes_changed(self) -> None:
        self._all_gangs = True

    def queues_changed(self) -> None:
        self._queues = True

    def namespace_changed(self, kind: str, obj: dict[str, Any]) -> None:
        self.namespaces.changed(obj["metadata"]["name"])

    def relisted(self, what: str) -> None:
        """An informer listed again: everything it holds may have changed."""
        if what == "pods" or what == "owners":
            self._all_pods = True
            self._all_virtual |= what == "owners"
        elif what == "nodes":
            self._all_nodes = self._nodes_moved = True
        elif what == "classes":
            self._all_gangs = True
        elif what == "namespaces":
            self.namespaces.relisted()
        else:
            self._queues = True

    # ------------------------------------------------------------ the actuator's

    def assume(self, uid: str, node: str, now: float) -> None:
        """A binding is being sent: the pod is on `node` until the watch says otherwise
        (or ASSUME_TTL passes), whether or not its answer comes back."""
        self.assumed[uid] = (node, now)
        key = self.index.uids.get(uid)
        if key is not None:
            self._pods.add(key)

    def unassume(self, uid: str) -> None:
        """The binding was refused, or never reached the server: the pod is not bound."""
        if self.assumed.pop(uid, None) is not None:
            key = self.index.uids.get(uid)
            if key is not None:
                self._pods.add(key)

    def hold_room(self, gang: str, node: str) -> None:
        """The room for a RayJob's submitter, held on `node` until its pod comes."""
        self.placeholders[gang] = node
        self._touched.gangs.add(gang)

    def release_room(self, gang: str) -> None:
        if self.placeholders.pop(gang, None) is not None:
            self._touched.gangs.add(gang)

    def take_direct(self) -> list[tuple[str, str, str]]:
        direct, self.direct = self.direct, []
        return direct

    def pod(self, gang: str, task: str) -> dict[str, Any] | None:
        found = self.gangs.get(gang) or self.problems.get(gang)
        if found is None:
            return None
        return next((p for p in found.pods if p["metadata"]["name"] == task), None)

    def suspended_owner(self, gang: str) -> Gang | None:
        """The gang, when it stands for an owner kai-ray suspended (its pods are virtual)."""
        found = self.gangs.get(gang)
        if found is None or not any(is_virtual(p) for p in found.pods):
            return None
        return found

    @property
    def snapshot(self) -> ClusterSnapshot | None:
        """The world the last observe built (None before the first)."""
        return self._snapshot

    def overrunning(self, now: float) -> list[tuple[Gang, str]]:
        """Gangs that run past their max runtime (their own annotation, else their
        queue's default), each with the reason it is stopped. A gang on its way out
        (some pod being deleted) is left to go."""
        runtimes = Runtimes()
        runtimes.set_queues(self.queue_set.queues)
        defaults = any(q.max_runtime is not None for q in self.queue_set.queues)
        jobs: Iterable[JobInfo] = (
            self._jobs.values()
            if defaults
            else [self._jobs[self._job_keys[gid]] for gid in self.timed if gid in self._job_keys]
        )
        out = []
        for job in jobs:
            limit = runtimes.max_runtime(job)
            running = [t.since for t in job.tasks if t.status is TaskStatus.RUNNING]
            if limit is None or not running or any(t.status is TaskStatus.RELEASING for t in job.tasks):
                continue
            over = runtime_over_at(min(running), 0.0, limit)
            gang = self.gangs.get(job.name)
            if over is not None and over <= now and gang is not None:
                out.append((gang, max_runtime_reason(limit)))
        return out

    def queue_access(self) -> dict[str, dict[str, Any]]:
        """Each ruled queue's rule resolved against the cluster now, for its status."""
        return self.namespaces.queue_access(self.queue_set.queues, self._classes)

    def facts(self, gang: str) -> Facts | None:
        """What people see of a gang beyond the core's job (ObservedLifecycle asks)."""
        found = self.gangs.get(gang)
        if found is None:
            return None
        return Facts(f"{found.kind}/{found.name}", found.kind, found.priority_class)

    def sharing_pods(self) -> list[Mapping[str, Any]]:
        items = self.watches.pods.items
        return [items[k] for k in self.index.sharing if k in items]

    def device_memory(self) -> Mapping[str, float]:
        return {name: info.gpu_memory for name, info in self._infos.items()}

    # ------------------------------------------------------------ ClusterSource

    def observe(self, now: float) -> ClusterSnapshot:
        self._expire_assumed(now)
        self._read_queues_and_classes()
        self._read_namespaces()
        self._mark_owners_pods()
        for key in self._pods:
            self.index.update(key, self._obj(key), self.owners, self.names, self._assumed_node, self._touched)
        self._pods = set()
        self._read_taints()
        self._rebuild_gangs(now)
        self._find_idle_holders()
        self._rebuild_nodes()
        snapshot = self._assemble()
        if self.check:
            same_world(snapshot, self.rebuild().snapshot)
        return snapshot

    def _expire_assumed(self, now: float) -> None:
        items = self.watches.pods.items
        for uid, (_, sent) in list(self.assumed.items()):
            key = self.index.uids.get(uid)
            pod = items.get(key) if key is not None else None
            if pod is None or pod.get("spec", {}).get("nodeName") or now - sent > ASSUME_TTL:
                del self.assumed[uid]
                if key is not None:
                    self._pods.add(key)

    def _read_queues_and_classes(self) -> None:
        if self._all_gangs:
            classes = {
                o["metadata"]["name"]: int(o.get("value", 0)) for o in self.watches.classes.items.values()
            }
            if classes != self._classes:
                self._classes = classes
                self._queues = True  # a queue's access rule may name a class
            else:
                self._all_gangs = False
        if self._queues:
            self._queues = False
            objects = (o for inf in self.watches.queues for o in inf.items.values())
            fresh = read_queues(objects, self._classes)
            if fresh.queues != self.queue_set.queues or fresh.problems != self.queue_set.problems:
                self.queue_set = fresh
            else:
                self.queue_set.source = fresh.source

    def _read_namespaces(self) -> None:
        """A namespace whose labels changed changes its gangs' tenant labels and maybe
        their queue (its default): those gangs are read again."""
        moved = self.namespaces.read(self.watches)
        if moved:
            self._touched.gangs |= of_namespaces([*self.index.members, *self.gangs, *self.problems], moved)

    def _mark_owners_pods(self) -> None:
        if self._all_pods:
            self._all_pods = False
            self._pods |= set(self.watches.pods.items) | self.index.keys()
        for owner in self._owner_keys:
            self._pods |= self.index.pods_of_owner.get(owner, set())
        if self._all_virtual:
            self._all_virtual = False
            self._owner_keys |= set(self._virtual_of) | {k for k in self.owners if k[0] in SUSPENDABLE_KINDS}
        self._refresh_virtual(self._owner_keys)
        self._owner_keys = set()

    def _refresh_virtual(self, owners: set[OwnerKey]) -> None:
        scheduler = virtual_scheduler(self.names)
        for key in owners:
            if key[0] not in SUSPENDABLE_KINDS:
                continue
            obj = self.owners.get(key)
            fresh = {
                (p["metadata"]["namespace"], p["metadata"]["name"]): p
                for p in (virtual_pods(key[0], obj, scheduler) if obj is not None else [])
            }
            old = self._virtual_of.pop(key, set())
            for gone in old:
                self.virtual.pop(gone, None)
            if fresh:
                self.virtual.update(fresh)
                self._virtual_of[key] = set(fresh)
            self._pods |= old | set(fresh)

    def _obj(self, key: Key) -> dict[str, Any] | None:
        return self.watches.pods.items.get(key) or self.virtual.get(key)

    def _assumed_node(self, uid: str) -> str | None:
        sent = self.assumed.get(uid)
        return sent[0] if sent is not None else None

    # ------------------------------------------------------------ gangs

    def _rebuild_gangs(self, now: float) -> None:
        if self._all_gangs:
            self._all_gangs = False
            self._touched.gangs |= set(self.index.members) | set(self.gangs) | set(self.problems)
        if not self._touched.gangs:
            return
        ctx = GangContext.of(
            self._classes,
            self.default_queue,
            self.index.submitter_elsewhere(),
            self.gpu_type_label,
            self.namespaces.labels,
        )
        for gid in sorted(self._touched.gangs):
            self._drop_gang(gid)
            members = self.index.members.get(gid)
            if members:
                self._add_gang(gid, members, ctx, now)
            else:
                self.placeholders.pop(gid, None)
        self._touched.gangs = set()

    def _drop_gang(self, gid: str) -> None:
        old = self.gangs.pop(gid, None) or self.problems.pop(gid, None)
        if old is None:
            return
        self.timed.discard(gid)
        if (order := self._job_keys.pop(gid, None)) is not None:
            del self._jobs[order]
            self._jobs_moved = True
        if old.problem:
            self._count(old, False)
        else:
            self._profile(old, -1)

    def _add_gang(self, gid: str, members: Mapping[Key, Lineage], ctx: GangContext, now: float) -> None:
        gang = gang_of(((self._pod_or_virtual(k), lin) for k, lin in members.items()), ctx)
        self._submitter_to_held_room(gang, now)
        if gang.problem:
            self.problems[gid] = gang
            self._count(gang, True)
            return
        self.gangs[gid] = gang
        self._profile(gang, +1)
        job = gang_job(gang, self._assumed_nodes(), self.placeholders, tolerating=self._tainted())
        self._job_keys[gid] = (gang.created_at, gid)
        self._jobs[(gang.created_at, gid)] = job
        if gang.max_runtime is not None:
            self.timed.add(gid)
        self._jobs_moved = True

    def _pod_or_virtual(self, key: Key) -> dict[str, Any]:
        found = self._obj(key)
        assert found is not None  # indexed members are live pods or virtual ones
        return found

    def _submitter_to_held_room(self, gang: Gang, now: float) -> None:
        """A RayJob's submitter pod that appeared where room was held for it goes there,
        without waiting its turn: the room was its own since the cluster was admitted."""
        node = self.placeholders.get(gang.id)
        if node is None:
            return
        if gang.submitter is None:
            for pod in gang.pods:
                meta = pod["metadata"]
                if meta["name"] in gang.subgroups.get("submitter", []) and not pod["spec"].get("nodeName"):
                    uid = meta.get("uid", "")
                    self.assumed[uid] = (node, now)
                    key = (meta.get("namespace", ""), meta["name"])
                    self.index.place(key, pod, node, self._touched)
                    self.direct.append((gang.id, meta["name"], node))
            del self.placeholders[gang.id]  # its room is the pod's now (or no longer needed)

    def _count(self, gang: Gang, counted: bool) -> None:
        """A problem gang's pods still run: they count as use outside on their nodes."""
        for pod in gang.pods:
            uid = pod["metadata"].get("uid")
            if counted:
                self._counted.add(uid)
            else:
                self._counted.discard(uid)
            node = self.index.node.get((pod["metadata"].get("namespace", ""), pod["metadata"]["name"]))
            if node is not None:
                self._touched.nodes.add(node)

    def _profile(self, gang: Gang, change: int) -> None:
        label, profile = gang_profile(gang)
        _, count = self._profiles.get(label, (profile, 0))
        if count + change <= 0:
            del self._profiles[label]
        else:
            self._profiles[label] = (profile, count + change)
        if (count == 0 or count + change == 0) and self._tainted():
            self._all_nodes = True  # a tolerations label came or went: every node may change

    def _assumed_nodes(self) -> dict[str, str]:
        return {uid: node for uid, (node, _) in self.assumed.items()}

    def _tainted(self) -> bool:
        return any(self._taints.values())

    # ------------------------------------------------------------ nodes

    def _find_idle_holders(self) -> None:
        """Reservations holding a device no sharing pod uses count as use outside."""
        if not self._touched.sharing:
            return
        self._touched.sharing = False
        items = self.watches.pods.items
        pods = [items[k] for k in self.index.sharing if k in items]
        idle = {
            (p["metadata"]["namespace"], p["metadata"]["name"])
            for p in idle_reservations(pods, self._assumed_nodes())
        }
        for key in idle ^ self._idle:
            uid = items[key]["metadata"].get("uid") if key in items else None
            if uid is not None:
                (self._counted.add if key in idle else self._counted.discard)(uid)
            if key in self.index.node:
                self._touched.nodes.add(self.index.node[key])
        self._idle = idle

    def _read_taints(self) -> None:
        """Each changed node's blocking taints. Whether any node has some decides whether
        jobs carry a tolerations label at all: when that flips, every job and node does."""
        items = self.watches.nodes.items
        if self._all_nodes:
            self._all_nodes = False
            self._touched.nodes |= {name for _, name in items} | set(self._infos)
        was_tainted = self._tainted()
        for name in self._touched.nodes:
            obj = items.get(("", name))
            self._taints.pop(name, None)
            if obj is not None:
                self._taints[name] = blocking_taints(obj)
        if self._tainted() != was_tainted:
            self._touched.gangs |= set(self.gangs)
            self._all_nodes = True

    def _rebuild_nodes(self) -> None:
        items = self.watches.nodes.items
        if self._all_nodes:  # a tolerations label came or went
            self._all_nodes = False
            self._touched.nodes |= {name for _, name in items} | set(self._infos)
        if not self._touched.nodes:
            return
        assumed = self._assumed_nodes()
        profiles = {label: p for label, (p, _) in self._profiles.items()} if self._tainted() else {}
        for name in self._touched.nodes:
            self._node(name, items.get(("", name)), assumed, profiles)
        self._touched.nodes = set()

    def _node(
        self, name: str, obj: Obj | None, assumed: Mapping[str, str], profiles: Mapping[str, Profile]
    ) -> None:
        if obj is None:
            if self._infos.pop(name, None) is not None:
                self._nodes_moved = True
            return
        pods = self.watches.pods.items
        here = [pods[k] for k in self.index.on_node.get(name, ()) if k in pods]
        outside = [p for p in here if outside_node(p, self.names, self._counted, assumed) is not None]
        info = node_info(obj, outside_use(outside), self.gpu_type_label)
        info = tolerated_labels(info, self._taints.get(name, ()), profiles)
        before = self._infos.get(name)
        self._infos[name] = kept(self._infos, name, info)
        if self._infos[name] is not before:
            self._nodes_moved = True

    # ------------------------------------------------------------ the world

    def _assemble(self) -> ClusterSnapshot:
        last = self._snapshot
        nodes = last.nodes if last is not None and not self._nodes_moved else None
        if nodes is None:
            nodes = [self._infos[name] for _, name in self.watches.nodes.items if name in self._infos]
        jobs = last.jobs if last is not None and not self._jobs_moved else None
        if jobs is None:
            jobs = list(self._jobs.values())
        self._nodes_moved = self._jobs_moved = False
        queues = self.queue_set.queues
        if last is not None and last.nodes is nodes and last.jobs is jobs and last.queues is queues:
            return last
        self._snapshot = ClusterSnapshot(nodes=nodes, queues=queues, jobs=jobs, can_grow=self.can_grow)
        return self._snapshot

    def rebuild(self) -> World:
        """The whole world from every object: the reference (kai_ray.k8s.reference)."""
        return rebuild_world(
            self.watches,
            self._classes,
            self.queue_set.queues,
            self.names,
            self.default_queue,
            self._assumed_nodes(),
            self.placeholders,
            list(self.virtual.values()),
            self.gpu_type_label,
        )
