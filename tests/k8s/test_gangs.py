"""Kubernetes pods and owners -> gangs: KAI's podgrouper rules for Ray, table by table."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Self

import pytest

from kai_ray.core.model.snapshot import Request, TopologyConstraint
from kai_ray.k8s.gangs import Gang, build_gangs, pod_finished, pod_request, scheduled_by_us

MI, GI = 2**20, 2**30
T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
BATCH_MIN = "kai.scheduler/batch-min-member"
API = {"RayCluster": "ray.io/v1", "RayJob": "ray.io/v1", "RayService": "ray.io/v1", "Job": "batch/v1"}


def resources(values: dict[str, Any]) -> dict[str, Any]:
    return {"nvidia.com/gpu" if k == "gpu" else k: v for k, v in values.items()}


class Builder:
    """What pods and owners share: metadata, owner references, spec fields."""

    def __init__(self, name: str, namespace: str = "ml", kind: str = "Pod") -> None:
        meta = {"name": name, "namespace": namespace, "labels": {}, "annotations": {}}
        self.kind, self.obj = kind, {"metadata": meta, "spec": {}}
        self.at(0)

    def labels(self, values: dict[str, str]) -> Self:
        self.obj["metadata"]["labels"].update(values)
        return self

    def annotations(self, values: dict[str, str]) -> Self:
        self.obj["metadata"]["annotations"].update(values)
        return self

    def owned_by(self, kind: str, name: str, *, controller: bool = True, api: str = "") -> Self:
        ref = {"apiVersion": api or API.get(kind, "apps/v1"), "kind": kind, "name": name}
        ref |= {"controller": True} if controller else {}
        self.obj["metadata"].setdefault("ownerReferences", []).append(ref)
        return self

    def at(self, seconds: float) -> Self:
        moment = T0 + timedelta(seconds=seconds)
        self.obj["metadata"]["creationTimestamp"] = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        return self

    def spec(self, **fields: Any) -> Self:
        self.obj["spec"].update(fields)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)


class PodBuilder(Builder):
    def __init__(self, name: str, namespace: str = "ml") -> None:
        super().__init__(name, namespace)
        self.spec(schedulerName="kai-ray", containers=[{"name": "main", "resources": {}}])
        self.obj["status"] = {"phase": "Pending"}

    def head(self) -> Self:
        return self.labels({"ray.io/node-type": "head"}).labels({"ray.io/group": "headgroup"})

    def worker(self, group: str = "g") -> Self:
        return self.labels({"ray.io/node-type": "worker"}).labels({"ray.io/group": group})

    def requests(self, **values: Any) -> Self:
        self.obj["spec"]["containers"][0]["resources"]["requests"] = resources(values)
        return self

    def limits(self, **values: Any) -> Self:
        self.obj["spec"]["containers"][0]["resources"]["limits"] = resources(values)
        return self

    def container(self, name: str, *, init: bool = False, sidecar: bool = False, **requests: Any) -> Self:
        container = {"name": name, "resources": {"requests": resources(requests)}}
        container |= {"restartPolicy": "Always"} if sidecar else {}
        self.obj["spec"].setdefault("initContainers" if init else "containers", []).append(container)
        return self

    def phase(self, phase: str) -> Self:
        self.obj["status"]["phase"] = phase
        return self


class OwnerBuilder(Builder):
    def workers(
        self, group: str, replicas: int, *, min_replicas: int = 0, hosts: int = 0, **more: Any
    ) -> Self:
        spec = {"groupName": group, "replicas": replicas, **more}
        spec |= {"minReplicas": min_replicas} if min_replicas else {}
        spec |= {"numOfHosts": hosts} if hosts else {}
        self.obj["spec"].setdefault("workerGroupSpecs", []).append(spec)
        return self

    def cluster(self, cluster: OwnerBuilder) -> Self:
        return self.spec(rayClusterSpec=cluster.build()["spec"])

    def submitter_template(self, **requests: Any) -> Self:
        container = {"name": "submit", "resources": {"requests": resources(requests)}}
        return self.spec(submitterPodTemplate={"spec": {"containers": [container]}})

    def status(self, deployment: str) -> Self:
        self.obj["status"] = {"jobDeploymentStatus": deployment}
        return self


def pod(name: str, namespace: str = "ml") -> PodBuilder:
    return PodBuilder(name, namespace)


def rc_pod(name: str, cluster: str = "rc") -> PodBuilder:
    return pod(name).owned_by("RayCluster", cluster)


def raycluster(name: str = "rc") -> OwnerBuilder:
    return OwnerBuilder(name, kind="RayCluster")


def rayjob(name: str = "j") -> OwnerBuilder:
    return OwnerBuilder(name, kind="RayJob")


def rayservice(name: str) -> OwnerBuilder:
    return OwnerBuilder(name, kind="RayService")


def job(name: str) -> OwnerBuilder:
    return OwnerBuilder(name, kind="Job")


def run(
    pods: Sequence[Builder], owners: Sequence[OwnerBuilder] = (), classes: Any = None, **kw: Any
) -> list[Gang]:
    """build_gangs over built objects. The owners' objects carry no `kind`, as list items
    from the API server do not: the module must take it from the key."""
    keyed = {(o.kind, o.obj["metadata"]["namespace"], o.obj["metadata"]["name"]): o.build() for o in owners}
    return build_gangs([p.build() for p in pods], keyed, classes or {}, **kw)


def only(gangs: list[Gang]) -> Gang:
    assert len(gangs) == 1, [g.id for g in gangs]
    return gangs[0]


def names(gang: Gang) -> list[str]:
    return [p["metadata"]["name"] for p in gang.pods]


def cases(rows: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Table rows (name, *values) as pytest params named by their first item."""
    return [pytest.param(*row[1:], id=row[0]) for row in rows]


