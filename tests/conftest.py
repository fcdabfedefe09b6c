"""Shared test fixtures: where ../shared lives, and quiet TensorFlow."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# TensorFlow reads its GCS cache settings once, at import: no caching in the test process either,
# so what another process (a tool under test) writes to the loopback bucket is seen at once.
for _name in ("GCS_STAT_CACHE_MAX_AGE", "GCS_READ_CACHE_MAX_SIZE_MB",
              "GCS_MATCHING_PATHS_CACHE_MAX_AGE"):
    os.environ.setdefault(_name, "0")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

from tests import paths  # noqa: E402
from tests.support.gcs_loopback import gcs  # noqa: E402,F401  (one loopback GCS per session)


@pytest.fixture(scope="session")
def shared_dir():
    if not os.path.isdir(paths.SHARED):
        pytest.fail("../shared not found at %s (set BERT_SHARED_DIR)" % paths.SHARED)
    return paths.SHARED
