"""GELU variants: the original's tanh approximation vs the exact erf GELU."""

import math

import numpy as np
import pytest
import tensorflow as tf

from modeling import activations


def test_gelu_is_tanh_approximation_and_gelu_exact_is_erf():
    xs = np.linspace(-6, 6, 101).astype(np.float64)
    tanh_ref = 0.5 * xs * (1 + np.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs ** 3)))
    erf_ref = np.array([0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs])
    got_tanh = activations.get_activation("gelu")(tf.constant(xs)).numpy()
    got_erf = activations.get_activation("gelu_exact")(tf.constant(xs)).numpy()
    assert np.max(np.abs(got_tanh - tanh_ref)) < 1e-12
    assert np.max(np.abs(got_erf - erf_ref)) < 1e-12
    assert np.max(np.abs(got_tanh - got_erf)) > 1e-4  # they really differ


def test_unknown_activation():
    with pytest.raises(ValueError, match="unsupported activation"):
        activations.get_activation("gelu_fancy")
