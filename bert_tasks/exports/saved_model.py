"""SavedModels written whole: a SavedModel folder replaced atomically, and TF Serving's
versioned layout (paths of any filesystem, through ``bert_common.files``; the staging and
all-or-nothing commits of ``bert_common.atomic``, with its fault points and leftovers):

* ``save_saved_model(module, export_dir, signatures)``: a SavedModel folder (replacing only
  a SavedModel: ``check_saved_model_destination``; ``save_saved_models`` for several written
  together, all new or all old);
* ``save_saved_model_version(module, base, signatures)``: the next version folder of a TF
  Serving model base path (``<base>/1``, ``<base>/2``, ...; never replacing one; a base
  holding other files is refused: ``check_export_base``; ``saved_model_versions`` lists them).

TensorFlow is imported by the writers only, when called.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from bert_common import atomic, files
from bert_common.errors import InputError

#: The file that makes a folder a SavedModel (``saved_model.pbtxt`` for the text form).
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
_VERSION_RE = re.compile(r"^[0-9]+$")


def is_saved_model(path: str) -> bool:
    """Whether folder ``path`` holds a SavedModel (``saved_model.pb``).

    Args:
        path: a folder path (local or remote).

    Returns:
        A bool.
    """
    return files.isdir(path) and any(files.isfile(os.path.join(path, n))
                                     for n in SAVED_MODEL_FILES)


def _examples(names: Sequence[str], limit: int = 3) -> str:
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def check_saved_model_destination(path: str, flag: Optional[str] = None) -> None:
    """``InputError`` unless ``save_saved_model`` may write ``path``: it does not exist, is an
    empty folder, or is a SavedModel (which it replaces). A file, or a folder holding anything
    but a SavedModel, is never replaced; ``flag`` (e.g. ``"--output"``) is named in the message.

    Args:
        path: the SavedModel folder to write.
        flag: the flag named in the message, or None.

    Raises:
        InputError: ``path`` may not be written.
    """
    if not (files.exists(path) if files.is_url(path) else os.path.lexists(path)):
        return
    hint = " (choose another %s or remove it)" % flag if flag else ""
    if not files.isdir(path) or (not files.is_url(path) and os.path.islink(path)):
        raise InputError("%s exists and is not a SavedModel folder: not replaced%s"
                         % (path, hint))
    names = files.listdir(path)
    if names and not is_saved_model(path):
        raise InputError("%s exists and is not a SavedModel (no saved_model.pb; it holds %s): "
                         "not replaced%s" % (path, _examples(names), hint))


@contextlib.contextmanager
def tracing_as_saved() -> Iterator[None]:
    """Traces in the context ``tf.saved_model.save`` (default ``SaveOptions``) traces in.

    A ``tf.function`` is saved with the concrete functions traced before the save, but the
    save looks each one up again inside its save context, which is part of the function
    cache's key: a concrete function traced outside it is traced a second time. Traced inside
    this context, the save finds it in the cache (each traced once). (TensorFlow's own
    ``save_context``, not public API: should it stop matching the save's, the cost is a second
    trace, never another SavedModel.)
    """
    import tensorflow as tf
    from tensorflow.python.saved_model import save_context

    if save_context.in_save_context():
        yield
        return
    with save_context.save_context(tf.saved_model.SaveOptions()):
        yield


def _traced_signatures(signatures: Callable[[], Any]) -> Any:
    with tracing_as_saved():
        return signatures()


def save_saved_models(exports: Sequence[Any]) -> List[str]:
    """Writes several SavedModels that belong together, all new or all as they were: each
    ``(module, export_dir, signatures)`` is saved with ``tf.saved_model.save(module, ...,
    signatures=signatures())`` into a hidden staging folder beside its ``export_dir``; once
    all are written they are renamed into place together (``atomic.commit_together``).

    Replace semantics: an ``export_dir`` may be new, an empty folder or an existing SavedModel
    (a folder holding ``saved_model.pb``), which is replaced: set aside, then removed once the
    new one is in place (on a local disk each step is one rename; a reader never sees a
    half-written SavedModel). Anything else (a file, a folder holding other files) is refused
    with ``InputError`` before anything is written (``check_saved_model_destination``).
    ``signatures`` is called inside the guarded block, so a tracing error also removes the
    staging folders; the parent folders are created if needed. Returns the ``export_dir``s.

    Args:
        exports: ``(module, export_dir, signatures)`` triples; ``signatures`` is a
            zero-argument callable returning the signatures dict.

    Returns:
        The ``export_dir``s.

    Raises:
        InputError: an ``export_dir`` that may not be written.
        ValueError: two exports to the same folder.
    """
    import tensorflow as tf

    finals = [files.abspath(d) if not files.is_url(d) else d for _, d, _ in exports]
    if len(set(finals)) != len(finals):
        raise ValueError("the same SavedModel folder is given twice: %s" % finals)
    for export_dir in finals:  # every destination before the first write
        check_saved_model_destination(export_dir)
    staged, asides, kept = [], [], []
    try:
        for (module, _, signatures), export_dir in zip(exports, finals):
            files.makedirs(os.path.dirname(export_dir) or ".")
            # The staging folder itself becomes the SavedModel (not atomic_path, where TF
            # would create it with its own mode); the aside folder takes the previous one.
            staged.append(atomic.staging_dir(export_dir))
            asides.append(atomic.staging_dir(export_dir))
            tf.saved_model.save(module, staged[-1], signatures=_traced_signatures(signatures))
            atomic.fault_point("write", export_dir)
        try:
            atomic.commit_together(list(zip(staged, finals, asides)))
        except BaseException as e:
            kept = atomic.kept_asides(e)
            raise
    finally:
        for tmp in staged + asides:
            if tmp not in kept and files.exists(tmp):
                files.rmtree(tmp, ignore_errors=True)
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

    Args:
        module: the ``tf.Module`` to save.
        export_dir: the SavedModel folder.
        signatures: a zero-argument callable returning the signatures dict.

    Returns:
        ``export_dir``.

    Raises:
        InputError: ``export_dir`` may not be written.
    """
    return save_saved_models([(module, export_dir, signatures)])[0]


