"""Atomic output: write to a temporary name in the same folder, then rename, so an interrupted
run never leaves a half-written file under the final name (paths of any filesystem, through
``bert_common.files``):

* ``atomic_open(path)``: a file object;
* ``AtomicTFRecordWriters(paths)``: TFRecord files written round-robin;
* ``atomic_path(path)`` / ``atomic_paths(paths)``: for writers that take a path (keras
  ``model.save``, a compiler's ``-o``, worker processes, a folder): a temporary path to hand
  them, renamed to ``path`` when the block succeeds (``atomic_paths``: all of them together,
  all new or all old);
* ``atomic_prefix(prefix, suffixes)``: for writers that add suffixes to a prefix (TF
  checkpoints: ``.index``, ``.data-00000-of-00001``).

SavedModels and TF Serving's versioned layout are written with these pieces by
``bert_tasks.exports.saved_model``.

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
import hashlib
import os
import re
import socket
import tempfile
import uuid
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar

from bert_common import files
from bert_common.errors import first_line

_W = TypeVar("_W", bound="AtomicWriter")


# ---------------------------------------------------------------- fault injection (tests)

_fault_hook: Optional[Callable[[str, str], None]] = None


def fault_point(event: str, path: str) -> None:
    """A place where writing ``path`` can fail: ``event`` is ``"write"`` (data into its
    temporary), ``"commit"`` (the rename into place) or a writer's own step (``"checkpoint"``).
    Calls the hook ``inject_faults`` installed (tests); a no-op otherwise.

    Args:
        event: ``"write"``, ``"commit"`` or a writer's own step name.
        path: the output being written.
    """
    if _fault_hook is not None:
        _fault_hook(event, path)


@contextlib.contextmanager
def inject_faults(hook: Callable[[str, str], None]) -> Iterator[None]:
    """Runs ``hook(event, path)`` at every ``fault_point`` inside the block (it raises to
    simulate a failure, e.g. ``OSError(errno.ENOSPC, ...)`` for a full disk).

    Args:
        hook: called as ``hook(event, path)`` at each fault point; raises to inject a failure.

    Yields:
        None, with the hook installed for the duration of the block.
    """
    global _fault_hook
    saved, _fault_hook = _fault_hook, hook
    try:
        yield
    finally:
        _fault_hook = saved


# ---------------------------------------------------------------- temporaries and leftovers

def _host_tag() -> str:
    """The host name and this process's PID namespace (``/proc/self/ns/pid``), hashed: a
    container that shares the host name and a folder (a pod's, a ``--network host`` one) but
    has its own process ids gets another tag, so its live temporaries are never taken for a
    killed process's by a pid that is free only here."""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return hashlib.sha1(("%s/%s" % (socket.gethostname(), namespace)).encode("utf-8")
                        ).hexdigest()[:6]


# Which machine and process made a temporary: ``<host tag>-<pid>`` in its name, so a later run
# can tell the leftovers of a killed process (same host and PID namespace, pid no longer
# running) from the temporaries of a run still writing. ``TEMP_RE`` matches the names of this
# module's temporaries (``base``: the output's name; ``host``; ``pid``):
# ``bert_tasks.exports.saved_model`` allows them in a TF Serving base path, whose versions it
# stages with ``staging_dir``.
_HOST = _host_tag()
TEMP_RE = re.compile(r"^\.(?P<base>.+)\.(?P<host>[0-9a-f]{6})-(?P<pid>\d+)\.[^./]+\.tmp$")


def _owner() -> str:
    return "%s-%d" % (_HOST, os.getpid())


def _pid_running(pid: int, since: Optional[float] = None) -> bool:
    """Whether process ``pid`` of this machine is the live writer of a temporary last changed
    at ``since`` (epoch seconds): not when no process has that pid, not when it is a zombie,
    and not when the process now holding that pid started after ``since`` (the pid was reused:
    pids wrap at ``pid_max``, 32768 in many containers, so a long run's dead writer can come
    back as a new process's pid)."""
    if pid != os.getpid():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:  # EPERM: someone else's process
            return True
    state, started = _process_state(pid)
    if state in ("Z", "X"):
        return False
    return not (since is not None and started is not None and started > since + 1.0)


def _process_state(pid: int) -> Tuple[Optional[str], Optional[float]]:
    """(state letter, start time in epoch seconds) of ``pid`` from Linux's /proc; (None, None)
    where there is no /proc."""
    try:
        with builtins.open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)"
        with builtins.open("/proc/stat", encoding="ascii") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime "))
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None, None


