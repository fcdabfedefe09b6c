"""Activation functions by config name.

``"gelu"`` is the original BERT's GELU, the tanh approximation
``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``; ``"gelu_exact"`` is the erf GELU
``0.5 * x * (1 + erf(x / sqrt(2)))`` that Hugging Face calls ``"gelu"``. Every function maps a
float tensor of any shape to a tensor of the same shape and dtype.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from keras import ops


def gelu(x: Any) -> Any:
    """GELU, tanh approximation: the original's ``x * 0.5 * (1 + tanh(...))``.

    ``keras.ops.gelu(approximate=True)`` computes exactly this formula (the original's
    ``sqrt(2/pi)`` and ``0.044715 * x**3``; float32 results differ from the original's operation
    order by an ulp or two). On TensorFlow it is ``tf.nn.gelu``, which TensorFlow's graph
    optimizer recognises after a matmul + bias_add and fuses with them into one oneDNN kernel
    on CPU.

    Args:
        x: any float tensor.

    Returns:
        The same shape and dtype.
    """
    return ops.gelu(x, approximate=True)


def gelu_exact(x: Any) -> Any:
    """GELU with the exact Gaussian CDF (erf): ``0.5 * x * (1 + erf(x / sqrt(2)))``.

    Args:
        x: any float tensor.
    """
    return ops.gelu(x, approximate=False)


def linear(x: Any) -> Any:
    """The identity (``hidden_act="linear"``).

    Args:
        x: any tensor.
    """
    return x


_ACTIVATIONS: Dict[str, Callable[[Any], Any]] = {
    "gelu": gelu,
    "gelu_exact": gelu_exact,
    "relu": ops.relu,
    "tanh": ops.tanh,
    "linear": linear,
}
NAMES = frozenset(_ACTIVATIONS)


def get_activation(name: str) -> Callable[[Any], Any]:
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
