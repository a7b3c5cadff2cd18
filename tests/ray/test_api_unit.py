"""The decorator's options, without a cluster: Ray's resource names per worker, and
mistakes caught where they are written."""

from __future__ import annotations

import re
from typing import Any

import pytest

import kai_ray
from kai_ray.api.workloads import make_spec


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
