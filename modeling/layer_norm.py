"""LayerNorm over the last axis, computed as the original (``tf.nn.moments`` + batch norm).

Variables ``gamma`` (ones) and ``beta`` (zeros) of shape [H]; the layer is named ``LayerNorm`` by
its users so that ``variable.path`` contains "LayerNorm" (excluded from weight decay). Under a
mixed or pure bfloat16 policy the statistics are computed in float32 (``gamma``/``beta`` cast to
float32) and the result is cast back to the compute dtype.
"""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertLayerNorm(keras.layers.Layer):
    """y = (x - mean) * rsqrt(var + eps) * gamma + beta over the last axis. [..., H] -> [..., H]."""

    def __init__(self, epsilon: float = 1e-12, **kwargs):
        kwargs.setdefault("name", "LayerNorm")
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.autocast = False

    def build(self, input_shape):
        dim = input_shape[-1]
        self.beta = self.add_weight(name="beta", shape=(dim,), initializer="zeros")
        self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer="ones")

    def call(self, x):
        x32 = tf.cast(x, tf.float32)  # [..., H]
        mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)  # [..., 1] each
        gamma = tf.cast(self.gamma.value, tf.float32)  # [H] (bf16 under a pure bf16 policy)
        beta = tf.cast(self.beta.value, tf.float32)  # [H]
        inv = tf.math.rsqrt(variance + self.epsilon) * gamma  # [..., H]
        y = x32 * inv + (beta - mean * inv)  # [..., H]
        return tf.cast(y, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config["epsilon"] = self.epsilon
        return config
