"""The incremental cycle against the full rebuild with queue access rules (docs/tenants.md):
jobs of several tenants (and trusted ones), rules on parents and leaves, tenant
selectors, ceilings, listed classes, queues closed by default, and rules that change
between cycles: the cache refuses and keeps what the full build does, to the last bit."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.core import NodeInfo, NodeRequirement, QueueAccess, SchedulerConfig, TenantSelector
from tests.properties import examples

from .test_incremental import World, ops, run_both_ways, worlds

GOLD = TenantSelector((("tier", "gold"),), (NodeRequirement("team", "NotIn", ("t9",)),))
RULES = {
    "dept": QueueAccess(tenants=("t1", "t2"), tenant_selector=GOLD),
    "a": QueueAccess(tenants=("t1",), max_priority=100, max_priority_class="build"),
    "c": QueueAccess(priority_classes=(("train", 50), ("build", 100))),
}
# Who submits, by the job's serial: a trusted submitter (None), tenants named by rules,
# one only a selector admits, one nobody admits.
TENANTS: list[tuple[str | None, dict[str, str]]] = [
    (None, {}),
    ("t1", {}),
    ("t2", {}),
    ("t3", {"tier": "gold", "team": "x"}),
    ("t4", {"tier": "silver"}),
]


class TenantWorld(World):
    def __init__(self, nodes: list[NodeInfo], config: SchedulerConfig) -> None:
        closed = len(nodes) % 2 == 1  # closed by default in half the worlds
        super().__init__(nodes, dataclasses.replace(config, closed_queues=closed))
        self.queues = _ruled(self.queues, narrow_b=False)

    def apply(self, op: tuple[Any, ...]) -> None:
        super().apply(op)
        if op[0] == "submit":  # the new job, before any cycle sees it
            tenant, labels = TENANTS[self.serial % len(TENANTS)]
            self.jobs[-1].tenant, self.jobs[-1].tenant_labels = tenant, labels
        elif op[0] == "queue":  # the queues made again: a rule on b comes and goes
            self.queues = _ruled(self.queues, narrow_b=op[1] == 3.0)


def _ruled(queues: list[Any], narrow_b: bool) -> list[Any]:
    rules = {**RULES, **({"b": QueueAccess(tenants=("t2",))} if narrow_b else {})}
    return [dataclasses.replace(q, access=rules.get(q.name)) for q in queues]


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds, st.lists(st.tuples(st.lists(ops, max_size=5), st.booleans()), min_size=2, max_size=12))
def test_the_incremental_cycle_decides_as_the_full_rebuild_with_tenants(
    world_spec: tuple[list[tuple[int, float, bool]], str, float, float],
    steps: list[tuple[list[tuple[Any, ...]], bool]],
) -> None:
    run_both_ways(world_spec, steps, TenantWorld)
