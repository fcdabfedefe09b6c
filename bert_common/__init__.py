"""Plumbing shared by ``data``, ``modeling`` and the command-line tools: the file-system layer
(``files``: local and ``gs://`` paths), atomic and grouped output with its fault points and
leftovers (``atomic``), the ``eval_results.txt`` writer (``results``), progress lines
(``progress``), errors (``errors``), fork safety (``fork_safety``) and the in-graph checks of
serving signatures' id inputs (``serving_inputs``). It imports neither ``data`` nor ``modeling``."""
