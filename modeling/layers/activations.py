"""Activation functions by config name.

``"gelu"`` is the original BERT's GELU, the tanh approximation
``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``; ``"gelu_exact"`` is the erf GELU
``0.5 * x * (1 + erf(x / sqrt(2)))`` that Hugging Face calls ``"gelu"``. Every function maps a
float tensor of any shape to a tensor of the same shape and dtype.
"""

from __future__ import annotations

from typing import Callable, Dict

import tensorflow as tf


def gelu(x: tf.Tensor) -> tf.Tensor:
    """GELU, tanh approximation: the original's ``x * 0.5 * (1 + tanh(...))``.

    ``tf.nn.gelu(approximate=True)`` computes exactly this formula (the original's
    ``sqrt(2/pi)`` and ``0.044715 * x**3``; float32 results differ from the original's operation
    order by an ulp or two), and TensorFlow's graph optimizer recognises it after a
    matmul + bias_add and fuses all three into one oneDNN kernel on CPU.

    Args:
        x: any float tensor.

    Returns:
        The same shape and dtype.
    """
    return tf.nn.gelu(x, approximate=True)


def gelu_exact(x: tf.Tensor) -> tf.Tensor:
    """GELU with the exact Gaussian CDF (erf): ``0.5 * x * (1 + erf(x / sqrt(2)))``.

    Args:
        x: any float tensor.
    """
    return tf.nn.gelu(x, approximate=False)


def linear(x: tf.Tensor) -> tf.Tensor:
    """The identity (``hidden_act="linear"``).

    Args:
        x: any tensor.
    """
    return x


_ACTIVATIONS: Dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "gelu": gelu,
    "gelu_exact": gelu_exact,
    "relu": tf.nn.relu,
    "tanh": tf.tanh,
    "linear": linear,
}
NAMES = frozenset(_ACTIVATIONS)


def get_activation(name: str) -> Callable[[tf.Tensor], tf.Tensor]:
    """The activation for a config's ``hidden_act`` (case-insensitive); ValueError if unknown.

    Args:
        name: ``"gelu"``, ``"gelu_exact"``, ``"relu"``, ``"tanh"`` or ``"linear"`` (``NAMES``).

    Returns:
        The function.

    Raises:
        ValueError: an unknown name.
    """
    key = (name or "linear").lower()
    if key not in _ACTIVATIONS:
        raise ValueError("unsupported activation: %r (known: %s)" % (name, ", ".join(sorted(NAMES))))
    return _ACTIVATIONS[key]
