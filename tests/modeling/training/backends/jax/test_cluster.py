"""modeling/training/backends/jax/cluster.py: the cluster flags' checks and each process's
rows of a global batch (plain Python; the processes themselves are
tests/bert_tasks/test_jax_pretraining.py's)."""

import types

import numpy as np
import pytest

from bert_common.errors import FlagError
from modeling.training.backends.jax import cluster


def _settings(**values):
    base = dict(coordinator_address=None, num_processes=None, process_id=None,
                initialization_timeout=300)
    base.update(values)
    return types.SimpleNamespace(**base)


def test_no_cluster_flag_is_one_process():
    cluster.check_flags(_settings())
    cluster.check_flags(types.SimpleNamespace())  # a tool without the flags


@pytest.mark.parametrize("values, words", [
    (dict(num_processes=2, process_id=0), "go together (given: --num_processes, --process_id)"),
    (dict(coordinator_address="10.0.0.1:1234"), "go together (given: --coordinator_address)"),
    (dict(coordinator_address="10.0.0.1", num_processes=2, process_id=0),
     "--coordinator_address=10.0.0.1: HOST:PORT"),
    (dict(coordinator_address="h:1", num_processes=0, process_id=0), "--num_processes=0"),
    (dict(coordinator_address="h:1", num_processes=2, process_id=2),
     "--process_id=2: out of range for --num_processes=2 (0 to 1)"),
    (dict(coordinator_address="h:1", num_processes=2, process_id=-1), "--process_id=-1"),
    (dict(coordinator_address="h:1", num_processes=2, process_id=1, initialization_timeout=0),
     "--initialization_timeout=0"),
])
def test_bad_cluster_flags_name_themselves(values, words):
    with pytest.raises(FlagError) as raised:
        cluster.check_flags(_settings(**values))
    assert words in str(raised.value)


def test_each_process_keeps_its_part_of_the_global_batch(monkeypatch):
    batch = {"input_ids": np.arange(24).reshape(8, 3), "labels": np.arange(8)}
    assert cluster.local_rows(batch)["labels"].tolist() == list(range(8))  # one process
    monkeypatch.setattr(cluster, "process_count", lambda: 4)
    parts = []
    for index in range(4):
        monkeypatch.setattr(cluster, "process_index", lambda index=index: index)
        parts.append(cluster.local_rows(batch))
    np.testing.assert_array_equal(np.concatenate([p["input_ids"] for p in parts]),
                                  batch["input_ids"])
    assert [p["labels"].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_the_mesh_holds_each_process_devices_together(monkeypatch):
    """Whatever order the runtime lists devices in, the mesh is by process then id, so that a
    process's places are consecutive (its rows of each batch, its input pipelines) and its
    input share is named by them."""
    import jax

    listed = [types.SimpleNamespace(process_index=p, id=i)
              for p, i in ((1, 3), (0, 1), (1, 2), (0, 0))]
    monkeypatch.setattr(jax, "devices", lambda: listed)
    assert [(d.process_index, d.id) for d in cluster.mesh_devices()] == [(0, 0), (0, 1), (1, 2),
                                                                          (1, 3)]
    monkeypatch.setattr(cluster, "process_count", lambda: 2)
    monkeypatch.setattr(cluster, "process_index", lambda: 1)
    assert cluster.device_places() == ([2, 3], 4)
    assert cluster.input_share(deterministic=True) == "process-1-of-2-devices-4"
