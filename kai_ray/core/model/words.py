"""How the core's reasons say things: counts with their nouns (1 node, 2 nodes, 0.5 GPU,
0 GPUs), requests, gangs, topology levels. Every reason goes through here, so each
piece of grammar is one rule."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from kai_ray.core.model.quantity import format_bytes
from kai_ray.core.model.snapshot import NODE_ID_LABELS, Request

__all__ = ["agree", "count", "describe_request", "gang_words", "level_noun", "listed", "number"]


def number(value: float) -> str:
    """Whole values as integers (5000, not 5e+03); others to six significant digits."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6g}"


def _singular(value: float) -> bool:
    # "1 GPU" and "0.5 GPU" (a part of one), but "0 GPUs" and "1.5 GPUs".
    return 0 < value <= 1


def agree(value: float, singular: str, plural: str) -> str:
    """The word that agrees with `value`: agree(n, "has", "have")."""
    return singular if _singular(value) else plural


def count(value: float, noun: str, plural: str = "") -> str:
    """`1 node`, `3 nodes`, `0.5 GPU`; `plural` where it is not the noun plus s."""
    return f"{number(value)} {agree(value, noun, plural or noun + 's')}"


def listed(names: Sequence[str], shown: int = 3) -> str:
    """The first `shown` names, and how many more: `a, b, c and 4 more`."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


@functools.lru_cache(maxsize=4096)
def describe_request(req: Request) -> str:
    """One task's request: `4 GPUs, 2 CPUs, 16Gi memory`. Kept per request: a waiting
    gang's reason is said again each time the state moved (allocate's look-alikes)."""
    parts = []
    if req.gpu_memory > 0:
        parts.append(f"{format_bytes(req.gpu_memory)} of GPU memory")
    elif req.gpu > 0:
        parts.append(count(req.gpu, "GPU"))
    if req.cpu > 0:
        parts.append(count(req.cpu, "CPU"))
    if req.memory > 0:
        parts.append(f"{format_bytes(req.memory)} memory")
    parts.extend(f"{number(v)} {k}" for k, v in req.extended)  # a resource's name: no plural
    return ", ".join(parts) or "no resources"


def gang_words(size: int, request: Request, alike: int | None = None) -> str:
    """`gang of 3 tasks (4 GPUs each)`, `task (4 GPUs)` for one task alone, or, when
    only `alike` of the gang's tasks ask for this request, `gang of 3 tasks (2 of them
    4 GPUs each)`."""
    what = describe_request(request)
    if size == 1:
        return f"task ({what})"
    if alike is not None and alike != size:
        return f"gang of {count(size, 'task')} ({alike} of them {what} each)"
    return f"gang of {count(size, 'task')} ({what} each)"


def level_noun(level: str) -> str:
    """A topology level as reasons name it: a node-identity label reads "node" (each of
    its domains is one node, and its raw key means nothing to a user); any other level
    by its label."""
    return "node" if level in NODE_ID_LABELS else level
