"""SelfAttention's probabilities: the fused CPU kernel in fused training steps, TensorFlow's ops
elsewhere, the same masks either way."""

import math

import numpy as np
import pytest
import tensorflow as tf

from modeling.kernels import cpu_ops
from modeling.kernels import switch
from modeling.layers.attention import SelfAttention, attention_bias_from_mask


def _graph_op_types(fn, *args):
    graph = tf.function(fn).get_concrete_function(*args).graph
    types = {op.type for op in graph.get_operations()}
    for function in graph._functions.values():  # noqa: SLF001 (custom-gradient bodies)
        types |= {node.op for node in function.definition.node_def}
    return types


@pytest.fixture()
def layer_and_inputs():
    if cpu_ops.load() is None:
        pytest.fail("the CPU kernel library did not build: %s" % cpu_ops.unavailable_reason())
    layer = SelfAttention(num_attention_heads=2, size_per_head=4, dropout_rate=0.1)
    hidden = tf.random.stateless_normal([2, 6, 8], seed=(1, 2))
    layer.build(hidden.shape)
    bias = attention_bias_from_mask(tf.constant([[1] * 6, [1] * 4 + [0] * 2]), tf.float32)
    return layer, hidden, bias


def test_fused_training_probs_are_softmax_then_the_layers_dropout(layer_and_inputs):
    layer, _, bias = layer_and_inputs
    scores = tf.random.stateless_normal([2, 2, 6, 6], seed=(3, 4)) * 2.0
    state = layer.dropout.seed_generator.state.numpy()
    with switch.use_kernels(layer, switch.Kernels(training=True)):
        fused = layer._probs(scores, bias, training=True)  # noqa: SLF001
    after_fused = layer.dropout.seed_generator.state.numpy()
    layer.dropout.seed_generator.state.assign(state)
    # what the layer computed before: TensorFlow's softmax, then its dropout's next seed
    probs = tf.nn.softmax(scores * (1.0 / math.sqrt(4.0)) + bias)
    reference = cpu_ops.dropout(probs, layer.dropout.rate, layer.dropout.seed_generator.next())
    np.testing.assert_array_equal(layer.dropout.seed_generator.state.numpy(), after_fused)
    np.testing.assert_array_equal(fused.numpy() == 0, reference.numpy() == 0)  # same mask
    np.testing.assert_allclose(fused, reference, rtol=1e-6, atol=1e-7)
    assert (fused.numpy() == 0).mean() > 0.1  # the padded keys and ~10% dropped


def test_fused_kernel_only_in_fused_training_steps(layer_and_inputs):
    layer, hidden, bias = layer_and_inputs

    def step(hidden, training):
        with tf.GradientTape() as tape:
            tape.watch(hidden)
            out = layer(hidden, bias, training=training)
            loss = tf.reduce_sum(out * out)
        return tape.gradient(loss, hidden)

    with switch.use_kernels(layer, switch.Kernels(training=True)):
        train = _graph_op_types(lambda h: step(h, True), hidden)
        predict = _graph_op_types(lambda h: step(h, False), hidden)
    plain = _graph_op_types(lambda h: step(h, True), hidden)
    assert {"BertAttentionProbs", "BertAttentionProbsGrad"} <= train and "Softmax" not in train
    assert "BertAttentionProbs" not in predict and "Softmax" in predict
    assert "BertAttentionProbs" not in plain and "Softmax" in plain


def test_fused_training_probs_broadcast_a_bias_over_the_batch(layer_and_inputs):
    layer, _, _ = layer_and_inputs
    scores = tf.random.stateless_normal([2, 2, 6, 6], seed=(5, 6))
    bias = attention_bias_from_mask(tf.constant([[1] * 5 + [0]]), tf.float32)  # [1, 1, 1, 6]
    state = layer.dropout.seed_generator.state.numpy()
    with switch.use_kernels(layer, switch.Kernels(training=True)):
        one = layer._probs(scores, bias, training=True)  # noqa: SLF001
        layer.dropout.seed_generator.state.assign(state)
        full = layer._probs(scores, tf.tile(bias, [2, 1, 1, 1]), training=True)  # noqa: SLF001
    np.testing.assert_array_equal(one.numpy(), full.numpy())
    assert (one.numpy()[..., 5] == 0).all()  # the padded key, in both sequences
