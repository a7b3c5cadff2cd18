"""A cluster followed over several scheduling sessions: each session starts from the state
the last one left, as a real cluster would be a few minutes later.

Between two sessions (`advance`):
- a task placed in the session (Binding) starts: it runs on its node from half a minute
  after the session;
- a task evicted in the session (Releasing) ends, and its job's controller makes it again:
  it waits, Pending, from the session on (a job's pods come back when preempted);
- a task placed on room still being released (Pipelined, also a task consolidation
  moved) is not bound: it waits again, and the next session places it on the room its
  victims left;
- each job that runs whole finishes with a fixed chance, the same for every scheduler
  (drawn from the job's name and the session, not from what else happened);
- a few new jobs arrive, the same ones whichever scheduler decided before.

So two schedulers followed from one first state meet the same arrivals and, where they
run the same job, the same finishes: what differs between their last states is what they
decided.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kai_ray.conformance.generate import State, draw_pending_job

__all__ = ["GAP_S", "Decision", "advance", "follow"]

GAP_S = 300  # the clock between sessions: whole minutes, so starts keep off min-runtime boundaries
_BIND_DELAY_S = 30
_FINISH_CHANCE = 0.15

# Per job, its tasks in order: {"name", "status", "node", "gpuGroup"} (the corpus' kai.json).
Decision = Mapping[str, Sequence[Mapping[str, Any]]]


def advance(state: State, decision: Decision, *, key: str, session: int, features: frozenset[str]) -> State:
    """The state `GAP_S` seconds after a session that decided `decision` on `state`."""
    doc = copy.deepcopy(state.doc)
    jobs = []
    in_flight: set[str] = set()
    for job in doc["jobs"]:
        tasks = decision.get(job["name"])
        if tasks is None:
            raise ValueError(f"{doc['name']}: the decision has no job {job['name']}")
        tasks = [_bound_before(d, state.in_flight) for d in tasks]
        job["tasks"] = [_next_task(t, d) for t, d in zip(job["tasks"], tasks, strict=True)]
        if job.get("staleSince") is not None:
            job["staleSince"] -= GAP_S
        if _finishes(key, session, job):
            continue
        if "releasing" in features:
            in_flight |= _binding_still(key, session, tasks)
        jobs.append(job)
    leaves = [
        q["name"] for q in doc["queues"] if not any(c.get("parent") == q["name"] for c in doc["queues"])
    ]
    # Arrivals draw from their own generator: the same jobs come whatever was decided.
    rng = random.Random(f"{key}/session/{session}")
    for i in range(rng.choice((0, 1, 1, 2))):
        jobs.append(draw_pending_job(rng, f"a{session}-{i}", leaves, doc["nodes"], features))
    doc["jobs"] = jobs
    _relabel_groups(jobs)
    doc["name"] = f"{doc['name'].rsplit('-t', 1)[0]}-t{session + 1}"
    return State(doc, in_flight)


def follow(
    first: State, decide: Callable[[State], Decision], *, key: str, sessions: int, features: frozenset[str]
) -> list[tuple[State, Decision]]:
    """Each session's state and decision, the first from `first`."""
    out: list[tuple[State, Decision]] = []
    state = first
    for session in range(1, sessions + 1):
        decision = decide(state)
        out.append((state, decision))
        if session < sessions:
            state = advance(state, decision, key=key, session=session, features=features)
    return out


def _next_task(task: Mapping[str, Any], decided: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in task.items() if k not in ("state", "node", "since", "gpuGroup")}
    status = decided["status"]
    if status in ("Running", "Binding"):
        out["state"] = "Running"
        out["node"] = decided["node"]
        out["since"] = task.get("since", 0) - GAP_S if status == "Running" else _BIND_DELAY_S - GAP_S
        if decided.get("gpuGroup"):
            out["gpuGroup"] = decided["gpuGroup"]
    elif status in ("Pending", "Pipelined", "Releasing"):
        out["state"] = "Pending"
        # Waiting since the session that evicted or skipped it, or still since it came.
        out["since"] = (
            -GAP_S if status != "Pending" or task.get("state") != "Pending" else task.get("since", 0) - GAP_S
        )
    else:
        raise ValueError(f"task {decided.get('name')}: unknown status {status!r}")
    return out


def _relabel_groups(jobs: Sequence[dict[str, Any]]) -> None:
    """A device group's name (KAI's is a uuid) as a short symbol, per node, by first use:
    the tasks that share a device keep sharing one."""
    symbols: dict[tuple[str, str], str] = {}
    per_node: dict[str, int] = {}
    for job in jobs:
        for task in job["tasks"]:
            group = task.get("gpuGroup")
            if group is None:
                continue
            node = task["node"]
            if (node, group) not in symbols:
                symbols[(node, group)] = f"g{per_node.get(node, 0)}"
                per_node[node] = per_node.get(node, 0) + 1
            task["gpuGroup"] = symbols[(node, group)]


def _finishes(key: str, session: int, job: Mapping[str, Any]) -> bool:
    if not job["tasks"] or any(t.get("state") != "Running" for t in job["tasks"]):
        return False
    return random.Random(f"{key}/finish/{session}/{job['name']}").random() < _FINISH_CHANCE


def _bound_before(decided: Mapping[str, Any], in_flight: set[str]) -> Mapping[str, Any]:
    """A task whose bind was in flight as the session began runs on: KAI reports it
    Binding again (its BindRequest), kai-ray Running; both mean the same."""
    if decided["status"] == "Binding" and decided["name"] in in_flight:
        return {**decided, "status": "Running"}
    return decided


def _binding_still(key: str, session: int, decided: Sequence[Mapping[str, Any]]) -> set[str]:
    """Some tasks bound in the session are still with the binder at the next one (drawn
    per task, so the same task is in flight whichever scheduler bound it)."""
    return {
        d["name"]
        for d in decided
        if d["status"] == "Binding" and random.Random(f"{key}/flight/{session}/{d['name']}").random() < 0.25
    }
