"""The backend shim: the few ops where the model keeps TensorFlow's exact op on TensorFlow.

The layers, heads and losses are written in ``keras.ops`` and run on every Keras 3 backend
(``KERAS_BACKEND=tensorflow``, the default here, or ``jax``). On TensorFlow a few ``keras.ops``
spellings would change the graph this port has always built, and with it oneDNN's CPU fusions
(MatMul + BiasAdd + Gelu/Add into one kernel) and the float rounding that the goldens pin:

* ``matmul(a, b, transpose_b=True)``: ``tf.matmul``'s transposed operand (``keras.ops`` would add
  a Transpose op before the MatMul);
* ``bias_add``: ``tf.nn.bias_add`` (``+`` is an AddV2, which the fusion pass does not fold);
* ``take_rows`` / ``take_along_rows``: ``tf.gather`` (IndexedSlices gradients for the word table,
  the original's sparse gradient; ``batch_dims=1`` for the masked positions);
* ``read``: ``tf.convert_to_tensor`` of a variable (a tensor, where Keras' conversion keeps the
  ``tf.Variable``, whose gather is a copy-on-read ResourceGather);
* ``moments``: ``tf.nn.moments`` (the original's LayerNorm statistics);
* ``argmax``: ``tf.argmax`` (``keras.ops.argmax`` adds a pass for negative zeros);
* ``shape``: ``tf.shape`` (dynamic, where a traced batch dimension is unknown).

Everywhere else they are the ``keras.ops`` equivalents. Each backend's ops are a module of this
package (``tensorflow.py``, ``jax.py``: JAX and every other Keras backend), the one for the
running backend chosen here once (``NAME``); TensorFlow is imported only when the backend is
TensorFlow. The fused CPU kernels (``modeling.kernels``) are TensorFlow-only and their switch
stays off on other backends.

Example::

    from modeling import backend
    y = backend.bias_add(backend.matmul(x, kernel), bias)   # [N, units]
"""

from __future__ import annotations

import importlib

import keras

BACKEND: str = keras.backend.backend()
TENSORFLOW: bool = BACKEND == "tensorflow"
# The one choice of a backend: the name of the per-backend modules (this package's, and
# ``modeling.training.backends``'s): ``tensorflow``, else ``jax`` (JAX and every other Keras
# backend, in ``keras.ops``).
NAME: str = "tensorflow" if TENSORFLOW else "jax"

_OPS = importlib.import_module("%s.%s" % (__name__, NAME))

STEP_DTYPE: str = _OPS.STEP_DTYPE  # the step counter's integer type
matmul = _OPS.matmul
bias_add = _OPS.bias_add
take_rows = _OPS.take_rows
take_few_rows = _OPS.take_few_rows
tapped = _OPS.tapped
read = _OPS.read
take_along_rows = _OPS.take_along_rows
moments = _OPS.moments
argmax = _OPS.argmax
shape = _OPS.shape
with_last_axis = _OPS.with_last_axis
replica_in_sync = _OPS.replica_in_sync


def module_of(package: str, part: str = ""):
    """The running backend's module in a package of per-backend modules.

    Args:
        package: a package with a ``tensorflow`` and a ``jax`` module or subpackage.
        part: a module of that subpackage (``"steps"``), or nothing.

    Returns:
        ``<package>.<NAME>[.<part>]``, imported.
    """
    return importlib.import_module(".".join([package, NAME] + ([part] if part else [])))
