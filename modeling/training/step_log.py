"""The trainer's step log: ``train_steps.jsonl`` in ``model_dir``, one JSON line per step.

Each record: ``{"step", "loss", "learning_rate", "global_norm"}`` (the step's loss, the rate
its update used, the gradients' global norm before clipping). The trainer's chief appends one
batch of lines per host loop and, when a run resumes from a checkpoint, first drops the lines
of steps after it (``truncate``), so the log of a resumed run reads as an uninterrupted one's.
"""

from __future__ import annotations

import json
import os
from typing import List, Sequence

from bert_common import atomic, files

STEP_LOG_NAME = "train_steps.jsonl"


def path_in(model_dir: str) -> str:
    """The step log's path in ``model_dir``.

    Args:
      model_dir: the trainer's output folder.

    Returns:
      ``model_dir/train_steps.jsonl``.
    """
    return os.path.join(model_dir, STEP_LOG_NAME)


def truncate(path: str, keep_through_step: int) -> None:
    """Drops the records of steps after ``keep_through_step`` (no file: nothing to do).

    Args:
      path: the step log.
      keep_through_step: the last step kept (the step of the checkpoint a run resumes from).
    """
    if not files.exists(path):
        return
    with files.open(path) as f:
        lines = [line for line in f if line.strip()
                 and json.loads(line)["step"] <= keep_through_step]
    with atomic.atomic_open(path) as f:
        f.writelines(lines)


def append(path: str, first_step: int, losses: Sequence[float], lrs: Sequence[float],
           norms: Sequence[float]) -> None:
    """Appends one record per step, for steps ``first_step``, ``first_step + 1``, ...

    Args:
      path: the step log.
      first_step: the step of the first record.
      losses: the steps' losses.
      lrs: the learning rates their updates used.
      norms: the gradients' global norms (before clipping).
    """
    # On GCS an append rewrites the object (objects are immutable): one append per host loop.
    with files.open(path, "a") as f:
        for i, (loss, lr, norm) in enumerate(zip(losses, lrs, norms)):
            f.write(json.dumps({"step": first_step + i, "loss": loss, "learning_rate": lr,
                                "global_norm": norm}) + "\n")


def read_step_log(model_dir: str) -> List[dict]:
    """The step log's records, one per step, in step order (the last record of a step wins).

    Args:
      model_dir: the trainer's output folder.

    Returns:
      The ``train_steps.jsonl`` records of ``model_dir``.
    """
    records = {}
    with files.open(path_in(model_dir)) as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                records[record["step"]] = record
    return [records[s] for s in sorted(records)]
