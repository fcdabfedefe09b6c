"""The CPU training kernels (modeling/kernels/cpu_ops.py) against TensorFlow's op-by-op computations."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from modeling.kernels import cpu_ops
from modeling.kernels import gelu_dense
from modeling.training import optimizers
from modeling.kernels import switch
from modeling.layers.dropout import Dropout
from modeling.layers.layer_norm import BertLayerNorm
from tests.modeling.tiny_pretraining import pretraining_batches, tiny_pretraining_trainer


@pytest.fixture(scope="module")
def ops():
    module = cpu_ops.load()
    assert module is not None, "the CPU kernel library did not build: %s" % (
        cpu_ops.unavailable_reason(),)
    return module


def _graph_op_types(fn, *args):
    graph = tf.function(fn).get_concrete_function(*args).graph
    types = {op.type for op in graph.get_operations()}
    for function in graph._functions.values():  # noqa: SLF001 (gradient/custom-gradient bodies)
        types |= {node.op for node in function.definition.node_def}
    return types


# ------------------------------------------------------------------------------------- dropout
def test_dropout_keeps_scales_and_replays(ops):
    x = tf.random.stateless_normal([1000, 999], seed=(1, 2))  # not a multiple of 64 elements
    seed = tf.constant([7, 11], tf.int64)
    y = cpu_ops.dropout(x, 0.1, seed).numpy()
    kept = y != 0
    n = kept.size
    sigma = np.sqrt(n * 0.9 * 0.1)
    assert abs(kept.sum() - 0.9 * n) < 5 * sigma
    scale = np.float32(1.0) / (np.float32(1.0) - np.float32(0.1))
    np.testing.assert_array_equal(y[kept], x.numpy()[kept] * scale)  # TF's x * (1 / (1 - rate))
    np.testing.assert_array_equal(cpu_ops.dropout(x, 0.1, seed).numpy(), y)  # same seed: same
    other = cpu_ops.dropout(x, 0.1, tf.constant([7, 12], tf.int64)).numpy() != 0
    assert 0.1 < np.mean(other != kept) < 0.25  # independent masks: 2 * 0.9 * 0.1 = 0.18
    # no structure along the flat index (the lanes/words interleave of the generator)
    flat = kept.reshape(-1).astype(np.float64)
    for lag in (1, 4, 16, 64):
        corr = np.corrcoef(flat[:-lag], flat[lag:])[0, 1]
        assert abs(corr) < 5 / np.sqrt(n), (lag, corr)
    for column in (0, 1, 63, 64):  # the tail of every chunk too
        assert 0.8 < kept[:, column].mean() < 0.97


def test_dropout_rate_is_exact_to_32_bits(ops):
    x = tf.ones([2 ** 20])
    y = cpu_ops.dropout(x, 0.5, tf.constant([3, 4], tf.int64)).numpy()
    assert set(np.unique(y)) == {0.0, 2.0}
    assert abs((y == 0).mean() - 0.5) < 5 * np.sqrt(0.25 / y.size)


def test_dropout_gradient_is_the_kept_mask_times_the_scale(ops):
    x = tf.random.stateless_normal([4, 33, 17], seed=(5, 6))
    dy = tf.random.stateless_normal([4, 33, 17], seed=(7, 8))
    seed = tf.constant([1, 2], tf.int64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = cpu_ops.dropout(x, 0.2, seed)
    dx = tape.gradient(y, x, output_gradients=dy).numpy()
    kept = y.numpy() != 0
    scale = np.float32(1.0) / (np.float32(1.0) - np.float32(0.2))
    np.testing.assert_array_equal(dx, np.where(kept, dy.numpy() * scale, 0.0).astype(np.float32))


def test_dropout_layer_uses_the_kernel_only_when_training_inside_the_switch(ops):
    layer = Dropout(0.1)
    assert layer.name.startswith("dropout")  # a drop-in: Keras' auto names unchanged
    x = tf.random.stateless_normal([8, 16], seed=(1, 1))
    with switch.use_kernels(layer, switch.Kernels(training=True)):
        fused = _graph_op_types(lambda v: layer(v, training=True), x)
        eval_types = _graph_op_types(lambda v: layer(v, training=False), x)
        first = layer(x, training=True).numpy()
        second = layer(x, training=True).numpy()
    plain = _graph_op_types(lambda v: layer(v, training=True), x)
    assert "BertDropout" in fused and "StatelessRandomUniformV2" not in fused
    assert "BertDropout" not in eval_types and "BertDropout" not in plain
    assert not np.array_equal(first != 0, second != 0)  # the seed generator advances
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    assert Dropout.from_config(layer.get_config()).rate == 0.1


def test_dropout_on_bfloat16_draws_the_float32_mask_and_rounds_once(ops):
    x = tf.cast(tf.random.stateless_normal([37, 129], seed=(2, 3)), tf.bfloat16)
    dy = tf.cast(tf.random.stateless_normal([37, 129], seed=(4, 5)), tf.bfloat16)
    seed = tf.constant([5, 9], tf.int64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = cpu_ops.dropout(x, 0.1, seed)
    dx = tape.gradient(y, x, output_gradients=dy)
    assert y.dtype == dx.dtype == tf.bfloat16
    kept = cpu_ops.dropout(tf.cast(x, tf.float32), 0.1, seed).numpy() != 0  # the same words
    scale = np.float32(1.0) / (np.float32(1.0) - np.float32(0.1))

    def rounded(v):  # float32 product, one rounding to bfloat16 (round to nearest even)
        return tf.cast(tf.constant(v, tf.float32), tf.bfloat16).numpy()

    x32 = tf.cast(x, tf.float32).numpy()
    dy32 = tf.cast(dy, tf.float32).numpy()
    np.testing.assert_array_equal(y.numpy(), rounded(np.where(kept, x32 * scale, 0.0)))
    np.testing.assert_array_equal(dx.numpy(), rounded(np.where(kept, dy32 * scale, 0.0)))


# ----------------------------------------------------------------------------------- LayerNorm
def _reference_layer_norm(x, gamma, beta, eps):
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    inv = tf.math.rsqrt(variance + eps) * gamma
    return x * inv + (beta - mean * inv)


@pytest.mark.parametrize("shape", [(3, 5, 768), (7, 33), (1, 1)])
def test_layer_norm_values_and_gradients_match_tensorflow(ops, shape):
    h = shape[-1]
    x = tf.random.stateless_normal(shape, seed=(1, 2)) * 3.0 + 0.5
    gamma = tf.random.stateless_normal([h], seed=(3, 4))
    beta = tf.random.stateless_normal([h], seed=(5, 6))
    dy = tf.random.stateless_normal(shape, seed=(7, 8))
    eps = 1e-12 if h > 1 else 1e-3

    def run(fn):
        with tf.GradientTape() as tape:
            tape.watch([x, gamma, beta])
            y = fn(x, gamma, beta, eps)
        return [y] + tape.gradient(y, [x, gamma, beta], output_gradients=dy)

    ours = run(cpu_ops.layer_norm)
    ref = run(_reference_layer_norm)
    for name, a, b in zip(["y", "dx", "dgamma", "dbeta"], ours, ref):
        assert a.shape == b.shape, name
        scale = np.abs(b.numpy()).max() + 1e-6
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=2e-5 * scale, err_msg=name)


def test_layer_norm_layer_switches_to_the_kernel_only_when_training(ops):
    layer = BertLayerNorm(epsilon=1e-12)
    x = tf.random.stateless_normal([4, 6, 32], seed=(9, 9))
    layer.build(x.shape)
    layer.gamma.assign(tf.random.stateless_normal([32], seed=(1, 3)))
    with switch.use_kernels(layer, switch.Kernels(training=True)):
        fused = _graph_op_types(lambda v: layer(v, training=True), x)
        inference = _graph_op_types(lambda v: layer(v, training=False), x)
        y = layer(x, training=True)
    assert "BertLayerNorm" in fused and "BertLayerNorm" not in inference
    np.testing.assert_allclose(y, layer(x), rtol=1e-5, atol=1e-5)


def test_layer_norm_of_an_empty_batch_has_zero_parameter_gradients(ops):
    x = tf.zeros([0, 8])
    gamma, beta = tf.ones([8]), tf.zeros([8])
    with tf.GradientTape() as tape:
        tape.watch([x, gamma, beta])
        y = cpu_ops.layer_norm(x, gamma, beta, 1e-12)
    dx, dgamma, dbeta = tape.gradient(y, [x, gamma, beta], output_gradients=tf.zeros([0, 8]))
    assert y.shape == dx.shape == (0, 8)
    np.testing.assert_array_equal(dgamma, np.zeros(8))
    np.testing.assert_array_equal(dbeta, np.zeros(8))


def test_layer_norm_on_bfloat16_is_the_float32_kernel_rounded_once(ops):
    # The kernel reads bfloat16 and does the float32 kernel's arithmetic: every bfloat16 output
    # is the float32 kernel's result on the same (widened) inputs, rounded once; dgamma/dbeta
    # (float32) are equal. The float32 kernel is checked against TensorFlow's ops above.
    x = tf.cast(tf.random.stateless_normal([6, 9, 768], seed=(1, 2)) * 3.0 + 0.5, tf.bfloat16)
    dy = tf.cast(tf.random.stateless_normal([6, 9, 768], seed=(7, 8)), tf.bfloat16)
    gamma = tf.random.stateless_normal([768], seed=(3, 4))
    beta = tf.random.stateless_normal([768], seed=(5, 6))

    def run(x, dy):
        with tf.GradientTape() as tape:
            tape.watch([x, gamma, beta])
            y = cpu_ops.layer_norm(x, gamma, beta, 1e-12)
        return [y] + tape.gradient(y, [x, gamma, beta], output_gradients=dy)

    ours = run(x, dy)
    wide = run(tf.cast(x, tf.float32), tf.cast(dy, tf.float32))
    assert [t.dtype for t in ours] == [tf.bfloat16, tf.bfloat16, tf.float32, tf.float32]
    for name, a, b in zip(["y", "dx", "dgamma", "dbeta"], ours, wide):
        np.testing.assert_array_equal(a.numpy(), tf.cast(b, a.dtype).numpy(), err_msg=name)
    # and, as a check of the meaning, close to the layer's TensorFlow path in float32
    ref = _reference_layer_norm(tf.cast(x, tf.float32), gamma, beta, 1e-12)
    np.testing.assert_allclose(tf.cast(ours[0], tf.float32), ref, rtol=2.0 ** -7, atol=1e-2)


def test_layers_use_the_kernels_on_bfloat16_inside_the_switch(ops):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        norm = BertLayerNorm(epsilon=1e-12)
        dropout = Dropout(0.1)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    x = tf.cast(tf.random.stateless_normal([4, 6, 32], seed=(9, 9)), tf.bfloat16)
    norm.build(x.shape)
    fused = switch.Kernels(training=True)
    with switch.use_kernels(norm, fused), switch.use_kernels(dropout, fused):
        types = _graph_op_types(lambda v: dropout(norm(v, training=True), training=True), x)
        y = norm(x, training=True)
    assert {"BertLayerNorm", "BertDropout"} <= types and "StatelessRandomUniformV2" not in types
    assert y.dtype == tf.bfloat16
    # the TensorFlow path (training=False) rounds its own float32 result: one bfloat16 step apart
    np.testing.assert_allclose(tf.cast(y, tf.float32), tf.cast(norm(x), tf.float32),
                               rtol=2.0 ** -7, atol=1e-2)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "bfloat16"])
def test_layer_norm_forward_uses_the_kernel_inside_the_inference_switch(ops, policy):
    norm = BertLayerNorm(epsilon=1e-12, dtype=policy)
    dtype = tf.float32 if policy == "float32" else tf.bfloat16
    x = tf.cast(tf.random.stateless_normal([4, 6, 32], seed=(3, 4)) * 3.0 + 1.0, dtype)
    norm.build(x.shape)
    norm.gamma.assign(tf.random.stateless_normal([32], seed=(5, 6)))
    norm.beta.assign(tf.random.stateless_normal([32], seed=(7, 8)))
    reference = norm(x, training=False)  # TensorFlow's ops: no switch
    assert "BertLayerNorm" not in _graph_op_types(lambda v: norm(v, training=False), x)
    with switch.use_kernels(norm, switch.Kernels(inference=True)):
        assert "BertLayerNorm" in _graph_op_types(lambda v: norm(v, training=False), x)
        # the training switch is a separate one: a training step here keeps TensorFlow's ops
        assert "BertLayerNorm" not in _graph_op_types(lambda v: norm(v, training=True), x)
        y = tf.function(lambda v: norm(v, training=False))(x)
    assert switch.kernels_of(norm) == switch.OP_BY_OP
    assert y.dtype == reference.dtype == dtype
    if dtype == tf.float32:
        np.testing.assert_allclose(y, reference, rtol=1e-5, atol=1e-5)
    else:  # each side rounds its own float32 result to bfloat16: at most one step apart
        np.testing.assert_allclose(tf.cast(y, tf.float32), tf.cast(reference, tf.float32),
                                   rtol=2.0 ** -7, atol=1e-2)


# -------------------------------------------------------------------------------------- GELU
def _gelu_float64(z):
    """The original's tanh GELU and its derivative, in float64."""
    z64, c, a = z.astype(np.float64), np.sqrt(2 / np.pi), 0.044715
    t = np.tanh(c * (z64 + a * z64 ** 3))
    return 0.5 * z64 * (1 + t), 0.5 * (1 + t) + 0.5 * z64 * (1 - t * t) * c * (1 + 3 * a * z64 ** 2)


