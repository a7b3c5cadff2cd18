"""The decorator's options, without a cluster: Ray's resource names per worker, and
mistakes caught where they are written."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

import kai_ray
from kai_ray.api.workloads import make_spec
from kai_ray.control import SubmitError, Workload, WorkloadSpec
from kai_ray.control.snapshot import job_info
from kai_ray.control.validate import validate_spec
from kai_ray.core import QueueInfo
from kai_ray.ray.translate import node_info


@pytest.mark.parametrize(
    ("options", "resources"),
    [
        ({}, {"CPU": 1}),  # a worker takes one CPU when nothing is said, as a Ray task does
        ({"num_gpus": 1}, {"CPU": 1, "GPU": 1}),
        ({"num_gpus": 0.5, "num_cpus": 2, "memory": "4Gi"}, {"CPU": 2, "GPU": 0.5, "memory": "4Gi"}),
        ({"num_cpus": 0, "resources": {"fpga": 1}}, {"CPU": 0, "fpga": 1}),
        ({"resources_per_worker": {"GPU": 1}}, {"GPU": 1}),
        ({"resources_per_worker": {"GPU": 1}, "resources": {"fpga": 2}}, {"GPU": 1, "fpga": 2}),
    ],
)
def test_a_workers_resources_in_rays_names(options: dict[str, Any], resources: dict[str, Any]) -> None:
    assert make_spec("a", **options).resources_per_worker == resources


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_gpu": 1}, "unknown option 'num_gpu'; the options are"),
        ({"num_gpus": 1, "resources_per_worker": {"GPU": 2}}, "GPU is given twice"),
        ({"resources": {"GPU": 1}}, "use num_gpus= for GPU, as in Ray"),
    ],
)
def test_mistakes_are_caught_at_the_decorator(options: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        kai_ray.workload(queue="a", **options)(print)


def test_options_are_checked_too() -> None:
    fn = kai_ray.workload(queue="a", num_gpus=1)(print)
    with pytest.raises(TypeError, match="unknown option 'gpus'"):
        fn.options(gpus=2)
    assert fn.options(num_gpus=2)._spec_kwargs["num_gpus"] == 2


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"working_dir": "/no/such/dir"}, "working_dir '/no/such/dir': no such directory here"),
        ({"env_vars": {"A": 1}}, "runtime_env['env_vars'] must be of type Dict[str, str]"),
        ({"pip": 3}, "runtime_env['pip'] must be of type str or List[str]"),
        ({"py_modules": ["/no/such/module"]}, "/no/such/module is not a valid path"),
    ],
)
def test_a_jobs_runtime_env_is_checked_where_it_is_submitted(env: dict[str, Any], message: str) -> None:
    from kai_ray.ray.jobs import upload_runtime_env

    with pytest.raises(ValueError, match=re.escape(message)):
        upload_runtime_env(env)


def test_a_tune_trial_with_bundles_of_different_sizes_is_refused_with_the_fix() -> None:
    from ray.air.execution.resources.request import ResourceRequest

    from kai_ray.api.tune import QueuedTrials

    trials = QueuedTrials(scheduler=None, queue="a")  # type: ignore[arg-type]
    same = trials._spec(ResourceRequest([{"GPU": 1, "CPU": 2}] * 3, strategy="SPREAD"))
    assert (same.workers, same.resources_per_worker, same.strategy) == (3, {"GPU": 1, "CPU": 2}, "SPREAD")
    assert same.kind == "block" and same.on_preempt == "fail"  # Tune pauses, kai-ray never re-runs
    with pytest.raises(ValueError, match=r"bundles of different sizes .* give every bundle the same"):
        trials._spec(ResourceRequest([{"CPU": 1}, {"GPU": 1, "CPU": 1}]))


def _gpu_types(spec: WorkloadSpec) -> tuple[tuple[str, ...], bool]:
    info = job_info(Workload(id="w", spec=spec, created_at=0.0), "ray.io/node-id")
    return info.gpu_types, info.mixed_gpu_types


@pytest.mark.parametrize(
    ("options", "types", "mixed"),
    [
        ({}, (), False),  # any type
        ({"accelerator_type": "A100"}, ("A100",), False),
        ({"accelerator_type": ["H100", "A100"]}, ("H100", "A100"), False),  # in order of preference
        ({"accelerator_type": ("L4", "A10G"), "mixed_accelerator_types": True}, ("L4", "A10G"), True),
        # Ray's own way, by hand: the type is read from the resource.
        ({"resources_per_worker": {"GPU": 1, "accelerator_type:A100": 0.001}}, ("A100",), False),
        ({"num_gpus": 1, "resources": {"accelerator_type:L4": 0.001}}, ("L4",), False),
        (
            {"accelerator_type": ["H100", "A100"], "resources": {"accelerator_type:A100": 0.001}},
            ("H100", "A100"),
            False,
        ),
    ],
)
def test_accelerator_types_become_the_jobs_gpu_types(
    options: dict[str, Any], types: tuple[str, ...], mixed: bool
) -> None:
    spec = make_spec("a", **options)
    assert _gpu_types(spec) == (types, mixed)
    # As the scheduler gets it: a dict over a Ray call, JSON in the GCS.
    sent = WorkloadSpec(**json.loads(json.dumps(dataclasses.asdict(spec))))
    assert sent == spec and _gpu_types(sent) == (types, mixed)


def test_a_spec_stored_before_accelerator_types_loads_as_any_type() -> None:
    stored = Workload(id="w", spec=make_spec("a"), created_at=0.0).to_json()
    del stored["spec"]["accelerator_type"], stored["spec"]["mixed_accelerator_types"]
    loaded = Workload.from_json(json.loads(json.dumps(stored)))
    assert (loaded.spec.accelerator_type, loaded.spec.mixed_accelerator_types) == ([], False)
    assert _gpu_types(loaded.spec) == ((), False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"accelerator_type": ""}, "accelerator_type='': '' is not a type name; give a type such as 'A100'"),
        ({"accelerator_type": 100}, "accelerator_type=100: give a type such as 'A100', or a list of them"),
        ({"accelerator_type": ["A100", 7]}, "7 is not a type name; give a type such as 'A100'"),
        ({"accelerator_type": ["A100", "H100", "A100"]}, "'A100' is given twice; name each type once"),
        ({"mixed_accelerator_types": "yes"}, "mixed_accelerator_types='yes': give True or False"),
        (
            {"resources": {"accelerator_type:A100": 0.001, "accelerator_type:L4": 0.001}},
            r"names 2 accelerator types \(A100, L4\) but a node has one; for any of them use "
            r"accelerator_type=\['A100', 'L4'\]",
        ),
        (
            {"accelerator_type": "H100", "resources": {"accelerator_type:A100": 0.001}},
            "asks for accelerator_type:A100 but accelerator_type=\\['H100'\\]; give the type once",
        ),
    ],
)
def test_bad_accelerator_types_are_refused_with_the_fix(options: dict[str, Any], message: str) -> None:
    with pytest.raises(SubmitError, match=message):
        kai_ray.workload(queue="a", **options)(print)


def test_a_type_asked_for_rays_way_fits_nodes_of_that_type() -> None:
    # Ray's nodes offer no accelerator_type resource to the core: the request must not
    # ask for one, or no node could ever hold the worker.
    raw = {"NodeID": "n1", "Resources": {"CPU": 4, "GPU": 2, "accelerator_type:A100": 1}, "Labels": {}}
    spec = make_spec("a", resources_per_worker={"GPU": 1, "accelerator_type:A100": 0.001})
    validate_spec(spec, [QueueInfo("a")], [node_info(raw)], "ray.io/node-id")
    assert node_info(raw).gpu_type == "A100" and _gpu_types(spec) == (("A100",), False)


def test_the_cli_takes_accelerator_types_repeated_or_comma_separated(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kai_ray.api import jobcommands
    from kai_ray.cli import build_parser

    sent: list[WorkloadSpec] = []

    class Sched:
        def submit(self, spec: WorkloadSpec, wid: str | None = None) -> str:
            sent.append(spec)
            return "j1"

        def info(self, wid: str) -> dict[str, Any]:
            return {"id": wid, "state": "Queued"}

    monkeypatch.setattr(jobcommands, "running_scheduler", lambda address: Sched())
    argv = ["job", "submit", "--queue", "a", "--gpus", "1", "--accelerator-type", "H100, A100"]
    args = build_parser().parse_args(
        [*argv, "--accelerator-type", "L4", "--mixed-accelerator-types", "--", "true"]
    )
    assert args.func(args) == 0
    assert sent[0].accelerator_type == ["H100", "A100", "L4"] and sent[0].mixed_accelerator_types
    bad = build_parser().parse_args([*argv[:-1], "A100,,L4", "--", "true"])
    assert bad.func(bad) != 0 and len(sent) == 1
    assert "--accelerator-type 'A100,,L4': an empty type" in capsys.readouterr().err
