"""Taints and tolerations on the Kubernetes backend: the rule is the control plane's
(kai_ray.control.taints), shared with scenario files and KAI's snapshots; this module
keeps the names the backend (world, source, report) imports.

A node's NoSchedule / NoExecute taints keep off every pod that does not tolerate them.
The core places by node labels, so the operator gives each distinct set of tolerations
among the gangs (a handful on a real cluster: "none", "GPU nodes", ...) a label of its own,
set on exactly the nodes whose taints all of a gang's pods tolerate, and adds it to the
gang's node selector. A cluster without such taints gets no labels at all.
"""

from __future__ import annotations

from kai_ray.control.taints import (
    TOLERATES_PREFIX,
    Profile,
    Taint,
    Toleration,
    blocking_taints,
    describe,
    profile_label,
    tolerates,
    tolerations_of,
)

__all__ = [
    "TOLERATES_PREFIX",
    "Profile",
    "Taint",
    "Toleration",
    "blocking_taints",
    "describe",
    "profile_label",
    "tolerates",
    "tolerations_of",
]
