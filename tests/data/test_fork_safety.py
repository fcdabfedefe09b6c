"""data/fork_safety.py: no fork once TensorFlow's threads may exist."""

import sys

import pytest

from data import fork_safety


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is the Linux default")
def test_fork_only_without_tensorflow(monkeypatch):
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    assert fork_safety.fork_is_safe()
    assert fork_safety.worker_context().get_start_method() == "fork"
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    assert not fork_safety.fork_is_safe()
    assert fork_safety.worker_context().get_start_method() == "forkserver"


def _square(x):
    return x * x


def test_forkserver_pool_runs_module_level_workers():
    """What run_workers does once TensorFlow is loaded: a forkserver pool, picklable jobs."""
    import multiprocessing

    with multiprocessing.get_context("forkserver").Pool(2) as pool:
        assert pool.map(_square, [1, 2, 3], chunksize=1) == [1, 4, 9]