# ---------------------------------------------------------------- TF Serving's versioned layout


def saved_model_versions(base: str) -> List[int]:
    """The versions in TF Serving model base path ``base``: its all-digit sub-folders, as
    integers, sorted ([] for a missing folder).

    Args:
        base: the model base path.

    Returns:
        The sorted version numbers.
    """
    if not files.isdir(base):
        return []
    return sorted(int(name) for name in files.listdir(base)
                  if _VERSION_RE.match(name) and files.isdir(os.path.join(base, name)))


def _next_version(base: str) -> str:
    """``<base>/<version>``, version = 1 + the largest in ``base`` (1 for none)."""
    versions = saved_model_versions(base)
    return os.path.join(base, str(versions[-1] + 1 if versions else 1))


def _is_within(path: str, folder: str) -> bool:
    path, folder = files.abspath(path).rstrip("/"), files.abspath(folder).rstrip("/")
    return path == folder or path.startswith(folder + "/")


def check_export_base(path: str, flag: str = "--export_dir",
                      others: Optional[Dict[str, Optional[str]]] = None) -> None:
    """``InputError`` (naming ``flag``) unless ``path`` can be a TF Serving model base path that
    ``save_saved_model_version`` adds a version to: missing (it is created), or a folder
    holding only version folders (all-digit names) and this layer's own hidden temporaries
    (``.<name>.<host>-<pid>.<random>.tmp``). ``others``: ``{flag: path}`` of the run's other
    outputs (``--output_dir``), which must not be ``path`` nor lie inside it. Tools call it
    when they check their flags (before any work) and again when they export.

    Args:
        path: the model base path.
        flag: the flag named in the message.
        others: ``{flag: path}`` of the run's other outputs, or None.

    Raises:
        InputError: ``path`` cannot be a model base path for this run.
    """
    for other_flag, other in (others or {}).items():
        if other and _is_within(other, path):
            raise InputError("%s=%s is %s=%s or holds it: the export needs a folder of its own "
                             "(TF Serving's model base path, holding only the version folders "
                             "1, 2, ... that exports add), e.g. %s=models/<name>"
                             % (flag, path, other_flag, other, flag))
    if not files.exists(path):
        if not files.is_url(path):  # the nearest existing folder must let it be created
            parent = os.path.dirname(files.abspath(path))
            while not os.path.exists(parent) and os.path.dirname(parent) != parent:
                parent = os.path.dirname(parent)
            if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
                raise InputError("%s=%s cannot be created: %s is not a writable folder"
                                 % (flag, path, parent))
        return
    if not files.isdir(path):
        raise InputError("%s=%s is a file: it must be a folder (TF Serving's model base path, "
                         "holding the version folders 1, 2, ...)" % (flag, path))
    foreign = [name for name in files.listdir(path)
               if not (_VERSION_RE.match(name) and files.isdir(os.path.join(path, name)))
               and not atomic.TEMP_RE.match(name)]
    if foreign:
        raise InputError("%s=%s holds other files than SavedModel versions (%s): it must be a "
                         "folder of its own (TF Serving's model base path; each export adds "
                         "the next version folder 1, 2, ... in it)"
                         % (flag, path, _examples(foreign)))
    if not files.is_url(path) and not os.access(path, os.W_OK | os.X_OK):
        raise InputError("%s=%s is not writable" % (flag, path))


def _remove_stale_version_temps(base: str) -> None:
    """Staging folders of exports into ``base`` that a killed process left (any version)."""
    versions = set()
    for name in files.listdir(base):
        m = atomic.TEMP_RE.match(name)
        if m is not None and _VERSION_RE.match(m.group("base")):
            versions.add(m.group("base"))
    for version in versions:
        atomic.remove_stale_temps(os.path.join(base, version))


def _claim(tmp: str, path: str) -> bool:
    """Renames staged folder ``tmp`` to ``path`` unless ``path`` exists (another export took
    that version meanwhile): True when done. Never replaces a non-empty folder."""
    if files.is_url(path):
        if files.exists(path):
            return False
        files.rename(tmp, path)
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

    Args:
        module: the ``tf.Module`` to save.
        base: the TF Serving model base path.
        signatures: a zero-argument callable returning the signatures dict.
        flag: the flag named in error messages.

    Returns:
        The version folder ``<base>/<version>``.

    Raises:
        InputError: ``base`` holds something other than versions.
        OSError: no free version folder after 1000 tries.
    """
    import tensorflow as tf

    check_export_base(base, flag)
    files.makedirs(base)
    _remove_stale_version_temps(base)
    first = _next_version(base)
    staging = atomic.staging_dir(first)
    try:
        tf.saved_model.save(module, staging, signatures=_traced_signatures(signatures))
        atomic.fault_point("write", first)
        for _ in range(1000):
            final = _next_version(base)
            atomic.fault_point("commit", final)
            if _claim(staging, final):
                return final
        raise OSError("%s: no free version folder after 1000 tries" % base)
    finally:
        if files.exists(staging):
            files.rmtree(staging, ignore_errors=True)
