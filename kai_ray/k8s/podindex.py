"""Where each pod stands in the Kubernetes backend's world, kept so that a pod's change
(a watch event) can be undone and redone without looking at any other pod: its gang
(our live pods), a RayJob submitter placed elsewhere, the node it holds room on, the
owners its lineage looked up (a change to one re-reads the pod), GPU sharing.

`update(key, pod)` takes the pod out of every index and puts it back as it is now
(None: deleted), saying in `Touched` which gangs and nodes to look at again."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from kai_ray.k8s.gangs import pod_role
from kai_ray.k8s.informer import Key
from kai_ray.k8s.owners import Lineage, Obj, OwnerKey, Owners, could_join_a_gang, lineage_of
from kai_ray.k8s.sharing import GPU_GROUP_ANNOTATION, is_reservation

__all__ = ["PodIndex", "Touched"]


@dataclass(slots=True)
class Touched:
    """What a step must look at again."""

    gangs: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    sharing: bool = False  # a reservation or a GPU-sharing pod changed


@dataclass(slots=True)
class PodIndex:
    gang: dict[Key, str] = field(default_factory=dict)  # our live pods -> gang id
    members: dict[str, dict[Key, Lineage]] = field(default_factory=lambda: defaultdict(dict))
    elsewhere: dict[str, set[Key]] = field(default_factory=lambda: defaultdict(set))  # submitters
    elsewhere_of: dict[Key, str] = field(default_factory=dict)
    node: dict[Key, str] = field(default_factory=dict)  # live pods with a node -> the node
    on_node: dict[str, dict[Key, None]] = field(default_factory=lambda: defaultdict(dict))
    looked_up: dict[Key, tuple[OwnerKey, ...]] = field(default_factory=dict)
    pods_of_owner: dict[OwnerKey, set[Key]] = field(default_factory=lambda: defaultdict(set))
    uids: dict[str, Key] = field(default_factory=dict)
    uid_of: dict[Key, str] = field(default_factory=dict)
    sharing: set[Key] = field(default_factory=set)  # reservations and sharing pods

    def keys(self) -> set[Key]:
        """Every pod some index holds."""
        return set(self.gang) | set(self.elsewhere_of) | set(self.node) | set(self.looked_up) | self.sharing

    def update(
        self,
        key: Key,
        pod: Obj | None,
        owners: Owners,
        names: Collection[str],
        assumed_node: Callable[[str], str | None],
        touched: Touched,
    ) -> None:
        """Take the pod out of every index, then put it back as it is now. `assumed_node`:
        the node a binding sent but not yet seen put the pod on (by uid)."""
        self._forget(key, touched)
        if pod is None:
            return
        meta = pod["metadata"]
        uid = meta.get("uid", "")
        self.uids[uid], self.uid_of[key] = key, uid
        if is_reservation(pod) or GPU_GROUP_ANNOTATION in (meta.get("annotations") or {}):
            self.sharing.add(key)
            touched.sharing = True
        if not is_reservation(pod) and could_join_a_gang(pod, names):
            self._lineage(key, pod, owners, names, touched)
        self.place(key, pod, assumed_node(uid), touched)

    def _forget(self, key: Key, touched: Touched) -> None:
        if (gang := self.gang.pop(key, None)) is not None:
            self.members[gang].pop(key, None)
            touched.gangs.add(gang)
        if (gang := self.elsewhere_of.pop(key, None)) is not None:
            self.elsewhere[gang].discard(key)
            touched.gangs.add(gang)
        if (node := self.node.pop(key, None)) is not None:
            self.on_node[node].pop(key, None)
            touched.nodes.add(node)
        for owner in self.looked_up.pop(key, ()):
            self.pods_of_owner[owner].discard(key)
        if key in self.sharing:
            self.sharing.discard(key)
            touched.sharing = True
        if (uid := self.uid_of.pop(key, None)) is not None:
            self.uids.pop(uid, None)

    def _lineage(self, key: Key, pod: Obj, owners: Owners, names: Collection[str], touched: Touched) -> None:
        lineage = lineage_of(pod, owners)
        self.looked_up[key] = lineage.looked_up
        for owner in lineage.looked_up:
            self.pods_of_owner[owner].add(key)
        role = pod_role(pod, lineage, names)
        if role == "ours":
            self.gang[key] = lineage.gang_id
            self.members[lineage.gang_id][key] = lineage
            touched.gangs.add(lineage.gang_id)
        elif role:
            self.elsewhere_of[key] = lineage.gang_id
            self.elsewhere[lineage.gang_id].add(key)
            touched.gangs.add(lineage.gang_id)

    def place(self, key: Key, pod: Obj, assumed: str | None, touched: Touched) -> None:
        """The node the pod holds room on (bound, or a binding sent), if any."""
        node = pod.get("spec", {}).get("nodeName") or assumed
        if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            self.node[key] = node
            self.on_node[node][key] = None
            touched.nodes.add(node)

    def submitter_elsewhere(self) -> Collection[str]:
        """Gang ids with a submitter pod outside the gang (GangContext reads `in`)."""
        return _Elsewhere(self)


class _Elsewhere(Collection[str]):
    def __init__(self, index: PodIndex) -> None:
        self.index = index

    def __contains__(self, gang: object) -> bool:
        return isinstance(gang, str) and bool(self.index.elsewhere.get(gang))

    def __iter__(self) -> Iterator[str]:
        return (g for g, keys in self.index.elsewhere.items() if keys)

    def __len__(self) -> int:
        return sum(1 for _ in self)