# A RayJob "j" whose RayCluster "rc" has one worker group of 1, and its submitter Job "j".
def job_owners(top: OwnerBuilder | None = None, cluster: OwnerBuilder | None = None) -> list[OwnerBuilder]:
    top = top or rayjob().cluster(raycluster("x").workers("g", 1))
    cluster = cluster or raycluster().owned_by("RayJob", "j").workers("g", 1)
    return [top, cluster, job("j").owned_by("RayJob", "j")]


def job_pods(*more: PodBuilder) -> list[PodBuilder]:
    return [rc_pod("h").head(), rc_pod("w").worker(), *more]


# ---------------------------------------------------------------- rule 1: top owner


def in_job(name: str, job_name: str = "t") -> PodBuilder:
    return pod(name).owned_by("Job", job_name)


def submitter(name: str = "s") -> PodBuilder:
    return in_job(name, "j")


OTHER_SCHEDULER = {"schedulerName": "default-scheduler"}
NOT_CONTROLLER = {"controller": False}
RC_LABEL = pod("h").labels({"ray.io/cluster": "rc"})
# (name, pods, owners, the gangs as "id: pod names in order; ...")
GROUPING = [
    ("plain pod: a gang of one", [pod("p")], [], "ml/Pod/p: p"),
    ("pod of a ReplicaSet: a gang of one", [pod("p").owned_by("ReplicaSet", "rs")], [], "ml/Pod/p: p"),
    ("RayCluster", [rc_pod("w").worker(), rc_pod("h").head()], [raycluster()], "ml/RayCluster/rc: h w"),
    ("RayCluster not in the owners", [rc_pod("h")], [], "ml/RayCluster/rc: h"),
    ("ray.io/cluster label, no owner", [RC_LABEL], [], "ml/RayCluster/rc: h"),
    ("ray.io/cluster label, up to the RayJob", [RC_LABEL], job_owners(), "ml/RayJob/j: h"),
    ("RayJob: cluster and submitter", job_pods(submitter()), job_owners(), "ml/RayJob/j: h w s"),
    *[
        (
            f"RayJob submitter by label {key}",
            job_pods(pod("s").labels({key: "j"})),
            job_owners(),
            "ml/RayJob/j: h w s",
        )
        for key in ("batch.kubernetes.io/job-name", "job-name")
    ],
    ("batch Job", [in_job("a"), in_job("b")], [job("t")], "ml/Job/t: a b"),
    ("Job not in the owners", [in_job("a")], [], "ml/Job/t: a"),
    ("Job of a RayJob not in the owners", [submitter()], [job("j").owned_by("RayJob", "j")], "ml/Job/j: s"),
    (
        "RayService: each cluster a gang",
        [rc_pod("a", "svc-a"), rc_pod("b", "svc-b")],
        [rayservice("svc"), *[raycluster(f"svc-{x}").owned_by("RayService", "svc") for x in "ab"]],
        "ml/RayService/svc/svc-a: a; ml/RayService/svc/svc-b: b",
    ),
    (
        "the controller reference wins over the first",
        [pod("p").owned_by("Job", "t", **NOT_CONTROLLER).owned_by("RayCluster", "rc")],
        [raycluster(), job("t")],
        "ml/RayCluster/rc: p",
    ),
    (
        "the first reference when none is the controller",
        [pod("p").owned_by("Job", "t", **NOT_CONTROLLER).owned_by("RayCluster", "rc", **NOT_CONTROLLER)],
        [raycluster(), job("t")],
        "ml/Job/t: p",
    ),
    ("a Job of another API group", [pod("p").owned_by("Job", "t", api="x.io/v1")], [job("t")], "ml/Pod/p: p"),
    (
        "other schedulers' pods and finished pods are left out",
        [
            rc_pod("h").head().spec(schedulerName="kai-scheduler"),
            *[rc_pod(f"w{i}").phase(phase) for i, phase in enumerate(("Succeeded", "Failed", "Running"))],
            rc_pod("w9").spec(**OTHER_SCHEDULER),
            pod("alone").spec(**OTHER_SCHEDULER),
        ],
        [raycluster()],
        "ml/RayCluster/rc: h w2",
    ),
    ("one name in two namespaces", [pod("p", "a"), pod("p", "b")], [], "a/Pod/p: p; b/Pod/p: p"),
]


