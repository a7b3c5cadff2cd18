"""The policy's judgements, what KAI calls plugins: pure functions of the state. Fair
share, queue capacity, per-type limits, node order and placement, reasons in words, and
the `Policy`'s hooks (job order, queue rank, who may be a victim)."""
