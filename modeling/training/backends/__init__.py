"""What differs between the Keras backends in a training job: one module per backend, the one
for the running backend chosen once, as a value (``current()``).

* ``tensorflow``: what only TensorFlow gives. Today the optimizer's side of it (cross-replica
  sums, ``tf.IndexedSlices`` clipping, loss scaling, the fused CPU update).
* ``jax``: JAX, and any other Keras backend (``keras.ops``): Keras' own update path, and the
  optimizer settings it refuses.

Each gives the same names: ``MATH`` (the array namespace of ``update_rules``),
``check_optimizer``, ``apply_gradients``, ``cpu_kernel_applies``. docs/architecture.md has the
target: each backend's compiled step and checkpoint store here, the rest written once.

Example::

    from modeling.training import backends
    backends.current().MATH.sqrt(4.0)   # tf.sqrt on TensorFlow, keras.ops.sqrt elsewhere
"""

from __future__ import annotations

import types

from modeling import backend as _model_backend


def current() -> types.ModuleType:
    """The module of the backend Keras runs on (``KERAS_BACKEND``, read once per process).

    Returns:
        ``modeling.training.backends.tensorflow`` or ``modeling.training.backends.jax``.
    """
    if _model_backend.TENSORFLOW:
        from modeling.training.backends import tensorflow as module
    else:
        from modeling.training.backends import jax as module
    return module
