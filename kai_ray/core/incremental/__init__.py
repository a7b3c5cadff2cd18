"""Cycles that cost what changed: the core's incremental machinery.

`run_cycle(snapshot, config, now, cache=CycleCache())` decides exactly what the full
rebuild (`run_cycle` without a cache) decides, at the cost of what changed since the
last cycle:

- cache.py: `CycleCache`, the working state kept from one cycle to the next, patched;
- jobdiff.py: what changed between two job lists, at the cost of what changed;
- jobline.py: the snapshot's job list as the cache keeps it, each job with its order;
- waitingline.py: the jobs waiting at the start of a cycle, in line (the cache keeps
  one; a cycle without a cache makes its own);
- gangs.py, outcomes.py: the actions that evict, with their lines and failed searches
  kept between cycles;
- candidates.py: the policy's candidate victims, in victim order, kept between cycles.

The full build (build.py) stays the reference. What both count and how they sum it
lives outside this package, used by both (accounting.py, gpushare.py, leafsums.py),
so that the two cannot count differently.

For rule authors: the cache keeps what an earlier cycle computed wherever its inputs
did not change, so a rule must name all of its inputs. The contract (search keys hold
every input a hook reads; job keys are functions of the job) is written once, beside
the hooks: `Policy` in kai_ray/core/rules/policy.py. A hook that breaks it makes the cache
decide differently from the full rebuild, silently; KAI_RAY_CHECK_INCREMENTAL (set by
the test suite) decides every cycle both ways and raises on a difference.
"""

from kai_ray.core.incremental.cache import CycleCache

__all__ = ["CycleCache"]
