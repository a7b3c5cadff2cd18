"""Expectations against the final state, and gpuGroup symbols <-> device indices."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kai_ray.core.model.snapshot import Bind, Evict, Pipeline
from kai_ray.scenario.expect import Mismatch
from kai_ray.scenario.runner import ScenarioResult, run_scenario
from kai_ray.scenario.symbols import GpuSymbols
from tests.scenario.builders import ScenarioBuilder, cycle_result, pending, running, scenario

# ------------------------------------------------------------------ symbols


def test_input_symbols_get_devices_per_node_in_order_of_first_appearance() -> None:
    loaded = (
        ScenarioBuilder()
        .node("a", gpus=4)
        .node("b", gpus=4)
        .job("x", running("a", gpuGroup="g1"), running("b", gpuGroup="g1"), gpu=0.5)
        .job("y", running("a", gpuGroup="g0"), running("a", gpuGroup="g1"), gpu=0.5)
        .load()
    )
    devices = [(t.node, t.gpu_group) for j in loaded.snapshot.jobs for t in j.tasks]
    assert devices == [("a", 0), ("b", 0), ("a", 1), ("a", 0)]
    assert loaded.symbols.symbols("a") == ["g1", "g0"]


def test_numeric_symbols_are_text() -> None:
    loaded = scenario().job("x", running("node0", gpuGroup=0), gpu=0.5).load()
    assert loaded.symbols.index_of("node0", "0") == 0


def test_bind_is_a_bijection_per_node() -> None:
    symbols = GpuSymbols()
    symbols.assign("a", "g0")
    assert symbols.bind("a", "g0", 0)
    assert not symbols.bind("a", "g0", 1)  # g0 is device 0
    assert not symbols.bind("a", "g1", 0)  # device 0 is g0
    assert symbols.bind("a", "g1", 1)
    assert symbols.bind("b", "g0", 3)  # another node, another map


def test_unnamed_devices_get_fresh_symbols() -> None:
    symbols = GpuSymbols()
    symbols.assign("a", "g0")
    assert (symbols.name("a", 0), symbols.name("a", 2)) == ("g0", "#2")
    symbols.assign("a", "#1")  # only a quoted symbol in a file could look like this
    assert symbols.name("a", 5) == "#5"
    symbols.bind("a", "#5", 4)
    assert symbols.name("a", 5) == "#5'"


BIND_OPS = st.lists(
    st.tuples(st.sampled_from("ab"), st.sampled_from(["g0", "g1", "g2"]), st.integers(0, 3)),
    max_size=30,
)


@given(BIND_OPS)
def test_binding_keeps_one_device_per_symbol_and_one_symbol_per_device(
    ops: list[tuple[str, str, int]],
) -> None:
    symbols = GpuSymbols()
    for node, symbol, index in ops:
        assert symbols.bind(node, symbol, index) == (symbols.index_of(node, symbol) == index)
    for node in "ab":
        for symbol in symbols.symbols(node):
            index = symbols.index_of(node, symbol)
            assert index is not None and symbols.symbol_of(node, index) == symbol


# ------------------------------------------------------------------ comparing


def fractional() -> ScenarioBuilder:
    return (
        ScenarioBuilder()
        .node("n", gpus=2)
        .job("old", running("n", gpuGroup="g0"), gpu=0.5)
        .job("new", pending(), pending(), gpu=0.5)
    )


def run_with(builder: ScenarioBuilder, *decisions: Any) -> ScenarioResult:
    core_answer = cycle_result(*decisions)
    return run_scenario(builder.load(), lambda _s, _c, _n: core_answer)


GROUPS = [
    ("same symbol on the same device", ("g0", "g0"), (0, 0), []),
    ("a new symbol on a new device", ("g1", "g1"), (1, 1), []),
    (
        "a new symbol on a device named in the input",
        ("g1", "g1"),
        (0, 1),
        [("new-0", ["g1"], ["g0"])],
    ),
    (
        "an input symbol elsewhere",
        ("g0", "g0"),
        (1, 1),
        [("new-0", ["g0"], ["#1"]), ("new-1", ["g0"], ["#1"])],
    ),
    ("one new symbol on two devices", ("g1", "g1"), (1, 0), [("new-1", ["g1"], ["g0"])]),
]


@pytest.mark.parametrize(
    ("expected", "devices", "mismatches"), [g[1:] for g in GROUPS], ids=[g[0] for g in GROUPS]
)
def test_gpu_groups(
    expected: tuple[str, str], devices: tuple[int, int], mismatches: list[tuple[Any, ...]]
) -> None:
    builder = fractional().expect("new", tasks=[{"gpuGroups": [expected[0]]}, {"gpuGroups": [expected[1]]}])
    result = run_with(builder, Bind("new", "new-0", "n", devices[0]), Bind("new", "new-1", "n", devices[1]))
    got = [(m.task, m.expected, m.actual) for m in result.mismatches]
    assert got == mismatches


def test_job_level_expectations_hold_for_every_task() -> None:
    builder = (
        scenario().job("j", pending(), pending()).expect("j", status="Binding", node="node0", gpuGroups=[])
    )
    result = run_with(builder, Bind("j", "j-0", "node0", None))
    assert result.mismatches == [
        Mismatch("j", "j-1", "status", "Binding", "Pending"),
        Mismatch("j", "j-1", "node", "node0", None),
    ]


def test_task_expectations_in_order() -> None:
    builder = (
        scenario()
        .job("j", running("node0"), running("node0"), minMember=1)
        .expect("j", node="node0", tasks=[{"status": "Running"}, {"status": "Releasing"}])
    )
    assert run_with(builder, Evict("j", "j-1", "node0", "preempt", "")).passed
    assert not run_with(builder, Evict("j", "j-0", "node0", "preempt", "")).passed


def test_node_null_expects_no_node() -> None:
    builder = scenario().job("j").expect("j", node=None)
    assert run_with(builder).passed
    assert run_with(builder, Pipeline("j", "j-0", "node0", None)).mismatches == [
        Mismatch("j", "j-0", "node", None, "node0")
    ]


def test_a_fraction_expected_on_a_device_but_pending() -> None:
    builder = fractional().expect("new", gpuGroups=["g0"])
    mismatch = run_with(builder).mismatches[0]
    assert (mismatch.field, mismatch.expected, mismatch.actual) == ("gpuGroups", ["g0"], [])


def test_mismatch_text_names_job_task_field_expected_actual() -> None:
    text = str(Mismatch("j", "j-1", "node", "node0", None))
    assert text == "job j, task j-1: node expected node0, actual none"
