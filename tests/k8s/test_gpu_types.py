"""GPU types on Kubernetes, without a server: a node's type from its label (GPU feature
discovery's product name, or the label the operator is told), and the types a gang
accepts from its GPU pods' nodeSelector or required node affinity on that label."""

from __future__ import annotations

from typing import Any, cast

import pytest

from kai_ray.api.operatorcommands import operator_options
from kai_ray.cli import build_parser
from kai_ray.control.gputypes import gang_gpu_types
from kai_ray.control.kubenodes import GPU_PRODUCT_LABEL
from kai_ray.k8s import DEFAULT_SCHEDULER_NAMES
from kai_ray.k8s.client import Kube
from kai_ray.k8s.gangs import build_gangs
from kai_ray.k8s.install import default_queues
from kai_ray.k8s.reference import same_world
from kai_ray.k8s.source import KubeSource
from kai_ray.k8s.watches import Watches
from kai_ray.k8s.world import build_world, node_info
from tests.k8s.test_gang_affinity import expr, required
from tests.k8s.test_gangs import PodBuilder, cases, only, raycluster, rc_pod, run
from tests.k8s.test_world import node, pod

PRODUCT = GPU_PRODUCT_LABEL
CUSTOM = "cloud.example.com/gpu-type"


@pytest.mark.parametrize(
    ("labels", "option", "expected"),
    [
        pytest.param({PRODUCT: "NVIDIA-H100-80GB-HBM3"}, None, "NVIDIA-H100-80GB-HBM3", id="product-label"),
        pytest.param({PRODUCT: "NVIDIA-A100", CUSTOM: "a100"}, CUSTOM, "a100", id="the-operators-label"),
        pytest.param({PRODUCT: "NVIDIA-A100"}, CUSTOM, "default", id="not-the-operators-label"),
        pytest.param({}, None, "default", id="no-label"),
    ],
)
def test_a_nodes_gpu_type(labels: dict[str, str], option: str | None, expected: str) -> None:
    info = node_info(node(labels=labels)) if option is None else node_info(node(labels=labels), None, option)
    assert info.gpu_type == expected
    assert info.gpu_model == labels.get(PRODUCT, "")  # the product name is still shown as it was


def worker(name: str, group: str = "g", gpus: int = 1, **spec: Any) -> PodBuilder:
    return rc_pod(name).worker(group).requests(gpu=gpus, cpu=1).spec(**spec)


def on(*types: str, key: str = PRODUCT) -> dict[str, Any]:
    return required({"matchExpressions": [expr(key, "In", *types)]})


GANGS = [
    ("no constraint: any type", [rc_pod("h").head(), worker("w")], ((), False)),
    ("a nodeSelector", [rc_pod("h").head(), worker("w", nodeSelector={PRODUCT: "H100"})], (("H100",), False)),
    (
        "required affinity In, in the order written",
        [worker("w1", affinity=on("H100", "A100")), worker("w2", affinity=on("H100", "A100"))],
        (("H100", "A100"), False),
    ),
    (
        "a head without a GPU does not say the type",
        [rc_pod("h").head().spec(nodeSelector={PRODUCT: "L4"}), worker("w", affinity=on("H100"))],
        (("H100",), False),
    ),
    (
        "pods that differ: the types all accept, in the first one's order",
        [worker("a", "g1", affinity=on("H100", "A100", "L4")), worker("b", "g2", affinity=on("L4", "A100"))],
        (("A100", "L4"), False),
    ),
    (
        "a GPU pod that names no type accepts any",
        [worker("a", "g1"), worker("b", "g2", nodeSelector={PRODUCT: "A100"})],
        (("A100",), False),
    ),
    (
        "pods with no type in common: the gang spans types",
        [worker("a", "g1", nodeSelector={PRODUCT: "H100"}), worker("b", "g2", affinity=on("A100", "L4"))],
        (("H100", "A100", "L4"), True),
    ),
    (
        "selector and affinity together: the type both admit",
        [worker("w", nodeSelector={PRODUCT: "A100"}, affinity=on("H100", "A100"))],
        (("A100",), False),
    ),
    (
        "terms are ORed: their types add up",
        [
            worker(
                "w",
                affinity=required(
                    {"matchExpressions": [expr(PRODUCT, "In", "H100")]},
                    {"matchExpressions": [expr(PRODUCT, "In", "A100"), expr("zone", "In", "a")]},
                ),
            )
        ],
        (("H100", "A100"), False),
    ),
    (
        "a term that leaves the type open admits any",
        [
            worker(
                "w",
                affinity=required(
                    {"matchExpressions": [expr(PRODUCT, "In", "H100")]},
                    {"matchExpressions": [expr("zone", "In", "a")]},
                ),
            )
        ],
        ((), False),
    ),
    (
        "NotIn lists no type",
        [worker("w", affinity=required({"matchExpressions": [expr(PRODUCT, "NotIn", "L4")]}))],
        ((), False),
    ),
    ("another label is no type", [worker("w", affinity=on("H100", key="zone"))], ((), False)),
]


