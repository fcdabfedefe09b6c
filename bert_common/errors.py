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

EXIT_BAD_INPUT = 1  # absl's own flag-parsing errors exit with 1 too


class InputError(ValueError):
    """Bad input (a file, a flag value, a combination of flags); the message names it."""


def first_line(error: BaseException, text: "str | None" = None) -> str:
    """The first non-empty line of ``text`` (default: the error's message), or the error's
    type name when there is none: what a one-line report quotes of an exception."""
    text = str(error) if text is None else text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
