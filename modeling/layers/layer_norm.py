"""LayerNorm over the last axis, computed as the original (``tf.nn.moments`` + batch norm).

Variables ``gamma`` (ones) and ``beta`` (zeros) of shape [H]; the layer is named ``LayerNorm`` by
its users so that ``variable.path`` contains "LayerNorm" (excluded from weight decay). Under a
mixed or pure bfloat16 policy the statistics are computed in float32 (``gamma``/``beta`` cast to
float32) and the result is cast back to the compute dtype.

Called with ``training=True`` under ``switch.Kernels(training=True)`` on float32 or
bfloat16 activations with float32 ``gamma``/``beta`` (with the CPU kernel library built), it
computes the same formula as one CPU kernel forward and one backward (``cpu_ops.layer_norm``;
equal up to float rounding, statistics in float32 either way). Called with ``training`` False or
None under ``switch.Kernels(inference=True)`` (prediction and evaluation on a CPU),
it runs the same kernel forward, for any ``gamma``/``beta`` dtype.
"""

from __future__ import annotations

import keras
from keras import ops

from modeling import backend
from modeling.kernels import switch
from modeling.layers import ConfigArgs


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertLayerNorm(ConfigArgs, keras.layers.Layer):
    """y = (x - mean) * rsqrt(var + eps) * gamma + beta over the last axis. [..., H] -> [..., H].

    Args:
        epsilon: added to the variance (the original's 1e-12).
    """

    CONFIG_ARGS = ("epsilon",)

    def __init__(self, epsilon: float = 1e-12, **kwargs):
        kwargs.setdefault("name", "LayerNorm")
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.autocast = False

    def build(self, input_shape):
        """Creates ``beta`` and ``gamma`` [H].

        Args:
            input_shape: [..., H].
        """
        dim = input_shape[-1]
        # autocast=False: read in their own dtype under a mixed policy even when this layer is
        # called on its own (Keras enters its autocast scope for a mixed layer called outside a
        # model regardless of ``self.autocast``).
        self.beta = self.add_weight(name="beta", shape=(dim,), initializer="zeros",
                                    autocast=False)
        self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer="ones",
                                     autocast=False)

    def _kernel_applies(self, x, training) -> bool:
        # The kernel returns x's dtype (float32 or bfloat16, cpu_ops.usable), as the fallback
        # returns the compute dtype: only where the two are the same. A training step needs
        # float32 gamma/beta (the kernel's gradients are float32); a forward pass reads
        # bfloat16 ones (a bfloat16-policy model) in float32, as the formula below does.
        # The kernels' switch is set by TensorFlow's steps only (modeling.kernels.switch): off
        # on every other backend.
        if x.dtype != self.compute_dtype:
            return False
        kernels = switch.kernels_of(self)
        if training:
            enabled = self.gamma.dtype == "float32" and kernels.training
        else:
            enabled = kernels.inference
        if not enabled:
            return False
        from modeling.kernels import cpu_ops
        return cpu_ops.usable(x.dtype)  # last: it builds the library

    def call(self, x, training=None):
        """Args:
            x: [..., H].
            training: a training step (selects the fused kernel's training or inference switch).

        Returns:
            LayerNorm(x) [..., H] in the compute dtype.
        """
        if self._kernel_applies(x, training):
            from modeling.kernels import cpu_ops
            return cpu_ops.layer_norm(x, ops.cast(self.gamma.value, "float32"),
                                      ops.cast(self.beta.value, "float32"),
                                      self.epsilon)  # [..., H]
        x32 = ops.cast(x, "float32")  # [..., H]
        mean, variance = backend.moments(x32, axes=[-1])  # [..., 1] each
        gamma = ops.cast(self.gamma.value, "float32")  # [H] (bf16 under a pure bf16 policy)
        beta = ops.cast(self.beta.value, "float32")  # [H]
        inv = ops.rsqrt(variance + self.epsilon) * gamma  # [..., H]
        y = x32 * inv + (beta - mean * inv)  # [..., H]
        return ops.cast(y, self.compute_dtype)
