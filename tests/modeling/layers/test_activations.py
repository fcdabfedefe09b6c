"""GELU variants: the original's tanh approximation vs the exact erf GELU."""

import math

import numpy as np
import pytest
import tensorflow as tf

from modeling.layers import activations


def test_gelu_is_tanh_approximation_and_gelu_exact_is_erf():
    xs = np.linspace(-6, 6, 101).astype(np.float32).astype(np.float64)
    tanh_ref = 0.5 * xs * (1 + np.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs ** 3)))
    erf_ref = np.array([0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs])
    x32 = tf.constant(xs.astype(np.float32))
    got_tanh = activations.get_activation("gelu")(x32).numpy().astype(np.float64)
    got_erf = activations.get_activation("gelu_exact")(x32).numpy().astype(np.float64)
    # float32 evaluation of the float64 formulas (1 + tanh cancels for x << 0: atol).
    np.testing.assert_allclose(got_tanh, tanh_ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_erf, erf_ref, rtol=1e-6, atol=1e-6)
    assert np.max(np.abs(got_tanh - got_erf)) > 1e-4  # they really differ


def test_gelu_matches_the_original_operation_order_in_float32():
    """The original: ``x * (0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))))``."""
    x = tf.constant(np.linspace(-8, 8, 4001).astype(np.float32))
    cdf = 0.5 * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))
    original = (x * cdf).numpy()
    got = activations.get_activation("gelu")(x).numpy()
    ulp = np.spacing(np.abs(original))
    assert np.all(np.abs(got - original) <= 2 * ulp)


def test_unknown_activation():
    with pytest.raises(ValueError, match="unsupported activation"):
        activations.get_activation("gelu_fancy")
