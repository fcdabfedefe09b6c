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

Everywhere else they are the ``keras.ops`` equivalents. TensorFlow is imported only when the
backend is TensorFlow (``TENSORFLOW``); the fused CPU kernels (``modeling.kernels``) are
TensorFlow-only and their switch stays off on other backends.

Example::

    from modeling import backend
    y = backend.bias_add(backend.matmul(x, kernel), bias)   # [N, units]
"""

from __future__ import annotations

from typing import Sequence

import keras
from keras import ops

BACKEND: str = keras.backend.backend()
TENSORFLOW: bool = BACKEND == "tensorflow"
# The step's integer type: int64 on TensorFlow (its iteration counter), int32 on JAX without
# x64 (exact up to 2**31 steps).
STEP_DTYPE: str = "int64" if TENSORFLOW else "int32"

if TENSORFLOW:
    import tensorflow as tf  # noqa: F401  (the TensorFlow backend has it installed)


def matmul(a, b, transpose_b: bool = False):
    """``a @ b`` or ``a @ b^T`` over the last two axes.

    Args:
        a: [..., M, K].
        b: [..., K, N], or [..., N, K] with ``transpose_b``.
        transpose_b: multiply by ``b``'s transpose.

    Returns:
        [..., M, N].
    """
    if TENSORFLOW:
        return tf.matmul(a, b, transpose_b=transpose_b)
    if transpose_b:
        b = ops.swapaxes(b, -1, -2)
    return ops.matmul(a, b)


def bias_add(x, bias):
    """``x + bias`` along the last axis.

    Args:
        x: [..., N].
        bias: [N].
    """
    if TENSORFLOW:
        return tf.nn.bias_add(x, bias)
    return ops.add(x, bias)


def take_rows(table, ids):
    """Rows of ``table`` by ``ids``: [V, H], int [...] -> [..., H].

    Args:
        table: [V, H].
        ids: int, any shape.
    """
    if TENSORFLOW:
        return tf.gather(table, ids)
    return ops.take(table, ids, axis=0)


def take_few_rows(table, ids):
    """``table[ids]`` for a small table (the token types: 2 rows): TensorFlow's gather (its
    sparse gradient, as the original's graph), elsewhere a chain of selects.

    The selects' values are the gather's, exactly; the gradient of each row is a masked sum
    over the positions, where a gather's is a scatter-add in which every position hits one of
    the few rows: on a GPU those colliding atomic adds made the backward pass several times
    slower than the forward (docs/benchmarks.md). The original looks token types up with a
    one-hot matmul for the same reason (TPUs).

    Args:
        table: [T, H], T small.
        ids: int [...], in [0, T).

    Returns:
        [..., H] in the table's dtype.
    """
    if TENSORFLOW:
        return tf.gather(table, ids)
    mask_shape = tuple(ids.shape) + (1,)
    out = ops.broadcast_to(table[0], tuple(ids.shape) + (table.shape[-1],))  # [..., H]
    for row in range(1, table.shape[0]):
        out = ops.where(ops.reshape(ops.equal(ids, row), mask_shape), table[row], out)
    return out


# The original's norm of a looked-up table's gradient on JAX (``occurrence_norm_tap``): the
# tapped tables' variable paths and the traced scalar whose gradient collects Σ ||g_pos||².
_TAP: dict = {}


class occurrence_norm_tap:  # noqa: N801 - a context manager, named as a function
    """On JAX, while tracing a step: the lookups of the tables named in ``paths`` report the
    original's squared norm of their gradient as the gradient of ``tap`` (a scalar 0.0 being
    differentiated): Σ over the looked-up positions of ||∂loss/∂row||², each occurrence of an
    id counted once (TensorFlow's IndexedSlices norm, which the original's
    ``tf.clip_by_global_norm`` takes), where the table's own gradient sums a repeated id's rows.

    Args:
        paths: the tables' variable paths (``embeddings.sparse_gradient_tables``).
        tap: the traced scalar.
    """

    def __init__(self, paths, tap):
        self.paths, self.tap = set(paths), tap

    def __enter__(self):
        _TAP.update(paths=self.paths, tap=self.tap)
        return self

    def __exit__(self, *exc):
        _TAP.clear()


def tapped(path: str):
    """The active tap's scalar if the table at ``path`` is tapped (JAX, inside
    ``occurrence_norm_tap``), else None."""
    if _TAP and path in _TAP["paths"]:
        return _TAP["tap"]
    return None


def take_rows_tapped(table, ids, tap):
    """``take_rows`` whose gradient also reports Σ ||g_pos||² as ``tap``'s (JAX; see
    ``occurrence_norm_tap``).

    Args:
        table: [V, H].
        ids: int, any shape.
        tap: the traced scalar.
    """
    return _tapped_gather()(table, ids, tap)


_TAPPED_GATHER = []


def _tapped_gather():
    if not _TAPPED_GATHER:
        import jax
        import jax.numpy as jnp
        import numpy as np

        @jax.custom_vjp
        def gather(table, ids, tap):
            del tap
            return jnp.take(table, ids, axis=0)

        def forward(table, ids, tap):
            return gather(table, ids, tap), (ids, table)  # the table: alive anyway

        def backward(residuals, g):
            ids, table = residuals
            table_grad = jnp.zeros_like(table).at[ids].add(g.astype(table.dtype))
            squares = jnp.sum(jnp.square(g.astype("float32")))  # per occurrence
            return table_grad, np.zeros(ids.shape, jax.dtypes.float0), squares

        gather.defvjp(forward, backward)
        _TAPPED_GATHER.append(gather)
    return _TAPPED_GATHER[0]


def read(variable):
    """The variable's value as a tensor (not a variable).

    Args:
        variable: a Keras variable (or its ``.value``).
    """
    if TENSORFLOW:
        return tf.convert_to_tensor(variable)
    return ops.convert_to_tensor(variable)


def take_along_rows(x, positions):
    """Per batch row, the entries of ``x`` at ``positions`` (``tf.gather(batch_dims=1)``).

    Args:
        x: [B, S, ...].
        positions: int [B, P], indices into S.

    Returns:
        [B, P, ...].
    """
    if TENSORFLOW:
        return tf.gather(x, positions, batch_dims=1)
    index = positions
    for _ in range(len(x.shape) - 2):
        index = ops.expand_dims(index, -1)  # [B, P, 1, ...]
    return ops.take_along_axis(x, index, axis=1)


def moments(x, axes: Sequence[int]):
    """Mean and variance over ``axes`` (kept as size-1 axes).

    Args:
        x: a float tensor.
        axes: the axes reduced.

    Returns:
        ``(mean, variance)``, each ``x``'s rank.
    """
    if TENSORFLOW:
        return tf.nn.moments(x, axes=list(axes), keepdims=True)
    mean = ops.mean(x, axis=tuple(axes), keepdims=True)
    variance = ops.mean(ops.square(x - ops.stop_gradient(mean)), axis=tuple(axes), keepdims=True)
    return mean, variance


def argmax(x):
    """int32 index of the largest entry over the last axis.

    Args:
        x: [..., N].

    Returns:
        int32 [...].
    """
    if TENSORFLOW:
        return tf.argmax(x, axis=-1, output_type=tf.int32)
    return ops.cast(ops.argmax(x, axis=-1), "int32")


def shape(x) -> Sequence:
    """``x``'s shape: ``tf.shape`` (a tensor) on TensorFlow, a tuple of ints elsewhere."""
    if TENSORFLOW:
        return tf.shape(x)
    return tuple(ops.shape(x))


def with_last_axis(shape_of, last: int):
    """``shape_of`` [..., d] with its last size replaced by ``last`` (a ``shape`` result)."""
    if TENSORFLOW:
        return tf.concat([shape_of[:-1], [last]], axis=0)
    return tuple(shape_of[:-1]) + (last,)
