"""One post-LN transformer block of the original BERT (``transformer_model``'s loop body).

Layer tree (= the original's variable scopes under ``bert/encoder/layer_N``)::

    layer_N/attention/self/{query,key,value}      SelfAttention
    layer_N/attention/output/{dense,LayerNorm}    ResidualOutput: LN(dropout(dense(ctx)) + x)
    layer_N/intermediate/dense                    Intermediate: act(dense(x)), [B,S,I]
    layer_N/output/{dense,LayerNorm}              ResidualOutput: LN(dropout(dense(h)) + x)

All tensors are [B, S, H] except the intermediate activation [B, S, I]; the attention bias is
[B, 1, 1, S]. Dropout only with ``training=True``.
"""

from __future__ import annotations

import keras
from keras import ops

from modeling import backend
from modeling.layers import ConfigArgs, activations
from modeling.layers.attention import SelfAttention
from modeling.layers.dense import BertDense
from modeling.layers.dropout import Dropout
from modeling.layers.embeddings import truncated_normal
from modeling.layers.layer_norm import BertLayerNorm


@keras.saving.register_keras_serializable(package="bert_tf2")
class ResidualOutput(ConfigArgs, keras.layers.Layer):
    """(x [B,S,I], residual [B,S,H]) -> LayerNorm(dropout(dense(x)) + residual) [B,S,H].

    Args:
        hidden_size: H.
        initializer_range: stddev of the dense kernel's init.
        dropout_rate: on the dense output, training only.
        layer_norm_eps: LayerNorm's epsilon.
    """

    CONFIG_ARGS = ("hidden_size", "initializer_range", "dropout_rate", "layer_norm_eps")

    def __init__(self, hidden_size: int, initializer_range: float = 0.02,
                 dropout_rate: float = 0.1, layer_norm_eps: float = 1e-12, **kwargs):
        kwargs.setdefault("name", "output")
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dropout_rate = dropout_rate
        self.layer_norm_eps = layer_norm_eps
        self.dense = BertDense(hidden_size, kernel_initializer=truncated_normal(
            initializer_range), dtype=self.dtype_policy, name="dense")
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy)
        self.layer_norm = BertLayerNorm(epsilon=layer_norm_eps, dtype=self.dtype_policy,
                                        name="LayerNorm")

    def build(self, x_shape):
        """Args:
            x_shape: the input's shape [B, S, I].
        """
        self.dense.build(x_shape)
        self.layer_norm.build(tuple(x_shape[:-1]) + (self.hidden_size,))

    def call(self, x, residual, training=None):
        # In 2-D [B*S, .] so that matmul, bias_add and the residual add stay adjacent (one
        # fused oneDNN kernel on CPU in graph mode; see modeling/layers/dense.py).
        """Args:
            x: [B, S, I].
            residual: [B, S, H].
            training: apply dropout.

        Returns:
            [B, S, H].
        """
        x2d = ops.reshape(x, (-1, x.shape[-1]))  # [B*S, I]
        residual2d = ops.reshape(residual, (-1, self.hidden_size))  # [B*S, H]
        y = self.dropout(self.dense(x2d), training=training)  # [B*S, H]
        y = self.layer_norm(y + residual2d, training=training)  # [B*S, H]
        return ops.reshape(y, backend.shape(residual))  # [B, S, H]


