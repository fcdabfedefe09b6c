"""The command-line tools: their flags and the one way they run and fail.

* ``flags``: the flags every tool shares (``--strategy`` and the original's TPU flags,
  ``--mixed_precision``, ``--use_xla``), defined once, and ``FlagError``;
* ``runner``: the run convention of every tool (``start`` / ``run_main``): bad input is one line
  ``<tool>: error: <message>`` on stderr and exit status 1, never a traceback;
* one module per tool (``run_classifier``, ``run_pretraining``, ...): its flags and one call.

``modeling`` and ``data`` never import this package. Importing a tool module imports no
TensorFlow, so ``--help`` answers at once.
"""
