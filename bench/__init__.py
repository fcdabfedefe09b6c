"""Benchmarks and checks (not tests, not installed), by kind: ``speed``, ``quality``, ``checks``,
``profiling``; ``harness`` is their shared argument set and worker plumbing. ``python -m bench``
lists them, ``python -m bench NAME [args]`` runs one. Standard library only: worker processes
import this package under the peers' venvs."""
