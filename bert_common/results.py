"""``eval_results.txt``: the one writer of every tool's ``key = value`` results.

The original writes ``estimator.evaluate``'s dict: numpy float32 metrics and the int64
``global_step``, one ``"%s = %s" % (key, str(value))`` line per key in sorted order. Values
here go through ``numpy.float32`` the same way, so a metric computed in float64 prints as the
original's would (``0.6931472``, not ``0.6931471805599453``).
"""

from __future__ import annotations

import numbers
from typing import Dict, Mapping

import numpy as np
from absl import logging

from bert_common.atomic import atomic_open
from bert_common.files import open as files_open

INTEGER_KEYS = frozenset(("global_step",))


def summary_scalars(results: Mapping[str, float]) -> Dict[str, float]:
    """The results that go to TensorBoard as scalars: real numbers, ``global_step`` (the
    scalars' step) and booleans left out.

    Args:
        results: eval results.

    Returns:
        name -> float, sorted by name.
    """
    return {key: float(value) for key, value in sorted(results.items())
            if key not in INTEGER_KEYS and isinstance(value, numbers.Real)
            and not isinstance(value, bool)}


def format_eval_results(results: Mapping[str, float]) -> str:
    """``key = value`` lines, sorted keys; ``global_step`` as an integer, the rest float32.

    Args:
        results: metric name -> value.

    Returns:
        The text.
    """
    lines = []
    for key in sorted(results):
        value = results[key]
        text = str(int(value)) if key in INTEGER_KEYS else str(np.float32(value))
        lines.append("%s = %s\n" % (key, text))
    return "".join(lines)


def write_eval_results(path: str, results: Mapping[str, float]) -> str:
    """Writes ``format_eval_results(results)`` to ``path`` (atomically) and logs each line
    under ``***** Eval results *****`` as the original; returns the text.

    Args:
        path: the file (local or ``gs://``).
        results: metric name -> value.

    Returns:
        The text written.
    """
    text = format_eval_results(results)
    with atomic_open(path) as writer:
        writer.write(text)
    logging.info("***** Eval results *****")
    for line in text.splitlines():
        logging.info("  %s", line)
    return text


def read_eval_results(path: str) -> dict:
    """The ``key -> str`` pairs of an ``eval_results.txt``.

    Args:
        path: the file (local or ``gs://``).

    Returns:
        key -> value text (``float(...)`` it where needed).
    """
    with files_open(path) as f:
        return dict(line.rstrip("\n").split(" = ", 1) for line in f if " = " in line)
