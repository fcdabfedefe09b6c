"""The file-system layer: every user path (local, ``gs://``, any filesystem TensorFlow knows).

A path with a scheme (``gs://bucket/x``, TensorFlow's in-process ``ram://``) goes through
``tf.io.gfile`` (imported on first use, so tools that never see such a path do not load
TensorFlow for it); a local path through ``os``/``open`` as before. ``exists``, ``isfile``,
``isdir``, ``glob``, ``listdir``, ``makedirs``, ``remove``, ``rmtree``, ``rename``, ``copy``,
``getsize``, ``open``, ``abspath`` take either; ``read_text`` / ``read_utf8`` read a whole
input file, ``split_lines`` cuts its text at ``\\n``; ``give_default_mode`` gives a local
output the mode of the user's umask.
``os.path.join`` / ``dirname`` / ``basename`` work on both (URLs use ``/``). Never
``os.path.abspath`` a URL: that gives ``<cwd>/gs:/...``.

Outputs are written through ``bert_common.atomic`` (a temporary name beside the final one,
renamed when complete; fault injection; leftovers of killed runs), SavedModels through
``bert_tasks.exports.saved_model``.
"""

from __future__ import annotations

import builtins
import glob as _glob
import os
import shutil
from typing import IO, Callable, List


def is_url(path: str) -> bool:
    """Whether ``path`` names a file through a TensorFlow filesystem (``gs://``, ``ram://``).

    Args:
        path: a local path or URL.

    Returns:
        True for a URL.
    """
    return "://" in str(path)


def _gfile():
    import tensorflow as tf  # only for URLs: local tools need no TensorFlow for their files

    return tf.io.gfile


def abspath(path: str) -> str:
    """``os.path.abspath`` for a local path; a URL as it is.

    Args:
        path: a local path or URL.

    Returns:
        The absolute path, or the URL unchanged.
    """
    return path if is_url(path) else os.path.abspath(path)


