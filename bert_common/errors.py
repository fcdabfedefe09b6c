"""The one error type for bad input: every tool reports it as one line and exit status 1.

``InputError`` is the base of every error a user can fix by changing a flag or a file: a
missing or malformed file, an unknown task, a checkpoint of another size, a flag out of range.
Its message names the file (and line) or the flag. The command-line tools (``bert_cli``)
print ``<tool>: error: <message>`` and exit with ``EXIT_BAD_INPUT``; any other exception is a
bug and keeps its traceback.

The library's own error types subclass it (``ConfigError``, ``CheckpointError``,
``VocabError``, ``ClassifierDataError``, ``SquadFormatError``, ``PretrainingDataError``, ...),
so library users can catch them one by one or all at once.
"""

import re
import sys

EXIT_BAD_INPUT = 1  # absl's own flag-parsing errors exit with 1 too


class InputError(ValueError):
    """Bad input (a file, a flag value, a combination of flags); the message names it."""


class FlagError(InputError):
    """A bad flag value or combination; the message names the flag (or the setting of the
    same name, for the fine-tuning driver's settings)."""


# How ``fatal`` ends the process: the tools' runner sets its own (bert_cli.runner), which
# names the tool and removes its temporary folder first.
FATAL_HANDLER = [None]


def fatal(message: str) -> None:
    """Ends the process at once (no exit handlers) with one line ``<program>: error:
    <message>`` and status ``EXIT_BAD_INPUT``: for failures found outside the main thread's
    flow, e.g. a JAX cluster whose peer died (modeling/training/backends/jax/cluster.py),
    where the runtime would otherwise abort the process with its stack traces. The tools'
    runner sets ``FATAL_HANDLER`` to its own.

    Args:
        message: what failed.
    """
    import os

    if FATAL_HANDLER[0] is not None:
        FATAL_HANDLER[0](message)
    print("%s: error: %s" % (os.path.basename(sys.argv[0] or "python"), message),
          file=sys.stderr, flush=True)
    os._exit(EXIT_BAD_INPUT)


def first_line(error: BaseException, text: "str | None" = None) -> str:
    """The first non-empty line of ``text`` (default: the error's message), or the error's
    type name when there is none: what a one-line report quotes of an exception.

    Args:
        error: the exception.
        text: the text to quote, or None for ``str(error)``.

    Returns:
        One line.
    """
    text = str(error) if text is None else text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def is_tf_error(e: BaseException) -> bool:
    """A ``tf.errors.OpError`` (file systems report through it: NotFound, PermissionDenied,
    DataLoss, ...); TensorFlow is not imported to check.

    Args:
        e: the exception.

    Returns:
        Whether it is a ``tf.errors.OpError``.
    """
    tf_errors = sys.modules.get("tensorflow.python.framework.errors_impl")
    return tf_errors is not None and isinstance(e, tf_errors.OpError)


def reason(e: BaseException) -> str:
    """The one line that says what went wrong: the message's first line, or for an error from
    inside a ``tf.function`` ("Graph execution error:", then the Python frames) its last line
    (e.g. "corrupted record at 1234"), without the node name.

    Args:
        e: the exception.

    Returns:
        One line of text.
    """
    message = str(getattr(e, "message", None) or getattr(e, "strerror", None) or str(e))
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    if lines[0].startswith("Graph execution error") and len(lines) > 1:
        cause = [line for line in lines[1:] if not line.startswith(("Detected at node",
                                                                    "File ", "[["))]
        if cause:
            return "%s (%s)" % (user_words(cause[-1].split("\t [[")[0].strip()),
                                type(e).__name__)
    return user_words(lines[0])


# TensorFlow's words that are not the user's: the op's function-node name, "[Op:SaveV2]", and
# the temporary files of a checkpoint save (<prefix>_temp/part-....tempstate<n>).
_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")
_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\]( name: ?\S*)?")
_CHECKPOINT_TEMP = re.compile(r"(\S+?)_temp/part-\S*?(?=[;:,\s]|$)")


def user_words(text: str) -> str:
    """``text`` without TensorFlow's node and op names, a checkpoint's temporary file named
    by the checkpoint it was writing ("<model_dir>/model.ckpt-45: No space left on device").

    Args:
        text: an error message.

    Returns:
        The cleaned message.
    """
    text = _OP_SUFFIX.sub("", _FUNCTION_NODE.sub("", text))
    match = _CHECKPOINT_TEMP.search(text)
    if match:
        cause = " ".join(part for part in (text[:match.start()].strip(" ;:,"),
                                           text[match.end():].strip(" ;:,")) if part)
        text = "%s: %s (writing the checkpoint)" % (match.group(1), cause or "failed")
    return text.strip()
