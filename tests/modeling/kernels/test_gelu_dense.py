"""modeling/kernels/gelu_dense.py: the fused training path of gelu(x @ kernel + bias)."""


import numpy as np
import pytest
import tensorflow as tf

from modeling.layers import activations
from modeling.kernels import gelu_dense
from modeling.kernels import switch
from modeling.layers.dense import BertDense
from tests.modeling.tiny_pretraining import pretraining_batches, tiny_pretraining_trainer
from tests.support import noise


def _reference(x, kernel, bias, dy):
    """tf.nn.gelu (the inference path) and its autodiff gradients."""
    with tf.GradientTape() as tape:
        tape.watch([x, kernel, bias])
        y = tf.nn.gelu(tf.nn.bias_add(tf.matmul(x, kernel), bias), approximate=True)
    return [y] + tape.gradient(y, [x, kernel, bias], dy)


def _fused(x, kernel, bias, dy):
    with tf.GradientTape() as tape:
        tape.watch([x, kernel, bias])
        y = gelu_dense.gelu_dense_train(x, kernel, bias)
    return [y] + tape.gradient(y, [x, kernel, bias], dy)


def test_gelu_kernels_match_the_formula_and_tf_gelu():
    z = np.linspace(-12.0, 12.0, 48001).astype(np.float32)
    dy = np.random.RandomState(0).randn(z.size).astype(np.float32)
    # The original's formula and its derivative in float64.
    z64, c, a = z.astype(np.float64), np.sqrt(2 / np.pi), 0.044715
    t = np.tanh(c * (z64 + a * z64 ** 3))
    value = 0.5 * z64 * (1 + t)
    derivative = 0.5 * (1 + t) + 0.5 * z64 * (1 - t * t) * c * (1 + 3 * a * z64 ** 2)
    fused = gelu_dense.gelu_forward(tf.constant(z)).numpy()
    fused_grad = gelu_dense.gelu_backward(tf.constant(z), tf.constant(dy)).numpy()
    np.testing.assert_allclose(fused, value, rtol=2e-7, atol=6e-7)  # ~an ulp of the value
    np.testing.assert_allclose(fused_grad, dy * derivative, rtol=2e-6, atol=4e-6)
    # Central differences of the float64 formula: the derivative is the right one.
    numeric = (0.5 * (z64 + 1e-6) * (1 + np.tanh(c * ((z64 + 1e-6) + a * (z64 + 1e-6) ** 3)))
               - 0.5 * (z64 - 1e-6) * (1 + np.tanh(c * ((z64 - 1e-6) + a * (z64 - 1e-6) ** 3)))
               ) / 2e-6
    np.testing.assert_allclose(derivative, numeric, rtol=1e-6, atol=1e-7)
    # TensorFlow's op-by-op GELU (the inference path) agrees to its own float32 rounding: its
    # tanh saturates to -1 for u < ~-9 and 1 + tanh(u) cancels (errors up to ~1e-6 / ~4e-6).
    with tf.GradientTape() as tape:
        zt = tf.constant(z)
        tape.watch(zt)
        reference = tf.nn.gelu(zt, approximate=True)
    reference_grad = tape.gradient(reference, zt, tf.constant(dy))
    np.testing.assert_allclose(fused, reference, rtol=1e-6, atol=2e-6)
    np.testing.assert_allclose(fused_grad, reference_grad, rtol=1e-5, atol=1.5e-5)


@pytest.mark.parametrize("shape", [(64, 16, 48), (37, 24, 8)])
def test_gelu_dense_train_values_and_gradients(shape):
    n, d_in, d_out = shape
    rng = np.random.RandomState(1)
    x = tf.constant(rng.randn(n, d_in).astype(np.float32))
    kernel = tf.constant(0.3 * rng.randn(d_in, d_out).astype(np.float32))
    bias = tf.constant(0.5 * rng.randn(d_out).astype(np.float32))
    dy = tf.constant(rng.randn(n, d_out).astype(np.float32))
    for name, got, want in zip(["y", "dx", "dkernel", "dbias"],
                               tf.function(_fused)(x, kernel, bias, dy),
                               tf.function(_reference)(x, kernel, bias, dy)):
        scale = np.abs(want.numpy()).max()
        noise.allclose("gelu_dense/%s %s" % (shape, name), got, want, 1e-5, 1e-6 * scale)


