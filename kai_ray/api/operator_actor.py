"""The Kubernetes operator inside the controller Ray cluster: a detached, named,
restartable Ray actor running the same operator loop as `kai-ray operator` does in a
process. `kai-ray operator --in-ray` starts it, or finds the one already running.

It is pinned to the node that started it, where the kubeconfig (or the pod's service
account) is. Killed or restarted, it rebuilds everything from the API server: the
operator holds no state of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import ray

from kai_ray.k8s.client import Kube, KubeConfig
from kai_ray.k8s.operator import Operator, OperatorOptions

__all__ = ["OPERATOR_ACTOR", "find_or_start_operator"]

OPERATOR_ACTOR = "kai-ray-operator"
NAMESPACE = "kai-ray"


@ray.remote(num_cpus=0, max_restarts=-1, max_concurrency=100)
class OperatorActor:
    def __init__(self, config: KubeConfig, options: dict[str, Any]) -> None:
        logging.basicConfig(level=logging.INFO)
        self.config = config
        self.options = OperatorOptions(**options)
        self.operator: Operator | None = None
        self._task: asyncio.Task[None] | None = None
        # The event loop is not running yet inside __init__, and after a restart nobody
        # else would call start(): the actor calls it on itself.
        ray.get_runtime_context().current_actor.start.remote()

    async def start(self) -> str:
        """Start the loop (the event loop runs only once a method is called)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self.config.server

    async def _run(self) -> None:
        while True:
            try:
                async with Kube(self.config) as kube:
                    self.operator = Operator(kube, self.options)
                    await self.operator.run()
            except Exception:  # the API server away: try again, from a fresh list
                logging.getLogger(__name__).exception("the operator stopped; starting it again")
                await asyncio.sleep(2.0)

    async def stats(self) -> dict[str, Any]:
        if self.operator is None:
            return {}
        return dataclasses.asdict(self.operator.stats)


def find_or_start_operator(config: KubeConfig, options: OperatorOptions) -> tuple[Any, bool]:
    """The operator actor of this Ray cluster, started when none runs; (handle, started)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        return ray.get_actor(OPERATOR_ACTOR, namespace=NAMESPACE), False
    except ValueError:
        pass
    here = ray.get_runtime_context().get_node_id()
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if f.name != "config"}
    handle = OperatorActor.options(  # type: ignore[attr-defined]
        name=OPERATOR_ACTOR,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
    ).remote(config, {**fields, "config": options.config})
    ray.get(handle.start.remote())
    return handle, True