def test_gelu_kernel_matches_the_formula_and_the_xla_kernel(ops):
    z = np.linspace(-12.0, 12.0, 48001).astype(np.float32)
    dy = np.random.RandomState(0).randn(z.size).astype(np.float32)
    value, derivative = _gelu_float64(z)
    y = cpu_ops.gelu(tf.constant(z)).numpy()
    dz, dbias = cpu_ops.gelu_grad(tf.constant(z), tf.constant(dy))
    dz = dz.numpy()
    assert y.dtype == dz.dtype == dbias.dtype == np.float32
    assert dbias.shape == (z.size,)  # one row: the bias gradient is dz itself
    np.testing.assert_array_equal(dbias, dz)
    # ~an ulp of the value, as the XLA kernels (test_gelu_dense.py), with room for Eigen's
    # logistic (a few ulp at worst, by vector width)
    np.testing.assert_allclose(y, value, rtol=2e-7, atol=1e-6)
    np.testing.assert_allclose(dz, dy * derivative, rtol=2e-6, atol=4e-6)
    np.testing.assert_allclose(y, gelu_dense.gelu_forward(tf.constant(z)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dz, gelu_dense.gelu_backward(tf.constant(z), tf.constant(dy)),
                               rtol=1e-5, atol=1e-5)
    # any shape, blocks not a multiple of the kernel's block size, and an empty tensor
    zs = tf.random.stateless_normal([3, 7, 333], seed=(1, 1)) * 4.0
    np.testing.assert_allclose(cpu_ops.gelu(zs), gelu_dense.gelu_forward(zs), rtol=1e-6,
                               atol=1e-6)
    assert cpu_ops.gelu(tf.zeros([0, 5])).shape == (0, 5)
    dz0, dbias0 = cpu_ops.gelu_grad(tf.zeros([0, 5]), tf.zeros([0, 5]))
    assert dz0.shape == (0, 5)
    np.testing.assert_array_equal(dbias0, np.zeros(5, np.float32))  # no rows: a zero gradient
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
        cpu_ops.gelu_grad(tf.zeros([2, 3]), tf.zeros([3, 2]))
    with pytest.raises(ValueError):  # the shape function merges z's and dy's shapes
        tf.function(cpu_ops.gelu_grad).get_concrete_function(
            tf.TensorSpec([2, 3]), tf.TensorSpec([3, 2]))
    spec = tf.function(cpu_ops.gelu_grad).get_concrete_function(
        tf.TensorSpec([None, 7]), tf.TensorSpec([4, None]))
    assert [t.shape.as_list() for t in spec.outputs] == [[4, 7], [7]]


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_gelu_grad_sums_the_bias_gradient_of_the_rounded_dz(ops, dtype):
    # more rows than the kernel's 32 row blocks, a row longer than its 1024-element pieces
    z = tf.cast(tf.random.stateless_normal([2, 45, 1100], seed=(5, 1)) * 3.0, dtype)
    dy = tf.cast(tf.random.stateless_normal([2, 45, 1100], seed=(5, 2)), dtype)
    dz, dbias = cpu_ops.gelu_grad(z, dy)
    assert dz.dtype == dtype and dbias.dtype == tf.float32 and dbias.shape == (1100,)
    wide = tf.cast(dz, tf.float64).numpy().reshape(-1, 1100)
    np.testing.assert_allclose(dbias, wide.sum(axis=0), rtol=1e-5, atol=1e-5)
    assert np.abs(dbias.numpy()).max() > 1.0  # not a vanishing sum
    # partial sums per fixed block of rows, added in block order: the same bits again
    again = tf.function(lambda a, b: cpu_ops.gelu_grad(a, b)[1])(z, dy)
    np.testing.assert_array_equal(dbias.numpy(), again.numpy())


def test_gelu_on_bfloat16_is_the_float32_kernel_rounded_once(ops):
    z = tf.cast(tf.random.stateless_normal([64, 1000], seed=(3, 1)) * 4.0, tf.bfloat16)
    dy = tf.cast(tf.random.stateless_normal([64, 1000], seed=(3, 2)), tf.bfloat16)
    y, (dz, _) = cpu_ops.gelu(z), cpu_ops.gelu_grad(z, dy)
    assert y.dtype == dz.dtype == tf.bfloat16
    wide_z, wide_dy = tf.cast(z, tf.float32), tf.cast(dy, tf.float32)
    np.testing.assert_array_equal(y.numpy(), tf.cast(cpu_ops.gelu(wide_z), tf.bfloat16).numpy())
    np.testing.assert_array_equal(
        dz.numpy(), tf.cast(cpu_ops.gelu_grad(wide_z, wide_dy)[0], tf.bfloat16).numpy())


def test_gelu_dense_uses_the_kernel_for_bfloat16_and_xla_for_float32(ops):
    def step(x, kernel, bias):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel, bias])
            y = gelu_dense.gelu_dense_train(x, kernel, bias)
        return tape.gradient(y, [x, kernel, bias])

    for dtype, ours in ((tf.bfloat16, True), (tf.float32, False)):
        args = [tf.cast(tf.random.stateless_normal(s, seed=(4, i)), dtype)
                for i, s in enumerate([[16, 8], [8, 24], [24]])]
        types = _graph_op_types(step, *args)
        assert ({"BertGelu", "BertGeluGrad"} <= types) == ours, dtype