def _graph_op_types(fn, *args):
    graph = tf.function(fn).get_concrete_function(*args).graph
    types = {op.type for op in graph.get_operations()}
    for function in graph._functions.values():  # noqa: SLF001 (nested function bodies)
        types |= {node.op for node in function.definition.node_def}
    return types


def test_bert_dense_takes_the_fused_path_only_when_training_inside_the_context():
    layer = BertDense(12, activation=activations.get_activation("gelu"), name="dense")
    x = tf.random.stateless_normal((2, 5, 8), seed=(3, 4))
    layer.build(x.shape)

    def loss(x, training):
        with tf.GradientTape() as tape:
            y = layer(x, training=training)
            total = tf.reduce_sum(y * y)
        return y, tape.gradient(total, layer.trainable_variables)

    plain_y, plain_grads = loss(x, True)
    with switch.use_kernels(layer, switch.Kernels(training=True)):
        fused_y, fused_grads = tf.function(lambda v: loss(v, True))(x)
        fused_types = _graph_op_types(lambda v: loss(v, True), x)
        eval_types = _graph_op_types(lambda v: loss(v, False), x)
    assert fused_y.shape == (2, 5, 12)
    noise.allclose("gelu_dense/layer y", fused_y, plain_y, 1e-5, 1e-6)
    for a, b in zip(fused_grads, plain_grads):
        noise.allclose("gelu_dense/layer gradients", a, b, 1e-5, 1e-5)
    assert "TanhGrad" not in fused_types and "Tanh" not in fused_types  # GELU is in XLA
    assert "Tanh" in eval_types  # inference keeps tf.nn.gelu (fusable by oneDNN)
    assert switch.kernels_of(layer) == switch.OP_BY_OP  # the layer's own value again after


def test_trainer_with_fused_kernels_follows_the_op_by_op_trajectory(tmp_path):
    """4 pre-training updates of a tiny BERT (dropout 0): the fused GELU path gives the op-by-op
    path's losses and weights up to float32 rounding."""
    results = {}
    for fused in (False, True):
        trainer = tiny_pretraining_trainer(str(tmp_path / str(fused)), fused)
        losses = trainer.run_steps(trainer.make_iterator(pretraining_batches()), 4)
        results[fused] = losses, [v.numpy() for v in trainer.model.trainable_variables]
    noise.allclose("gelu_dense/trainer losses", results[True][0], results[False][0], 1e-5, 0.0)
    assert results[True][0][-1] < results[True][0][0] - 0.1  # it trained
    # Adam turns a float-rounding difference of a near-zero gradient into one of up to a
    # step's size (lr 1e-2): worst measured 2.06e-6 (AVX-512; 1.34e-6 on AVX2), on one element of
    # 512; twice that.
    noise.within("gelu_dense/trainer weights", max(
        float(np.abs(a - b).max()) for a, b in zip(results[True][1], results[False][1])), 4e-6)


@pytest.mark.bf16_matmul
def test_fused_kernels_under_mixed_bfloat16_give_the_same_gradients(tmp_path):
    """bf16 activations: the fused path's gradients equal the op-by-op path's to bf16 rounding
    (relative norm of the difference per variable)."""
    trainer = tiny_pretraining_trainer(str(tmp_path), False, "mixed_bfloat16")
    batch = next(iter(pretraining_batches()))
    totals = trainer.objective.totals(batch)

    def grads():
        return trainer._grads_and_logs(batch, totals)[0]  # noqa: SLF001

    plain = tf.function(grads)()
    with switch.use_kernels(trainer.model, switch.Kernels(training=True)):
        fused = tf.function(grads)()
    names = [v.path for v in trainer.model.trainable_variables]
    assert any("intermediate" in n for n in names)
    fused = [tf.convert_to_tensor(g).numpy() for g in fused]
    plain = [tf.convert_to_tensor(g).numpy() for g in plain]
    floor = 1e-4 * max(np.linalg.norm(g) for g in plain)  # e.g. key biases: exactly 0 in math
    for name, a, b in zip(names, fused, plain):
        assert a.dtype == np.float32
        assert np.linalg.norm(a - b) <= 3e-2 * np.linalg.norm(b) + floor, name
