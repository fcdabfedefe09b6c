"""The model's ops on TensorFlow: TensorFlow's own op where the graph this port has always built
(its oneDNN fusions, the float rounding the goldens pin) needs it (``modeling.backend`` says
which and why). ``jax.py`` gives the same names in ``keras.ops``.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

# The step's integer type: TensorFlow's iteration counter's.
STEP_DTYPE = "int64"


def tapped(path: str):
    """None: no lookup is tapped on TensorFlow (the word table's gradient is an
    ``IndexedSlices``, whose norm counts each occurrence: ``jax.occurrence_norm_tap``).

    Args:
        path: a table's variable path.
    """
    del path
    return None


def matmul(a, b, transpose_b: bool = False):
    """``a @ b`` or ``a @ b^T`` over the last two axes.

    Args:
        a: [..., M, K].
        b: [..., K, N], or [..., N, K] with ``transpose_b``.
        transpose_b: multiply by ``b``'s transpose.

    Returns:
        [..., M, N].
    """
    return tf.matmul(a, b, transpose_b=transpose_b)


def bias_add(x, bias):
    """``x + bias`` along the last axis.

    Args:
        x: [..., N].
        bias: [N].
    """
    return tf.nn.bias_add(x, bias)


def take_rows(table, ids):
    """Rows of ``table`` by ``ids``: [V, H], int [...] -> [..., H].

    Args:
        table: [V, H].
        ids: int, any shape.
    """
    return tf.gather(table, ids)


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
    return tf.gather(table, ids)


def read(variable):
    """The variable's value as a tensor (not a variable).

    Args:
        variable: a Keras variable (or its ``.value``).
    """
    return tf.convert_to_tensor(variable)


def take_along_rows(x, positions):
    """Per batch row, the entries of ``x`` at ``positions`` (``tf.gather(batch_dims=1)``).

    Args:
        x: [B, S, ...].
        positions: int [B, P], indices into S.

    Returns:
        [B, P, ...].
    """
    return tf.gather(x, positions, batch_dims=1)


def moments(x, axes: Sequence[int]):
    """Mean and variance over ``axes`` (kept as size-1 axes).

    Args:
        x: a float tensor.
        axes: the axes reduced.

    Returns:
        ``(mean, variance)``, each ``x``'s rank.
    """
    return tf.nn.moments(x, axes=list(axes), keepdims=True)


def argmax(x):
    """int32 index of the largest entry over the last axis.

    Args:
        x: [..., N].

    Returns:
        int32 [...].
    """
    return tf.argmax(x, axis=-1, output_type=tf.int32)


def shape(x) -> Sequence:
    """``x``'s shape: ``tf.shape`` (a tensor) on TensorFlow, a tuple of ints elsewhere."""
    return tf.shape(x)


def with_last_axis(shape_of, last: int):
    """``shape_of`` [..., d] with its last size replaced by ``last`` (a ``shape`` result)."""
    return tf.concat([shape_of[:-1], [last]], axis=0)


def replica_in_sync():
    """This replica's index when several replicas of a ``tf.distribute`` strategy are in sync,
    else None (``layers.dropout``: each replica draws its own masks)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return None
    return context.replica_id_in_sync_group
