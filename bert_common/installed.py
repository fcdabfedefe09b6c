"""Whether an optional package is installed, asked without importing it."""

from __future__ import annotations

import importlib.util


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported (on any Keras backend: the JAX tools use it, where
    it is installed, for tf.data input and TF1 checkpoints; without it they read with numpy).

    Returns:
        True if ``import tensorflow`` would find the package.
    """
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):  # a finder that refuses it (tests/support/no_tensorflow)
        return False
