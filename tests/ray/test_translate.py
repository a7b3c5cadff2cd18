"""Ray's side of translation, without a cluster: nodes in, bundles out, job errors
classified, node ids shortened for people."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.control import BackendError
from kai_ray.control.snapshot import request_for
from kai_ray.ray.gpus import summarize
from kai_ray.ray.jobs import job_error
from kai_ray.ray.translate import bundle_for, node_info, short_node_ids


def ray_node(name: str, gpus: int = 4, cpu: int = 8, **labels: str) -> dict[str, Any]:
    return {
        "NodeID": name,
        "Alive": True,
        "Labels": labels,
        "Resources": {"CPU": cpu, "GPU": gpus, "memory": 64 * 2**30, f"node:{name}": 1},
    }


def test_translation_of_ray_nodes_and_bundles() -> None:
    raw = ray_node("n9", gpus=8, rack="r1")
    raw["Resources"].update({"CPU_group_abc": 1, "bundle_group_abc": 1000, "fpga": 2})
    devices = [{"model": "H100", "memory": 80 * 2**30}, {"model": "H100", "memory": 40 * 2**30}]
    node = node_info(raw, summarize(devices), {"GPU": 1.5, "CPU": 2})
    assert (node.gpus, node.cpu, node.gpu_model, node.gpu_memory) == (8, 8, "H100", 40 * 2**30)
    assert node.extended == (("fpga", 2.0),)  # Ray's bookkeeping resources dropped
    assert node.labels["rack"] == "r1" and node.labels["ray.io/node-id"] == "n9"
    assert dict(node.used_outside) == {"gpu": 2.0, "cpu": 2.0}  # a partly used device is not offered
    req = request_for({"GPU": 0.5, "CPU": 2, "fpga": 1})
    assert (req.gpu, req.cpu, req.extended) == (0.5, 2, (("fpga", 1.0),))
    assert bundle_for(req, node) == {"fpga": 1, "CPU": 2, "GPU": 0.5}
    by_memory = request_for({"gpu_memory": 10 * 2**30})
    # 10 GiB of the node's 40 GiB devices, of their usable 40,900 MiB (KAI's floor to
    # hundreds of MiB), rounded up to Ray's 4 decimals.
    assert bundle_for(by_memory, node) == {"GPU": 0.2504}
    assert summarize([]) is None


AGENT_DOWN = RuntimeError(
    "Request failed with status code 500: No available agent to submit job, please try again later.."
)


@pytest.mark.parametrize(
    ("error", "permanent", "says"),
    [
        (AGENT_DOWN, False, "Ray could not take the job now"),
        (RuntimeError("Request failed with status code 400: bad entrypoint."), True, "refused the job"),
        (TypeError("env_vars must be strings"), True, "runtime environment"),
        (ConnectionError("connection refused"), False, "could not take the job now"),
    ],
)
def test_ray_job_errors_are_classified(error: Exception, permanent: bool, says: str) -> None:
    failed = job_error(error)
    assert isinstance(failed, BackendError) and failed.permanent is permanent and says in str(failed)


def test_node_ids_read_as_twelve_digits() -> None:
    nid = "3a3afee48400" + "0" * 44
    view = {"reason": f"placed on node {nid}; waiting", "history": [[1.0, "", "Queued", f"node {nid} left"]]}
    assert short_node_ids(view) == {
        "reason": "placed on node 3a3afee48400; waiting",
        "history": [[1.0, "", "Queued", "node 3a3afee48400 left"]],
    }


@pytest.mark.parametrize(
    ("resources", "labels", "expected"),
    [
        pytest.param({"accelerator_type:A100": 1}, {}, "A100", id="from-the-resource"),
        pytest.param({}, {"ray.io/accelerator-type": "H100"}, "H100", id="from-the-label"),
        pytest.param(
            {"accelerator_type:A100": 1}, {"ray.io/accelerator-type": "H100"}, "H100", id="label-wins"
        ),
        pytest.param({}, {}, "default", id="none"),
        pytest.param({"accelerator_type:A100": 0}, {}, "default", id="resource-of-zero"),
    ],
)
def test_a_ray_nodes_gpu_type(resources: dict[str, float], labels: dict[str, str], expected: str) -> None:
    raw = ray_node("n1", **labels)
    raw["Resources"].update(resources)
    node = node_info(raw)
    assert node.gpu_type == expected
    assert all(not k.startswith("accelerator_type:") for k, _ in node.extended)  # a type, not a resource


def test_an_accelerator_type_asked_for_rays_way_is_no_resource_of_the_bundle() -> None:
    raw = ray_node("n1")
    raw["Resources"]["accelerator_type:A100"] = 1
    req = request_for({"GPU": 1, "accelerator_type:A100": 0.001, "fpga": 1})
    assert req.extended == (("fpga", 1.0),)  # the node offers no such resource to the core
    assert bundle_for(req, node_info(raw)) == {"fpga": 1, "GPU": 1}  # the bundle is pinned instead