@pytest.mark.parametrize(("pods", "owners", "expected"), cases(GROUPING))
def test_pods_group_by_their_top_owner(
    pods: list[Builder], owners: list[OwnerBuilder], expected: str
) -> None:
    gangs = sorted(run(pods, owners), key=lambda g: g.id)
    assert "; ".join(f"{g.id}: {' '.join(names(g))}" for g in gangs) == expected


def test_gang_names_its_top_owner() -> None:
    gang = only(run(job_pods(submitter()), job_owners()))
    assert (gang.namespace, gang.kind, gang.name) == ("ml", "RayJob", "j")


# ---------------------------------------------------------------- rule 2: min_member

CLUSTERS = [
    ("min replicas x hosts", raycluster().workers("g", 3, min_replicas=2, hosts=2), 1 + 4),
    ("min replicas 0: replicas", raycluster().workers("g", 3, min_replicas=0), 1 + 3),
    ("min replicas unset: replicas x hosts", raycluster().workers("g", 3, hosts=2), 1 + 6),
    ("two groups", raycluster().workers("a", 2, hosts=2).workers("b", 1), 1 + 4 + 1),
    ("a suspended group counts none", raycluster().workers("a", 2).workers("b", 3, suspend=True), 1 + 2),
    ("head only", raycluster(), 1),
]


@pytest.mark.parametrize(("cluster", "expected"), cases(CLUSTERS))
def test_raycluster_min_member(cluster: OwnerBuilder, expected: int) -> None:
    assert only(run([rc_pod("h").head()], [cluster])).min_member == expected


def rayjob_mode(mode: str) -> list[OwnerBuilder]:
    return job_owners(rayjob().cluster(raycluster("x").workers("g", 1)).spec(submissionMode=mode))


