"""Locations of the shared reference data, read in place (never copied in)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERT_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
GOLDEN = os.path.join(SHARED, "golden")
DATA = os.path.join(SHARED, "data")
GOLDEN_VOCAB = os.path.join(GOLDEN, "inputs", "vocab.txt")

# The suite's import shim (tests/support/site/sitecustomize.py; tests/suite.py puts it on
# PYTHONPATH for every process of `make test`).
SITE = os.path.join(ROOT, "tests", "support", "site")
# PYTHONPATH for a process that runs the project's code from this checkout: the checkout, then
# what this process was given (the shim, under `make test`).
PYTHONPATH = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(
    os.pathsep) if p and p != ROOT])
