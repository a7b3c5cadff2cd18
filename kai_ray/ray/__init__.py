"""The Ray backend: the scheduler actor, its state machine and Ray's side of its ports.

    engine.SchedulerEngine   the state machine (no Ray import): snapshot in, decisions out
    workload.Workload        a workload's record, state and transition table
    translate                Ray nodes/resources <-> the core's NodeInfo/Request/JobInfo
    ports                    the narrow interfaces the engine needs (backend, store, jobs)
    backend                  placement groups, process kills, GCS KV persistence (Ray)
    actor.SchedulerActor     the detached, named, restartable actor around the engine
    jobs                     Ray Jobs submitted when admitted
    metrics, gpus, bench     Prometheus metrics, NVML discovery, `kai-ray bench ray`

Nothing is imported here, so that `import kai_ray.ray.engine` does not pull in Ray.
"""

__all__: list[str] = []
