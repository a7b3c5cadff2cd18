"""The cycle's working state: nodes, jobs and tasks, queues and what each holds (also per
GPU type), built from a snapshot (build.py) and changed only through the `Statement`,
which can undo every change. Reads the model alone."""
