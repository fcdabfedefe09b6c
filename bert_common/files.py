"""Atomic file output: write to a temporary name in the same folder, then rename.

Every writer of the project goes through here, so an interrupted run never
leaves a half-written file under the final name:

* ``atomic_open(path)``: a file object (the temporary is made by ``mkstemp``, mode 0600);
* ``AtomicTFRecordWriters(paths)``: TFRecord files written round-robin;
* ``atomic_path(path)`` / ``atomic_paths(paths)``: for writers that take a path (keras
  ``model.save``, a compiler's ``-o``, worker processes, a folder): a temporary path to hand
  them, renamed to ``path`` when the block succeeds;
* ``atomic_prefix(prefix, suffixes)``: for writers that add suffixes to a prefix (TF
  checkpoints: ``.index``, ``.data-00000-of-00001``);
* ``save_saved_model(module, export_dir, signatures)``: a SavedModel folder.

Temporaries always live in the destination folder (same filesystem, so the rename is atomic)
under hidden names (``.<name>.<random>...``) and are removed when the block fails.
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


def _staging_dir(path: str) -> str:
    """A new empty hidden folder beside ``path``: ``<folder>/.<name>.<random>.tmp``."""
    directory = os.path.dirname(path) or "."
    return tempfile.mkdtemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                            suffix=".tmp")


def _move_into_place(tmp: str, path: str) -> None:
    """``os.replace(tmp, path)``; a folder replaces an existing folder (removed first: that
    one step is not atomic, as no rename over a non-empty folder is)."""
    if os.path.isdir(tmp) and os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    os.replace(tmp, path)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str = "utf-8") -> Iterator:
    """``open()`` for writing that only creates ``path`` once the block succeeds."""
    _check_writable(path)
    tmp = _temp_name(path)
    try:
        kwargs = {} if "b" in mode else {"encoding": encoding}
        with open(tmp, mode, **kwargs) as f:
            yield f
        _move_into_place(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def _staged(paths: Sequence[str], suffixes: Sequence[str],
            make_parents: bool) -> Iterator[List[str]]:
    """Yields one temporary stand-in per path, ``<folder>/.<name>.<random>.tmp/<name>``; on
    success moves ``stand_in + s`` to ``path + s`` for every path and suffix ``s``; always
    removes the staging folders (with whatever the writer left in them)."""
    finals = [os.path.abspath(p) for p in paths]
    if len(set(finals)) != len(finals):
        raise ValueError("the same output path is given twice: %s" % list(paths))
    for path in finals:
        if make_parents:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        _check_writable(path)
    staging: List[str] = []
    try:
        for path in finals:
            staging.append(_staging_dir(path))
        temps = [os.path.join(d, os.path.basename(p)) for d, p in zip(staging, finals)]
        yield temps
        moves = [(t + s, p + s) for t, p in zip(temps, finals) for s in suffixes]
        missing = [p for t, p in moves if not os.path.lexists(t)]
        if missing:
            raise FileNotFoundError("the writer did not create %s" % ", ".join(missing))
        for tmp, path in moves:
            _move_into_place(tmp, path)
    finally:
        for d in staging:
            shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def atomic_paths(paths: Sequence[str], make_parents: bool = False) -> Iterator[List[str]]:
    """Temporary paths for writers that take a path; renamed to ``paths`` (all of them) when
    the block succeeds, removed when it fails.

    The i-th temporary path is ``<folder of paths[i]>/.<name>.<random>.tmp/<name>``: in the
    destination folder (so the rename is atomic), with the final file name (writers that
    look at the extension, such as keras ``model.save``, see the right one), not existing
    yet: the writer creates it, as a file or a folder (an existing folder under the final
    name is then replaced), with the permissions it would give the final path. Each path
    must be created by the block (else ``FileNotFoundError``, and nothing is renamed).

    Args:
      paths: the final paths (distinct). make_parents: create missing parent folders;
        otherwise a missing or read-only folder raises ``OSError`` before anything is written.
    Yields:
      list of temporary paths, one per path, in order.
    """
    with _staged(paths, [""], make_parents) as temps:
        yield temps


@contextlib.contextmanager
def atomic_path(path: str, make_parents: bool = False) -> Iterator[str]:
    """``atomic_paths([path])`` for one path: yields its temporary path.

    ``with atomic_path("model.keras") as tmp: model.save(tmp)``.
    """
    with _staged([path], [""], make_parents) as (temp,):
        yield temp


@contextlib.contextmanager
def atomic_prefix(prefix: str, suffixes: Sequence[str]) -> Iterator[str]:
    """A temporary prefix for writers that add suffixes to the prefix they are given (TF
    checkpoints: ``.index``, ``.data-00000-of-00001``): when the block succeeds each
    ``temp_prefix + s`` (which must exist) is renamed to ``prefix + s``; when it fails
    everything written under the temporary prefix is removed. As ``atomic_paths`` otherwise.
    """
    with _staged([prefix], list(suffixes), False) as (temp,):
        yield temp


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
            _move_into_place(tmp, path)

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
    # The mkdtemp folder itself becomes the SavedModel (not atomic_path, where TF would create
    # it): that keeps the exported folder's mode unchanged (mkdtemp's 0700).
    tmp = tempfile.mkdtemp(dir=parent, prefix="." + os.path.basename(export_dir) + ".")
    try:
        tf.saved_model.save(module, tmp, signatures=signatures())
        _move_into_place(tmp, export_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def int64_feature(values) -> "tf.train.Feature":
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values) -> "tf.train.Feature":
    import tensorflow as tf

    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
