"""Conformance with KAI-Scheduler: cluster states written both as kai-ray scenarios and as
the snapshot KAI's scheduler reads (kaiwrite), so the two schedulers can decide the same
state (docs/conformance.md, docs/kai-snapshots.md)."""
