"""Multi-head self-attention as in the original BERT (``attention_layer``).

Shapes: hidden [B, S, H]; attention bias [B, 1, 1, S] (0 for real tokens, -10000 for padding);
N heads of size D = H / N. Scores are ``(q k^T) * 1/sqrt(D) + bias``, softmax over the keys,
dropout on the probabilities (only with ``training=True``), then ``probs @ v`` merged back to
[B, S, H]. Sub-layers are named ``query``, ``key``, ``value`` (the original's variable scopes).

Training under ``switch.Kernels(training=True)`` computes the scale, bias, softmax
and dropout as one CPU kernel each way (``cpu_ops.attention_probs``: same mask as the layer's
dropout kernel, the softmax in float32 with one rounding); elsewhere they are TensorFlow's ops.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from modeling import backend
from modeling.layers import ConfigArgs
from modeling.layers.dense import BertDense
from modeling.layers.dropout import Dropout
from modeling.layers.embeddings import truncated_normal

MASK_ADDER = -10000.0


def attention_bias_from_mask(input_mask, dtype):
    """int/float mask [B, S] (1 = real) -> additive bias [B, 1, 1, S]: (1 - mask) * -10000.

    Args:
        input_mask: [B, S].
        dtype: the bias's dtype (the compute dtype).
    """
    mask = ops.cast(input_mask, dtype)[:, None, None, :]  # [B, 1, 1, S]
    return (1.0 - mask) * MASK_ADDER


@keras.saving.register_keras_serializable(package="bert_tf2")
class AttentionBias(keras.layers.Layer):
    """Keras wrapper of ``attention_bias_from_mask``: input_mask [B, S] -> bias [B, 1, 1, S].

    Args:
        **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("name", "attention_bias")
        super().__init__(**kwargs)

    def call(self, input_mask):
        """The additive attention bias of ``input_mask``.

        Args:
            input_mask: [B, S], 1 for real tokens, 0 for padding.

        Returns:
            [B, 1, 1, S] in the compute dtype: 0 where attended, a large negative value elsewhere.
        """
        return attention_bias_from_mask(input_mask, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: ``(B, S)``.

        Returns:
            ``(B, 1, 1, S)``.
        """
        return (input_shape[0], 1, 1, input_shape[1])


@keras.saving.register_keras_serializable(package="bert_tf2")
class SelfAttention(ConfigArgs, keras.layers.Layer):
    """hidden [B, S, H], bias [B, 1, 1, S] -> context [B, S, H] (before the output projection).

    Args:
        num_attention_heads: A.
        size_per_head: H / A.
        initializer_range: stddev of the query/key/value kernels' init.
        dropout_rate: on the attention probabilities, training only.
    """

    CONFIG_ARGS = ("num_attention_heads", "size_per_head", "initializer_range", "dropout_rate")

    def __init__(self, num_attention_heads: int, size_per_head: int,
                 initializer_range: float = 0.02, dropout_rate: float = 0.1, **kwargs):
        kwargs.setdefault("name", "self")
        super().__init__(**kwargs)
        self.num_attention_heads = num_attention_heads
        self.size_per_head = size_per_head
        self.initializer_range = initializer_range
        self.dropout_rate = dropout_rate
        width = num_attention_heads * size_per_head
        init = truncated_normal(initializer_range)
        self.query = BertDense(width, kernel_initializer=init, dtype=self.dtype_policy, name="query")
        self.key = BertDense(width, kernel_initializer=init, dtype=self.dtype_policy, name="key")
        self.value = BertDense(width, kernel_initializer=init, dtype=self.dtype_policy, name="value")
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, hidden_shape):
        """Builds the query/key/value projections.

        Args:
            hidden_shape: [B, S, H].
        """
        for layer in (self.query, self.key, self.value):
            layer.build(hidden_shape)

    def _split_heads(self, x):
        shape = backend.shape(x)
        return ops.reshape(x, (shape[0], shape[1], self.num_attention_heads,
                               self.size_per_head))  # [B, S, N, D]

    def call(self, hidden, attention_bias, training=None):
        """Projects ``hidden`` to query/key/value and attends (``attend``).

        Args:
            hidden: [B, S, H].
            attention_bias: [B, 1, 1, S].
            training: apply dropout.

        Returns:
            context [B, S, H].
        """
        return self.attend(self.query(hidden), self.key(hidden), self.value(hidden),
                           attention_bias, training=training)

    def attend(self, query, key, value, attention_bias, training=None):
        """The attention proper, after the projections: query/key/value [B, S, H] -> context
        [B, S, H] (scores, softmax, dropout, weighted sum; benchmarks time it alone).

        Args:
            query: [B, S, H], projected.
            key: [B, S, H], projected.
            value: [B, S, H], projected.
            attention_bias: [B, 1, 1, S].
            training: apply dropout.
        """
        q = self._split_heads(query)  # [B, F, N, D]
        k = self._split_heads(key)  # [B, T, N, D]
        v = self._split_heads(value)  # [B, T, N, D]
        q = ops.transpose(q, (0, 2, 1, 3))  # [B, N, F, D]
        k = ops.transpose(k, (0, 2, 1, 3))  # [B, N, T, D]
        # (q k^T) * 1/sqrt(D) + bias: the original's order (BatchMatMul on [B, N, S, D]).
        scores = backend.matmul(q, k, transpose_b=True)  # [B, N, F, T]
        probs = self._probs(scores, ops.cast(attention_bias, scores.dtype), training)
        context = backend.matmul(probs, ops.transpose(v, (0, 2, 1, 3)))  # [B, N, F, D]
        context = ops.transpose(context, (0, 2, 1, 3))  # [B, F, N, D]
        shape = backend.shape(context)
        return ops.reshape(context, (shape[0], shape[1],
                                     self.num_attention_heads * self.size_per_head))  # [B, F, H]

    def _probs(self, scores, bias, training):
        """scores [B, N, F, T], bias [B, 1, 1, T] -> dropout(softmax(scores / sqrt(D) + bias))."""
        scale = 1.0 / math.sqrt(float(self.size_per_head))
        if (training and self.dropout.fused_kernel_applies(scores.dtype)
                and len(bias.shape) == 4 and bias.shape[1] == 1 and bias.shape[2] == 1):
            # One CPU kernel each way for the chain below (modeling/kernels/cpu_ops.py, on
            # TensorFlow only); its dropout draws the mask the layer's fused dropout would draw.
            import tensorflow as tf
            from modeling.kernels import cpu_ops
            shape = tf.shape(scores)
            bias = tf.broadcast_to(bias, [shape[0], 1, 1, shape[3]])  # the kernel's [B, 1, 1, T]
            return cpu_ops.attention_probs(scores, bias, scale, self.dropout.rate,
                                           self.dropout.next_seed())
        scores = scores * ops.cast(scale, scores.dtype)
        scores = scores + bias  # [B, N, F, T]
        # Softmax in the compute dtype: oneDNN's bfloat16 softmax accumulates in float32.
        probs = ops.softmax(scores, axis=-1)  # [B, N, F, T]
        return self.dropout(probs, training=training)