WORKERS = [rc_pod(f"w{i}").worker() for i in range(3)]
MIN_MEMBER = [
    ("surplus workers do not count", [rc_pod("h").head(), *WORKERS], [raycluster().workers("g", 1)], 2),
    ("RayCluster unknown: every pod present", [rc_pod("h").head(), *WORKERS], [], 4),
    ("RayJob, K8sJobMode by default: cluster + submitter", job_pods(submitter()), job_owners(), 2 + 1),
    *[
        (f"RayJob {mode}: the cluster only", job_pods(), rayjob_mode(mode), 2)
        for mode in ("HTTPMode", "SidecarMode")
    ],
    ("RayJob without rayClusterSpec: its RayCluster's", job_pods(submitter()), job_owners(rayjob()), 2 + 1),
    (
        "RayJob: rayClusterSpec first",
        job_pods(),
        job_owners(rayjob().cluster(raycluster().workers("g", 3))),
        4 + 1,
    ),
    (
        "RayJob on an existing cluster: its submitter only",
        [submitter()],
        job_owners(rayjob().spec(clusterSelector={"ray.io/cluster": "shared"})),
        1,
    ),
    (
        "RayService: its RayCluster's spec",
        [rc_pod("h").head()],
        [rayservice("svc"), raycluster().owned_by("RayService", "svc").workers("g", 2, hosts=2)],
        5,
    ),
    ("Job, parallelism unset: 1", [in_job("a"), in_job("b")], [job("t")], 1),
    *[
        (
            f"Job, parallelism {n}, {count} pods",
            [in_job(f"p{i}") for i in range(count)],
            [job("t").spec(parallelism=n)],
            m,
        )
        for n, count, m in ((3, 2, 2), (2, 4, 2), (0, 2, 1))
    ],
    (
        "Job with KAI's batch-min-member: that many, present or not",
        [in_job("a"), in_job("b")],
        [job("t").spec(parallelism=4).annotations({BATCH_MIN: "4"})],
        4,
    ),
    ("plain pod", [pod("p")], [], 1),
    (
        "batch-min-member on a plain pod: not read (KAI reads it on a Job)",
        [pod("p").annotations({BATCH_MIN: "3"})],
        [],
        1,
    ),
]


@pytest.mark.parametrize(("pods", "owners", "expected"), cases(MIN_MEMBER))
def test_min_member(pods: list[Builder], owners: list[OwnerBuilder], expected: int) -> None:
    assert only(run(pods, owners)).min_member == expected


SUBGROUPS = [
    (
        "head and each worker group",
        [rc_pod("h").head()],
        [raycluster().workers("a", 2).workers("b", 1)],
        {"a": 2, "b": 1},
    ),
    (
        "min replicas x hosts",
        [rc_pod("h").head()],
        [raycluster().workers("g", 3, min_replicas=2, hosts=2)],
        {"g": 4},
    ),
    (
        "a suspended group has none",
        [rc_pod("h").head()],
        [raycluster().workers("a", 2).workers("b", 3, suspend=True)],
        {"a": 2},
    ),
    (
        "a group of no replicas has none",
        [rc_pod("h").head()],
        [raycluster().workers("a", 0).workers("b", 1)],
        {"b": 1},
    ),
    ("RayJob, K8sJobMode: its submitter too", job_pods(submitter()), job_owners(), {"g": 1, "submitter": 1}),
    ("RayJob, HTTPMode: its cluster only", job_pods(), rayjob_mode("HTTPMode"), {"g": 1}),
    (
        "RayService: its RayCluster's",
        [rc_pod("h").head()],
        [rayservice("svc"), raycluster().owned_by("RayService", "svc").workers("g", 2)],
        {"g": 2},
    ),
]


@pytest.mark.parametrize(("pods", "owners", "workers"), cases(SUBGROUPS))
def test_subgroup_minimums(pods: list[Builder], owners: list[OwnerBuilder], workers: dict[str, int]) -> None:
    """KAI's podgrouper: a head subgroup of 1, one per worker group of minReplicas (or
    replicas) x numOfHosts, a counted submitter; together the gang's minMember."""
    gang = only(run(pods, owners))
    assert gang.subgroup_min == {"head": 1, **workers}
    assert sum(gang.subgroup_min.values()) == gang.min_member


NO_SUBGROUPS = [
    ("RayCluster unknown", [rc_pod("h").head(), *WORKERS], []),
    (
        "RayJob on an existing cluster",
        [submitter()],
        job_owners(rayjob().spec(clusterSelector={"ray.io/cluster": "s"})),
    ),
    ("Job", [in_job("a"), in_job("b")], [job("t")]),
    ("plain pod", [pod("p")], []),
]


@pytest.mark.parametrize(("pods", "owners"), cases(NO_SUBGROUPS))
def test_no_subgroups_where_no_ray_cluster_spec_says_them(
    pods: list[Builder], owners: list[OwnerBuilder]
) -> None:
    assert only(run(pods, owners)).subgroup_min == {}


# ---------------------------------------------------------------- rule 3: the submitter

