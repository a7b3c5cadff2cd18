"""One cycle's session (KAI's framework session): the `CycleContext` the actions talk to,
the lines of waiting jobs it hands out, and its in-cycle memos (failed searches, jobs sure
to fail, the candidate victims). The only door to the memos and to what `incremental/`
keeps between cycles: an action names what its rule reads (GangWalk), never a cache."""