# --------------------------------------------------------------------------------------- Adam
def _optimizer_and_variables():
    values = {
        "layer/dense/kernel": np.random.RandomState(0).randn(300, 70).astype(np.float32),
        "layer/dense/bias": np.random.RandomState(1).randn(70).astype(np.float32),
        "layer/LayerNorm/gamma": np.random.RandomState(2).randn(70).astype(np.float32),
        "word_embeddings": np.random.RandomState(3).randn(50, 70).astype(np.float32),
    }
    variables = [keras.Variable(v, name=n.replace("/", "_")) for n, v in values.items()]
    optimizer = optimizers.create_optimizer(1e-2, 20, 3)
    optimizer.build(variables)
    return optimizer, variables


@pytest.mark.parametrize("gradient_scale", [0.001, 30.0])  # clipping inactive / active
def test_adam_weight_decay_kernel_is_bit_identical_to_the_op_by_op_update(ops, gradient_scale):
    results = []
    for fused in (False, True):
        optimizer, variables = _optimizer_and_variables()
        assert optimizer.cpu_kernel_applies(variables)
        decays = [optimizer.decays(v) for v in variables]
        assert decays == [True, False, False, True]

        @tf.function
        def step(grads, cpu_kernel=fused):
            return optimizer.clip_and_apply(grads, variables, cpu_kernel=cpu_kernel)

        def gradients(t):
            grads = [tf.random.stateless_normal(v.shape, seed=(t, i)) * gradient_scale
                     for i, v in enumerate(variables[:3])]
            # a gather's gradient: clipped per occurrence, repeated rows summed after
            rows = tf.constant([3, 7, 3, 3, 49, 0, 7], tf.int64)
            values = tf.random.stateless_normal([7, 70], seed=(t, 9)) * gradient_scale
            return grads + [tf.IndexedSlices(values, rows, tf.constant([50, 70], tf.int64))]

        norms = []
        for t in range(4):
            grads = gradients(t)
            norms.append(float(step(grads)["global_norm"]))
        types = _graph_op_types(step, grads)
        assert ("BertAdamWeightDecayApply" in types) == fused
        slots = [s.numpy() for s in optimizer._m + optimizer._v]  # noqa: SLF001
        results.append(([v.numpy() for v in variables], slots, norms,
                        int(optimizer.iterations.numpy())))
    (p0, s0, n0, i0), (p1, s1, n1, i1) = results
    assert i0 == i1 == 4 and n0 == n1
    assert all((n > 1.0) == (gradient_scale > 1.0) for n in n0)
    for a, b in zip(p0 + s0, p1 + s1):
        np.testing.assert_array_equal(a, b)


