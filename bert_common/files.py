"""The file layer: every user path (local, ``gs://``, any filesystem TensorFlow knows) and
atomic output.

Paths. A path with a scheme (``gs://bucket/x``, TensorFlow's in-process ``ram://``) goes
through ``tf.io.gfile`` (imported on first use, so tools that never see such a path do not load
TensorFlow for it); a local path through ``os``/``open`` as before. ``exists``, ``isfile``,
``isdir``, ``glob``, ``listdir``, ``makedirs``, ``remove``, ``rmtree``, ``rename``, ``copy``,
``getsize``, ``open``, ``abspath`` take either. ``os.path.join`` / ``dirname`` / ``basename``
work on both (URLs use ``/``). Never ``os.path.abspath`` a URL: that gives ``<cwd>/gs:/...``.

Atomic output: write to a temporary name in the same folder, then rename, so an interrupted
run never leaves a half-written file under the final name:

* ``atomic_open(path)``: a file object;
* ``AtomicTFRecordWriters(paths)``: TFRecord files written round-robin;
* ``atomic_path(path)`` / ``atomic_paths(paths)``: for writers that take a path (keras
  ``model.save``, a compiler's ``-o``, worker processes, a folder): a temporary path to hand
  them, renamed to ``path`` when the block succeeds;
* ``atomic_prefix(prefix, suffixes)``: for writers that add suffixes to a prefix (TF
  checkpoints: ``.index``, ``.data-00000-of-00001``);
* ``save_saved_model(module, export_dir, signatures)``: a SavedModel folder (replacing only
  a SavedModel; ``save_saved_models`` for several written together, all new or all old);
* ``save_saved_model_version(module, base, signatures)``: the next version folder of a TF
  Serving model base path (``<base>/1``, ``<base>/2``, ...; never replacing one; a base
  holding other files is refused: ``check_export_base``).

Temporaries always live in the destination folder under hidden names
(``.<name>.<host>-<pid>.<random>.tmp``) and are removed when the block fails; a process killed
before it could remove them leaves them behind, and the next process writing the same output on
the same machine removes those of dead processes (``remove_stale_temps``, at its first write of
that output), never another live run's.

Faults: every write step of this layer passes through ``fault_point(event, path)`` (``"write"``:
data going into the temporary of ``path``; ``"commit"``: the rename into ``path``), where tests
inject a failure (``inject_faults``, e.g. ``OSError(ENOSPC)``) to check that a failed write
leaves the previous output intact and nothing half-written. Outputs get the permissions
of the user's umask (as ``open`` would create them), so e.g. a TF Serving process running as
another user can read an export. On a local disk the final rename is atomic. On an object
store (GCS) there is no rename: ``tf.io.gfile.rename`` copies then deletes, object by object
for a folder, so a reader may briefly see a folder that is still being filled, but never a
file under its final name that is not complete (each object appears whole).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import glob as _glob
import hashlib
import os
import re
import shutil
import socket
import tempfile
import uuid
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Sequence, TypeVar

from bert_common.errors import InputError, first_line

_W = TypeVar("_W", bound="AtomicWriter")


# ======================================================================= paths of any filesystem


def is_url(path: str) -> bool:
    """Whether ``path`` names a file through a TensorFlow filesystem (``gs://``, ``ram://``)."""
    return "://" in str(path)


def _gfile():
    import tensorflow as tf  # only for URLs: local tools need no TensorFlow for their files

    return tf.io.gfile


def abspath(path: str) -> str:
    """``os.path.abspath`` for a local path; a URL as it is."""
    return path if is_url(path) else os.path.abspath(path)


def exists(path: str) -> bool:
    return _gfile().exists(path) if is_url(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    return _gfile().isdir(path) if is_url(path) else os.path.isdir(path)


def isfile(path: str) -> bool:
    if is_url(path):
        g = _gfile()
        return g.exists(path) and not g.isdir(path)
    return os.path.isfile(path)


def getsize(path: str) -> int:
    return _gfile().stat(path).length if is_url(path) else os.path.getsize(path)


def glob(pattern: str) -> List[str]:
    """The paths matching ``pattern`` (``*``, ``?``, ``[...]``) in the order the filesystem
    lists them, hidden files included, as the original's ``tf.gfile.Glob`` (not sorted: the
    order of input files decides the order of the records made from them)."""
    if is_url(pattern):
        return list(_gfile().glob(pattern))
    return _glob.glob(pattern, include_hidden=True)


def has_magic(pattern: str) -> bool:
    return _glob.has_magic(pattern)


def listdir(path: str) -> List[str]:
    """Names in folder ``path`` (no trailing ``/`` on sub-folders), sorted."""
    if is_url(path):
        return sorted(name.rstrip("/") for name in _gfile().listdir(path))
    return sorted(os.listdir(path))


def makedirs(path: str) -> None:
    """Creates ``path`` and its parents; an existing folder is fine."""
    if is_url(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def remove(path: str) -> None:
    if is_url(path):
        _gfile().remove(path)
    else:
        os.remove(path)


def rmtree(path: str, ignore_errors: bool = False) -> None:
    """Removes folder ``path`` and everything under it."""
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
    non-empty folder is). On an object store this copies then deletes, object by object."""
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
    """Copies file ``src`` to ``dst`` (replacing it)."""
    if is_url(src) or is_url(dst):
        _gfile().copy(src, dst, overwrite=True)
    else:
        shutil.copyfile(src, dst)


def open(path: str, mode: str = "r", encoding: str = "utf-8") -> IO:  # noqa: A001
    """``open()`` for a local path, ``tf.io.gfile.GFile`` for a URL (UTF-8 text or bytes).

    For plain reads; writers use ``atomic_open``."""
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
    with open(path, "r") as f:
        return f.read()


def read_utf8(path: str, error: Callable[[str], Exception], *, strip_bom: bool = True) -> str:
    """The text of the input file ``path`` (local or URL), strict UTF-8 (a leading BOM dropped
    with ``strip_bom``). Raises ``error(message)`` (the reader's own ``InputError`` class) with
    one line: ``<path>: no such file``, ``<path> is a folder, not a file``,
    ``<path>: cannot read (<reason>)`` or
    ``<path>:<line>: not valid UTF-8 (byte offset <n>)``."""
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
        return raw[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = bom + e.start  # in the file, BOM included
        raise error("%s:%d: not valid UTF-8 (byte offset %d)"
                    % (path, raw[:offset].count(b"\n") + 1, offset)) from None


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
    0600 files and 0700 folders, which another user, e.g. a serving process, cannot read)."""
    if not is_url(path):
        os.chmod(path, (0o777 if folder else 0o666) & ~_umask())


# ======================================================================= atomic output


# ---------------------------------------------------------------- fault injection (tests)

_fault_hook: Optional[Callable[[str, str], None]] = None


def fault_point(event: str, path: str) -> None:
    """A place where writing ``path`` can fail: ``event`` is ``"write"`` (data into its
    temporary), ``"commit"`` (the rename into place) or a writer's own step (``"checkpoint"``).
    Calls the hook ``inject_faults`` installed (tests); a no-op otherwise."""
    if _fault_hook is not None:
        _fault_hook(event, path)


@contextlib.contextmanager
def inject_faults(hook: Callable[[str, str], None]) -> Iterator[None]:
    """Runs ``hook(event, path)`` at every ``fault_point`` inside the block (it raises to
    simulate a failure, e.g. ``OSError(errno.ENOSPC, ...)`` for a full disk)."""
    global _fault_hook
    saved, _fault_hook = _fault_hook, hook
    try:
        yield
    finally:
        _fault_hook = saved


# ---------------------------------------------------------------- temporaries and leftovers

# Which machine and process made a temporary: ``<host hash>-<pid>`` in its name, so a later run
# can tell the leftovers of a killed process (same host, pid no longer running) from the
# temporaries of a run still writing.
_HOST = hashlib.sha1(socket.gethostname().encode("utf-8")).hexdigest()[:6]
_TEMP_RE = re.compile(r"^\.(?P<base>.+)\.(?P<host>[0-9a-f]{6})-(?P<pid>\d+)\.[^./]+\.tmp$")


def _owner() -> str:
    return "%s-%d" % (_HOST, os.getpid())


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's process
        return True
    return True


def _lexists(path: str) -> bool:
    return exists(path) if is_url(path) else os.path.lexists(path)


def remove_stale_temps(path: str) -> List[str]:
    """Removes the temporaries of output ``path`` that a killed process of this machine left
    in its folder (files or staging folders named ``.<name>.<host>-<pid>.<random>.tmp`` whose
    pid is no longer running); returns what was removed. Temporaries of live processes, of
    other machines and every other file are left alone. A staging folder still holding the
    previous ``path`` (set aside by a commit that was killed, or that could not put it back)
    while ``path`` itself is missing gives it back first: it is the user's output."""
    directory = os.path.dirname(abspath(path)) or "."
    base = os.path.basename(path)
    final = os.path.join(directory, base)
    try:
        names = listdir(directory)
    except Exception:  # noqa: BLE001 - no folder yet (or unreadable): nothing to clean
        return []
    removed = []
    for name in names:
        m = _TEMP_RE.match(name.rstrip("/"))
        if (m is None or m.group("base") != base or m.group("host") != _HOST
                or int(m.group("pid")) == os.getpid() or _pid_running(int(m.group("pid")))):
            continue
        stale = os.path.join(directory, name.rstrip("/"))
        try:
            if isdir(stale):
                previous = os.path.join(stale, _PREVIOUS + base)
                if _lexists(previous) and not _lexists(final):
                    rename(previous, final)
                rmtree(stale)
            else:
                remove(stale)
            removed.append(stale)
        except Exception:  # noqa: BLE001 - removed meanwhile, or not ours to remove after all
            pass
    return removed


_PREVIOUS = ".previous."  # <staging folder>/.previous.<name>: the output a commit replaces
_CLEANED: set = set()  # outputs whose stale temporaries this process already looked for


def _remove_stale_temps_once(path: str) -> None:
    """``remove_stale_temps(path)`` the first time this process writes ``path`` only: a
    folder listing per output, not per write (a step log appended on gs:// rewrites one
    output many times; N shards of one folder still cost N listings)."""
    key = abspath(path)
    if key not in _CLEANED:
        remove_stale_temps(path)
        _CLEANED.add(key)


def _temp_name(path: str) -> str:
    directory = os.path.dirname(abspath(path)) or "."
    base = os.path.basename(path)
    _remove_stale_temps_once(path)
    if is_url(path):
        return os.path.join(directory, ".%s.%s.%s.tmp" % (base, _owner(), uuid.uuid4().hex[:12]))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s.%s." % (base, _owner()), suffix=".tmp")
    os.close(fd)
    give_default_mode(tmp)
    return tmp


def check_output_folder(path: str) -> None:
    """``OSError`` naming the folder of output ``path`` when it is missing or read-only (on an
    object store: the folder is made, which fails for a missing or read-only bucket)."""
    directory = os.path.dirname(abspath(path)) or "."
    if is_url(directory):
        # An object store has no folders to check: making one proves the bucket is there and
        # writable (on GCS it writes a zero-byte "<folder>/" marker).
        try:
            makedirs(directory)
        except Exception as e:  # noqa: BLE001 - tf.errors.* (NotFound, PermissionDenied)
            raise OSError("cannot write to %s (%s)" % (directory, first_line(e))) from None
        return
    if not isdir(directory):
        raise OSError("output folder %s does not exist (for %s)" % (directory, path))
    if not is_url(directory) and not os.access(directory, os.W_OK):
        raise OSError("output folder %s is not writable (for %s)" % (directory, path))


def _staging_dir(path: str) -> str:
    """A new empty hidden folder beside ``path``: ``<folder>/.<name>.<host>-<pid>.<random>.tmp``
    (stale ones of killed processes are removed on this process's first write of ``path``)."""
    directory = os.path.dirname(path) or "."
    _remove_stale_temps_once(path)
    if is_url(path):
        staging = os.path.join(directory, ".%s.%s.%s.tmp" % (os.path.basename(path), _owner(),
                                                            uuid.uuid4().hex[:12]))
        makedirs(staging)
        return staging
    staging = tempfile.mkdtemp(dir=directory, prefix=".%s.%s." % (os.path.basename(path),
                                                                  _owner()), suffix=".tmp")
    give_default_mode(staging, folder=True)
    return staging


def local_scratch_dir(name: str) -> str:
    """A new empty folder ``<$TMPDIR>/.<name>.<host>-<pid>.<random>.tmp`` for a run's scratch
    files (local disk, whatever the outputs' file system); the ones that killed processes of
    this machine left are removed first. The caller removes it when done."""
    return _staging_dir(os.path.join(tempfile.gettempdir(), name))


_RECORDERS: List[List[str]] = []  # the lists of ``recording_writes`` blocks now open


def _move_into_place(tmp: str, path: str) -> None:
    fault_point("commit", path)
    rename(tmp, path)
    for written in _RECORDERS:
        written.append(abspath(path))


def _unrecord(path: str) -> None:
    """Takes the last record of ``path`` out of the open ``recording_writes`` lists (an output
    this process had just put in place, taken back)."""
    for written in _RECORDERS:
        for i in range(len(written) - 1, -1, -1):
            if written[i] == abspath(path):
                del written[i]
                break


@contextlib.contextmanager
def recording_writes() -> Iterator[List[str]]:
    """Yields a list that collects the final path (absolute) of every output this process
    puts in place through this module while the block runs (``atomic_*`` writers, several
    outputs written together)."""
    written: List[str] = []
    _RECORDERS.append(written)
    try:
        yield written
    finally:
        _RECORDERS.remove(written)


def _remove_quietly(path: str) -> None:
    try:
        if exists(path):
            remove(path)
    except Exception:  # noqa: BLE001 - cleaning up after a failure must not hide it
        pass


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str = "utf-8") -> Iterator:
    """``open()`` for writing that only creates ``path`` once the block succeeds."""
    check_output_folder(path)
    tmp = _temp_name(path)
    try:
        with open(tmp, mode, encoding=encoding) as f:
            yield f
            fault_point("write", path)  # where a full disk shows: flushing what was written
        _move_into_place(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise


@contextlib.contextmanager
def _staged(paths: Sequence[str], suffixes: Sequence[str],
            make_parents: bool) -> Iterator[List[str]]:
    """Yields one temporary stand-in per path, ``<folder>/.<name>.<random>.tmp/<name>``; on
    success moves ``stand_in + s`` to ``path + s`` for every path and suffix ``s``; removes
    the staging folders (with whatever the writer left in them), except one keeping a previous
    output that a failed commit could not put back (``_commit_together``)."""
    finals = [abspath(p) for p in paths]
    if len(set(finals)) != len(finals):
        raise ValueError("the same output path is given twice: %s" % list(paths))
    for path in finals:
        if make_parents:
            makedirs(os.path.dirname(path))
        check_output_folder(path)
    staging: List[str] = []
    kept: List[str] = []  # staging folders holding a previous output that could not be put back
    try:
        for path in finals:
            staging.append(_staging_dir(path))
        temps = [os.path.join(d, os.path.basename(p)) for d, p in zip(staging, finals)]
        yield temps
        for path in finals:
            fault_point("write", path)
        moves = [(t + s, p + s, d) for t, p, d in zip(temps, finals, staging) for s in suffixes]
        missing = [p for t, p, _ in moves
                   if not _lexists(t)]
        if missing:
            raise FileNotFoundError("the writer did not create %s" % ", ".join(missing))
        try:
            _commit_together(moves)
        except BaseException as e:
            kept = _kept_asides(e)
            raise
    finally:
        for d in staging:
            if d not in kept:
                rmtree(d, ignore_errors=True)


def _commit_together(moves: Sequence[Any]) -> None:
    """Renames each ``(tmp, path, aside folder)`` of ``moves`` into place, all or none. Each
    previous output (file or folder) is first set aside in its aside folder, which the caller
    removes afterwards. If a step fails, the new outputs already moved are taken out again and
    the previous ones put back; one that cannot be put back stays in its aside folder (named in
    the exception's notes), which the caller must then keep: ``_kept_asides(exception)``; the
    next write of that output gives it back if the output is missing (``remove_stale_temps``).
    One file alone: a plain rename, atomic by itself."""
    if len(moves) == 1 and not isdir(moves[0][1]):
        _move_into_place(*moves[0][:2])
        return
    done = []  # [path, its previous version set aside or None, new one moved in?], in order
    try:
        for tmp, path, folder in moves:
            previous = None
            if _lexists(path):
                previous = os.path.join(folder, _PREVIOUS + os.path.basename(path))
                rename(path, previous)
            done.append([path, previous, False])
            _move_into_place(tmp, path)
            done[-1][2] = True
    except BaseException as e:
        kept = []
        for path, previous, moved in reversed(done):
            try:
                if moved:
                    _unrecord(path)
                    if isdir(path):
                        rmtree(path)
                    else:
                        remove(path)
                if previous is not None:
                    rename(previous, path)
            except Exception:  # noqa: BLE001 - restoring what it can; the first error is raised
                if previous is not None:
                    kept.append(os.path.dirname(previous))
                    e.add_note("the previous %s is kept in %s" % (path, previous))
        e._kept_asides = kept  # type: ignore[attr-defined]
        raise


def _kept_asides(error: BaseException) -> List[str]:
    """The aside folders a failed ``_commit_together`` could not empty (never removed)."""
    return list(getattr(error, "_kept_asides", []))


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
            check_output_folder(p)
        self.paths: List[str] = list(paths)
        self._tmps = [_temp_name(p) for p in self.paths]
        import tensorflow as tf  # imported here: data generators may not need TF otherwise

        self._writers = [tf.io.TFRecordWriter(t) for t in self._tmps]
        self._next = 0
        self.num_written = 0

    def write(self, serialized: bytes) -> None:
        fault_point("write", self.paths[self._next])
        self._writers[self._next].write(serialized)
        self._next = (self._next + 1) % len(self._writers)
        self.num_written += 1

    def close(self) -> None:
        for w in self._writers:
            w.close()
        for tmp in self._tmps:
            if is_url(tmp) and not exists(tmp):  # no record written: GCS made no object
                with open(tmp, "wb"):
                    pass
        for tmp, path in zip(self._tmps, self.paths):
            _move_into_place(tmp, path)

    def abort(self) -> None:
        for w in self._writers:
            w.close()
        for tmp in self._tmps:
            _remove_quietly(tmp)


# ======================================================================= SavedModels

#: The file that makes a folder a SavedModel (``saved_model.pbtxt`` for the text form).
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
_VERSION_RE = re.compile(r"^[0-9]+$")


def is_saved_model(path: str) -> bool:
    """Whether folder ``path`` holds a SavedModel (``saved_model.pb``)."""
    return isdir(path) and any(isfile(os.path.join(path, n)) for n in SAVED_MODEL_FILES)


def _examples(names: Sequence[str], limit: int = 3) -> str:
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def check_saved_model_destination(path: str, flag: Optional[str] = None) -> None:
    """``InputError`` unless ``save_saved_model`` may write ``path``: it does not exist, is an
    empty folder, or is a SavedModel (which it replaces). A file, or a folder holding anything
    but a SavedModel, is never replaced; ``flag`` (e.g. ``"--output"``) is named in the message."""
    if not (exists(path) if is_url(path) else os.path.lexists(path)):
        return
    hint = " (choose another %s or remove it)" % flag if flag else ""
    if not isdir(path) or (not is_url(path) and os.path.islink(path)):
        raise InputError("%s exists and is not a SavedModel folder: not replaced%s"
                         % (path, hint))
    names = listdir(path)
    if names and not is_saved_model(path):
        raise InputError("%s exists and is not a SavedModel (no saved_model.pb; it holds %s): "
                         "not replaced%s" % (path, _examples(names), hint))


def save_saved_models(exports: Sequence[Any]) -> List[str]:
    """Writes several SavedModels that belong together, all new or all as they were: each
    ``(module, export_dir, signatures)`` is saved with ``tf.saved_model.save(module, ...,
    signatures=signatures())`` into a hidden staging folder beside its ``export_dir``; once
    all are written they are renamed into place together (``_commit_together``).

    Replace semantics: an ``export_dir`` may be new, an empty folder or an existing SavedModel
    (a folder holding ``saved_model.pb``), which is replaced: set aside, then removed once the
    new one is in place (on a local disk each step is one rename; a reader never sees a
    half-written SavedModel). Anything else (a file, a folder holding other files) is refused
    with ``InputError`` before anything is written (``check_saved_model_destination``).
    ``signatures`` is called inside the guarded block, so a tracing error also removes the
    staging folders; the parent folders are created if needed. Returns the ``export_dir``s.
    """
    import tensorflow as tf

    finals = [abspath(d) if not is_url(d) else d for _, d, _ in exports]
    if len(set(finals)) != len(finals):
        raise ValueError("the same SavedModel folder is given twice: %s" % finals)
    for export_dir in finals:  # every destination before the first write
        check_saved_model_destination(export_dir)
    staged, asides, kept = [], [], []
    try:
        for (module, _, signatures), export_dir in zip(exports, finals):
            makedirs(os.path.dirname(export_dir) or ".")
            # The staging folder itself becomes the SavedModel (not atomic_path, where TF
            # would create it with its own mode); the aside folder takes the previous one.
            staged.append(_staging_dir(export_dir))
            asides.append(_staging_dir(export_dir))
            tf.saved_model.save(module, staged[-1], signatures=signatures())
            fault_point("write", export_dir)
        try:
            _commit_together(list(zip(staged, finals, asides)))
        except BaseException as e:
            kept = _kept_asides(e)
            raise
    finally:
        for tmp in staged + asides:
            if tmp not in kept and exists(tmp):
                rmtree(tmp, ignore_errors=True)
    return [d for _, d, _ in exports]


def save_saved_model(module: Any, export_dir: str, signatures: Callable[[], Dict]) -> str:
    """``tf.saved_model.save(module, ..., signatures=signatures())`` into a hidden staging
    folder beside ``export_dir``, then renamed to ``export_dir``; returns ``export_dir``.

    ``export_dir`` may be new, an empty folder or a SavedModel, which is replaced (set aside,
    removed once the new one is in place: a failure at any step leaves it as it was); any other
    existing ``export_dir`` (a file, a folder holding other files) is refused with
    ``InputError`` before anything is written. ``signatures`` is called inside the guarded
    block, so a tracing error also removes the staging folder; the parent folder of
    ``export_dir`` is created if needed. For TF Serving's versioned layout (a base path whose
    versions are never replaced) use ``save_saved_model_version``.
    """
    return save_saved_models([(module, export_dir, signatures)])[0]


# ---------------------------------------------------------------- TF Serving's versioned layout


def saved_model_versions(base: str) -> List[int]:
    """The versions in TF Serving model base path ``base``: its all-digit sub-folders, as
    integers, sorted ([] for a missing folder)."""
    if not isdir(base):
        return []
    return sorted(int(name) for name in listdir(base)
                  if _VERSION_RE.match(name) and isdir(os.path.join(base, name)))


def _is_within(path: str, folder: str) -> bool:
    path, folder = abspath(path).rstrip("/"), abspath(folder).rstrip("/")
    return path == folder or path.startswith(folder + "/")


def check_export_base(path: str, flag: str = "--export_dir",
                      others: Optional[Dict[str, Optional[str]]] = None) -> None:
    """``InputError`` (naming ``flag``) unless ``path`` can be a TF Serving model base path that
    ``save_saved_model_version`` adds a version to: missing (it is created), or a folder
    holding only version folders (all-digit names) and this layer's own hidden temporaries
    (``.<name>.<host>-<pid>.<random>.tmp``). ``others``: ``{flag: path}`` of the run's other
    outputs (``--output_dir``), which must not be ``path`` nor lie inside it. Tools call it
    when they check their flags (before any work) and again when they export."""
    for other_flag, other in (others or {}).items():
        if other and _is_within(other, path):
            raise InputError("%s=%s is %s=%s or holds it: the export needs a folder of its own "
                             "(TF Serving's model base path, holding only the version folders "
                             "1, 2, ... that exports add), e.g. %s=models/<name>"
                             % (flag, path, other_flag, other, flag))
    if not exists(path):
        if not is_url(path):  # the nearest existing folder must let it be created
            parent = os.path.dirname(abspath(path))
            while not os.path.exists(parent) and os.path.dirname(parent) != parent:
                parent = os.path.dirname(parent)
            if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
                raise InputError("%s=%s cannot be created: %s is not a writable folder"
                                 % (flag, path, parent))
        return
    if not isdir(path):
        raise InputError("%s=%s is a file: it must be a folder (TF Serving's model base path, "
                         "holding the version folders 1, 2, ...)" % (flag, path))
    foreign = [name for name in listdir(path)
               if not (_VERSION_RE.match(name) and isdir(os.path.join(path, name)))
               and not _TEMP_RE.match(name)]
    if foreign:
        raise InputError("%s=%s holds other files than SavedModel versions (%s): it must be a "
                         "folder of its own (TF Serving's model base path; each export adds "
                         "the next version folder 1, 2, ... in it)"
                         % (flag, path, _examples(foreign)))
    if not is_url(path) and not os.access(path, os.W_OK | os.X_OK):
        raise InputError("%s=%s is not writable" % (flag, path))


def _remove_stale_version_temps(base: str) -> None:
    """Staging folders of exports into ``base`` that a killed process left (any version)."""
    versions = set()
    for name in listdir(base):
        m = _TEMP_RE.match(name)
        if m is not None and _VERSION_RE.match(m.group("base")):
            versions.add(m.group("base"))
    for version in versions:
        remove_stale_temps(os.path.join(base, version))


def _claim(tmp: str, path: str) -> bool:
    """Renames staged folder ``tmp`` to ``path`` unless ``path`` exists (another export took
    that version meanwhile): True when done. Never replaces a non-empty folder."""
    if is_url(path):
        if exists(path):
            return False
        rename(tmp, path)
        return True
    try:
        os.rename(tmp, path)  # fails on an existing non-empty folder, replaces an empty one
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            return False
        raise
    return True


def save_saved_model_version(module: Any, base: str, signatures: Callable[[], Dict],
                             flag: str = "--export_dir") -> str:
    """Adds a version to TF Serving model base path ``base`` (a folder created if needed);
    returns the version folder ``<base>/<version>``.

    ``version`` = 1 + the largest existing version (1 for a new or empty ``base``); the
    SavedModel (``tf.saved_model.save(module, ..., signatures=signatures())``) is written into
    a hidden staging folder in ``base`` (``.<version>.<host>-<pid>.<random>.tmp``, which TF
    Serving ignores) and renamed into place, so a server watching ``base`` loads it whole. An
    existing version is never replaced: when another export took the version meanwhile, the
    next one is taken. ``base`` is checked first (``check_export_base``: ``InputError`` naming
    ``flag`` for a folder holding anything else); staging folders of killed exports are
    removed. A failure at any step leaves ``base`` as it was. On an object store (no atomic
    rename) two exports racing for the same version are not detected.
    """
    import tensorflow as tf

    check_export_base(base, flag)
    makedirs(base)
    _remove_stale_version_temps(base)
    versions = saved_model_versions(base)
    staging = _staging_dir(os.path.join(base, str(versions[-1] + 1 if versions else 1)))
    try:
        tf.saved_model.save(module, staging, signatures=signatures())
        fault_point("write", os.path.join(base, str(versions[-1] + 1 if versions else 1)))
        for _ in range(1000):
            versions = saved_model_versions(base)
            final = os.path.join(base, str(versions[-1] + 1 if versions else 1))
            fault_point("commit", final)
            if _claim(staging, final):
                return final
        raise OSError("%s: no free version folder after 1000 tries" % base)
    finally:
        if exists(staging):
            rmtree(staging, ignore_errors=True)


def int64_feature(values) -> "tf.train.Feature":
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values) -> "tf.train.Feature":
    import tensorflow as tf

    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