def _lexists(path: str) -> bool:
    return files.exists(path) if files.is_url(path) else os.path.lexists(path)


def remove_stale_temps(path: str) -> List[str]:
    """Removes the temporaries of output ``path`` that a killed process of this machine left
    in its folder (files or staging folders named ``.<name>.<host>-<pid>.<random>.tmp`` whose
    pid is no longer running); returns what was removed. Temporaries of live processes, of
    other machines and every other file are left alone. A staging folder still holding the
    previous ``path`` (set aside by a commit that was killed, or that could not put it back)
    while ``path`` itself is missing gives it back first: it is the user's output.

    Args:
        path: an output path; its folder is searched for that output's temporaries.

    Returns:
        The paths removed (files and folders).
    """
    directory = os.path.dirname(files.abspath(path)) or "."
    base = os.path.basename(path)
    final = os.path.join(directory, base)
    try:
        names = files.listdir(directory)
    except Exception:  # noqa: BLE001 - no folder yet (or unreadable): nothing to clean
        return []
    removed = []
    for name in names:
        m = TEMP_RE.match(name.rstrip("/"))
        if m is None or m.group("base") != base or m.group("host") != _HOST:
            continue
        stale = os.path.join(directory, name.rstrip("/"))
        if _pid_running(int(m.group("pid")), since=_mtime(stale)):
            continue
        try:
            if files.isdir(stale):
                previous = os.path.join(stale, _PREVIOUS + base)
                if _lexists(previous) and not _lexists(final):
                    files.rename(previous, final)
                files.rmtree(stale)
            else:
                files.remove(stale)
            removed.append(stale)
        except Exception:  # noqa: BLE001 - removed meanwhile, or not ours to remove after all
            pass
    return removed


def _mtime(path: str) -> Optional[float]:
    """When a local temporary was last changed (None for a URL, or when it is gone)."""
    if files.is_url(path):
        return None
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


_PREVIOUS = ".previous."  # <staging folder>/.previous.<name>: the output a commit replaces
_CLEANED: set = set()  # outputs whose stale temporaries this process already looked for


def _remove_stale_temps_once(path: str) -> None:
    """``remove_stale_temps(path)`` the first time this process writes ``path`` only: a
    folder listing per output, not per write (a step log appended on gs:// rewrites one
    output many times; N shards of one folder still cost N listings)."""
    key = files.abspath(path)
    if key not in _CLEANED:
        remove_stale_temps(path)
        _CLEANED.add(key)


def _temp_name(path: str) -> str:
    directory = os.path.dirname(files.abspath(path)) or "."
    base = os.path.basename(path)
    _remove_stale_temps_once(path)
    if files.is_url(path):
        return os.path.join(directory, ".%s.%s.%s.tmp" % (base, _owner(), uuid.uuid4().hex[:12]))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s.%s." % (base, _owner()), suffix=".tmp")
    os.close(fd)
    files.give_default_mode(tmp)
    return tmp


def check_output_folder(path: str) -> None:
    """``OSError`` naming the folder of output ``path`` when it is missing or read-only (on an
    object store: the folder is made, which fails for a missing or read-only bucket).

    Args:
        path: the output path whose folder is checked.

    Raises:
        OSError: the folder is missing or read-only.
    """
    directory = os.path.dirname(files.abspath(path)) or "."
    if files.is_url(directory):
        # An object store has no folders to check: making one proves the bucket is there and
        # writable (on GCS it writes a zero-byte "<folder>/" marker).
        try:
            files.makedirs(directory)
        except Exception as e:  # noqa: BLE001 - tf.errors.* (NotFound, PermissionDenied)
            raise OSError("cannot write to %s (%s)" % (directory, first_line(e))) from None
        return
    if not files.isdir(directory):
        raise OSError("output folder %s does not exist (for %s)" % (directory, path))
    if not files.is_url(directory) and not os.access(directory, os.W_OK):
        raise OSError("output folder %s is not writable (for %s)" % (directory, path))