def test_adam_kernel_updates_a_copy_when_a_read_is_still_alive(ops):
    optimizer, variables = _optimizer_and_variables()
    before = tf.convert_to_tensor(variables[0])  # shares the variable's buffer
    kept = before.numpy().copy()
    optimizer.clip_and_apply([tf.ones(v.shape) for v in variables], variables, cpu_kernel=True)
    np.testing.assert_array_equal(before.numpy(), kept)  # the read is not changed under it
    assert not np.array_equal(variables[0].numpy(), kept)


def test_lamb_and_loss_scaling_keep_the_tensorflow_update():
    variables = [keras.Variable(np.ones([3], np.float32), name="w")]
    lamb = optimizers.create_optimizer(1e-2, 20, 3, optimizer="lamb")
    lamb.build(variables)
    scaled = optimizers.create_optimizer(1e-2, 20, 3, loss_scale="dynamic")
    scaled.build(variables)
    assert not lamb.cpu_kernel_applies(variables)
    assert not scaled.cpu_kernel_applies(variables)


# ------------------------------------------------------------------------------------ building
def test_unbuildable_library_falls_back_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_ops, "_state", {"tried": False, "module": None, "error": None})
    monkeypatch.setenv("BERT_TF2_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    assert cpu_ops.load() is None
    assert "no-such-compiler-xyz" in cpu_ops.unavailable_reason()
    assert not cpu_ops.usable(tf.float32)
    assert os.listdir(tmp_path) == []  # nothing half-written left behind

    monkeypatch.setattr(cpu_ops, "_state", {"tried": False, "module": None, "error": None})
    monkeypatch.setenv("BERT_TF2_CPU_KERNELS", "0")
    assert cpu_ops.load() is None and "BERT_TF2_CPU_KERNELS" in cpu_ops.unavailable_reason()


def test_library_is_cached_under_a_key_of_source_and_toolchain(ops):
    path = cpu_ops.library_path()
    assert os.path.exists(path) and path.endswith(".so")
    assert os.path.basename(path).startswith("bert_cpu_ops-")


# ------------------------------------------------------------------------------------- trainer
def test_trainer_with_fused_kernels_runs_the_cpu_kernels_and_learns(ops, tmp_path):
    """A tiny BERT with dropout 0.1: the traced step contains the three kernels, and 12 updates
    on one batch lower the loss."""
    trainer = tiny_pretraining_trainer(str(tmp_path), True, dropout=0.1, steps=12)
    iterator = trainer.make_iterator(pretraining_batches())
    losses = trainer.run_steps(iterator, 12)
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] - 0.3, losses
    graph = trainer._loop_fn.get_concrete_function(iterator, tf.constant(12)).graph  # noqa: SLF001
    types = set()
    for function in graph._functions.values():  # noqa: SLF001
        types |= {node.op for node in function.definition.node_def}
    for kernel in ("BertDropout", "BertDropoutGrad", "BertLayerNorm", "BertLayerNormGrad",
                   "BertAdamWeightDecayApply"):
        assert kernel in types, kernel
    assert "StatelessRandomUniformV2" not in types


