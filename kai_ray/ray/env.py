"""The environment variables a workload's code finds kai-ray's facts in. A module of its
own, importing nothing: a workload's fresh process reads these first."""

from __future__ import annotations

__all__ = ["ENV_ATTEMPT", "ENV_GROUP", "ENV_PLACEMENT", "ENV_WORKLOAD"]

ENV_WORKLOAD = "KAI_RAY_WORKLOAD"  # the workload's id
ENV_GROUP = "KAI_RAY_PLACEMENT_GROUP_ID"  # a Ray job's reservation (hex id)
ENV_ATTEMPT = "KAI_RAY_ATTEMPT"  # which admission of the workload this run is
ENV_PLACEMENT = "KAI_RAY_PLACEMENT"  # a Ray job's nodes and resources per worker (JSON)
