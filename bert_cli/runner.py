"""How every tool runs: flags, then one call; bad input is one line and exit status 1.

Each tool module defines ``define_flags(flag_values)`` and ``run(flag_values)`` (the one call
into the library; it raises ``InputError`` for bad input), and ends with::

    def main(argv):
        runner.run_main("run_classifier.py", run, FLAGS, argv)

    def entry():                     # the console command and ``python run_classifier.py``
        runner.start(define_flags, main, required=("task_name", ...))

``run_main`` turns an ``InputError`` (any library error type: they all subclass it) or an
``OSError`` into ``<tool>: error: <message>`` on stderr and exit status ``EXIT_BAD_INPUT`` (1,
as absl's own flag errors); anything else is a bug and keeps its traceback. ``start`` lists every
flag of the tool, the shared ones included, in ``--help``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Sequence

from absl import app, flags

from bert_common.errors import EXIT_BAD_INPUT, InputError
from bert_cli.flags import FlagError


def fail(tool: str, message: Any) -> None:
    """One line ``<tool>: error: <message>`` on stderr, then exit status 1."""
    print("%s: error: %s" % (tool, message), file=sys.stderr, flush=True)
    sys.exit(EXIT_BAD_INPUT)


def warn(tool: str, message: str) -> None:
    """One line ``<tool>: warning: <message>`` on stderr."""
    print("%s: warning: %s" % (tool, message), file=sys.stderr, flush=True)


def run_main(tool: str, run: Callable[[flags.FlagValues], Any], flag_values: flags.FlagValues,
             argv: Sequence[str]) -> Any:
    """``run(flag_values)``, with bad input reported as one line and exit status 1."""
    if len(argv) > 1:
        fail(tool, "unexpected arguments: %s" % " ".join(argv[1:]))
    try:
        return run(flag_values)
    except (InputError, OSError) as e:
        fail(tool, e)
    except Exception as e:  # noqa: BLE001
        if not _is_tf_error(e):
            raise  # a bug: the traceback is what its report needs
        fail(tool, _reason(e))  # e.g. a gs:// object not found or not readable


def _is_tf_error(e: BaseException) -> bool:
    """A ``tf.errors.OpError`` (file systems report through it: NotFound, PermissionDenied,
    DataLoss, ...); TensorFlow is not imported to check."""
    tf_errors = sys.modules.get("tensorflow.python.framework.errors_impl")
    return tf_errors is not None and isinstance(e, tf_errors.OpError)


def _reason(e: BaseException) -> str:
    """The one line that says what went wrong: the message's first line, or for an error from
    inside a ``tf.function`` ("Graph execution error:", then the Python frames) its last line
    (e.g. "corrupted record at 1234"), without the node name."""
    message = str(getattr(e, "message", None) or getattr(e, "strerror", None) or str(e))
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    if lines[0].startswith("Graph execution error") and len(lines) > 1:
        cause = [line for line in lines[1:] if not line.startswith(("Detected at node",
                                                                    "File ", "[["))]
        if cause:
            return "%s (%s)" % (cause[-1].split("\t [[")[0].strip(), type(e).__name__)
    return lines[0]


def prepare_output_dir(path: str) -> None:
    """Creates ``--output_dir`` and proves it writable (``FlagError`` naming it otherwise), so
    that a run fails before any work rather than at its first checkpoint."""
    from bert_common import files

    try:
        files.makedirs(path)
        probe = os.path.join(path, ".write_probe.%d" % os.getpid())
        with files.open(probe, "w") as f:
            f.write("ok")
        files.remove(probe)
    except Exception as e:  # noqa: BLE001 - OSError, or tf.errors.* for a gs:// folder
        if not isinstance(e, OSError) and not _is_tf_error(e):
            raise
        raise FlagError("--output_dir=%s is not writable (%s)" % (path, _reason(e))) from None


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
    (absl then refuses a run without them, exit status 1) and runs ``main``."""
    define_flags(flags.FLAGS)
    for name in required:
        flags.mark_flag_as_required(name)
    _list_in_help(flags.FLAGS)
    try:
        app.run(main)
    except SystemExit as e:
        # absl exits with 1 after printing --help: asking for help is not an error.
        if e.code == 1 and _HELP_FLAGS.intersection(sys.argv[1:]):
            sys.exit(0)
        raise


_HELP_FLAGS = frozenset(("--help", "-help", "-h", "-?", "--helpshort", "--helpfull",
                         "--helpxml"))


__all__ = ["EXIT_BAD_INPUT", "FlagError", "InputError", "fail", "prepare_output_dir", "run_main",
           "start", "warn"]