# ------------------------------------------------------------------ attention probabilities
def _scores_and_bias(dtype, shape=(2, 3, 5, 70), seed=6):
    scores = tf.cast(tf.random.stateless_normal(shape, seed=(seed, 1)) * 3.0, dtype)
    padding = np.random.RandomState(seed).rand(shape[0], 1, 1, shape[3]) < 0.2
    bias = tf.constant(np.where(padding, -10000.0, 0.0), dtype)  # [B, 1, 1, T]
    return scores, bias


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_attention_probs_is_softmax_then_the_dropout_kernel(ops, dtype):
    scores, bias = _scores_and_bias(dtype)
    seed = tf.constant([11, 12], tf.int64)
    y, probs, mask = ops.bert_attention_probs(scores, bias, seed, scale=0.125, rate=0.1)
    assert y.dtype == probs.dtype == dtype and mask.dtype == tf.uint8
    # the dropout: BertDropout on these probabilities with the same seed, bit for bit
    dropped, dropout_mask = ops.bert_dropout(probs, seed, rate=0.1)
    np.testing.assert_array_equal(mask.numpy(), dropout_mask.numpy())
    np.testing.assert_array_equal(tf.bitcast(y, tf.uint16 if dtype == tf.bfloat16 else tf.uint32),
                                  tf.bitcast(dropped, tf.uint16 if dtype == tf.bfloat16
                                             else tf.uint32))
    assert 0.07 < 1.0 - mask.numpy().mean() < 0.13
    # the softmax: TensorFlow's on the same float32 logits (bfloat16: rounded once from float32)
    wide = tf.cast(scores, tf.float32) * 0.125 + tf.cast(bias, tf.float32)
    reference = tf.nn.softmax(wide)
    if dtype == tf.float32:
        np.testing.assert_allclose(probs, reference, rtol=1e-6, atol=1e-7)
    else:
        fp32_probs = ops.bert_attention_probs(tf.cast(scores, tf.float32),
                                              tf.cast(bias, tf.float32), seed, scale=0.125,
                                              rate=0.1)[1]
        np.testing.assert_array_equal(probs.numpy(), tf.cast(fp32_probs, tf.bfloat16).numpy())
    padded = np.broadcast_to(bias.numpy() < 0, probs.shape)
    assert (tf.cast(probs, tf.float32).numpy()[padded] == 0).all()  # exp(-10000) underflows
    np.testing.assert_allclose(tf.reduce_sum(tf.cast(probs, tf.float32), -1), 1.0,
                               atol=1e-5 if dtype == tf.float32 else 2e-2)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_attention_probs_gradient_is_the_op_by_op_gradient(ops, dtype):
    scores, bias = _scores_and_bias(dtype, shape=(2, 4, 9, 130), seed=7)
    seed = tf.constant([3, 4], tf.int64)
    dy = tf.cast(tf.random.stateless_normal(scores.shape, seed=(7, 3)), dtype)
    keep = tf.cast(ops.bert_dropout(tf.ones_like(scores), seed, rate=0.1)[1], tf.float32)
    wide, wide_bias, wide_dy = (tf.cast(t, tf.float32) for t in (scores, bias, dy))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([scores, wide])
        fused = cpu_ops.attention_probs(scores, bias, 0.125, 0.1, seed)
        reference = tf.nn.softmax(wide * 0.125 + wide_bias) * keep / 0.9
    np.testing.assert_allclose(tf.cast(fused, tf.float32), reference, rtol=1e-2, atol=1e-6)
    got = tf.cast(tape.gradient(fused, scores, dy), tf.float32).numpy()
    want = tape.gradient(reference, wide, wide_dy).numpy()
    assert np.abs(want).max() > 0.01
    if dtype == tf.float32:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:  # from bfloat16 probabilities, rounded to bfloat16 once
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-3)