KUBERAY = Request(cpu=0.5, memory=200 * MI)
TEMPLATED = rayjob().cluster(raycluster("x").workers("g", 1)).submitter_template(cpu="2", memory="1Gi")
SUBMITTERS = [
    ("not created yet: KubeRay's default", job_pods(), job_owners(), KUBERAY, 3),
    ("not created yet, K8sJobMode said", job_pods(), rayjob_mode("K8sJobMode"), KUBERAY, 3),
    ("not created yet: its template's", job_pods(), job_owners(TEMPLATED), Request(cpu=2, memory=GI), 3),
    ("created: a pod of the gang", job_pods(submitter()), job_owners(), None, 3),
    ("HTTPMode has none", job_pods(), rayjob_mode("HTTPMode"), None, 2),
    ("one succeeded: the job is done", job_pods(submitter().phase("Succeeded")), job_owners(), None, 2),
    ("another scheduler places it", job_pods(submitter().spec(**OTHER_SCHEDULER)), job_owners(), None, 2),
    (
        "one failed: its retry's room stays held",
        job_pods(submitter().phase("Failed")),
        job_owners(),
        KUBERAY,
        3,
    ),
    ("the RayJob is complete", job_pods(), job_owners(job_owners()[0].status("Complete")), None, 2),
]


@pytest.mark.parametrize(("pods", "owners", "submitter", "min_member"), cases(SUBMITTERS))
def test_rayjob_submitter(
    pods: list[Builder], owners: list[OwnerBuilder], submitter: Request | None, min_member: int
) -> None:
    gang = only(run(pods, owners))
    assert (gang.submitter, gang.min_member, gang.problem) == (submitter, min_member, "")


def test_pods_ordered_head_workers_by_group_then_submitter() -> None:
    pods = [
        submitter(),
        rc_pod("b0").worker("b").at(1),
        rc_pod("a2").worker("a").at(1),
        rc_pod("h").head().at(9),
        rc_pod("a1").worker("a").at(1),
        rc_pod("a0").worker("a").at(5),
    ]
    gang = only(run(pods, job_owners()))
    assert names(gang) == ["h", "a1", "a2", "a0", "b0", "s"]
    assert gang.subgroups == {"head": ["h"], "a": ["a1", "a2", "a0"], "b": ["b0"], "submitter": ["s"]}


def test_plain_pods_have_no_subgroup() -> None:
    assert only(run([pod("p")])).subgroups == {}


# ---------------------------------------------------------------- rules 4-7: labels and annotations

QUEUE = "kai.scheduler/queue"
LABELLED = raycluster().owned_by("RayJob", "j").workers("g", 1)
QUEUES = [
    ("the top owner's", [rc_pod("h").labels({QUEUE: "pod"})], [raycluster().labels({QUEUE: "rc"})], "rc"),
    ("an intermediate RayCluster's", job_pods(), job_owners(cluster=LABELLED.labels({QUEUE: "q"})), "q"),
    (
        "the first pod's",
        [rc_pod("w").worker().labels({QUEUE: "w"}), rc_pod("h").head().labels({QUEUE: "h"})],
        [],
        "h",
    ),
    ("none: the default", [pod("p")], [], "default-queue"),
]


@pytest.mark.parametrize(("pods", "owners", "expected"), cases(QUEUES))
def test_queue(pods: list[Builder], owners: list[OwnerBuilder], expected: str) -> None:
    assert only(run(pods, owners)).queue == expected


def test_default_queue_is_the_callers() -> None:
    assert only(run([pod("p")], default_queue="research")).queue == "research"


RAY_CLASS, CLASS, SPEC = "ray.io/priority-class-name", "priorityClassName", "spec.priorityClassName"
# (name, the RayCluster's labels, the pod's labels (SPEC: its spec.priorityClassName), classes, expected)
PRIORITIES = [
    ("none: train", {}, {}, {}, ("train", 50, True)),
    ("the Ray label", {RAY_CLASS: "inference"}, {}, {}, ("inference", 125, False)),
    ("the Ray label first", {CLASS: "build", RAY_CLASS: "inference"}, {}, {}, ("inference", 125, False)),
    ("the owner's label first", {CLASS: "build"}, {CLASS: "train"}, {}, ("build", 100, False)),
    ("the pod's label", {}, {CLASS: "build"}, {}, ("build", 100, False)),
    ("the pod's label before its spec", {}, {CLASS: "build", SPEC: "inference"}, {}, ("build", 100, False)),
    ("the pod's spec", {}, {SPEC: "inference"}, {}, ("inference", 125, False)),
    ("the cluster's class over the default", {}, {}, {"train": 40}, ("train", 40, True)),
    ("a class only the cluster has", {}, {CLASS: "vip"}, {"vip": 1000}, ("vip", 1000, False)),
]


