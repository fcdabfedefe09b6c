"""Plumbing shared by ``data``, ``modeling`` and the command-line tools: atomic file output
(``files``), the ``eval_results.txt`` writer (``results``), progress lines (``progress``),
errors (``errors``) and fork safety (``fork_safety``). It imports neither ``data`` nor
``modeling``."""
