"""The training path of ``gelu(x @ kernel + bias)``: fused GELU kernels and a hand-written gradient.

Used by ``BertDense`` (the ``intermediate`` layers) when called with ``training=True`` under
``switch.Kernels(training=True)``: the model is the same, only how TensorFlow
computes the step changes. In graph mode TensorFlow runs the tanh GELU as ~7 elementwise ops
forward and ~8 backward, each a pass over the [B*S, I] activation; here the forward GELU is one
fused kernel and its derivative another (one pass each; XLA-compiled in float32, C++ CPU kernels
in bfloat16: below), and the input gradient is
computed as ``dz @ transpose(kernel)`` with the transpose materialised by XLA (oneDNN runs that
plain matmul faster than the same product with ``transpose_b=True`` at K = I; a TensorFlow
``Transpose`` would be folded back into the matmul by grappler). docs/benchmarks.md has the
measured step times with and without these kernels.

Math (z = x @ kernel + bias [N, I], c = sqrt(2/pi), a = 0.044715, u = c (z + a z^3))::

    gelu(z)  = 0.5 z (1 + tanh(u))                    = z s,       s = sigmoid(2u)
    gelu'(z) = 0.5 (1 + t) + 0.5 z (1 - t^2) c (1 + 3 a z^2)
             = s + 2 c z s (1 - s) (1 + 3 a z^2),                  t = tanh(u)
    dz = dy * gelu'(z);  dx = dz @ kernel^T;  dkernel = x^T @ dz;  dbias = sum_rows(dz)

The sigmoid form is the original's tanh formula rewritten (1 + tanh(u) = 2 sigmoid(2u)); in
float32 it avoids the cancellation of 1 + tanh(u) for u << 0, so against float64 it is the more
accurate of the two (max abs error 5e-7 vs 9e-7 for the value, 2e-6 vs 4e-6 for the derivative
over [-12, 12]). Against ``tf.nn.gelu(approximate=True)`` and its autodiff gradient the values
differ by float rounding only (up to ~1e-6 / ~6e-6 absolute, in the tail where tanh saturates),
which is why the trainer keeps these kernels off in ``--deterministic`` runs, like the XLA-fused
optimizer update.

Under ``--mixed_precision=bf16`` the activation is bfloat16, and XLA's CPU kernels convert it
element by element, several times slower than in float32 (docs/benchmarks.md has the figures):
there the same formula runs as the C++ CPU kernels
``cpu_ops.gelu`` / ``cpu_ops.gelu_grad`` (bfloat16 read into float32, Eigen's vectorised
logistic, one rounding to bfloat16; the backward kernel also sums dbias, in float32, in the same
pass), when the kernel library is built. float32 keeps XLA's.

The layer's ``Kernels`` value (``modeling/kernels/switch.py``) is read when a step is traced. XLA is
only used where it can compile a kernel for the replica's device: the trainer enables this for
one local replica (as for the fused optimizer); TPUs compile the whole step anyway.
"""

from __future__ import annotations

import math

import tensorflow as tf

from modeling.kernels import cpu_ops

_C = math.sqrt(2.0 / math.pi)
_A = 0.044715


@tf.function(jit_compile=True)
def gelu_forward(z: tf.Tensor) -> tf.Tensor:
    """tanh GELU of ``z`` (any shape), one fused XLA kernel.

    Args:
        z: the pre-activations, any shape.

    Returns:
        gelu(z), z's shape and dtype.
    """
    return z * tf.math.sigmoid((2.0 * _C) * (z + _A * (z * z * z)))


@tf.function(jit_compile=True)
def gelu_backward(z: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
    """dy * gelu'(z) (same shape as ``z``), one fused XLA kernel.

    Args:
        z: the pre-activations, any shape.
        dy: the upstream gradient, z's shape.

    Returns:
        dz, z's shape.
    """
    z2 = z * z
    s = tf.math.sigmoid((2.0 * _C) * (z + _A * (z2 * z)))
    return dy * (s + (2.0 * _C) * z * s * (1.0 - s) * (1.0 + (3.0 * _A) * z2))


@tf.function(jit_compile=True)
def transpose_2d(kernel: tf.Tensor) -> tf.Tensor:
    """[a, b] -> [b, a], materialised (an XLA kernel, so grappler cannot fold it away).

    Args:
        kernel: a matrix [a, b].

    Returns:
        Its transpose [b, a].
    """
    return tf.transpose(kernel)


def _xla_gelu_grad(z: tf.Tensor, dy: tf.Tensor):
    """z, dy [N, units] -> (dz [N, units], dbias [units] float32): the XLA backward kernel, then
    the bias gradient summed in float32 (as TensorFlow's BiasAddGrad accumulates)."""
    dz = gelu_backward(z, dy)  # [N, units]
    return dz, tf.reduce_sum(tf.cast(dz, tf.float32), axis=0)  # [units]


def _gelu_kernels(dtype: tf.DType):
    """(forward, backward) GELU kernels for activations of ``dtype``: XLA's in float32, the C++
    CPU kernels in bfloat16, where XLA converts element by element (see module). backward(z, dy)
    -> (dz, dbias in float32): the C++ kernel sums the bias gradient in the same pass."""
    if dtype == tf.bfloat16 and cpu_ops.usable(dtype):
        return cpu_ops.gelu, cpu_ops.gelu_grad
    return gelu_forward, _xla_gelu_grad


def gelu_dense_train(x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """x [N, in], kernel [in, units], bias [units] -> gelu(x @ kernel + bias) [N, units].

    Args:
        x: the inputs [N, in].
        kernel: the dense kernel [in, units].
        bias: the dense bias [units].

    Returns:
        gelu(x @ kernel + bias) [N, units], with a custom gradient.
    """
    gelu, gelu_grad = _gelu_kernels(x.dtype)

    @tf.custom_gradient
    def forward(x, kernel, bias):
        z = tf.nn.bias_add(tf.matmul(x, kernel), bias)  # [N, units]: one oneDNN kernel
        y = gelu(z)  # [N, units]

        def grad(dy):
            dz, dbias = gelu_grad(z, tf.cast(dy, z.dtype))  # [N, units], [units] float32
            dx = tf.matmul(dz, transpose_2d(kernel))  # [N, in]
            dkernel = tf.matmul(x, dz, transpose_a=True)  # [in, units]
            return dx, dkernel, tf.cast(dbias, dz.dtype)

        return y, grad

    return forward(x, kernel, bias)
