"""Plumbing shared by ``data``, ``modeling`` and the command-line tools: atomic file output
(``files``) and fork safety (``fork_safety``). It imports neither ``data`` nor ``modeling``."""
