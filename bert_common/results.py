"""``eval_results.txt`` and TensorBoard scalars: the one writer of each for every tool, on every
Keras backend.

``write_eval_results``: the ``key = value`` results. ``ScalarWriter``: TensorBoard scalars with
tensorboard's own event writer (TensorFlow's file systems, ``gs://`` among them, where
TensorFlow is installed; local folders without it): the training loops' ``train`` summaries
and, through ``write_eval_summaries``, the eval results in ``<output_dir>/eval``.

The original writes ``estimator.evaluate``'s dict: numpy float32 metrics and the int64
``global_step``, one ``"%s = %s" % (key, str(value))`` line per key in sorted order. Values
here go through ``numpy.float32`` the same way, so a metric computed in float64 prints as the
original's would (``0.6931472``, not ``0.6931471805599453``).
"""

from __future__ import annotations

import numbers
import os
import time
from typing import Dict, Mapping

import numpy as np
from absl import logging

from bert_common.atomic import atomic_open
from bert_common.files import makedirs
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


class ScalarWriter:
    """TensorBoard scalars in one event file of ``folder``, with tensorboard's own writer.

    Args:
        folder: the event folder (created).

    Example::

        writer = ScalarWriter("out/train")
        writer.write(10, {"loss": 2.5, "learning_rate": 1e-4})
        writer.close()
    """

    def __init__(self, folder: str):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        makedirs(folder)
        self._writer = EventFileWriter(folder)

    def write(self, step: int, values: Mapping[str, float]) -> None:
        """One scalar per name at ``step``.

        Args:
            step: the global step.
            values: tag -> value.
        """
        from tensorboard.compat.proto import event_pb2, summary_pb2

        summary = summary_pb2.Summary(value=[
            summary_pb2.Summary.Value(tag=name, simple_value=float(value))
            for name, value in values.items()])
        self._writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                               summary=summary))

    def flush(self) -> None:
        """Writes what is queued to the file."""
        self._writer.flush()

    def close(self) -> None:
        """Flushes and closes the event file."""
        self._writer.close()


def write_eval_summaries(output_dir: str, results: Mapping[str, float], step: int) -> None:
    """The numeric eval results (``summary_scalars``) as TensorBoard scalars in
    ``output_dir/eval`` at ``step``, beside the training loop's ``train`` summaries
    (``tensorboard --logdir output_dir`` shows both).

    Args:
        output_dir: the run's output folder (local or ``gs://``).
        results: eval results; ``global_step`` and values that are not real numbers are skipped.
        step: the global step the scalars are written at.
    """
    writer = ScalarWriter(os.path.join(output_dir, "eval"))
    try:
        writer.write(step, summary_scalars(results))
    finally:
        writer.close()