def labelled(owner_labels: dict[str, str], pod_labels: dict[str, str]) -> tuple[PodBuilder, OwnerBuilder]:
    """A RayCluster and its pod, labelled; SPEC among the pod's labels goes to its spec."""
    labels = dict(pod_labels)
    spec_class = labels.pop(SPEC, None)
    pod_b = rc_pod("h").labels(labels)
    if spec_class is not None:
        pod_b.spec(priorityClassName=spec_class)
    return pod_b, raycluster().labels(owner_labels)


@pytest.mark.parametrize(("owner", "pod_labels", "classes", "expected"), cases(PRIORITIES))
def test_priority(owner: dict[str, str], pod_labels: dict[str, str], classes: Any, expected: Any) -> None:
    pod_b, cluster = labelled(owner, pod_labels)
    gang = only(run([pod_b], [cluster], classes))
    assert (gang.priority_class, gang.priority, gang.preemptible, gang.problem) == (*expected, "")


def test_priority_from_an_intermediate_raycluster() -> None:
    owners = job_owners(cluster=raycluster().owned_by("RayJob", "j").labels({RAY_CLASS: "build"}))
    assert only(run(job_pods(), owners)).priority == 100


PREEMPT = "kai.scheduler/preemptibility"
# (name, the RayCluster's labels, the pod's labels, expected)
PREEMPTIBLE = [
    ("preemptible beats class build", {RAY_CLASS: "build", PREEMPT: "preemptible"}, {}, True),
    ("non-preemptible beats class train", {PREEMPT: "non-preemptible"}, {}, False),
    ("the pod's label", {}, {PREEMPT: "non-preemptible"}, False),
    ("the owner's first", {PREEMPT: "preemptible"}, {PREEMPT: "non-preemptible"}, True),
    ("unset: 75 is preemptible", {RAY_CLASS: "build-preemptible"}, {}, True),
    ("unset: 100 is not", {RAY_CLASS: "build"}, {}, False),
]


@pytest.mark.parametrize(("owner", "pod_labels", "expected"), cases(PREEMPTIBLE))
def test_preemptible(owner: dict[str, str], pod_labels: dict[str, str], expected: bool) -> None:
    pod_b, cluster = labelled(owner, pod_labels)
    gang = only(run([pod_b], [cluster]))
    assert (gang.preemptible, gang.problem) == (expected, "")


TOPO = "kai.scheduler/topology"
REQUIRED, PREFERRED = f"{TOPO}-required-placement", f"{TOPO}-preferred-placement"
# (name, the RayCluster's annotations, the pod's annotations, expected)
TOPOLOGIES = [
    ("none", {}, {}, None),
    ("a name only", {TOPO: "dc"}, {}, TopologyConstraint("dc")),
    (
        "both levels",
        {TOPO: "dc", REQUIRED: "row", PREFERRED: "rack"},
        {},
        TopologyConstraint("dc", "row", "rack"),
    ),
    ("the owner's first", {TOPO: "dc"}, {TOPO: "pod-dc", REQUIRED: "rack"}, TopologyConstraint("dc", "rack")),
    ("the pod's", {}, {TOPO: "dc", PREFERRED: "rack"}, TopologyConstraint("dc", None, "rack")),
]


@pytest.mark.parametrize(("owner", "pod_annotations", "expected"), cases(TOPOLOGIES))
def test_topology(owner: dict[str, str], pod_annotations: dict[str, str], expected: Any) -> None:
    gang = only(run([rc_pod("h").annotations(pod_annotations)], [raycluster().annotations(owner)]))
    assert (gang.topology, gang.problem) == (expected, "")


# ---------------------------------------------------------------- problems

