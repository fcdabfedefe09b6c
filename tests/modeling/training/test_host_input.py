"""modeling/training/host_input.py: per-host input gives the global batches of the
dataset, split over replicas as experimental_distribute_dataset splits them."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from modeling.training import host_input
from tests import paths

B = 8


def _global_batches(n=5):
    rows = np.arange(n * B * 3, dtype=np.int32).reshape(n * B, 3)
    return tf.data.Dataset.from_tensor_slices({"x": rows}).batch(B, drop_remainder=True)


@pytest.mark.parametrize("replicas,pipelines", [(1, 1), (2, 1), (4, 2), (4, 4), (8, 2)])
def test_pipelines_together_hold_each_global_batch_in_replica_order(replicas, pipelines):
    per_pipeline = replicas // pipelines
    streams = []
    for pipeline in range(pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines,
                                             input_pipeline_id=pipeline,
                                             num_replicas_in_sync=replicas)
        pieces = host_input.replica_pieces(_global_batches(), context)
        streams.append([p["x"].numpy() for p in pieces])
    for step, batch in enumerate(_global_batches()):
        # The strategy gives pipeline w's consecutive pieces to its replicas in order.
        rebuilt = np.concatenate([streams[w][step * per_pipeline + j]
                                  for w in range(pipelines) for j in range(per_pipeline)])
        np.testing.assert_array_equal(rebuilt, batch["x"].numpy())


def test_indivisible_batch_is_a_clear_error():
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=3)
    with pytest.raises(ValueError, match="divisible by the 3 replicas"):
        host_input.replica_pieces(_global_batches(), context)


MIRRORED = """
import numpy as np
import tensorflow as tf
from modeling.training import host_input, strategies
from tests.modeling.training.test_host_input import _global_batches
strategies.split_cpu(2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
ours = iter(host_input.distribute(strategy, _global_batches(), skip=1))
theirs = iter(strategy.experimental_distribute_dataset(_global_batches().skip(1)))
for _ in range(4):
    a = strategy.experimental_local_results(next(ours)["x"])
    b = strategy.experimental_local_results(next(theirs)["x"])
    assert len(a) == 2
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
print("same batches")
"""


def test_mirrored_gets_the_batches_experimental_distribute_dataset_gives():
    # A fresh process: the CPU is split into 2 logical devices before TensorFlow starts.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH)
    proc = subprocess.run([sys.executable, "-c", MIRRORED], env=env, cwd=paths.ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "same batches" in proc.stdout, proc.stderr[-2000:]


def test_a_dataset_function_skips_its_share_of_consumed_batches():
    strategy = tf.distribute.get_strategy()  # one replica, one pipeline

    def per_replica(context):
        return _global_batches()

    first = next(iter(host_input.distribute(strategy, per_replica, skip=2)))
    np.testing.assert_array_equal(first["x"].numpy(), list(_global_batches())[2]["x"].numpy())
