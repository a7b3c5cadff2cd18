"""Tenants on Kubernetes, without a server (docs/tenants.md): a gang's tenant is its
namespace, with the namespace's labels; a namespace's label names the default queue of
its work; Queue objects read with the cluster's PriorityClasses; and each ruled queue's
rule resolved for its status, which the admission policy reads."""

from __future__ import annotations

from kai_ray.core import QueueAccess, QueueInfo, TenantSelector
from kai_ray.k8s.queues import access_status, read_queues
from kai_ray.k8s.world import gang_job

from .test_gangs import only, pod, run
from .test_queues import queue

NAMESPACES = {"ml": {"team": "a", "kai.scheduler/queue": "ml-queue"}, "other": {}}


def test_a_gangs_tenant_is_its_namespace_with_its_labels() -> None:
    gang = only(run([pod("p")], namespaces=NAMESPACES))
    job = gang_job(gang, {}, {}, tolerating=False)
    assert (job.tenant, dict(job.tenant_labels)) == ("ml", NAMESPACES["ml"])


def test_a_namespaces_label_names_the_queue_of_work_that_names_none() -> None:
    assert only(run([pod("p")], namespaces=NAMESPACES)).queue == "ml-queue"
    named = pod("q").labels({"kai.scheduler/queue": "mine"})
    assert only(run([named], namespaces=NAMESPACES)).queue == "mine"  # the pod's own label wins
    assert only(run([pod("r", "other")], namespaces=NAMESPACES)).queue == "default-queue"


def test_queue_objects_may_name_the_clusters_priority_classes() -> None:
    rule = {"access": {"maxPriority": "research"}}
    unknown = read_queues([queue("q", **rule)])
    assert "priority class 'research' does not exist" in unknown.problems["q"]
    known = read_queues([queue("q", **rule)], {"research": 60})
    assert [q.access for q in known.queues] == [QueueAccess(max_priority=60, max_priority_class="research")]


def test_each_ruled_queue_is_resolved_for_its_status() -> None:
    queues = [
        QueueInfo("open"),
        QueueInfo("dept", access=QueueAccess(tenant_selector=TenantSelector((("team", "a"),)))),
        QueueInfo("dept-ml", parent="dept", access=QueueAccess(max_priority=100)),
    ]
    labels = {"ml": {"team": "a"}, "web": {"team": "b"}, "ops": {}}
    said = access_status(queues, False, labels, labels, {"urgent": 200})
    assert said == {
        "dept": {"tenants": ["ml"]},
        "dept-ml": {
            "tenants": ["ml"],
            "priorityClasses": ["build", "build-preemptible", "train"],
            "maxPriority": 100,
        },
    }
    closed = access_status(queues, True, labels, labels, {})
    assert closed["open"] == {"tenants": []}  # closed: a queue whose path names none admits none
