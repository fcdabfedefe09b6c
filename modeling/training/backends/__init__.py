"""What differs between the Keras backends in a training job: one package per backend, the one
for the running backend chosen once, as a value (``current(part)``). What is the same on every
backend is written once above them (``modeling.training.job``: the loop;
``modeling.training.optimizers``: the optimizer classes).

* ``tensorflow``: ``optimizer.py`` (what only TensorFlow gives the optimizer: cross-replica sums,
  ``tf.IndexedSlices`` clipping, loss scaling, the fused CPU update), ``steps.py`` (host loops
  of the compiled step under a ``tf.distribute`` strategy, gradient accumulation, the
  ``model.ckpt-N`` store with the tf.data iterator's state), ``execution.py`` (how the step
  runs: XLA, the fused kernels, the fused optimizer, decided once), ``predict.py`` (the traced
  forward).
* ``jax``: JAX, and any other Keras backend (``keras.ops``): ``optimizer.py`` (Keras' own update
  path, the optimizer settings it refuses), ``settings.py`` (the one table of the TensorFlow-only
  flags refused), ``steps.py`` (the compiled step, the devices, the job's steps),
  ``checkpoints.py`` (``jax-ckpt-N.npz``), ``predict.py`` (the compiled forward).

Each backend's ``optimizer`` gives the same names: ``MATH`` (the array namespace of
``update_rules``), ``check_optimizer``, ``apply_gradients``, ``cpu_kernel_applies``; each
``predict``: ``predict(model, dataset, output_names, total, strategy, label)``,
``encoder_layers(model, layer_indexes, inference_dtype)``, ``resolve_strategy(strategy)``.

Example::

    from modeling.training import backends
    backends.current("optimizer").MATH.sqrt(4.0)   # tf.sqrt on TensorFlow, keras.ops elsewhere
"""

from __future__ import annotations

import types

from modeling import backend as _model_backend


def current(part: str) -> types.ModuleType:
    """The running backend's module of ``part`` (``KERAS_BACKEND``, read once per process).

    Args:
        part: ``"optimizer"`` or ``"predict"`` (each backend has both), or another module of
            the backend's package (``"steps"``).

    Returns:
        ``modeling.training.backends.<tensorflow or jax>.<part>`` (``modeling.backend.NAME``:
        the one choice).
    """
    return _model_backend.module_of(__name__, part)
