"""The Ray backend: Ray's adapters of the control plane's ports, the scheduler actor
that runs the controller, and the client the user API and the CLI talk to.

    adapters       RayNodes, RayExecutor, KVStore: the ports on placement groups,
                   Ray Jobs, stops through the drivers' dispatchers and the GCS
                   key-value store
    translate      Ray nodes -> the core's NodeInfo; requests -> Ray bundles
    jobs           Ray Jobs submitted when admitted; runtime environments checked and
                   uploaded where they are submitted
    actor          the detached, named, restartable actor: the RPC surface only
    scheduler      what the actor runs: the Controller on these adapters, stepped by
                   the one scheduling loop (control.pacing), waking callers
    upkeep         housekeeping after steps: drivers gone, orphan groups, the store's
                   journal, job packages, NVML probes, Ray's autoscaler
    dashboard      the dashboard served from the actor, published in the GCS
    feed           what the scheduler tells each driver's dispatcher (admitted, ended)
    env            the environment variables a workload's code reads
    client         a thin client of the actor, specs and workload ids
    metrics, gpus, bench, benchqueue   Prometheus metrics, NVML discovery, `kai-ray bench ray`

Nothing is imported here: importing one module does not pull in the others.
"""

__all__: list[str] = []
