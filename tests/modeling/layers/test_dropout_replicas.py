"""Dropout under several replicas (modeling/layers/dropout.py): each replica draws its own mask,
replica r from ``stateless_fold_in(seed, r)`` of the one seed stream; one replica keeps Keras'
own draw bit for bit. Mirrored over 2 logical CPUs runs in a subprocess (logical devices must
be set before TensorFlow starts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

from modeling.layers.dropout import Dropout
from tests import paths

_MIRRORED = r"""
import json, sys
sys.path.insert(0, %(root)r)
from modeling.training import strategies
strategies.split_cpu(2)
import tensorflow as tf
from modeling.layers.dropout import Dropout
strategy = strategies.make_strategy("mirrored")
with strategy.scope():
    layer = Dropout(0.5, seed=7)
    layer.build((4, 256))
x = tf.ones([4, 256])

@tf.function
def step():
    return strategy.run(lambda: layer(x, training=True))

outs = [[t.numpy() for t in strategy.experimental_local_results(step())] for _ in range(2)]
twin = Dropout(0.5, seed=7)  # the same seed stream, outside the strategy
twin.build((4, 256))
match = []
for call in range(2):
    seed = tf.cast(twin.seed_generator.next(), tf.int64)
    for r in range(2):
        want = tf.nn.experimental.stateless_dropout(
            x, rate=0.5, seed=tf.random.experimental.stateless_fold_in(seed, r)).numpy()
        match.append(bool((want == outs[call][r]).all()))
print(json.dumps({"replicas": strategy.num_replicas_in_sync, "match": match,
                  "replicas_differ": [bool((o[0] != o[1]).any()) for o in outs],
                  "calls_differ": bool((outs[0][0] != outs[1][0]).any())}))
"""


def test_each_replica_draws_its_own_mask_by_the_rule():
    proc = subprocess.run([sys.executable, "-c", _MIRRORED % {"root": paths.ROOT}],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2
    assert report["match"] == [True] * 4
    assert report["replicas_differ"] == [True, True] and report["calls_differ"]


def test_one_replica_keeps_keras_own_masks():
    x = tf.ones([8, 128])
    ours, theirs = Dropout(0.3, seed=11), keras.layers.Dropout(0.3, seed=11)
    for _ in range(3):
        np.testing.assert_array_equal(ours(x, training=True).numpy(),
                                      theirs(x, training=True).numpy())
