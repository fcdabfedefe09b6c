"""modeling/training/backends/: the backend chosen once (``current()``), and the optimizer
settings that JAX's update path refuses (``backends/jax/optimizer.py``)."""

import keras
import pytest

from modeling.training import backends
from modeling.training.backends.jax import optimizer as jax_optimizer


def test_the_optimizer_settings_jax_cannot_do_are_refused():
    jax_optimizer.check_optimizer("mean_then_clip", None)
    with pytest.raises(ValueError, match="per-replica clipping needs the TensorFlow backend"):
        jax_optimizer.check_optimizer("clip_then_sum", None)
    with pytest.raises(ValueError, match="loss scaling .float16. needs the TensorFlow backend"):
        jax_optimizer.check_optimizer("mean_then_clip", "dynamic")


def test_current_is_the_package_of_the_running_backend_with_its_optimizer():
    expected = "tensorflow" if keras.backend.backend() == "tensorflow" else "jax"
    assert backends.current().__name__ == "modeling.training.backends." + expected
    assert backends.current() is backends.current()
    assert backends.current().optimizer.__name__.endswith(expected + ".optimizer")
