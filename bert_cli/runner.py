"""How every tool runs: flags, then one call; bad input is one line and exit status 1.

Each tool module defines ``define_flags(flag_values)`` and ``run(flag_values)`` (the one call
into the library; it raises ``InputError`` for bad input), and ends with its two entry
points (``entry_points``)::

    # main(argv): absl's main; entry(): the console command and ``python run_classifier.py``
    main, entry = runner.entry_points("run_classifier.py", define_flags, run,
                                      required=("task_name", ...))

``run_main`` turns an ``InputError`` (any library error type: they all subclass it) or an
``OSError`` into ``<tool>: error: <message>`` on stderr and exit status ``EXIT_BAD_INPUT`` (1,
as absl's own flag errors); anything else is a bug and keeps its traceback. ``start`` lists every
flag of the tool, the shared ones included, in ``--help``. With ``BERT_TRACEBACK=1`` in the
environment every error keeps its traceback (for a bug report about a one-line error).

A successful run of a tool with ``--output_dir`` ends by writing ``run_outputs.json`` there
(``mark_outputs``): what this run wrote, and the result files beside them that an earlier run
left (named in a warning too), so that old scores are never taken for new ones. A run that
fails after some of its results were put in place writes it too, with its error line.

A tool's process keeps its scratch files in a folder of its own under the system's temp folder
(``private_temp_folder``), removed on every way out: TensorFlow's autograph writes a module file
per traced function there and the GCS file system stages each upload there, and both are left
behind by an exit that skips Python's teardown.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
from typing import Any, Callable, List, Optional, Sequence, Tuple

from absl import app, flags, logging

from bert_common import errors
from bert_common.errors import EXIT_BAD_INPUT, InputError


def fail(tool: str, message: Any) -> None:
    """One line ``<tool>: error: <message>`` on stderr, then exit status 1.

    Args:
        tool: the tool's name.
        message: the error (an exception or text).

    Raises:
        SystemExit: always (status 1).
    """
    print("%s: error: %s" % (tool, message), file=sys.stderr, flush=True)
    sys.exit(EXIT_BAD_INPUT)


def fail_at_once(tool: str, message: Any) -> None:
    """``fail``, then leave without Python's exit handlers: a worker of a multi-worker cluster
    whose collectives failed (UnavailableError) hung for minutes in TensorFlow's exit (its
    coordination service waits for the peers at shutdown), while the peers waited for it in a
    collective. Its outputs are already finished or removed when this is called.

    Args:
        tool: the tool's name.
        message: the error.
    """
    print("%s: error: %s" % (tool, message), file=sys.stderr, flush=True)
    sys.stdout.flush()
    logging.flush()
    remove_private_temp_folder()
    os._exit(EXIT_BAD_INPUT)


def warn(tool: str, message: str) -> None:
    """One line ``<tool>: warning: <message>`` on stderr.

    Args:
        tool: the tool's name.
        message: the warning.
    """
    print("%s: warning: %s" % (tool, message), file=sys.stderr, flush=True)


def _missing_tensorflow(error: BaseException) -> Optional[str]:
    """The message for a run that needs TensorFlow where it is not installed (Keras on another
    backend), or None for any other error."""
    name = (getattr(error, "name", None) or "").split(".")[0]
    if not isinstance(error, ModuleNotFoundError) or name not in ("tensorflow",
                                                                   "tensorflow_text"):
        return None
    return ("%s is not installed, and this run needs it (without it, KERAS_BACKEND=jax runs "
            "the tools on local paths, not gs://, and on Hugging Face, .weights.h5 or JAX "
            "checkpoints, not TF1 ones or SavedModels: convert_checkpoint.py "
            "--output_format=hf turns a TF1 checkpoint into a Hugging Face folder where "
            "TensorFlow is; docs/jax.md)" % name)


def run_main(tool: str, run: Callable[[flags.FlagValues], Any], flag_values: flags.FlagValues,
             argv: Sequence[str]) -> Any:
    """``run(flag_values)``, with bad input reported as one line and exit status 1.

    Args:
        tool: the tool's name.
        run: the tool's ``run(flag_values)``.
        flag_values: the parsed flag values.
        argv: absl's remaining command line (only the program name is allowed).

    Returns:
        What ``run`` returns.

    Raises:
        SystemExit: bad input (status 1, after one error line).
    """
    if len(argv) > 1:
        fail(tool, "unexpected arguments: %s" % " ".join(argv[1:]))
    from bert_common import atomic, files

    keep_traceback = os.environ.get("BERT_TRACEBACK", "") not in ("", "0")
    errors.FATAL_HANDLER[0] = lambda message: fail_at_once(tool, message)
    output_dir = flag_values["output_dir"].value if "output_dir" in flag_values else None
    chief = _is_chief_process(flag_values)
    made_output_dir = bool(output_dir) and chief and not _exists(output_dir)
    written: List[str] = []
    try:
        with atomic.recording_writes() as written, _kernel_choice(flag_values):
            result = run(flag_values)
    except Exception as e:  # noqa: BLE001
        missing = _missing_tensorflow(e)
        peer = _jax_peer_failure(e)
        one_line = (isinstance(e, (InputError, OSError)) or errors.is_tf_error(e)
                    or missing is not None or peer is not None)
        if keep_traceback or not one_line:
            if _in_a_cluster(flag_values):
                # a bug, in one process of a cluster: its traceback, then out at once (at a
                # normal exit it would wait for the peers, which wait for it)
                traceback.print_exc()
                fail_at_once(tool, "%s (the traceback above)" % errors.reason(e))
            raise  # a bug: the traceback is what its report needs
        if missing is not None:
            message = missing
        elif peer is not None:
            message = peer
        else:
            message = str(e) if isinstance(e, (InputError, OSError)) else errors.reason(e)
        # Its notes belong on the line: e.g. where a previous output is kept that a failed
        # commit could not put back (bert_common.atomic).
        notes = [n for n in getattr(e, "__notes__", []) if n]
        if notes:
            message += " (%s)" % "; ".join(notes)
        if made_output_dir:
            _remove_if_no_file(output_dir)  # the folder this run made, holding nothing
        if output_dir and chief and _results_in(output_dir, written):
            # Results of the steps that finished are in place: say which, beside older ones.
            try:
                mark_outputs(tool, output_dir, written, error=message)
            except Exception:  # noqa: BLE001 - the run's own error is the one to report
                _remove_marker(output_dir)
        if _in_a_cluster(flag_values):
            fail_at_once(tool, message)
        fail(tool, message)  # e.g. a gs:// object not found or not readable
    if output_dir and chief and files.isdir(output_dir):
        try:
            mark_outputs(tool, output_dir, written)
        except Exception as e:  # noqa: BLE001 - the run itself succeeded: say so, exit 0
            if keep_traceback:
                raise
            removed = _remove_marker(output_dir)
            warn(tool, "could not write %s in %s (%s)%s" % (
                RUN_OUTPUTS, output_dir, errors.reason(e),
                "; the earlier run's one, which would list its outputs as this run's, was "
                "removed" if removed else ""))
    return result


def _kernel_choice(flag_values: flags.FlagValues):
    """``--noxla_kernels`` (and run_pretraining's ``--deterministic``) keep TensorFlow's ops in
    prediction and evaluation too, not only in training (``modeling/kernels/switch.py``)."""
    def value(name, default):
        return flag_values[name].value if name in flag_values else default

    if not value("xla_kernels", True) or value("deterministic", False):
        # imported here: ``modeling`` loads TensorFlow, which the text tools never import
        from modeling.kernels import switch

        return switch.fused_inference_kernels(False)
    return contextlib.nullcontext()


def _remove_marker(output_dir: str) -> bool:
    """Removes an earlier run's ``run_outputs.json`` (this run could not replace it, and it
    would name that run's outputs as this one's); whether there was one to remove."""
    from bert_common import files

    path = os.path.join(output_dir, RUN_OUTPUTS)
    try:
        if files.exists(path):
            files.remove(path)
            return True
    except Exception:  # noqa: BLE001 - best effort after a failed write
        pass
    return False


RUN_OUTPUTS = "run_outputs.json"
# Files of --output_dir that are not results: training state (checkpoints, the step log,
# TensorBoard files), cached inputs (TFRecords), the model's files, hidden temporaries.
_NOT_RESULTS = re.compile(r"^(checkpoint|.*\.index|.*\.data-\d{5}-of-\d{5}|.*\.tf_?record"
                          r"|events\.out\.tfevents\..*|train_steps\.jsonl|bert_config\.json"
                          r"|vocab\.txt|labels\.txt|%s|\..*)$" % re.escape(RUN_OUTPUTS))


def _results_in(output_dir: str, written: Sequence[str]) -> List[str]:
    """The paths of ``written`` that are result files of ``output_dir`` (not training state,
    not files elsewhere, such as the compiled-kernel cache)."""
    from bert_common import files

    root = files.abspath(output_dir).rstrip("/") + "/"
    return [p for p in written if p.startswith(root) and "/" not in p[len(root):]
            and not _NOT_RESULTS.match(os.path.basename(p))]


def mark_outputs(tool: str, output_dir: str, written: Sequence[str],
                 error: Optional[str] = None) -> List[str]:
    """Writes ``<output_dir>/run_outputs.json``: ``{"tool", "finished" (UTC),
    "written": [this run's outputs in output_dir, relative], "earlier": [result files there
    that this run did not write], "error": the failed run's error line, or null}``; warns
    about ``earlier`` ones (after a success); returns them.

    Args:
        tool: the tool's name.
        output_dir: the run's output folder.
        written: the paths this run wrote.
        error: the failed run's error line, or None.

    Returns:
        The ``earlier`` files (relative paths).
    """
    from bert_common import atomic, files

    root = files.abspath(output_dir)
    mine = sorted(os.path.relpath(p, root) for p in set(written)
                  if p.startswith(root.rstrip("/") + "/"))
    earlier = []
    for name in sorted(files.listdir(output_dir)):
        path = os.path.join(root, name.rstrip("/"))
        if (name.endswith("/") or _NOT_RESULTS.match(name) or path in written
                or files.isdir(path)):
            continue
        earlier.append(name)
    record = {"tool": tool, "finished": datetime.datetime.now(datetime.timezone.utc)
              .strftime("%Y-%m-%dT%H:%M:%SZ"), "written": mine, "earlier": earlier,
              "error": error}
    with atomic.atomic_open(os.path.join(output_dir, RUN_OUTPUTS)) as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    if earlier and error is None:
        warn(tool, "%s in %s: left by an earlier run, not written by this one (%s lists this "
                   "run's outputs)" % (", ".join(earlier), output_dir, RUN_OUTPUTS))
    return earlier


def _is_chief_process(flag_values: flags.FlagValues) -> bool:
    """False for the workers of a ``--strategy=multi_worker`` cluster other than its chief
    (``TF_CONFIG``: task ``chief``, else ``worker`` 0 of a cluster without one, as
    ``MultiWorkerMirroredStrategy`` picks it) and for JAX's processes other than
    ``--process_id=0``; they do not mark outputs. Other strategies ignore ``TF_CONFIG``."""
    if "process_id" in flag_values and flag_values["process_id"].value is not None:
        return flag_values["process_id"].value == 0  # JAX's processes: process 0 writes
    if "strategy" not in flag_values or flag_values["strategy"].value != "multi_worker":
        return True
    from bert_common.cluster import is_chief_task

    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        task, cluster = config.get("task") or {}, config.get("cluster") or {}
        return is_chief_task(task.get("type"), int(task.get("index", 0) or 0), cluster)
    except (ValueError, TypeError, AttributeError):
        return True  # the strategy reports a malformed TF_CONFIG itself


def _in_a_cluster(flag_values: flags.FlagValues) -> bool:
    """Whether this process is one of several workers (``--strategy=multi_worker`` with a
    ``TF_CONFIG`` cluster of more than one task, or a JAX cluster it joined)."""
    jax_cluster = sys.modules.get("modeling.training.backends.jax.cluster")
    if jax_cluster is not None and jax_cluster.joined() > 1:
        return True
    if "strategy" not in flag_values or flag_values["strategy"].value != "multi_worker":
        return False
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or {}
        return sum(len(tasks) for tasks in cluster.values()) > 1
    except (ValueError, TypeError, AttributeError):
        return False


def _jax_peer_failure(e: BaseException) -> Optional[str]:
    """The one line for ``e`` if it is a JAX cluster's runtime error (a peer's connection
    closed in a collective), else None."""
    jax_cluster = sys.modules.get("modeling.training.backends.jax.cluster")
    return None if jax_cluster is None else jax_cluster.peer_failure(e)


def _exists(path: str) -> bool:
    from bert_common import files

    try:
        return files.exists(path)
    except Exception:  # noqa: BLE001 - an unreachable bucket: the run's own check says so
        return True


def _remove_if_no_file(folder: str) -> None:
    """Removes ``folder`` when no file is under it (only empty folders): what a failed run
    made before it wrote anything."""
    from bert_common import files

    def has_file(path):
        for name in files.listdir(path):
            child = os.path.join(path, name.rstrip("/"))
            if not files.isdir(child) or has_file(child):
                return True
        return False

    try:
        if files.isdir(folder) and not has_file(folder):
            files.rmtree(folder)
    except Exception:  # noqa: BLE001 - the run's own error is the one to report
        pass


def entry_points(tool: str, define_flags: Callable[[flags.FlagValues], None],
                 run: Callable[[flags.FlagValues], Any], required: Sequence[str] = ()
                 ) -> Tuple[Callable[[Sequence[str]], None], Callable[[], None]]:
    """A tool's ``main(argv)`` (absl's main: ``run`` on the parsed ``flags.FLAGS`` under
    ``run_main``) and ``entry()`` (its console command and ``python <tool>``: ``start``).

    Args:
        tool: the tool's name, as its error lines show it (``run_classifier.py``).
        define_flags: the tool's ``define_flags(flag_values)``.
        run: the tool's ``run(flag_values)``.
        required: the flags absl must see set.

    Returns:
        ``(main, entry)``.
    """

    def main(argv: Sequence[str]) -> None:
        """``run`` under ``runner.run_main`` (absl's main: what it returns is the exit status,
        so ``run``'s result is not returned).

        Args:
            argv: the command line left after absl's flags (only the program name).
        """
        run_main(tool, run, flags.FLAGS, argv)

    def entry() -> None:
        """The tool's console command and ``python <tool>``."""
        start(define_flags, main, required)

    return main, entry


def _list_in_help(flag_values: flags.FlagValues) -> None:
    """Makes every flag that is not absl's own a key flag of the main module: ``--help`` lists
    the shared flags too (absl shows only the main module's own flags otherwise)."""
    main_module = sys.argv[0]
    for module, module_flags in flag_values.flags_by_module_dict().items():
        if module.startswith("absl."):
            continue
        for flag in module_flags:
            flag_values.register_key_flag_for_module(main_module, flag)


def start(define_flags: Callable[[flags.FlagValues], None],
          main: Callable[[Sequence[str]], Any], required: Sequence[str] = ()) -> None:
    """The console command / ``__main__`` of a tool: defines its flags, marks ``required`` ones
    (absl then refuses a run without them, exit status 1) and runs ``main``.

    Args:
        define_flags: the tool's ``define_flags(flag_values)``.
        main: the tool's ``main(argv)``.
        required: the flags absl must see set.
    """
    define_flags(flags.FLAGS)
    for name in required:
        flags.mark_flag_as_required(name)
    _list_in_help(flags.FLAGS)
    private_temp_folder()
    try:
        app.run(main)
    except SystemExit as e:
        # absl exits with 1 after printing --help: asking for help is not an error.
        if e.code == 1 and _HELP_FLAGS.intersection(sys.argv[1:]):
            sys.exit(0)
        if e.code in (None, 0) and skips_teardown(os.environ):
            exit_without_teardown(0)
        raise


# (the process's own temp folder, tempfile.tempdir and TMPDIR before it), once made
_TEMP_FOLDER: List[Any] = []


# The longest system temp folder that keeps a forkserver's socket inside the tool's folder under
# the 107 bytes of an AF_UNIX path: it adds "/.bert-tmp.<host>-<pid>.<8>.tmp" (at most 38) and
# multiprocessing's "/pymp-<8>/listener-<8>" (32).
MAX_TEMP_BASE = 37


def private_temp_folder() -> Optional[str]:
    """Makes a folder of this process's own in the system's temp folder and points ``tempfile``
    and ``TMPDIR`` (read by TensorFlow's C++ side, e.g. the GCS file system's upload staging) at
    it, so that ``remove_private_temp_folder`` takes every scratch file of the run with it: at
    exit (after multiprocessing has removed its own temp folder in it), or before an exit that
    skips the exit handlers (``exit_without_teardown``, ``fail_at_once``). It is named as
    ``bert_common.atomic``'s temporaries (``.bert-tmp.<host>-<pid>.<random>.tmp``): the one a
    killed run left, with what is in it, goes when the next tool starts. Nothing changes where
    the system's temp folder's path is longer than ``MAX_TEMP_BASE`` (a forkserver's socket
    would not fit in it; macOS's ``TMPDIR``) or no folder can be made (a full or read-only
    disk). A second call returns the same folder.

    Returns:
        The folder's path, or None.
    """
    if not _TEMP_FOLDER:
        from multiprocessing import util as mp_util

        from bert_common import atomic

        base = tempfile.gettempdir()
        if len(base) > MAX_TEMP_BASE:
            return None
        try:
            folder = atomic.staging_dir(os.path.join(base, "bert-tmp"))
        except OSError:
            return None  # the run's own writes will say what is wrong, in one line
        _TEMP_FOLDER.append((folder, tempfile.tempdir, os.environ.get("TMPDIR")))
        tempfile.tempdir = folder
        os.environ["TMPDIR"] = folder
        # Run by multiprocessing's exit handler after its finalizers of higher priority: its
        # own temp folder's (-100), which it removes without ignoring errors.
        mp_util.Finalize(None, remove_private_temp_folder, exitpriority=-200)
    return _TEMP_FOLDER[0][0] if _TEMP_FOLDER else None


def remove_private_temp_folder() -> None:
    """Removes the folder of ``private_temp_folder`` with what is in it (nothing when none was
    made); ``tempfile`` and ``TMPDIR`` are then as before."""
    while _TEMP_FOLDER:
        folder, tempdir, before = _TEMP_FOLDER.pop()
        shutil.rmtree(folder, ignore_errors=True)
        tempfile.tempdir = tempdir
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before


def skips_teardown(env: Any) -> bool:
    """Whether a successful run ends without Python's interpreter teardown
    (``exit_without_teardown``): yes, unless the process is a worker of a multi-worker cluster
    (``TF_CONFIG`` names more than one task), whose TensorFlow runtime meets its peers at
    shutdown, or the environment has ``BERT_SLOW_EXIT=1``.

    Args:
        env: the process's environment (``os.environ``).

    Returns:
        A bool.
    """
    if env.get("BERT_SLOW_EXIT", "") == "1":
        return False
    try:  # a TF_CONFIG TensorFlow would refuse: the slow exit, never a traceback here
        cluster = json.loads(env.get("TF_CONFIG") or "{}").get("cluster") or {}
        return sum(len(tasks) for tasks in cluster.values()) <= 1
    except (ValueError, AttributeError, TypeError):
        return False


def exit_without_teardown(code: int) -> None:
    """Ends the process with ``code`` once its output streams and logs are flushed, skipping the
    interpreter's teardown: the tool's outputs are written and closed when its ``main`` returns
    (files through ``bert_common.atomic``, summaries flushed), and tearing down thousands of
    TensorFlow modules and objects cost a second or more of CPU after every run. A process of
    a JAX cluster first leaves it with the others (``cluster.leave``): Python's exit handlers
    would have."""
    jax_cluster = sys.modules.get("modeling.training.backends.jax.cluster")
    if jax_cluster is not None and code == 0:
        jax_cluster.leave()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    logging.flush()
    import logging as std_logging

    std_logging.shutdown()
    remove_private_temp_folder()
    os._exit(code)


_HELP_FLAGS = frozenset(("--help", "-help", "-h", "-?", "--helpshort", "--helpfull",
                         "--helpxml"))


__all__ = ["MAX_TEMP_BASE", "entry_points", "exit_without_teardown", "fail",
           "private_temp_folder", "remove_private_temp_folder", "run_main", "skips_teardown",
           "start", "warn"]
