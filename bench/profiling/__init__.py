"""Profiling: where the time of a step goes."""
