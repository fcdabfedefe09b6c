"""The model's ops: TensorFlow's own (``modeling.backend.tensorflow``) against their ``keras.ops``
twins (``modeling.backend.jax``, which run on the TensorFlow backend too), and the one choice."""

import numpy as np
import pytest
import tensorflow as tf

from modeling import backend
from modeling.backend import jax as keras_ops
from modeling.backend import tensorflow as tf_ops

RNG = np.random.default_rng(0)


def _close(a, b, rtol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=1e-6)


def test_the_running_backends_ops_are_chosen_once():
    assert backend.NAME == "tensorflow" and backend.TENSORFLOW
    assert backend.matmul is tf_ops.matmul and backend.STEP_DTYPE == "int64"
    assert backend.module_of("modeling.backend") is tf_ops
    assert keras_ops.STEP_DTYPE == "int32"


@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_and_bias_add(transpose_b):
    a = RNG.normal(size=(2, 3, 5)).astype("float32")
    b = RNG.normal(size=(4, 5) if transpose_b else (5, 4)).astype("float32")
    bias = RNG.normal(size=(4,)).astype("float32")
    expected = a @ (b.T if transpose_b else b) + bias
    for ops in (tf_ops, keras_ops):
        _close(ops.bias_add(ops.matmul(a, b, transpose_b=transpose_b), bias), expected, 1e-5)


def test_row_lookups():
    table = RNG.normal(size=(7, 3)).astype("float32")
    ids = RNG.integers(0, 7, size=(2, 5))
    few = RNG.integers(0, 2, size=(2, 5))
    x = RNG.normal(size=(2, 6, 3)).astype("float32")
    positions = RNG.integers(0, 6, size=(2, 4))
    for ops in (tf_ops, keras_ops):
        np.testing.assert_array_equal(ops.take_rows(table, ids), table[ids])
        np.testing.assert_array_equal(ops.take_few_rows(table[:2], few), table[:2][few])
        np.testing.assert_array_equal(ops.take_along_rows(x, positions),
                                      np.stack([x[i][positions[i]] for i in range(2)]))
        np.testing.assert_array_equal(ops.read(tf.Variable(table)), table)


def test_moments_argmax_and_shapes():
    x = RNG.normal(size=(3, 8)).astype("float32")
    for ops in (tf_ops, keras_ops):
        mean, variance = ops.moments(x, axes=[-1])
        _close(mean, x.mean(-1, keepdims=True))
        _close(variance, x.var(-1, keepdims=True), rtol=1e-5)
        index = ops.argmax(x)
        assert np.asarray(index).dtype == np.int32
        np.testing.assert_array_equal(index, x.argmax(-1))
        assert [int(d) for d in ops.with_last_axis(ops.shape(x), 5)] == [3, 5]
        assert ops.tapped("word_embeddings") is None  # no tap outside a JAX step
        assert ops.replica_in_sync() is None  # no strategy's replica context here
