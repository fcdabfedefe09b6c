"""The BERT encoder as a Keras 3 functional model (the original ``modeling.BertModel``).

Inputs (dict, int32 [B, S]): ``input_ids``, ``input_mask`` (1 = real token, 0 = padding) and
``segment_ids`` (token types). Outputs (dict):

* ``embedding_output`` [B, S, H]: word + segment + position embeddings, LayerNorm, dropout;
* ``encoder_outputs``: list of the L block outputs, each [B, S, H];
* ``sequence_output`` [B, S, H]: the last block's output;
* ``pooled_output`` [B, H]: tanh(dense(sequence_output[:, 0])).

Top-level layer names (``word_embeddings``, ``embeddings``, ``attention_bias``, ``layer_N``,
``pooler``) are what ``modeling.checkpoints.tf1`` maps to Google's TF1 variable names. Dropout is
active only when the model is called with ``training=True``.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import keras
import tensorflow as tf

from modeling.layers.attention import AttentionBias
from modeling.config import BertConfig
from modeling.layers.embeddings import EmbeddingPostprocessor, WordEmbedding, truncated_normal
from modeling.layers.transformer import TransformerLayer

INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


@keras.saving.register_keras_serializable(package="bert_tf2")
class Pooler(keras.layers.Layer):
    """sequence_output [B, S, H] -> tanh(dense(sequence_output[:, 0])) [B, H]."""

    def __init__(self, hidden_size: int, initializer_range: float = 0.02, **kwargs):
        kwargs.setdefault("name", "pooler")
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(hidden_size, activation="tanh", name="dense",
                                        dtype=self.dtype_policy,
                                        kernel_initializer=truncated_normal(initializer_range))

    def build(self, input_shape):
        self.dense.build((input_shape[0], input_shape[-1]))

    def call(self, sequence_output):
        return self.dense(sequence_output[:, 0, :])  # [B, H]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, initializer_range=self.initializer_range)
        return config


def bert_inputs(seq_length: Optional[int] = None) -> Dict[str, keras.KerasTensor]:
    """The encoder's symbolic inputs: int32 [B, S] each (S = ``seq_length`` or dynamic)."""
    return {name: keras.Input(shape=(seq_length,), dtype="int32", name=name)
            for name in INPUT_NAMES}


def build_encoder(config: BertConfig, inputs: Dict[str, keras.KerasTensor],
                  dtype=None) -> Tuple[Dict[str, object], WordEmbedding]:
    """Calls fresh encoder layers on symbolic ``inputs``; returns (outputs dict, word layer).

    The word-embedding layer is returned so that heads can reuse (tie) its table.
    """
    word_layer = WordEmbedding(config.vocab_size, config.hidden_size, config.initializer_range,
                               dtype=dtype, name="word_embeddings")
    words = word_layer(inputs["input_ids"])  # [B, S, H]
    embedding_output = EmbeddingPostprocessor(
        config.type_vocab_size, config.max_position_embeddings, config.initializer_range,
        config.hidden_dropout_prob, config.layer_norm_eps, dtype=dtype,
        name="embeddings")(words, inputs["segment_ids"])  # [B, S, H]
    bias = AttentionBias(dtype=dtype, name="attention_bias")(inputs["input_mask"])  # [B,1,1,S]
    hidden = embedding_output
    encoder_outputs = []
    for index in range(config.num_hidden_layers):
        hidden = TransformerLayer(
            config.hidden_size, config.num_attention_heads, config.intermediate_size,
            config.hidden_act, config.initializer_range, config.hidden_dropout_prob,
            config.attention_probs_dropout_prob, config.layer_norm_eps, dtype=dtype,
            name="layer_%d" % index)(hidden, bias)  # [B, S, H]
        encoder_outputs.append(hidden)
    pooled = Pooler(config.hidden_size, config.initializer_range, dtype=dtype,
                    name="pooler")(hidden)  # [B, H]
    outputs = {
        "embedding_output": embedding_output,
        "encoder_outputs": encoder_outputs,
        "sequence_output": hidden,
        "pooled_output": pooled,
    }
    return outputs, word_layer


def BertModel(config: BertConfig, seq_length: Optional[int] = None, dtype=None,
              name: str = "bert") -> keras.Model:
    """The encoder as a functional ``keras.Model`` (see the module docstring for I/O)."""
    config.validate("BertModel config")
    inputs = bert_inputs(seq_length)
    outputs, _ = build_encoder(config, inputs, dtype=dtype)
    return keras.Model(inputs=inputs, outputs=outputs, name=name)
