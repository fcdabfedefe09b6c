"""Shared test fixtures: where ../shared lives, and quiet TensorFlow."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

from tests import paths  # noqa: E402


@pytest.fixture(scope="session")
def shared_dir():
    if not os.path.isdir(paths.SHARED):
        pytest.fail("../shared not found at %s (set BERT_SHARED_DIR)" % paths.SHARED)
    return paths.SHARED
