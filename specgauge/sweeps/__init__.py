"""Sweeps: the executors that run a function over many configurations, with their journal and lock."""
