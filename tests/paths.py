"""Locations of the shared reference data, read in place (never copied in)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERT_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
GOLDEN = os.path.join(SHARED, "golden")
DATA = os.path.join(SHARED, "data")
GOLDEN_VOCAB = os.path.join(GOLDEN, "inputs", "vocab.txt")