@keras.saving.register_keras_serializable(package="bert_tf2")
class Intermediate(ConfigArgs, keras.layers.Layer):
    """x [B,S,H] -> act(dense(x)) [B,S,I]; ``hidden_act`` as in the config ("gelu" = tanh).

    Args:
        intermediate_size: I.
        hidden_act: the activation's name.
        initializer_range: stddev of the dense kernel's init.
    """

    CONFIG_ARGS = ("intermediate_size", "hidden_act", "initializer_range")

    def __init__(self, intermediate_size: int, hidden_act: str = "gelu",
                 initializer_range: float = 0.02, **kwargs):
        kwargs.setdefault("name", "intermediate")
        super().__init__(**kwargs)
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.activation = activations.get_activation(hidden_act)
        self.dense = BertDense(intermediate_size, activation=self.activation,
                               kernel_initializer=truncated_normal(initializer_range),
                               dtype=self.dtype_policy, name="dense")

    def build(self, input_shape):
        """Args:
            input_shape: [B, S, H].
        """
        self.dense.build(input_shape)

    def call(self, x, training=None):
        """Args:
            x: [B, S, H].
            training: a training step (the fused GELU kernel may apply).

        Returns:
            act(x @ kernel + bias) [B, S, I].
        """
        return self.dense(x, training=training)  # [B, S, I]: act(x @ kernel + bias)

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: [B, S, H].

        Returns:
            ``(B, S, I)``.
        """
        return tuple(input_shape[:-1]) + (self.intermediate_size,)


@keras.saving.register_keras_serializable(package="bert_tf2")
class AttentionBlock(ConfigArgs, keras.layers.Layer):
    """x [B,S,H], bias [B,1,1,S] -> LayerNorm(dropout(dense(self_attention(x))) + x) [B,S,H].

    Args:
        hidden_size: H.
        num_attention_heads: A.
        initializer_range: stddev of the kernels' init.
        hidden_dropout_prob: on the projected output.
        attention_probs_dropout_prob: on the attention probabilities.
        layer_norm_eps: LayerNorm's epsilon.
    """

    CONFIG_ARGS = ("hidden_size", "num_attention_heads", "initializer_range",
                   "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps")

    def __init__(self, hidden_size: int, num_attention_heads: int,
                 initializer_range: float = 0.02, hidden_dropout_prob: float = 0.1,
                 attention_probs_dropout_prob: float = 0.1, layer_norm_eps: float = 1e-12,
                 **kwargs):
        kwargs.setdefault("name", "attention")
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.initializer_range = initializer_range
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.layer_norm_eps = layer_norm_eps
        self.self_attention = SelfAttention(
            num_attention_heads, hidden_size // num_attention_heads,
            initializer_range=initializer_range, dropout_rate=attention_probs_dropout_prob,
            dtype=self.dtype_policy, name="self")
        self.output_layer = ResidualOutput(hidden_size, initializer_range, hidden_dropout_prob,
                                           layer_norm_eps, dtype=self.dtype_policy,
                                           name="output")

    def build(self, hidden_shape):
        """Args:
            hidden_shape: [B, S, H].
        """
        self.self_attention.build(hidden_shape)
        self.output_layer.build(hidden_shape)

    def call(self, hidden, attention_bias, training=None):
        """Args:
            hidden: [B, S, H].
            attention_bias: [B, 1, 1, S].
            training: apply dropout.

        Returns:
            [B, S, H].
        """
        context = self.self_attention(hidden, attention_bias, training=training)  # [B, S, H]
        return self.output_layer(context, hidden, training=training)


@keras.saving.register_keras_serializable(package="bert_tf2")
class TransformerLayer(ConfigArgs, keras.layers.Layer):
    """One encoder block: x [B,S,H], bias [B,1,1,S] -> [B,S,H]. Name it ``layer_N``.

    Args:
        hidden_size: H.
        num_attention_heads: A.
        intermediate_size: I.
        hidden_act: the feed-forward activation's name.
        initializer_range: stddev of the kernels' init.
        hidden_dropout_prob: on the attention and feed-forward outputs.
        attention_probs_dropout_prob: on the attention probabilities.
        layer_norm_eps: LayerNorm's epsilon.
    """

    CONFIG_ARGS = ("hidden_size", "num_attention_heads", "intermediate_size", "hidden_act",
                   "initializer_range", "hidden_dropout_prob", "attention_probs_dropout_prob",
                   "layer_norm_eps")

    def __init__(self, hidden_size: int, num_attention_heads: int, intermediate_size: int,
                 hidden_act: str = "gelu", initializer_range: float = 0.02,
                 hidden_dropout_prob: float = 0.1, attention_probs_dropout_prob: float = 0.1,
                 layer_norm_eps: float = 1e-12, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.layer_norm_eps = layer_norm_eps
        self.attention = AttentionBlock(hidden_size, num_attention_heads, initializer_range,
                                        hidden_dropout_prob, attention_probs_dropout_prob,
                                        layer_norm_eps, dtype=self.dtype_policy,
                                        name="attention")
        self.intermediate = Intermediate(intermediate_size, hidden_act, initializer_range,
                                         dtype=self.dtype_policy, name="intermediate")
        self.output_layer = ResidualOutput(hidden_size, initializer_range, hidden_dropout_prob,
                                           layer_norm_eps, dtype=self.dtype_policy,
                                           name="output")

    def build(self, hidden_shape):
        """Args:
            hidden_shape: [B, S, H].
        """
        self.attention.build(hidden_shape)
        self.intermediate.build(hidden_shape)
        self.output_layer.build(tuple(hidden_shape[:-1]) + (self.intermediate_size,))

    def call(self, hidden, attention_bias, training=None):
        """Args:
            hidden: [B, S, H].
            attention_bias: [B, 1, 1, S].
            training: apply dropout.

        Returns:
            [B, S, H].
        """
        attention_output = self.attention(hidden, attention_bias, training=training)  # [B,S,H]
        intermediate = self.intermediate(attention_output, training=training)  # [B, S, I]
        return self.output_layer(intermediate, attention_output, training=training)  # [B,S,H]
