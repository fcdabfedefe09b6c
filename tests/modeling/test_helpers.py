"""modeling/helpers.py: the original modeling.py's small public helpers, under its names and
arguments, checked against the original's documented behaviour with values computed here."""

import math

import numpy as np
import pytest
import tensorflow as tf

import modeling


def test_gelu_is_the_tanh_form():
    def expected(x):
        return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    assert modeling.gelu(tf.constant(1.0)).numpy() == pytest.approx(
        0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * (1 + 0.044715))), rel=1e-6)
    xs = [-3.0, -0.5, 0.0, 0.25, 2.0]
    got = modeling.gelu(tf.constant(xs, tf.float64)).numpy()
    # TensorFlow keeps the constants in float32 (sqrt(2/pi), 0.044715): ~1e-7 relative
    np.testing.assert_allclose(got, [expected(x) for x in xs], rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("name", [None, "", "linear", "LINEAR"])
def test_get_activation_linear_is_none(name):
    assert modeling.get_activation(name) is None


def test_get_activation_by_name_and_function():
    x = tf.constant([-2.0, -0.5, 0.0, 1.5])
    np.testing.assert_array_equal(modeling.get_activation("relu")(x).numpy(), [0, 0, 0, 1.5])
    np.testing.assert_allclose(modeling.get_activation("TANH")(x).numpy(), np.tanh(x.numpy()),
                               rtol=1e-6)
    np.testing.assert_allclose(modeling.get_activation("gelu")(x).numpy(),
                               modeling.gelu(x).numpy(), rtol=0)

    def custom(t):
        return t * 2

    assert modeling.get_activation(custom) is custom  # a function passes through
    with pytest.raises(ValueError, match="swish") as raised:
        modeling.get_activation("swish")
    assert "\n" not in str(raised.value)


def test_create_attention_mask_from_input_mask():
    to_mask = tf.constant([[1, 1, 0], [1, 0, 0]])
    for from_tensor in (tf.zeros([2, 4, 8]), tf.zeros([2, 4], tf.int32)):
        mask = modeling.create_attention_mask_from_input_mask(from_tensor, to_mask)
        assert mask.dtype == tf.float32 and mask.shape == (2, 4, 3)
        expected = np.repeat(np.array([[[1, 1, 0]], [[1, 0, 0]]], np.float32), 4, axis=1)
        np.testing.assert_array_equal(mask.numpy(), expected)
    with pytest.raises(ValueError, match="actual rank `1`"):
        modeling.create_attention_mask_from_input_mask(tf.zeros([4]), to_mask)


def test_get_shape_list_static_dynamic_and_rank():
    assert modeling.get_shape_list(tf.zeros([2, 3])) == [2, 3]
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def shapes(t):
        batch, width = modeling.get_shape_list(t, expected_rank=2)
        seen["kinds"] = (type(batch), type(width))
        return batch

    assert int(shapes(tf.zeros([5, 3]))) == 5
    assert issubclass(seen["kinds"][0], tf.Tensor) and seen["kinds"][1] is int
    with pytest.raises(ValueError, match=r"the actual rank `2` \(shape = \(2, 3\)\) is not equal "
                                         r"to the expected rank `\[3, 4\]`"):
        modeling.get_shape_list(tf.zeros([2, 3]), expected_rank=[3, 4], name="x")


def test_create_initializer_is_a_truncated_normal_of_that_stddev():
    values = modeling.create_initializer(0.5)(shape=[200, 200]).numpy()
    assert np.abs(values).max() <= 2 * 0.5  # cut at two standard deviations
    # The std of a normal truncated at +-2 sigma: sigma * sqrt(1 - 2*2*phi(2) / (2*Phi(2) - 1)).
    phi = math.exp(-2.0) / math.sqrt(2 * math.pi)
    big_phi = 0.5 * (1 + math.erf(2 / math.sqrt(2)))
    expected_std = 0.5 * math.sqrt(1 - 4 * phi / (2 * big_phi - 1))
    assert values.std() == pytest.approx(expected_std, rel=0.02)
    assert abs(values.mean()) < 0.01
    default = modeling.create_initializer()(shape=[200, 200]).numpy()
    assert np.abs(default).max() <= 0.04 and default.std() == pytest.approx(
        expected_std / 0.5 * 0.02, rel=0.02)