def exists(path: str) -> bool:
    """Whether file or folder ``path`` exists (local or URL).

    Args:
        path: a local path or URL.

    Returns:
        True if it exists.
    """
    return _gfile().exists(path) if is_url(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    """Whether ``path`` is an existing folder (local or URL).

    Args:
        path: a local path or URL.

    Returns:
        True for a folder.
    """
    return _gfile().isdir(path) if is_url(path) else os.path.isdir(path)


def isfile(path: str) -> bool:
    """Whether ``path`` is an existing file, not a folder (local or URL).

    Args:
        path: a local path or URL.

    Returns:
        True for a file.
    """
    if is_url(path):
        g = _gfile()
        return g.exists(path) and not g.isdir(path)
    return os.path.isfile(path)


def getsize(path: str) -> int:
    """The size of file ``path`` in bytes (local or URL).

    Args:
        path: a local path or URL.

    Returns:
        The size in bytes.
    """
    return _gfile().stat(path).length if is_url(path) else os.path.getsize(path)


def glob(pattern: str) -> List[str]:
    """The paths matching ``pattern`` (``*``, ``?``, ``[...]``) in the order the filesystem
    lists them, hidden files included, as the original's ``tf.gfile.Glob`` (not sorted: the
    order of input files decides the order of the records made from them).

    Args:
        pattern: a local or URL glob pattern.

    Returns:
        The matching paths, unsorted.
    """
    if is_url(pattern):
        return list(_gfile().glob(pattern))
    return _glob.glob(pattern, include_hidden=True)


def has_magic(pattern: str) -> bool:
    """Whether ``pattern`` holds glob wildcards (``glob.has_magic``).

    Args:
        pattern: a path or glob pattern.

    Returns:
        True if it has ``*``, ``?`` or ``[``.
    """
    return _glob.has_magic(pattern)


def listdir(path: str) -> List[str]:
    """Names in folder ``path`` (no trailing ``/`` on sub-folders), sorted.

    Args:
        path: a local folder or URL folder.

    Returns:
        The sorted entry names.
    """
    if is_url(path):
        return sorted(name.rstrip("/") for name in _gfile().listdir(path))
    return sorted(os.listdir(path))


def makedirs(path: str) -> None:
    """Creates ``path`` and its parents; an existing folder is fine.

    Args:
        path: the folder to create (local or URL).
    """
    if is_url(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def remove(path: str) -> None:
    """Removes file ``path`` (local or URL).

    Args:
        path: the file to remove.
    """
    if is_url(path):
        _gfile().remove(path)
    else:
        os.remove(path)


def rmtree(path: str, ignore_errors: bool = False) -> None:
    """Removes folder ``path`` and everything under it.

    Args:
        path: the folder to remove (local or URL).
        ignore_errors: ignore failures (as ``shutil.rmtree``).
    """
    if not is_url(path):
        shutil.rmtree(path, ignore_errors=ignore_errors)
        return
    try:
        _gfile().rmtree(path)
    except Exception:  # noqa: BLE001 - tf.errors.* (NotFound, ...) are not OSError
        if not ignore_errors:
            raise


def rename(src: str, dst: str) -> None:
    """Moves file or folder ``src`` to ``dst``, replacing an existing file ``dst`` (an
    existing folder ``dst`` is removed first: that one step is not atomic, as no rename over a
    non-empty folder is). On an object store this copies then deletes, object by object.

    Args:
        src: the file or folder to move.
        dst: its new path.
    """
    if not is_url(src) and not is_url(dst):
        if os.path.isdir(src) and os.path.isdir(dst) and not os.path.islink(dst):
            shutil.rmtree(dst)
        os.replace(src, dst)
        return
    g = _gfile()
    if not g.isdir(src):
        g.rename(src, dst, overwrite=True)
        return
    if g.isdir(dst):
        g.rmtree(dst)
    # Folder by folder: TensorFlow's in-process ram:// filesystem does not rename folders, and
    # GCS renames object by object anyway.
    for folder, _, names in g.walk(src):
        target = dst + folder[len(src):]
        g.makedirs(target)
        for name in names:
            g.rename(os.path.join(folder, name), os.path.join(target, name), overwrite=True)
    g.rmtree(src)


def copy(src: str, dst: str) -> None:
    """Copies file ``src`` to ``dst`` (replacing it).

    Args:
        src: the file to copy.
        dst: the destination file.
    """
    if is_url(src) or is_url(dst):
        _gfile().copy(src, dst, overwrite=True)
    else:
        shutil.copyfile(src, dst)


def open(path: str, mode: str = "r", encoding: str = "utf-8") -> IO:  # noqa: A001
    """``open()`` for a local path, ``tf.io.gfile.GFile`` for a URL (UTF-8 text or bytes).

    For plain reads; writers use ``bert_common.atomic.atomic_open``.

    Args:
        path: a local path or URL.
        mode: an ``open()`` mode (``"r"``, ``"rb"``, ...).
        encoding: the text encoding (ignored for bytes).

    Returns:
        A file object (a context manager).
    """
    if is_url(path):
        return _url_file_class()(path, mode)
    if "b" in mode:
        return builtins.open(path, mode)
    return builtins.open(path, mode, encoding=encoding)


_URL_FILE = None


def _url_file_class():
    """``tf.io.gfile.GFile`` with the file methods it lacks (``writelines``), that creates
    the file it opens for writing even when nothing is written: TensorFlow's GCS file
    uploads an object only after a write, so an empty output would be missing (and its
    rename into place fail with a 404)."""
    global _URL_FILE
    if _URL_FILE is None:
        class UrlFile(_gfile().GFile):
            def __init__(self, name, mode="r"):
                super().__init__(name, mode)
                if "w" in mode:
                    self.write(b"" if "b" in mode else "")

            def writelines(self, lines) -> None:
                for line in lines:
                    self.write(line)

        _URL_FILE = UrlFile
    return _URL_FILE


def read_text(path: str) -> str:
    """The whole text of file ``path`` (local or URL).

    Args:
        path: a local path or URL.

    Returns:
        The file's contents.
    """
    with open(path, "r") as f:
        return f.read()


def read_utf8(path: str, error: Callable[[str], Exception], *, strip_bom: bool = True,
              require_text: bool = False) -> str:
    """The text of the input file ``path`` (local or URL), strict UTF-8 (a leading BOM dropped
    with ``strip_bom``). Raises ``error(message)`` (the reader's own ``InputError`` class) with
    one line: ``<path>: no such file``, ``<path> is a folder, not a file``,
    ``<path>: cannot read (<reason>)``,
    ``<path>:<line>: not valid UTF-8 (byte offset <n>)`` or, with ``require_text``,
    ``<path>: the file is empty`` (nothing but whitespace).

    Args:
        path: the input file (local or URL).
        error: the exception class to raise, called with the message.
        strip_bom: drop a leading UTF-8 byte order mark.
        require_text: a file of only whitespace is an error.

    Returns:
        The decoded text.

    Raises:
        InputError: ``error(message)``, as above.
    """
    if not isfile(path):
        raise error("%s is a folder, not a file" % path if isdir(path)
                    else "%s: no such file" % path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise error("%s: cannot read (%s)" % (path, e.strerror or e)) from None
    bom = 3 if strip_bom and raw.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = raw[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = bom + e.start  # in the file, BOM included
        raise error("%s:%d: not valid UTF-8 (byte offset %d)"
                    % (path, raw[:offset].count(b"\n") + 1, offset)) from None
    if require_text and not text.strip():
        raise error("%s: the file is empty" % path)
    return text


def split_lines(text: str) -> List[str]:
    """The lines of ``text``, split at ``\\n`` only (``str.splitlines`` also splits at ``\\r``,
    form feeds, U+0085, U+2028 ...), with no empty line after a final newline.

    Args:
        text: the text.

    Returns:
        The lines, without their ``\\n``.
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _umask() -> int:
    """The process umask, read without changing it where Linux tells it (``os.umask`` can
    only be read by setting it, which for a moment would give files that other threads
    create, e.g. TensorFlow writing a checkpoint, mode 0666)."""
    try:
        with builtins.open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o077)  # elsewhere: the safe way round, 0600 for that moment
    os.umask(mask)
    return mask


def give_default_mode(path: str, folder: bool = False) -> None:
    """The mode ``open``/``mkdir`` would have given ``path`` (``mkstemp``/``mkdtemp`` make
    0600 files and 0700 folders, which another user, e.g. a serving process, cannot read).

    Args:
        path: a file or folder just made by ``mkstemp`` / ``mkdtemp``.
        folder: ``path`` is a folder.
    """
    if not is_url(path):
        os.chmod(path, (0o777 if folder else 0o666) & ~_umask())


def prepare_output_dir(path: str) -> None:
    """Creates ``path`` (a tool's ``--output_dir``) and proves it writable, so that a run fails
    before any work rather than at its first checkpoint.

    Args:
        path: the output folder (local or URL).

    Raises:
        FlagError: "--output_dir=<path> is not writable (<reason>)".
    """
    from bert_common import errors

    try:
        makedirs(path)
        probe = os.path.join(path, ".write_probe.%d" % os.getpid())
        with open(probe, "w") as f:
            f.write("ok")
        remove(probe)
    except Exception as e:  # noqa: BLE001 - OSError, or tf.errors.* for a gs:// folder
        if not isinstance(e, OSError) and not errors.is_tf_error(e):
            raise
        raise errors.FlagError("--output_dir=%s is not writable (%s)"
                               % (path, errors.reason(e))) from None
