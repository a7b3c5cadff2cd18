"""The actions of a cycle, in KAI's order: allocate (with reservations), consolidation,
reclaim, preempt and stale gang eviction, and KAI's job solver (solver.py) that the
actions that evict share. Each talks to the session (session/) and reads the rules."""
