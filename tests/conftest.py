"""Shared test fixtures: where ../shared lives, and quiet TensorFlow."""

import gc
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


def pytest_runtest_setup(item):
    """A ``bf16_matmul`` test where TensorFlow would crash (tests/suite.py): it fails with why,
    instead of taking its pytest worker down."""
    from tests import suite

    if item.get_closest_marker("bf16_matmul") and suite.emulates_avx2(os.environ,
                                                                       suite.cpu_flags()):
        pytest.fail("ONEDNN_MAX_CPU_ISA=%s on a CPU with AVX-512: TensorFlow's bfloat16 matmuls "
                    "crash in oneDNN here; `make test` (tests/suite.py) runs this test with "
                    "TF_ENABLE_ONEDNN_OPTS=0, as an AVX2 CPU runs them"
                    % os.environ["ONEDNN_MAX_CPU_ISA"], pytrace=False)


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test file's last test (its fixtures gone): collect its garbage, then freeze
    what is left (``gc.freeze``), so that later collections skip it.

    A worker's heap grows to gigabytes of TensorFlow/Keras objects that stay alive (traced
    functions, caches), and Python's full collections walk all of it: on the busy 2-core host
    one took 34 s in a full run, and the suite spent about 4 minutes of worker time in them
    (tests that take 0.2 s alone stalled for 40 s)."""
    yield
    if nextitem is None or nextitem.module is not item.module:
        gc.collect()
        gc.freeze()
