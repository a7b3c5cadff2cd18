"""Fair share: named table cases, an independent scalar reference, and properties."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_ray.core.model.snapshot import QueueInfo
from kai_ray.core.rules.fairshare import FairShares, compute_fair_shares
from kai_ray.core.state.queues import QueueTree, build_queue_tree
from tests.properties import examples

INF = math.inf


# ------------------------------------------------------------------ builder


@dataclass(frozen=True)
class Q:
    """One queue; every resource column gets the same numbers unless a test says otherwise.
    `request` is the queue's own (leaf) request; parents get their subtree's sum."""

    name: str
    parent: str | None = None
    quota: float = 0.0
    limit: float = -1.0
    weight: float = 1.0
    priority: int = 100
    request: float = 0.0
    usage: float = 0.0


def q(name: str, parent: str | None = None, **kw: float) -> Q:
    return Q(name, parent, **kw)  # type: ignore[arg-type]


def tree_of(queues: Sequence[Q]) -> QueueTree:
    return build_queue_tree(
        [
            QueueInfo(
                name=x.name,
                parent=x.parent,
                priority=x.priority,
                quota=(x.quota,) * 3,
                limit=(x.limit,) * 3,
                over_quota_weight=(x.weight,) * 3,
            )
            for x in queues
        ]
    )


def subtree_requests(tree: QueueTree, own: Sequence[float]) -> np.ndarray:
    req = np.zeros(len(tree))
    for i, amount in enumerate(own):
        for a in tree.ancestors[i]:
            req[a] += amount
    return req


def run(
    queues: Sequence[Q], total: float, *, k: float = 1.0, with_usage: bool = False
) -> tuple[QueueTree, FairShares]:
    tree = tree_of(queues)
    req = subtree_requests(tree, [x.request for x in queues])
    usage = np.array([[x.usage] * 3 for x in queues]).reshape(-1, 3) if with_usage else None
    shares = compute_fair_shares(tree, np.full(3, float(total)), np.repeat(req[:, None], 3, 1), usage, k)
    return tree, shares


def by_name(tree: QueueTree, values: np.ndarray) -> dict[str, float]:
    # Same inputs in every column: every column must come out the same.
    assert np.array_equal(values, np.repeat(values[:, :1], 3, 1))
    return {n: float(values[i, 0]) for i, n in enumerate(tree.names)}


# ------------------------------------------------------------------ table


@dataclass(frozen=True)
class Case:
    queues: tuple[Q, ...]
    total: float
    fair: dict[str, float]
    deserved: dict[str, float] = field(default_factory=dict)
    k: float = 1.0
    with_usage: bool = False


CASES: dict[str, Case] = {
    # KAI's own test, cpu column: B fits its 1498.5 offer, A gets floor(1498.5), and the
    # 0.5 left after rounding goes to A.
    "kai-cpu-rounding": Case(
        (q("a", quota=1.5, request=1700), q("b", quota=1.5, request=1500)),
        3000,
        fair={"a": 1500, "b": 1500},
        deserved={"a": 1.5, "b": 1.5},
    ),
    # Quotas adding up to more than the cluster are not scaled down; nothing is left over.
    "over-committed-quotas-weight-0": Case(
        tuple(q(f"q{i}", quota=1, weight=0, request=1 + i % 2) for i in range(4)),
        2,
        fair={"q0": 1, "q1": 1, "q2": 1, "q3": 1},
        deserved={"q0": 1, "q1": 1, "q2": 1, "q3": 1},
    ),
    "weights-2-to-1": Case(
        (q("a", weight=2, request=100), q("b", weight=1, request=100)),
        30,
        fair={"a": 20, "b": 10},
    ),
    "weights-apply-only-above-quota": Case(
        (q("a", quota=10, weight=1, request=100), q("b", quota=0, weight=1, request=100)),
        30,
        fair={"a": 20, "b": 10},
        deserved={"a": 10, "b": 0},
    ),
    # A takes 3 of its offer of 5; the 2 it leaves go to B in a second round.
    "limit-caps-and-surplus-resplit": Case(
        (q("a", limit=3, request=10), q("b", request=10)),
        10,
        fair={"a": 3, "b": 7},
    ),
    "limit-caps-deserved": Case(
        (q("a", quota=4, limit=4, request=10), q("b", quota=2, weight=0, request=10)),
        10,
        fair={"a": 4, "b": 2},
        deserved={"a": 4, "b": 2},
    ),
    "quota-minus-one-is-everything": Case(
        (q("a", quota=-1, request=5), q("b", quota=2, request=10)),
        8,
        fair={"a": 5, "b": 3},
        deserved={"a": 5, "b": 2},
    ),
    "quota-minus-one-takes-all-first": Case(
        (q("a", quota=-1, request=20), q("b", quota=0, request=5)),
        8,
        fair={"a": 8, "b": 0},
        deserved={"a": 8, "b": 0},
    ),
    "priority-tier-served-first": Case(
        (q("low", priority=50, request=10), q("high", priority=200, request=7)),
        10,
        fair={"low": 3, "high": 7},
    ),
    "priority-tier-takes-everything": Case(
        (q("low", priority=50, weight=10, request=10), q("high", priority=200, request=20)),
        10,
        fair={"low": 0, "high": 10},
    ),
    # Lower tier: offers 1.5 each, floor 1 each, leftover 1 to the older queue.
    "lower-tier-gets-leftover-with-fractions": Case(
        (
            q("high", priority=200, request=7),
            q("low1", priority=50, request=10),
            q("low2", priority=50, request=10),
        ),
        10,
        fair={"high": 7, "low1": 2, "low2": 1},
    ),
    "fractions-equal-remainders-older-first": Case(
        (q("a", request=100), q("b", request=100), q("c", request=100)),
        10,
        fair={"a": 4, "b": 3, "c": 3},
    ),
    "fractions-largest-remainder-first": Case(
        (q("a", weight=1, request=100), q("b", weight=2, request=100)),
        10,
        fair={"a": 3, "b": 7},
    ),
    # Fractional GPUs: A fits 0.7 of 1.25; B gets 1, then 0.8 left, then 0.8 as leftover.
    "fractional-gpus": Case(
        (q("a", request=0.7), q("b", request=5)),
        2.5,
        fair={"a": 0.7, "b": 1.8},
    ),
    # Both offered 0.25 < 0.3: nothing whole; the leftover 0.5 is capped by what each wants.
    "leftover-capped-by-what-is-wanted": Case(
        (q("a", request=0.3), q("b", request=0.3)),
        0.5,
        fair={"a": 0.3, "b": 0.2},
    ),
    "zero-request-gets-zero": Case(
        (q("idle", quota=5, request=0), q("busy", quota=1, request=100)),
        10,
        fair={"idle": 0, "busy": 10},
        deserved={"idle": 0, "busy": 1},
    ),
    "weight-0-gets-no-over-quota": Case(
        (q("a", quota=1, weight=0, request=10), q("b", quota=1, weight=1, request=3)),
        10,
        fair={"a": 1, "b": 3},
    ),
    # dept-a gets 10 (quota 4 + the 6 dept-b does not want); a1 and a2 split those 10;
    # a1's 5 are split 3:1 among its children (3.75 / 1.25 -> 3 + 1 leftover, 1).
    "three-levels": Case(
        (
            q("dept-a", quota=4),
            q("dept-b", quota=4),
            q("a1", "dept-a", quota=1),
            q("a2", "dept-a", quota=1, request=10),
            q("b1", "dept-b", quota=0, request=2),
            q("a1x", "a1", weight=3, request=6),
            q("a1y", "a1", weight=1, request=6),
        ),
        12,
        fair={"dept-a": 10, "dept-b": 2, "a1": 5, "a2": 5, "b1": 2, "a1x": 4, "a1y": 1},
        deserved={"dept-a": 4, "dept-b": 2, "a1": 1, "a2": 1, "b1": 0, "a1x": 0, "a1y": 0},
    ),
    "child-quota-minus-one-is-parents-share": Case(
        (q("p", quota=6, weight=0), q("c", "p", quota=-1, request=50)),
        20,
        fair={"p": 6, "c": 6},
        deserved={"p": 6, "c": 6},
    ),
    # Usage 0.5 vs 0, k=1: share weights 0.5 and 1.0 -> offers 3.33 / 6.67 -> 3 and 7.
    "usage-shifts-to-less-used": Case(
        (q("a", usage=0.5, request=100), q("b", usage=0.0, request=100)),
        10,
        fair={"a": 3, "b": 7},
        with_usage=True,
    ),
    "usage-ignored-with-k-0": Case(
        (q("a", usage=0.5, request=100), q("b", usage=0.0, request=100)),
        10,
        fair={"a": 5, "b": 5},
        k=0.0,
        with_usage=True,
    ),
    # A's share weight drops to 0, but what B does not want still reaches A next round.
    "usage-heavy-queue-still-gets-unwanted-rest": Case(
        (q("a", usage=1.0, request=100), q("b", usage=0.0, request=6)),
        10,
        fair={"a": 4, "b": 6},
        with_usage=True,
    ),
    "nothing-to-share": Case(
        (q("a", quota=2, request=5), q("b", request=5)),
        0,
        fair={"a": 2, "b": 0},
        deserved={"a": 2, "b": 0},
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_fair_share_table(case: Case) -> None:
    tree, shares = run(case.queues, case.total, k=case.k, with_usage=case.with_usage)
    assert by_name(tree, shares.fair_share) == pytest.approx(case.fair)
    if case.deserved:
        assert by_name(tree, shares.deserved) == pytest.approx(case.deserved)


@pytest.mark.parametrize(
    ("queue", "total", "expected"),
    [
        pytest.param(q("a", quota=4, request=1), 10, 4, id="quota-above-request"),
        pytest.param(q("a", quota=2, request=9), 10, 9, id="fair-share-above-quota"),
        pytest.param(q("a", quota=4, limit=6, request=9), 10, 6, id="capped-by-limit"),
        pytest.param(q("a", quota=-1, limit=7, request=1), 10, 7, id="unlimited-quota-limit"),
        pytest.param(q("a", quota=-1, request=1), 10, 10, id="unlimited-quota-no-limit"),
        pytest.param(q("a", quota=0, weight=0, request=3), 10, 0, id="nothing"),
    ],
)
def test_allocatable(queue: Q, total: float, expected: float) -> None:
    tree, shares = run([queue], total)
    assert by_name(tree, shares.allocatable)["a"] == pytest.approx(expected)


def test_resources_are_independent() -> None:
    # gpu: a's quota 1, then 2.5 offered each -> 2 + 2, and the 1 left goes to the older a.
    # cpu: weights 2:1. memory: a has weight 0 and no quota, so b takes everything.
    tree = build_queue_tree(
        [
            QueueInfo("a", quota=(1, 0, 0), over_quota_weight=(1, 2, 0)),
            QueueInfo("b", quota=(0, 0, 0), over_quota_weight=(1, 1, 1)),
        ]
    )
    req = np.array([[4.0, 100, 100], [4.0, 100, 100]])
    shares = compute_fair_shares(tree, np.array([6.0, 30, 50]), req)
    assert shares.deserved.tolist() == [[1, 0, 0], [0, 0, 0]]
    assert shares.fair_share.tolist() == [[4, 20, 0], [2, 10, 50]]


def test_empty_tree() -> None:
    shares = compute_fair_shares(build_queue_tree([]), np.ones(3), np.zeros((0, 3)))
    assert shares.fair_share.shape == (0, 3)


def test_wrong_shapes_are_named() -> None:
    tree = tree_of([q("a")])
    with pytest.raises(ValueError, match=r"requested and usage \[1, 3\]"):
        compute_fair_shares(tree, np.ones(3), np.ones((2, 3)))


def test_negative_k_is_zero() -> None:
    queues = (q("a", usage=0.5, request=100), q("b", request=100))
    _, neg = run(queues, 10, k=-3.0, with_usage=True)
    _, zero = run(queues, 10, k=0.0, with_usage=True)
    assert np.array_equal(neg.fair_share, zero.fair_share)


def test_a_thousand_queues_in_three_levels_share_the_whole_cluster() -> None:
    # How fast is the cycle benchmark's to say (kai-ray bench cycle), not a timed assert's.
    rng = np.random.default_rng(7)
    queues = [q(f"d{d}", quota=float(rng.integers(0, 20))) for d in range(20)]
    for t in range(200):
        queues.append(q(f"t{t}", f"d{t % 20}", quota=float(rng.integers(0, 5))))
    for j in range(800):
        queues.append(
            q(
                f"l{j}",
                f"t{j % 200}",
                weight=float(rng.integers(0, 4)),
                priority=int(rng.choice([50, 100, 200])),
                request=float(rng.integers(0, 30)),
            )
        )
    tree, shares = run(queues, 5000)
    assert shares.fair_share[list(tree.roots)].sum(axis=0) == pytest.approx(np.full(3, 5000))


# ------------------------------------------------------- scalar reference


def reference(queues: Sequence[Q], total: float, k: float) -> dict[str, tuple[float, float]]:
    """The rules written out queue by queue (one resource), for comparison."""
    tree = tree_of(queues)
    req = subtree_requests(tree, [x.request for x in queues])
    want = {x.name: min(req[i], INF if x.limit < 0 else x.limit) for i, x in enumerate(queues)}
    order = {x.name: i for i, x in enumerate(queues)}
    out: dict[str, tuple[float, float]] = {}

    def split(parent: str | None, share: float) -> None:
        kids = [x for x in queues if x.parent == parent]
        des = {c.name: max(0.0, min(share if c.quota < 0 else c.quota, want[c.name])) for c in kids}
        fair = dict(des)
        left = max(0.0, share - sum(des.values()))
        for prio in sorted({c.priority for c in kids}, reverse=True):
            tier = [c for c in kids if c.priority == prio]
            frac: dict[str, float] = {}
            while left > 0:
                active = [c for c in tier if want[c.name] - fair[c.name] > 0 and c.weight > 0]
                wsum = sum(c.weight for c in active)
                norm = {c.name: c.weight / wsum for c in active}
                sw = {c.name: max(0.0, norm[c.name] + k * (norm[c.name] - c.usage)) for c in active}
                ssum = sum(sw.values())
                if not active or ssum == 0:
                    break
                again, given_now = False, 0.0
                for c in active:
                    offer, need = left * sw[c.name] / ssum, want[c.name] - fair[c.name]
                    if need <= offer:
                        fair[c.name] = want[c.name]
                        given_now += need
                        again = again or need < offer
                        frac.pop(c.name, None)
                    else:
                        fair[c.name] += math.floor(offer)
                        given_now += math.floor(offer)
                        if offer > math.floor(offer):
                            frac[c.name] = offer - math.floor(offer)
                left = max(0.0, left - given_now)
                if not again:
                    break
            for name in sorted(frac, key=lambda n: (-frac[n], order[n])):
                need = want[name] - fair[name]
                if left <= 0 or need <= 0:
                    continue
                gift = min(1.0, need, left)
                fair[name] += gift
                left -= gift
        for c in kids:
            out[c.name] = (des[c.name], fair[c.name])
            split(c.name, fair[c.name])

    split(None, total)
    return out


# ------------------------------------------------------------------ properties

quarters = st.integers(0, 80).map(lambda v: v / 4)


@st.composite
def forests(draw: st.DrawFn, integral: bool = False) -> tuple[list[Q], float]:
    amount = st.integers(0, 20).map(float) if integral else quarters
    queues: list[Q] = []
    for i in range(draw(st.integers(1, 12))):
        parent = draw(st.sampled_from([None, *(x.name for x in queues)]))
        quota = draw(st.one_of(st.just(-1.0), amount) if draw(st.booleans()) else amount)
        extra = draw(st.one_of(st.none(), amount))
        limit = -1.0 if extra is None else (extra if quota < 0 else quota + extra)
        queues.append(
            Q(
                f"q{i}",
                parent,
                quota,
                limit,
                weight=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0])),
                priority=draw(st.sampled_from([50, 100, 200])),
                request=draw(amount),
                usage=draw(st.sampled_from([0.0, 0.25, 0.5, 1.0])),
            )
        )
    # A queue with children holds no jobs of its own.
    parents_ = {x.parent for x in queues}
    queues = [replace(x, request=0.0) if x.name in parents_ else x for x in queues]
    return queues, float(draw(st.integers(0, 60)) if integral else draw(quarters))


@settings(max_examples=examples(200), deadline=None)
@given(forests(), st.sampled_from([0.0, 0.5, 1.0, 2.0]))
def test_matches_scalar_reference(forest: tuple[list[Q], float], k: float) -> None:
    queues, total = forest
    tree, shares = run(queues, total, k=k, with_usage=True)
    expected = reference(queues, total, k)
    fair, des = by_name(tree, shares.fair_share), by_name(tree, shares.deserved)
    for name, (d, f) in expected.items():
        assert des[name] == pytest.approx(d, abs=1e-9), name
        assert fair[name] == pytest.approx(f, abs=1e-9), name


@settings(max_examples=examples(200), deadline=None)
@given(forests(), st.booleans())
def test_bounds(forest: tuple[list[Q], float], with_usage: bool) -> None:
    queues, total = forest
    tree, shares = run(queues, total, with_usage=with_usage)
    req = subtree_requests(tree, [x.request for x in queues])
    fair, des, alloc = (shares.fair_share[:, 0], shares.deserved[:, 0], shares.allocatable[:, 0])
    eps = 1e-9
    for i, x in enumerate(queues):
        assert 0 <= des[i] <= fair[i] + eps
        assert fair[i] <= req[i] + eps, "never more than requested"
        if x.limit >= 0:
            assert fair[i] <= x.limit + eps and alloc[i] <= x.limit + eps
        if x.quota >= 0 or x.limit >= 0:
            assert alloc[i] >= fair[i] - eps
    # A level never hands out more than its share, except deserved over-committed quotas.
    groups = [(total, list(tree.roots))] + [
        (fair[p], list(tree.children[p])) for p in range(len(tree)) if tree.children[p]
    ]
    for share, kids in groups:
        assert fair[kids].sum() <= max(share, des[kids].sum()) + eps


@settings(max_examples=examples(200), deadline=None)
@given(forests(integral=True))
def test_whole_units_and_positive_weights_use_everything(forest: tuple[list[Q], float]) -> None:
    queues, total = forest
    queues = [replace(x, weight=max(x.weight, 1.0)) for x in queues]
    tree, shares = run(queues, total)
    fair, des = shares.fair_share[:, 0], shares.deserved[:, 0]
    want = np.minimum(
        subtree_requests(tree, [x.request for x in queues]),
        np.where(tree.limit[:, 0] < 0, INF, tree.limit[:, 0]),
    )
    groups = [(total, list(tree.roots))] + [
        (fair[p], list(tree.children[p])) for p in range(len(tree)) if tree.children[p]
    ]
    for share, kids in groups:
        expected = des[kids].sum() if des[kids].sum() >= share else min(share, want[kids].sum())
        assert fair[kids].sum() == pytest.approx(expected, abs=1e-9)