PROBLEMS = [
    (
        "unknown class in the Ray label",
        [rc_pod("h")],
        [raycluster().labels({RAY_CLASS: "trian"})],
        "RayCluster ml/rc (label ray.io/priority-class-name on RayCluster ml/rc): priority class "
        "'trian' does not exist; did you mean 'train'? use one of build, build-preemptible, inference, "
        "train, or create the PriorityClass",
    ),
    (
        "unknown class in a pod's spec",
        [pod("p").spec(priorityClassName="gold")],
        [],
        "Pod ml/p (spec.priorityClassName of Pod ml/p): priority class 'gold' does not exist; use one "
        "of build, build-preemptible, inference, train, or create the PriorityClass",
    ),
    (
        "bad preemptibility",
        [rc_pod("h")],
        [raycluster().labels({PREEMPT: "yes"})],
        "RayCluster ml/rc: label kai.scheduler/preemptibility on RayCluster ml/rc is 'yes': "
        "use 'preemptible' or 'non-preemptible'",
    ),
    (
        "a placement without a topology",
        [pod("p").annotations({REQUIRED: "rack"})],
        [],
        "Pod ml/p: annotation kai.scheduler/topology-required-placement on Pod ml/p names a level but no "
        "annotation kai.scheduler/topology names the topology",
    ),
    (
        "bad gpu-fraction on one worker",
        [rc_pod("h").head(), rc_pod("w").annotations({"gpu-fraction": "1.5"})],
        [raycluster()],
        "RayCluster ml/rc: pod ml/w: annotation gpu-fraction is '1.5': it must be a number between 0 and 1",
    ),
    (
        "bad batch-min-member",
        [in_job("a")],
        [job("t").annotations({BATCH_MIN: "all"})],
        "Job ml/t: annotation kai.scheduler/batch-min-member on Job ml/t is 'all': use a whole number",
    ),
    (
        "bad submitter template",
        job_pods(),
        job_owners(rayjob().cluster(raycluster("x")).submitter_template(cpu="lots")),
        "RayJob ml/j spec.submitterPodTemplate: container 'submit': cpu: 'lots' is not a quantity",
    ),
]


@pytest.mark.parametrize(("pods", "owners", "words"), cases(PROBLEMS))
def test_problem_names_the_object_and_the_field(
    pods: list[Builder], owners: list[OwnerBuilder], words: str
) -> None:
    gangs = {g.namespace: g for g in run([*pods, pod("fine", "other")], owners)}
    assert words in gangs["ml"].problem
    assert gangs["other"].problem == ""  # one gang's problem is its own


def test_unknown_class_has_priority_zero() -> None:
    gang = only(run([pod("p").labels({CLASS: "gold"})]))
    assert (gang.priority_class, gang.priority) == ("gold", 0)


# ---------------------------------------------------------------- rules 9-10: selector and time


def test_node_selector_is_what_every_pod_shares() -> None:
    pods = [
        rc_pod("h").head().spec(nodeSelector={"zone": "a", "pool": "cpu"}),
        rc_pod("w").worker().spec(nodeSelector={"zone": "a", "pool": "gpu", "gpu": "h100"}),
    ]
    assert only(run(pods, [raycluster()])).node_selector == {"zone": "a"}
    assert only(run([pod("p").spec(nodeSelector={"zone": "b"})])).node_selector == {"zone": "b"}


def test_created_at_and_gang_order() -> None:
    pods = [rc_pod("h").at(100), pod("late").at(50), pod("x").owned_by("Job", "gone").at(30)]
    gangs = run([*pods, pod("y").owned_by("Job", "gone").at(20)], [raycluster().at(10)])
    assert [(g.id, g.created_at - T0.timestamp()) for g in gangs] == [
        ("ml/RayCluster/rc", 10.0),  # the owner's time, not its pods'
        ("ml/Job/gone", 20.0),  # owner unknown: its oldest pod's
        ("ml/Pod/late", 50.0),
    ]


# ---------------------------------------------------------------- rule 8: requests


def shared(**annotations: str) -> PodBuilder:
    """A pod with GPU-sharing annotations (gpu_fraction= stands for gpu-fraction)."""
    return pod("p").annotations({key.replace("_", "-"): value for key, value in annotations.items()})


