"""Ray Tune under a kai-ray queue: `kai_ray.tune.fit(tuner, queue="ml")` runs each trial
as a workload of the queue (see kai_ray.api.tune for why trials, and how)."""

from kai_ray.api.tune import QueuedTrials, fit, trials_in_queue

__all__ = ["QueuedTrials", "fit", "trials_in_queue"]