def staging_dir(path: str) -> str:
    """A new empty hidden folder beside ``path``: ``<folder>/.<name>.<host>-<pid>.<random>.tmp``
    (stale ones of killed processes are removed on this process's first write of ``path``).
    The caller removes it (or renames it into place: ``commit_together``).

    Args:
        path: the output the staging folder is for.

    Returns:
        The path of the new empty folder.
    """
    directory = os.path.dirname(path) or "."
    _remove_stale_temps_once(path)
    if files.is_url(path):
        staging = os.path.join(directory, ".%s.%s.%s.tmp" % (os.path.basename(path), _owner(),
                                                            uuid.uuid4().hex[:12]))
        files.makedirs(staging)
        return staging
    staging = tempfile.mkdtemp(dir=directory, prefix=".%s.%s." % (os.path.basename(path),
                                                                  _owner()), suffix=".tmp")
    files.give_default_mode(staging, folder=True)
    return staging


def local_scratch_dir(name: str) -> str:
    """A new empty folder ``<$TMPDIR>/.<name>.<host>-<pid>.<random>.tmp`` for a run's scratch
    files (local disk, whatever the outputs' file system); the ones that killed processes of
    this machine left are removed first. The caller removes it when done.

    Args:
        name: the base name of the folder.

    Returns:
        The path of the new empty folder.
    """
    return staging_dir(os.path.join(tempfile.gettempdir(), name))


_RECORDERS: List[List[str]] = []  # the lists of ``recording_writes`` blocks now open


def _move_into_place(tmp: str, path: str) -> None:
    fault_point("commit", path)
    files.rename(tmp, path)
    for written in _RECORDERS:
        written.append(files.abspath(path))


