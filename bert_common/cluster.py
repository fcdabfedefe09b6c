"""Which process of a multi-worker cluster is its chief: the one that writes checkpoints,
summaries and results. One rule for the trainer (``modeling.training.strategies.is_chief``)
and the tools' run marker (``bert_cli.runner``); no TensorFlow import."""

from __future__ import annotations

from typing import Mapping, Optional


def is_chief_task(task_type: Optional[str], task_index: Optional[int],
                  cluster: Mapping) -> bool:
    """``MultiWorkerMirroredStrategy``'s choice: the ``chief`` task, else ``worker`` 0 of a
    cluster that has no chief; a process without a task (no cluster) is its own chief.

    Args:
        task_type: the task's type (``"chief"``, ``"worker"``, ...), or None without a cluster.
        task_index: the task's index within its type, or None.
        cluster: the ``TF_CONFIG`` cluster spec (type -> list of addresses).

    Returns:
        Whether this task is the chief.
    """
    if not task_type or task_type == "chief":
        return True
    return task_type == "worker" and int(task_index or 0) == 0 and "chief" not in cluster
