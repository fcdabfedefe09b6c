"""Shared test fixtures: where ../shared lives, and quiet TensorFlow."""

import gc
import os
import sys
import tempfile

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


def pytest_configure(config):
    """The suite's processes (the xdist workers and every tool they start) keep their scratch
    files in one folder of the suite's, removed at its exit (the tools' own rule,
    ``bert_cli.runner.private_temp_folder``): a tool killed with SIGKILL by a test leaves its
    temp folder behind, and TensorFlow its autograph files. pytest's ``tmp_path`` folders stay
    where they were (kept for a look after a failure)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return  # a worker: the controller's folder is already its TMPDIR
    from bert_cli import runner

    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    runner.private_temp_folder()


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


# The test files whose work is longest (trainings in subprocesses, exports, JAX processes),
# from `--durations=0` (docs/testing.md). `make test` hands whole files to its two workers in
# this order and then the rest in collection order (tests/suite.py: loadscope), so that no long
# file starts last and one worker runs on alone. The two files whose processes wait for each
# other (multi-worker collectives, JAX's two host devices) are kept apart: side by side, each
# starved the other's processes and both took twice as long; so is the gs:// pipeline (its
# tools wait on the loopback GCS server in this process), which beside the multi-worker file
# took 2.5 times as long.
LONGEST_FIRST = [
    "tests/bert_cli/test_run_pretraining_distributed.py",
    "tests/bert_cli/test_run_pretraining.py",
    "tests/modeling/test_jax_backend.py",
    "tests/bert_cli/test_gcs_pipeline.py",
    "tests/bert_cli/test_interruptions.py",
    "tests/modeling/kernels/test_cpu_ops.py",
    "tests/bert_tasks/test_jax_finetuning.py",
    "tests/bert_tasks/test_jax_pretraining.py",
    "tests/bert_cli/test_run_classifier.py",
    "tests/data/pretraining/test_beam.py",
    "tests/test_docs.py",
    "tests/demo/test_run_demo.py",
    "tests/bert_tasks/exports/test_hub.py",
    "tests/bert_cli/test_extract_features.py",
    "tests/modeling/training/test_finetuning.py",
    "tests/modeling/training/backends/tensorflow/test_steps.py",
    # then every other file of 5 s or more, longest first: the files left for the end are the
    # short ones, and the two workers finish within seconds of each other
    "tests/bert_cli/test_run_ner.py",
    "tests/bert_cli/test_exports.py",
    "tests/modeling/heads/test_token_classifier.py",
    "tests/bert_cli/test_run_squad.py",
    "tests/test_packaging.py",
    "tests/modeling/training/test_finetuning_golden.py",
    "tests/bert_cli/test_cloud_paths.py",
    "tests/test_suite.py",
    "tests/bert_cli/test_bad_inputs.py",
    "tests/bert_cli/test_run_swag.py",
    "tests/bert_common/test_gcs_loopback.py",
    "tests/bert_cli/test_run_pretraining_real_data.py",
    "tests/bert_tasks/test_driver.py",
    "tests/bert_cli/test_create_pretraining_data_sharded.py",
    "tests/bert_tasks/exports/test_hf.py",
    "tests/data/tokenization/test_graph.py",
    "tests/bert_tasks/test_pretrained.py",
    "tests/modeling/kernels/test_gelu_dense.py",
    "tests/bert_cli/test_bad_files.py",
    "tests/bert_tasks/exports/test_hub_preprocessor.py",
    "tests/bert_cli/test_convert_checkpoint.py",
    "tests/test_readme_example.py",
    "tests/test_docstring_examples.py",
    "tests/modeling/test_public_api.py",
    "tests/bert_cli/test_runner.py",
    "tests/bert_cli/test_build_vocab.py",
    "tests/bert_cli/test_fault_injection.py",
    "tests/bert_cli/test_squad_failures.py",
    "tests/modeling/test_encoder.py",
    "tests/data/tokenization/test_properties.py",
]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """The files of ``LONGEST_FIRST`` first, in its order; the others after, as collected."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
