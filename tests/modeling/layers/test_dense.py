"""BertDense: the same layer as keras Dense, laid out so that oneDNN fuses it on CPU."""

import collections
import glob

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from modeling.encoder import BertModel
from modeling.config import BertConfig
from modeling.layers.dense import BertDense


def test_same_result_and_variables_as_keras_dense():
    x = tf.random.stateless_normal((2, 5, 8), seed=(1, 2))
    ours = BertDense(6, activation="tanh", name="dense")
    reference = keras.layers.Dense(6, activation="tanh", name="dense")
    ours.build(x.shape)
    reference.build(x.shape)
    reference.set_weights(ours.get_weights())
    assert [v.path.split("/")[-1] for v in ours.weights] == ["kernel", "bias"]
    np.testing.assert_allclose(ours(x).numpy(), reference(x).numpy(), rtol=1e-6, atol=1e-6)
    assert ours(x).shape == (2, 5, 6)
    assert ours(tf.reshape(x, [10, 8])).shape == (10, 6)


def _op_kinds(fn, arg, logdir):
    """{graph node name: kernel that ran it} of one call, from the profiler's trace."""
    fn(arg)
    tf.profiler.experimental.start(logdir)
    np.asarray(fn(arg))
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    with open(glob.glob(logdir + "/**/*.xplane.pb", recursive=True)[0], "rb") as f:
        space.ParseFromString(f.read())
    kinds = collections.defaultdict(set)
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                node, _, kind = names.get(event.metadata_id, "").rpartition(":")
                if node:
                    kinds[node].add(kind)
    return kinds


@pytest.mark.skipif(not _pywrap_util_port.IsMklEnabled(), reason="TensorFlow built without oneDNN")
@pytest.mark.parametrize("dtype", ["float32",
                                   pytest.param("bfloat16", marks=pytest.mark.bf16_matmul)])
def test_graph_mode_fuses_matmul_bias_gelu_and_residual(dtype, tmp_path):
    """The bf16 inference speed rests on these fusions: a change to BertDense, the GELU or
    ResidualOutput that breaks them shows up here, not only in the benchmark."""
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64)
    model = BertModel(config, dtype=dtype)
    inputs = {"input_ids": tf.ones((2, 8), tf.int32), "input_mask": tf.ones((2, 8), tf.int32),
              "segment_ids": tf.zeros((2, 8), tf.int32)}
    fn = tf.function(lambda x: model(x, training=False)["sequence_output"])
    kinds = _op_kinds(fn, inputs, str(tmp_path))
    fused = {node for node, k in kinds.items() if "_MklNativeFusedMatMul" in k}
    assert any("intermediate" in node and "Gelu" in node for node in fused), sorted(kinds)
    assert any("query" in node for node in fused)
    assert any("output" in node and node.endswith("/add") for node in fused)  # residual add
    assert not any(k & {"Tanh", "Pow", "BiasAdd"} for k in kinds.values())
