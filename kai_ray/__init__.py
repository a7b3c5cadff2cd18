"""kai-ray: KAI Scheduler's policies (queues, fair share, gangs, preemption) for Ray."""

__version__ = "0.1.0"
