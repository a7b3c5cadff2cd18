"""kai-ray on Kubernetes: the operator that schedules the pods of KubeRay's RayClusters,
RayJobs and RayServices (and any pod whose schedulerName is ours) through the API server.

Light on purpose: `kai-ray --help` imports this package; the client (aiohttp) and the
operator load only when the operator runs."""

DEFAULT_SCHEDULER_NAMES = ("kai-ray", "kai-scheduler")

__all__ = ["DEFAULT_SCHEDULER_NAMES"]