def test_attention_probs_rejects_a_bias_that_is_not_per_key(ops):
    scores, _ = _scores_and_bias(tf.float32)
    seed = tf.constant([1, 2], tf.int64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="bias must be"):
        ops.bert_attention_probs(scores, tf.zeros([2, 1, 5, 70]), seed, scale=1.0, rate=0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="rate"):
        ops.bert_attention_probs(scores, tf.zeros([2, 1, 1, 70]), seed, scale=1.0, rate=1.0)
    y, probs, _ = ops.bert_attention_probs(scores, tf.zeros([2, 1, 1, 70]), seed, scale=1.0,
                                           rate=0.0)
    np.testing.assert_array_equal(y.numpy(), probs.numpy())  # rate 0 keeps everything


def test_bfloat16_stores_keep_infinities_and_quiet_nans(ops):
    # the kernels' branch-free bfloat16 rounding: specials as Eigen's (NaN -> the quiet NaN of
    # its sign), every other bfloat16 value unchanged by a pass with rate 0 (scale 1)
    # (no subnormals: TensorFlow's CPU threads flush them to zero)
    bits = np.array([0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7F7F, 0x0080, 0x8000,
                     0x3F80], np.uint16)
    x = tf.bitcast(tf.constant(bits), tf.bfloat16)
    y, _ = ops.bert_dropout(x, tf.constant([1, 2], tf.int64), rate=0.0)
    want = bits.copy()
    want[[4, 5]] = [0x7FC0, 0xFFC0]  # signalling-pattern NaNs come back quiet
    np.testing.assert_array_equal(tf.bitcast(y, tf.uint16).numpy(), want)


