"""Embedding layers of BERT: the word-embedding table and the embedding postprocessor.

``WordEmbedding`` owns ``bert/embeddings/word_embeddings`` [V, H]. Called on int ids it is a
``tf.gather`` lookup (gradient: IndexedSlices, as the original's ``use_one_hot_embeddings=False``);
called with ``reverse=True`` on a float [N, H] tensor it returns ``x @ table^T`` [N, V]: the masked-LM
output layer, tied to the same variable.

``EmbeddingPostprocessor`` adds the segment (token type) and learned absolute position embeddings,
then LayerNorm (epsilon 1e-12) and dropout (only with ``training=True``).
"""

from __future__ import annotations

import keras
from keras import ops

from modeling import backend
from modeling.layers import ConfigArgs
from modeling.layers.dropout import Dropout
from modeling.layers.layer_norm import BertLayerNorm


def truncated_normal(stddev: float) -> keras.initializers.Initializer:
    """The original's initializer: truncated normal (2 standard deviations), mean 0.

    Args:
        stddev: the standard deviation (``initializer_range``).
    """
    return keras.initializers.TruncatedNormal(mean=0.0, stddev=stddev)


def sparse_gradient_tables(model: keras.Model, one_hot_embeddings: bool = False) -> list:
    """The tables of ``model`` whose gradient the original graph keeps sparse (IndexedSlices,
    whose norm in ``tf.clip_by_global_norm`` counts a repeated id once per occurrence): the
    word embeddings when ids are looked up with ``tf.gather`` (the original's
    ``use_one_hot_embeddings=False``, its choice off TPU), and nothing else. The original
    looks token types up with a one-hot matmul and slices the position table: dense
    gradients, their norm that of the summed rows; with ``one_hot_embeddings`` (the original
    on TPU) the word embeddings' gradient is dense too, and this is empty. The one rule for
    which gradients go to clipping sparse: ``backends.tensorflow.steps`` applies it.

    Args:
        model: the model being trained.
        one_hot_embeddings: the original's TPU lookup (no sparse table then).

    Returns:
        The table variables.
    """
    if one_hot_embeddings:
        return []
    return [layer.embeddings for layer in model._flatten_layers(include_self=True)  # noqa: SLF001
            if isinstance(layer, WordEmbedding) and layer.built]


@keras.saving.register_keras_serializable(package="bert_tf2")
class WordEmbedding(ConfigArgs, keras.layers.Layer):
    """Word-piece embedding table [V, H]; lookup (ids -> [..., H]) or tied logits (reverse).

    Args:
        vocab_size: V.
        hidden_size: H.
        initializer_range: stddev of the table's init.
    """

    CONFIG_ARGS = ("vocab_size", "hidden_size", "initializer_range")

    def __init__(self, vocab_size: int, hidden_size: int, initializer_range: float = 0.02,
                 **kwargs):
        kwargs.setdefault("name", "word_embeddings")
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.autocast = False  # gather float32 rows, then cast (cheaper than casting the table)

    def build(self, input_shape=None):
        """Creates ``embeddings`` [V, H].

        Args:
            input_shape: unused (the ids' shape).
        """
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.hidden_size),
            initializer=truncated_normal(self.initializer_range))

    def call(self, inputs, reverse: bool = False):
        """The ids' rows, or (``reverse``) the logits against the table (the tied output layer).

        Args:
            inputs: ids [B, S], or (``reverse``) vectors [N, H].
            reverse: multiply by the transposed table instead of looking up.

        Returns:
            [B, S, H], or (``reverse``) [N, V], in the compute dtype.
        """
        if reverse:
            table = ops.cast(self.embeddings.value, self.compute_dtype)  # [V, H]
            x = ops.cast(inputs, self.compute_dtype)  # [N, H]
            return backend.matmul(x, table, transpose_b=True)  # [N, V]
        ids = ops.cast(inputs, "int32")  # [B, S]
        # Gather from a read of the table, not from the variable: on TensorFlow a gather on the
        # variable (ResourceGather) switches it to copy-on-read, and every later read of the
        # 30522 x 768 table (the tied output layer's, each step) then copies it. Same values,
        # same IndexedSlices gradient.
        table = backend.read(self.embeddings.value)  # [V, H] float32
        tap = backend.tapped(self.embeddings.path)
        if tap is not None:  # JAX: the original's norm of this gradient (backends.jax.steps)
            from modeling.backend.jax import take_rows_tapped

            rows = take_rows_tapped(table, ids, tap)  # [B, S, H] float32
        else:
            rows = backend.take_rows(table, ids)  # [B, S, H] float32
        return ops.cast(rows, self.compute_dtype)


@keras.saving.register_keras_serializable(package="bert_tf2")
class EmbeddingPostprocessor(ConfigArgs, keras.layers.Layer):
    """word_embeddings [B,S,H] + segment + position embeddings -> LayerNorm -> dropout [B,S,H].

    Variables: ``token_type_embeddings`` [type_vocab_size, H], ``position_embeddings``
    [max_position_embeddings, H] (the first S rows are used), ``LayerNorm/{gamma,beta}``.

    Args:
        type_vocab_size: segment ids.
        max_position_embeddings: the longest S.
        initializer_range: stddev of the tables' init.
        dropout_rate: after the LayerNorm, training only.
        layer_norm_eps: LayerNorm's epsilon.
    """

    CONFIG_ARGS = ("type_vocab_size", "max_position_embeddings", "initializer_range",
                   "dropout_rate", "layer_norm_eps")

    def __init__(self, type_vocab_size: int, max_position_embeddings: int,
                 initializer_range: float = 0.02, dropout_rate: float = 0.1,
                 layer_norm_eps: float = 1e-12, **kwargs):
        kwargs.setdefault("name", "embeddings")
        super().__init__(**kwargs)
        self.type_vocab_size = type_vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.dropout_rate = dropout_rate
        self.layer_norm_eps = layer_norm_eps
        self.layer_norm = BertLayerNorm(epsilon=layer_norm_eps, dtype=self.dtype_policy,
                                        name="LayerNorm")
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, word_shape):
        """Creates the segment and position tables and the LayerNorm.

        Args:
            word_shape: the word embeddings' shape [B, S, H].
        """
        hidden = word_shape[-1]
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(self.type_vocab_size, hidden),
            initializer=truncated_normal(self.initializer_range))
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_position_embeddings, hidden),
            initializer=truncated_normal(self.initializer_range))
        self.layer_norm.build(word_shape)

    def call(self, word_embeddings, segment_ids, training=None):
        """Args:
            word_embeddings: [B, S, H].
            segment_ids: int [B, S].
            training: apply dropout.

        Returns:
            [B, S, H].
        """
        seq_length = backend.shape(word_embeddings)[1]
        ids = ops.cast(segment_ids, "int32")  # [B, S]
        token_type = backend.take_few_rows(self.token_type_embeddings, ids)  # [B, S, H]
        position = self.position_embeddings[:seq_length]  # [S, H]
        output = word_embeddings + token_type  # [B, S, H]
        output = output + position[None]  # [B, S, H]
        output = self.layer_norm(output, training=training)
        return self.dropout(output, training=training)

    def compute_output_shape(self, word_embeddings_shape, segment_ids_shape=None):
        """Args:
            word_embeddings_shape: [B, S, H].
            segment_ids_shape: [B, S].

        Returns:
            ``word_embeddings_shape`` (Keras' symbolic build on JAX cannot infer it through
            the position-table slice).
        """
        return tuple(word_embeddings_shape)
