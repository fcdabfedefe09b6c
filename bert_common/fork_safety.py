"""Whether this process may ``fork``, and the ``multiprocessing`` context to use.

A forked child has only the thread that called ``fork``; a lock another thread held at that
moment stays locked in the child forever. Once TensorFlow is loaded its runtime keeps dozens of
threads (thread pools, the allocator), and a forked worker can hang on such a lock (seen: a
``create_pretraining_data`` pool worker forked from a test process that had trained models,
stuck in a futex). So: fork (cheap, copy-on-write) only while TensorFlow is not loaded, as in
``create_pretraining_data.py`` itself; otherwise start workers from a fresh ``forkserver``.
"""

from __future__ import annotations

import multiprocessing
import sys


def fork_is_safe() -> bool:
    """Linux (fork available and the default there) and TensorFlow not loaded."""
    return sys.platform.startswith("linux") and "tensorflow" not in sys.modules


def worker_context():
    """``fork`` when ``fork_is_safe()``, else ``forkserver`` on Linux (the platform default
    elsewhere). Worker functions and their arguments must then be picklable."""
    if fork_is_safe():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if sys.platform.startswith("linux")
                                       else None)
