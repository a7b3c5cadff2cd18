"""The Kubernetes operator inside the controller Ray cluster: a detached, named,
restartable Ray actor running the same operator loop as `kai-ray operator` does in a
process. `kai-ray operator --in-ray` starts it, or finds the one already running.

It is pinned to the node that started it, where the kubeconfig (or the pod's service
account) is. Killed or restarted, it rebuilds everything from the API server: the
operator holds no state of its own. With leader election (the default) a restarted
actor is a new identity, so it waits for the killed one's Lease to expire (a lease
duration, 15 s by default): `status()` says so, with the holder and the time.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import time
from typing import Any

import ray

from kai_ray.k8s.client import Kube, KubeConfig
from kai_ray.k8s.operator import Operator, OperatorOptions
from kai_ray.k8s.progress import STARTING

__all__ = ["OPERATOR_ACTOR", "RecentLog", "find_or_start_operator"]

OPERATOR_ACTOR = "kai-ray-operator"
NAMESPACE = "kai-ray"
LOG_LINES = 500  # the actor's recent log lines kept for log_tail()
RETRY_S = 2.0  # after the operator stopped on an error, before it starts again


class RecentLog(logging.Handler):
    """The process's last log lines, so that `kai-ray operator --in-ray --status` and a
    failing test show what the actor did without finding Ray's worker log files."""

    def __init__(self, lines: int = LOG_LINES) -> None:
        super().__init__()
        self.lines: collections.deque[str] = collections.deque(maxlen=lines)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a bad log call must not break the operator
            self.handleError(record)


@ray.remote(num_cpus=0, max_restarts=-1, max_concurrency=100)
class OperatorActor:
    # An async __init__ runs on the actor's event loop, so the operator's task starts
    # here, on every start and restart. It was started by a call the actor made to itself
    # (`current_actor.start.remote()`), which Ray fails now and then when the call races
    # the actor's own restart ("ActorUnavailableError: The actor is restarting"); nobody
    # read that call's result, and the restarted operator never ran (issue 38).
    async def __init__(self, config: KubeConfig, options: dict[str, Any]) -> None:  # type: ignore[misc]
        self.recent = RecentLog()
        logging.basicConfig(level=logging.INFO)
        logging.getLogger("kai_ray").setLevel(logging.INFO)  # whatever Ray's worker set up
        logging.getLogger().addHandler(self.recent)
        self.config = config
        self.operator_options = OperatorOptions(**options)
        self.operator: Operator | None = None
        self.started_at = time.time()
        self.attempts = 0  # operators this actor started (more than one: it stopped on errors)
        self.last_error = ""
        self.restarted = _restarted()
        logging.getLogger(__name__).info(
            "operator actor %s in process %d (%s), on %s",
            OPERATOR_ACTOR,
            os.getpid(),
            "restarted by Ray" if self.restarted else "first start",
            config.server,
        )
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def start(self) -> str:
        """The operator runs (started again if its task ever ended); the API server's URL."""
        if self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self.config.server

    async def _run(self) -> None:
        while True:
            self.attempts += 1
            try:
                async with Kube(self.config) as kube:
                    self.operator = Operator(kube, self.operator_options)
                    await self.operator.run()
            except Exception as exc:  # the API server away, the lease lost: again, from a fresh list
                self.operator, self.last_error = None, f"{type(exc).__name__}: {exc}"
                logging.getLogger(__name__).exception("the operator stopped; starting it again")
                await asyncio.sleep(RETRY_S)

    async def stats(self) -> dict[str, Any]:
        if self.operator is None:
            return {}
        return dataclasses.asdict(self.operator.stats)

    async def status(self) -> dict[str, Any]:
        """Where the operator stands (kai_ray.k8s.progress: phase, since, detail, lease,
        figures) and the actor's own: its process, whether Ray restarted it, the errors
        its operator stopped on."""
        op = self.operator
        base = op.status() if op is not None else _starting(self.started_at, self.last_error)
        return {
            **base,
            "pid": os.getpid(),
            "restarted": self.restarted,
            "started_at": self.started_at,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "running": not self._task.done(),
            "server": self.config.server,
            "dashboard": op.dashboard.url if op is not None and op.dashboard is not None else None,
        }

    async def log_tail(self, lines: int = 100) -> list[str]:
        """The actor's last log lines, oldest first."""
        return list(self.recent.lines)[-lines:] if lines > 0 else []


def _restarted() -> bool | None:
    """Whether Ray restarted this actor (None: the GCS did not say); for people only, so
    a failed look never stops the operator from starting."""
    try:
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:
        return None


def _starting(since: float, error: str) -> dict[str, Any]:
    detail = f"starting again after an error: {error}" if error else "starting"
    return {"phase": STARTING, "since": since, "detail": detail, "scheduling": False}


def find_or_start_operator(config: KubeConfig, options: OperatorOptions) -> tuple[Any, bool]:
    """The operator actor of this Ray cluster, started when none runs; (handle, started).
    A found one is asked to start too: a no-op unless its loop ended."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        handle = ray.get_actor(OPERATOR_ACTOR, namespace=NAMESPACE)
    except ValueError:  # none yet
        pass
    else:
        ray.get(handle.start.remote())
        return handle, False
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
