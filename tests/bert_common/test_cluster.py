"""bert_common/cluster.py: the chief of a multi-worker cluster, as MultiWorkerMirroredStrategy
picks it (the trainer and the run marker both ask it)."""

import pytest

from bert_common.cluster import is_chief_task

WORKERS = {"worker": ["a:1", "b:1"]}
WITH_CHIEF = {"chief": ["c:1"], "worker": ["a:1", "b:1"]}


@pytest.mark.parametrize("task_type,index,cluster,chief", [
    (None, None, {}, True),  # no cluster
    ("worker", 0, WORKERS, True),
    ("worker", 1, WORKERS, False),
    ("chief", 0, WITH_CHIEF, True),
    ("worker", 0, WITH_CHIEF, False),  # the cluster has a chief: worker 0 is not it
    ("evaluator", 0, WITH_CHIEF, False),
    ("ps", 0, WORKERS, False),
])
def test_the_chief_task(task_type, index, cluster, chief):
    assert is_chief_task(task_type, index, cluster) is chief