# The kernels' outputs (``parts``) from ``ops``, ``tf`` and ``np``: run in this process and in
# others (``_KERNELS_SCRIPT``).
_KERNELS_PARTS = r"""
z = tf.cast(tf.random.stateless_normal([300, 1100], seed=(8, 1)) * 3.0, tf.bfloat16)
dy = tf.cast(tf.random.stateless_normal([300, 1100], seed=(8, 2)), tf.bfloat16)
scores = tf.random.stateless_normal([3, 4, 50, 77], seed=(8, 3))
bias = tf.zeros([3, 1, 1, 77])
seed = tf.constant([5, 6], tf.int64)
x = tf.random.stateless_normal([300, 96], seed=(8, 4))
y, probs, mask = ops.bert_attention_probs(scores, bias, seed, scale=0.3, rate=0.1)
_, mean, rstd = ops.bert_layer_norm(x, tf.ones([96]), tf.zeros([96]), epsilon=1e-12)
threads = [ops.bert_gelu_grad(z, dy)[1], y, mask,
           ops.bert_attention_probs_grad(scores, probs, mask, scale=0.3, rate=0.1),
           *ops.bert_layer_norm_grad(x, x, mean, rstd, tf.ones([96]))[1:]]
parts = {"threads/%d" % i: tf.cast(t, tf.float32).numpy() for i, t in enumerate(threads)}
rng = np.random.default_rng(5)
for dtype in (tf.float32, tf.bfloat16):
    x = tf.cast(rng.normal(0.5, 3.0, [40, 771]).astype(np.float32), dtype)  # 771: a lane tail
    dy = tf.cast(rng.normal(size=[40, 771]).astype(np.float32), dtype)
    gamma = tf.constant(rng.normal(size=[771]).astype(np.float32))
    beta = tf.constant(rng.normal(size=[771]).astype(np.float32))
    y, mean, rstd = ops.bert_layer_norm(x, gamma, beta, epsilon=1e-12)
    dx, dgamma, dbeta = ops.bert_layer_norm_grad(dy, x, mean, rstd, gamma)
    scores = rng.normal(0.0, 4.0, [2, 3, 9, 133]).astype(np.float32)
    bias = tf.cast(rng.normal(size=[2, 1, 1, 133]).astype(np.float32), dtype)
    _, probs, mask = ops.bert_attention_probs(tf.cast(scores, dtype), bias,
                                              tf.constant([5, 6], tf.int64), scale=0.3, rate=0.1)
    fixed = np.exp(scores - scores.max(-1, keepdims=True))  # probabilities not from the kernel
    fixed = tf.cast(fixed / fixed.sum(-1, keepdims=True), dtype)
    dscores = ops.bert_attention_probs_grad(
        tf.cast(rng.normal(size=[2, 3, 9, 133]).astype(np.float32), dtype), fixed, mask,
        scale=0.3, rate=0.1)
    for name, t in [("y", y), ("mean", mean), ("rstd", rstd), ("dx", dx), ("dgamma", dgamma),
                    ("dbeta", dbeta), ("dscores", dscores), ("probs", probs)]:
        parts["%s/%s" % (dtype.name, name)] = tf.cast(t, tf.float32).numpy()
"""