INIT, SIDECAR = {"init": True}, {"init": True, "sidecar": True}
REQUESTS = [
    ("nothing", pod("p"), Request()),
    ("cpu and memory", pod("p").requests(cpu="500m", memory="16Gi"), Request(cpu=0.5, memory=16 * GI)),
    ("containers add up", pod("p").requests(cpu="1").container("c", cpu="250m"), Request(cpu=1.25)),
    ("a limit without a request counts", pod("p").limits(cpu="2", memory="1Gi"), Request(cpu=2, memory=GI)),
    ("a request before its limit", pod("p").requests(cpu="1").limits(cpu="4"), Request(cpu=1)),
    ("a bigger init container", pod("p").requests(cpu="1").container("i", **INIT, cpu="4"), Request(cpu=4)),
    (
        "init: per resource",
        pod("p").requests(cpu="1").container("i", **INIT, memory="1"),
        Request(cpu=1, memory=1),
    ),
    (
        "a sidecar adds to the app and to the init containers after it",
        pod("p").requests(cpu="2").container("m", **SIDECAR, cpu="1").container("i", **INIT, cpu="2.5"),
        Request(cpu=3.5),
    ),
    ("overhead", pod("p").requests(cpu="1").spec(overhead={"cpu": "250m"}), Request(cpu=1.25)),
    ("whole gpus", pod("p").requests(gpu=2), Request(gpu=2)),
    (
        "extended resources sorted; disk and huge pages ignored",
        pod("p").requests(**{"x.io/b": 2, "amd.com/gpu": 1, "ephemeral-storage": "1", "hugepages-2Mi": "1"}),
        Request(extended=(("amd.com/gpu", 1), ("x.io/b", 2))),
    ),
    ("gpu-fraction", shared(gpu_fraction="0.5"), Request(gpu=0.5)),
    ("on one device", shared(gpu_fraction="0.25", gpu_fraction_num_devices="1"), Request(gpu=0.25)),
    ("gpu-memory", shared(gpu_memory="20000"), Request(gpu_memory=20000 * MI)),
]


@pytest.mark.parametrize(("pod_b", "expected"), cases(REQUESTS))
def test_pod_request(pod_b: PodBuilder, expected: Request) -> None:
    assert pod_request(pod_b.build()) == expected


BETWEEN = "it must be a number between 0 and 1"
BAD_REQUESTS = [
    ("fraction 1", shared(gpu_fraction="1"), f"annotation gpu-fraction is '1': {BETWEEN}"),
    ("fraction 0", shared(gpu_fraction="0"), f"annotation gpu-fraction is '0': {BETWEEN}"),
    ("fraction not a number", shared(gpu_fraction="half"), f"annotation gpu-fraction is 'half': {BETWEEN}"),
    ("both", shared(gpu_fraction="0.5", gpu_memory="9"), "gpu-fraction and gpu-memory are both"),
    (
        "several devices",
        shared(gpu_fraction="0.5", gpu_fraction_num_devices="2"),
        "annotation gpu-fraction-num-devices is '2': a fraction of several devices is not supported",
    ),
    ("share and whole", shared(gpu_fraction="0.5").requests(gpu=1), "requests nvidia.com/gpu and a GPU"),
    ("gpu-memory 0", shared(gpu_memory="0"), "annotation gpu-memory is '0': it must be a number of MiB"),
    ("not a quantity", pod("p").requests(cpu="lots"), "container 'main': cpu: 'lots' is not a quantity"),
    ("init: not a quantity", pod("p").container("i", **INIT, cpu="x"), "init container 'i': cpu: 'x' is not"),
]


@pytest.mark.parametrize(("pod_b", "words"), cases(BAD_REQUESTS))
def test_pod_request_refuses_naming_the_pod_and_the_field(pod_b: PodBuilder, words: str) -> None:
    with pytest.raises(ValueError, match=r"^pod ml/p: ") as caught:
        pod_request(pod_b.build())
    assert words in str(caught.value)


# ---------------------------------------------------------------- small predicates

PREDICATES = [
    ("ours, pending", pod("p"), True, False),
    ("the other name we answer to", pod("p").spec(schedulerName="kai-scheduler"), True, False),
    ("another scheduler's", pod("p").spec(**OTHER_SCHEDULER), False, False),
    ("no scheduler name", pod("p").spec(schedulerName=None), False, False),
    ("succeeded", pod("p").phase("Succeeded"), True, True),
    ("failed", pod("p").phase("Failed"), True, True),
    ("running", pod("p").phase("Running"), True, False),
]


@pytest.mark.parametrize(("pod_b", "ours", "finished"), cases(PREDICATES))
def test_predicates(pod_b: PodBuilder, ours: bool, finished: bool) -> None:
    built = pod_b.build()
    assert (scheduled_by_us(built, ("kai-ray", "kai-scheduler")), pod_finished(built)) == (ours, finished)
