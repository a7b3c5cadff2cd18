"""Trace-driven simulator: the controller (kai_ray.control.Controller) with a simulated
cluster, a simulated executor and a virtual clock, replaying a job trace under several
policies side by side (docs/simulator.md)."""