# ``python -c _KERNELS_SCRIPT OUT.npz THREADS``: the parts with THREADS intra-op threads.
_KERNELS_SCRIPT = r"""
import sys
import numpy as np
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[2]))
from modeling.kernels import cpu_ops
ops = cpu_ops.load()
assert ops is not None, cpu_ops.unavailable_reason()
""" + _KERNELS_PARTS + r"""
np.savez(sys.argv[1], **parts)
"""


def test_kernel_bits_do_not_depend_on_the_thread_count_or_the_vector_width(ops, tmp_path):
    # A resumed run may land on a machine with another core count or another CPU. With 1 thread
    # and with this process's threads (one per core: 2 or more), the sums over rows (dbias,
    # dgamma/dbeta) and the per-row kernels give the same bits ("threads/"). The library built
    # for an AVX2 CPU (x86-64-v3, 2 threads) and for this one (-march=native): LayerNorm forward
    # and backward and the softmax gradient give the same bits, float32 and bfloat16 (LaneSum's
    # fixed order); the probabilities differ at most in the last bits of Eigen's vectorised exp.
    # Before LaneSum the sums' order followed the vector width, and on AVX2 the bfloat16
    # LayerNorm gradient was not the float32 one rounded once.
    assert tf.config.threading.get_intra_op_parallelism_threads() != 1
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    runs = {}
    for march, threads in (("native", 1), ("x86-64-v3", 2)):
        out = tmp_path / ("%s-%d.npz" % (march, threads))
        subprocess.run([sys.executable, "-c", _KERNELS_SCRIPT, str(out), str(threads)],
                       cwd=root, env=dict(env, BERT_TF2_KERNEL_MARCH=march), check=True)
        runs[march, threads] = dict(np.load(out))
    here = {"ops": ops, "tf": tf, "np": np}
    exec(_KERNELS_PARTS, here)  # noqa: S102 - the same code as the other processes'
    one, native, avx2 = runs["native", 1], here["parts"], runs["x86-64-v3", 2]
    assert len(native) == 22
    assert sum(v.size for k, v in native.items() if k.startswith("threads/")) > 100000
    for name, value in native.items():
        if name.startswith("threads/"):
            np.testing.assert_array_equal(one[name], value, err_msg=name)
        elif name.endswith("/probs"):
            np.testing.assert_allclose(avx2[name], value, rtol=4e-7, atol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(avx2[name], value, err_msg=name)
