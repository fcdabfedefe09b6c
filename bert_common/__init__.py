"""Plumbing shared by ``data``, ``modeling`` and the command-line tools: atomic file output
(``files``; SavedModels and TF Serving's versioned layout too), the ``eval_results.txt``
writer (``results``), progress lines (``progress``), errors (``errors``), fork safety
(``fork_safety``) and the in-graph checks of serving signatures' id inputs
(``serving_inputs``). It imports neither ``data`` nor ``modeling``."""
