"""The model's ops in ``keras.ops``, for JAX and every other Keras backend: the names of
``tensorflow.py`` (whose docstrings give their contracts), and the tap through which a JAX step
clips by the original's norm of the word table's gradient (``occurrence_norm_tap``).
"""

from __future__ import annotations

from typing import Sequence

from keras import ops

# The step's integer type: int32 on JAX without x64 (exact up to 2**31 steps).
STEP_DTYPE = "int32"


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


def matmul(a, b, transpose_b: bool = False):
    """``tensorflow.matmul`` in ``keras.ops``."""
    if transpose_b:
        b = ops.swapaxes(b, -1, -2)
    return ops.matmul(a, b)


def bias_add(x, bias):
    """``tensorflow.bias_add`` in ``keras.ops``."""
    return ops.add(x, bias)


def take_rows(table, ids):
    """``tensorflow.take_rows`` in ``keras.ops``."""
    return ops.take(table, ids, axis=0)


def take_few_rows(table, ids):
    """``tensorflow.take_few_rows`` as a chain of selects: the gather's values, exactly; the
    gradient of each row is a masked sum over the positions, where a gather's is a scatter-add
    in which every position hits one of the few rows: on a GPU those colliding atomic adds made
    the backward pass several times slower than the forward (docs/benchmarks.md). The original
    looks token types up with a one-hot matmul for the same reason (TPUs)."""
    mask_shape = tuple(ids.shape) + (1,)
    out = ops.broadcast_to(table[0], tuple(ids.shape) + (table.shape[-1],))  # [..., H]
    for row in range(1, table.shape[0]):
        out = ops.where(ops.reshape(ops.equal(ids, row), mask_shape), table[row], out)
    return out


def read(variable):
    """``tensorflow.read`` in ``keras.ops``."""
    return ops.convert_to_tensor(variable)


def take_along_rows(x, positions):
    """``tensorflow.take_along_rows`` in ``keras.ops``."""
    index = positions
    for _ in range(len(x.shape) - 2):
        index = ops.expand_dims(index, -1)  # [B, P, 1, ...]
    return ops.take_along_axis(x, index, axis=1)


def moments(x, axes: Sequence[int]):
    """``tensorflow.moments`` in ``keras.ops``."""
    mean = ops.mean(x, axis=tuple(axes), keepdims=True)
    variance = ops.mean(ops.square(x - ops.stop_gradient(mean)), axis=tuple(axes), keepdims=True)
    return mean, variance


def argmax(x):
    """``tensorflow.argmax`` in ``keras.ops``."""
    return ops.cast(ops.argmax(x, axis=-1), "int32")


def shape(x) -> Sequence:
    """``x``'s shape, a tuple of ints (JAX traces static shapes)."""
    return tuple(ops.shape(x))


def with_last_axis(shape_of, last: int):
    """``tensorflow.with_last_axis`` on a tuple."""
    return tuple(shape_of[:-1]) + (last,)


def replica_in_sync():
    """None: a JAX step is one program over all devices, with no replica context."""
    return None
