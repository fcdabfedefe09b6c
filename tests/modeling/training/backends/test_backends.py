"""modeling/training/backends/: the backend chosen once (``current(part)``), and the optimizer
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


def test_current_is_the_running_backends_module_of_each_part():
    expected = "tensorflow" if keras.backend.backend() == "tensorflow" else "jax"
    for part in ("optimizer", "predict"):
        module = backends.current(part)
        assert module.__name__ == "modeling.training.backends.%s.%s" % (expected, part)
        assert backends.current(part) is module