def _unrecord(path: str) -> None:
    """Takes the last record of ``path`` out of the open ``recording_writes`` lists (an output
    this process had just put in place, taken back)."""
    for written in _RECORDERS:
        for i in range(len(written) - 1, -1, -1):
            if written[i] == files.abspath(path):
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
        if files.exists(path):
            files.remove(path)
    except Exception:  # noqa: BLE001 - cleaning up after a failure must not hide it
        pass


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str = "utf-8") -> Iterator:
    """``open()`` for writing that only creates ``path`` once the block succeeds.

    Args:
        path: the output file.
        mode: the ``open()`` mode (``"w"`` or ``"wb"``).
        encoding: the text encoding (ignored for bytes).

    Yields:
        The open file object of the temporary, moved to ``path`` when the block succeeds.
    """
    check_output_folder(path)
    tmp = _temp_name(path)
    try:
        with files.open(tmp, mode, encoding=encoding) as f:
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
    output that a failed commit could not put back (``commit_together``)."""
    finals = [files.abspath(p) for p in paths]
    if len(set(finals)) != len(finals):
        raise ValueError("the same output path is given twice: %s" % list(paths))
    for path in finals:
        if make_parents:
            files.makedirs(os.path.dirname(path))
        check_output_folder(path)
    staging: List[str] = []
    kept: List[str] = []  # staging folders holding a previous output that could not be put back
    try:
        for path in finals:
            staging.append(staging_dir(path))
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
            commit_together(moves)
        except BaseException as e:
            kept = kept_asides(e)
            raise
    finally:
        for d in staging:
            if d not in kept:
                files.rmtree(d, ignore_errors=True)


def commit_together(moves: Sequence[Any]) -> None:
    """Renames each ``(tmp, path, aside folder)`` of ``moves`` into place, all or none. Each
    previous output (file or folder) is first set aside in its aside folder, which the caller
    removes afterwards. If a step fails, the new outputs already moved are taken out again and
    the previous ones put back; one that cannot be put back stays in its aside folder (named in
    the exception's notes), which the caller must then keep: ``kept_asides(exception)``; the
    next write of that output gives it back if the output is missing (``remove_stale_temps``).
    One file alone: a plain rename, atomic by itself.

    Args:
        moves: ``(tmp, path, aside folder)`` triples.

    Raises:
        Exception: the first failing step's error, after rolling back; ``kept_asides`` names
            what it left behind.
    """
    if len(moves) == 1 and not files.isdir(moves[0][1]):
        _move_into_place(*moves[0][:2])
        return
    done = []  # [path, its previous version set aside or None, new one moved in?], in order
    try:
        for tmp, path, folder in moves:
            previous = None
            if _lexists(path):
                previous = os.path.join(folder, _PREVIOUS + os.path.basename(path))
                files.rename(path, previous)
            done.append([path, previous, False])
            _move_into_place(tmp, path)
            done[-1][2] = True
    except BaseException as e:
        kept = []
        for path, previous, moved in reversed(done):
            try:
                if moved:
                    _unrecord(path)
                    if files.isdir(path):
                        files.rmtree(path)
                    else:
                        files.remove(path)
                if previous is not None:
                    files.rename(previous, path)
            except Exception:  # noqa: BLE001 - restoring what it can; the first error is raised
                if previous is not None:
                    kept.append(os.path.dirname(previous))
                    e.add_note("the previous %s is kept in %s" % (path, previous))
        e._kept_asides = kept  # type: ignore[attr-defined]
        raise


def kept_asides(error: BaseException) -> List[str]:
    """The aside folders a failed ``commit_together`` could not empty (never removed).

    Args:
        error: the exception ``commit_together`` raised.

    Returns:
        The aside folders kept (empty when none).
    """
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

    Args:
        path: the output file or folder.
        make_parents: create missing parent folders.

    Yields:
        The temporary path to write instead of ``path``.
    """
    with _staged([path], [""], make_parents) as (temp,):
        yield temp


@contextlib.contextmanager
def atomic_prefix(prefix: str, suffixes: Sequence[str]) -> Iterator[str]:
    """A temporary prefix for writers that add suffixes to the prefix they are given (TF
    checkpoints: ``.index``, ``.data-00000-of-00001``): when the block succeeds each
    ``temp_prefix + s`` (which must exist) is renamed to ``prefix + s``; when it fails
    everything written under the temporary prefix is removed. As ``atomic_paths`` otherwise.

    Args:
        prefix: the final prefix.
        suffixes: the suffixes the writer adds (each file must exist at the end).

    Yields:
        The temporary prefix to give the writer.
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
    """Writes serialized examples round-robin over one or more TFRecord files: records are
    framed a batch at a time (``bert_common.record_framing``) and written through
    ``bert_common.files`` (local paths without TensorFlow; ``gs://`` through its file system).

    The files appear under their final names only when ``close()`` succeeds
    (use as a context manager; on an exception the temporaries are removed).

    Args:
        paths: the output TFRecord files (at least one).

    Raises:
        ValueError: ``paths`` is empty.
        OSError: an output folder is missing or read-only.

    Example::

        with AtomicTFRecordWriters(["train.tf_record"]) as writer:
            writer.write(serialized_example)
    """

    FLUSH_BYTES = 1 << 20  # a file's pending records are framed and written at this size

    def __init__(self, paths: Sequence[str]):
        if not paths:
            raise ValueError("no output file given")
        for p in paths:
            check_output_folder(p)
        self.paths: List[str] = list(paths)
        self._tmps = [_temp_name(p) for p in self.paths]
        self._files: List[Any] = []
        try:
            for tmp in self._tmps:
                self._files.append(files.open(tmp, "wb"))  # created now, even if left empty
        except BaseException:
            self.abort()
            raise
        self._pending: List[List[bytes]] = [[] for _ in self.paths]
        self._pending_bytes = [0] * len(self.paths)
        self._next = 0
        self.num_written = 0

    def write(self, serialized: bytes) -> None:
        """Writes one record to the next file in turn.

        Args:
            serialized: a serialized ``tf.train.Example`` (bytes; text is written as UTF-8).

        Raises:
            TypeError: neither bytes nor text (nothing written).
        """
        if isinstance(serialized, str):  # (TensorFlow's writer took text as UTF-8 too)
            serialized = serialized.encode("utf-8")
        elif not isinstance(serialized, (bytes, bytearray, memoryview)):
            raise TypeError("a record is bytes, not %s" % type(serialized).__name__)
        record = bytes(serialized)
        i = self._next
        fault_point("write", self.paths[i])
        self._pending[i].append(record)
        self._pending_bytes[i] += len(record)
        if self._pending_bytes[i] >= self.FLUSH_BYTES:
            self._flush(i)
        self._next = (i + 1) % len(self.paths)
        self.num_written += 1

    def _flush(self, i: int) -> None:
        from bert_common.record_framing import frame_records

        if self._pending[i]:
            self._files[i].write(frame_records(self._pending[i]))
            self._pending[i] = []
            self._pending_bytes[i] = 0

    def close(self) -> None:
        try:
            for i, f in enumerate(self._files):
                self._flush(i)
                f.close()
        except BaseException:
            self.abort()
            raise
        for tmp, path in zip(self._tmps, self.paths):
            _move_into_place(tmp, path)

    def abort(self) -> None:
        for f in self._files:
            try:
                f.close()
            except Exception:  # noqa: BLE001 (the temporary goes anyway)
                pass
        for tmp in self._tmps:
            _remove_quietly(tmp)