@pytest.mark.parametrize(("pods", "expected"), cases(GANGS))
def test_the_types_a_gang_accepts(pods: list[PodBuilder], expected: tuple[tuple[str, ...], bool]) -> None:
    gang = only(run(pods, [raycluster().workers("g", 1)]))
    assert not gang.problem
    assert (gang.gpu_types, gang.mixed_gpu_types) == expected
    assert gang_gpu_types(gang.pods, PRODUCT) == expected


def test_the_operators_label_names_the_types() -> None:
    pods = [
        worker("a", nodeSelector={PRODUCT: "NVIDIA-A100"}),
        worker("b", affinity=on("h100", "a100", key=CUSTOM)),
    ]
    gang = only(run(pods, [raycluster().workers("g", 2)], gpu_type_label=CUSTOM))
    assert gang.gpu_types == ("h100", "a100")


def test_the_core_is_told_the_types_of_nodes_and_jobs() -> None:
    nodes = [node("n0", labels={CUSTOM: "h100"}), node("n1", labels={PRODUCT: "A100"})]
    wanted = pod("p")
    wanted["spec"]["nodeSelector"] = {CUSTOM: "h100"}
    w = build_world(
        nodes,
        [wanted],
        build_gangs([wanted], {}, {}, gpu_type_label=CUSTOM),
        [],
        scheduler_names=("kai-ray",),
        assumed={},
        placeholders={},
        gpu_type_label=CUSTOM,
    )
    assert [n.gpu_type for n in w.snapshot.nodes] == ["h100", "default"]
    (job,) = w.snapshot.jobs
    assert (job.gpu_types, job.mixed_gpu_types) == (("h100",), False)


def test_the_operators_source_reads_types_by_its_label() -> None:
    watches = Watches(cast(Kube, None))
    source = KubeSource(watches, DEFAULT_SCHEDULER_NAMES, "default-queue", gpu_type_label=CUSTOM)
    for q in default_queues():
        watches.queues[0].items[("", q["metadata"]["name"])] = q
    for name, gpu in (("n0", "h100"), ("n1", "a100")):
        watches.nodes.items[("", name)] = node(name, labels={CUSTOM: gpu, PRODUCT: "NVIDIA"})
    wanted = pod("p")
    wanted["spec"]["affinity"] = on("a100", "h100", key=CUSTOM)
    watches.pods.items[("ns", "p")] = wanted
    for informer in (watches.nodes, watches.pods, *watches.queues):
        assert informer.on_relist is not None
        informer.on_relist()
    snapshot = source.observe(0.0)
    assert {n.name: n.gpu_type for n in snapshot.nodes} == {"n0": "h100", "n1": "a100"}
    assert [j.gpu_types for j in snapshot.jobs] == [("a100", "h100")]
    same_world(snapshot, source.rebuild().snapshot)  # the reference reads the same label


def test_the_operator_option() -> None:
    default = operator_options(build_parser().parse_args(["operator"]))
    assert default.gpu_type_label == PRODUCT
    told = operator_options(build_parser().parse_args(["operator", "--gpu-type-label", CUSTOM]))
    assert told.gpu_type_label == CUSTOM
