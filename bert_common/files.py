"""Atomic file output: write to a temporary name in the same folder, then rename.

Every writer of the project goes through here, so an interrupted run never
leaves a half-written file under the final name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Sequence, TypeVar

_W = TypeVar("_W", bound="AtomicWriter")


def _temp_name(path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path)) or "."
    base = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + base + ".", suffix=".tmp")
    os.close(fd)
    return tmp


def _check_writable(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(directory):
        raise OSError("output folder %s does not exist (for %s)" % (directory, path))
    if not os.access(directory, os.W_OK):
        raise OSError("output folder %s is not writable (for %s)" % (directory, path))


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str = "utf-8") -> Iterator:
    """``open()`` for writing that only creates ``path`` once the block succeeds."""
    _check_writable(path)
    tmp = _temp_name(path)
    try:
        kwargs = {} if "b" in mode else {"encoding": encoding}
        with open(tmp, mode, **kwargs) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


class AtomicWriter:
    """The context-manager protocol of the atomic writers below: leaving the block normally
    calls ``close()`` (the output appears under its final name), leaving it by an exception
    calls ``abort()`` (the partial output is removed). Subclasses implement both."""

    def close(self) -> None:
        raise NotImplementedError()

    def abort(self) -> None:
        raise NotImplementedError()

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class AtomicTFRecordWriters(AtomicWriter):
    """Writes serialized examples round-robin over one or more TFRecord files.

    The files appear under their final names only when ``close()`` succeeds
    (use as a context manager; on an exception the temporaries are removed).
    """

    def __init__(self, paths: Sequence[str]):
        if not paths:
            raise ValueError("no output file given")
        for p in paths:
            _check_writable(p)
        self.paths: List[str] = list(paths)
        self._tmps = [_temp_name(p) for p in self.paths]
        import tensorflow as tf  # imported here: data generators may not need TF otherwise

        self._writers = [tf.io.TFRecordWriter(t) for t in self._tmps]
        self._next = 0
        self.num_written = 0

    def write(self, serialized: bytes) -> None:
        self._writers[self._next].write(serialized)
        self._next = (self._next + 1) % len(self._writers)
        self.num_written += 1

    def close(self) -> None:
        for w in self._writers:
            w.close()
        for tmp, path in zip(self._tmps, self.paths):
            os.replace(tmp, path)

    def abort(self) -> None:
        for w in self._writers:
            w.close()
        for tmp in self._tmps:
            if os.path.exists(tmp):
                os.remove(tmp)


def save_saved_model(module: Any, export_dir: str, signatures: Callable[[], Dict]) -> None:
    """``tf.saved_model.save(module, ..., signatures=signatures())`` into a temporary folder
    beside ``export_dir``, then renamed to ``export_dir`` (an existing one is replaced).

    ``signatures`` is called inside the guarded block, so a tracing error also removes the
    temporary folder; the parent folder of ``export_dir`` is created if needed.
    """
    import tensorflow as tf

    parent = os.path.dirname(os.path.abspath(export_dir)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix="." + os.path.basename(export_dir) + ".")
    try:
        tf.saved_model.save(module, tmp, signatures=signatures())
        if os.path.exists(export_dir):
            shutil.rmtree(export_dir)
        os.replace(tmp, export_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def int64_feature(values) -> "tf.train.Feature":
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values) -> "tf.train.Feature":
    import tensorflow as tf

    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
