"""Pre-training heads of the original (``run_pretraining.get_masked_lm_output`` /
``get_next_sentence_output``) as Keras layers, plus their loss functions.

Masked LM, for P predictions per sequence:

* ``GatherIndexes``: sequence_output [B, S, H], masked_lm_positions [B, P] -> [B*P, H];
* ``MaskedLMTransform`` (``cls/predictions/transform``): dense [H, H] + hidden_act + LayerNorm;
* the tied output layer: ``WordEmbedding(x, reverse=True)`` -> logits [B*P, V];
* ``MaskedLMOutput`` (``cls/predictions``): + ``output_bias`` [V], log-softmax, float32 [B*P, V];
* ``masked_lm_loss``: per prediction -log p(label) [B*P] and sum(w * loss) / (sum(w) + 1e-5).

Next sentence: ``NextSentenceOutput`` (``cls/seq_relationship``): pooled [B, H] -> log-softmax
float32 [B, 2]; ``next_sentence_loss``: per example -log p(label) [B] and its mean.

Heads compute their log-softmax and losses in float32 (also under ``mixed_bfloat16``).

``BertPretrainingModel``: encoder + both heads as one functional model (run_pretraining's graph),
a ``keras.Model`` subclass like ``modeling.encoder.BertModel``.

Inputs (dict): the encoder's ``input_ids``, ``input_mask``, ``segment_ids`` (int32 [B, S]) plus
``masked_lm_positions``, ``masked_lm_ids`` (int32 [B, P]), ``masked_lm_weights`` (float32 [B, P])
and ``next_sentence_labels`` (int32 [B, 1]).

Outputs (dict, heads and losses in float32): ``masked_lm_log_probs`` [B*P, V],
``masked_lm_example_loss`` [B*P], ``masked_lm_loss`` [] (sum(w*CE) / (sum(w) + 1e-5)),
``next_sentence_log_probs`` [B, 2], ``next_sentence_example_loss`` [B], ``next_sentence_loss``
[] (mean), ``total_loss`` [] = MLM + NSP, and the encoder's ``sequence_output``,
``pooled_output``, ``embedding_output``, ``encoder_outputs``.

The MLM output layer is the word-embedding layer called with ``reverse=True``: one variable.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Union

import keras
from keras import ops

from modeling import backend

from modeling.config import BertConfig
from modeling.encoder import (FlatExportMixin, as_bert_config, bert_inputs, build_encoder,
                              config_dict, deserialize_dtype, resolve_dtype_policy)
from modeling.layers import ConfigArgs, activations
from modeling.layers.embeddings import truncated_normal
from modeling.layers.layer_norm import BertLayerNorm

MLM_LOSS_EPSILON = 1e-5


def gather_indexes(sequence_tensor: Any, positions: Any) -> Any:
    """sequence [B, S, H], positions int [B, P] -> the gathered vectors flattened [B*P, H].

    Args:
        sequence_tensor: [B, S, H].
        positions: int [B, P], indices into S.

    Returns:
        [B*P, H], in ``sequence_tensor``'s dtype.
    """
    gathered = backend.take_along_rows(sequence_tensor, ops.cast(positions, "int32"))  # [B,P,H]
    return ops.reshape(gathered, (-1, backend.shape(sequence_tensor)[-1]))  # [B*P, H]


def masked_lm_loss(log_probs: Any, label_ids: Any,
                   label_weights: Any) -> Tuple[Any, Any]:
    """log_probs float32 [B*P, V], ids int [B, P], weights float [B, P] -> (per-example [B*P], []).

    Args:
        log_probs: float32 [B*P, V], the MLM head's log-softmax.
        label_ids: int [B, P], the original tokens at the masked positions.
        label_weights: float [B, P], 1 for a real prediction, 0 for padding.

    Returns:
        ``(per_example, loss)``: float32 [B*P] and the weighted mean (the original's
        ``sum(w * nll) / (sum(w) + 1e-5)``).
    """
    ids = ops.reshape(ops.cast(label_ids, "int32"), (-1,))  # [B*P]
    weights = ops.reshape(ops.cast(label_weights, "float32"), (-1,))  # [B*P]
    per_example = -backend.take_along_rows(log_probs, ids[:, None])[:, 0]  # [B*P]
    numerator = ops.sum(weights * per_example)
    denominator = ops.sum(weights) + MLM_LOSS_EPSILON
    return per_example, numerator / denominator


def next_sentence_loss(log_probs: Any, labels: Any) -> Tuple[Any, Any]:
    """log_probs float32 [B, 2], labels int [B, 1] -> (per-example [B], mean []).

    Args:
        log_probs: float32 [B, 2], the NSP head's log-softmax.
        labels: int [B, 1] (or [B]); 0 = B follows A, 1 = random B.

    Returns:
        ``(per_example, loss)``: float32 [B] and its mean.
    """
    ids = ops.reshape(ops.cast(labels, "int32"), (-1,))  # [B]
    per_example = -backend.take_along_rows(log_probs, ids[:, None])[:, 0]  # [B]
    return per_example, ops.mean(per_example)


@keras.saving.register_keras_serializable(package="bert_tf2")
class GatherIndexes(keras.layers.Layer):
    """(sequence [B, S, H], positions int [B, P]) -> [B*P, H].

    Args:
        **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("name", "gather_indexes")
        super().__init__(**kwargs)

    def call(self, sequence_tensor, positions):
        """Args:
            sequence_tensor: [B, S, H].
            positions: int [B, P].

        Returns:
            [B*P, H].
        """
        return gather_indexes(sequence_tensor, positions)


@keras.saving.register_keras_serializable(package="bert_tf2")
class MaskedLMTransform(ConfigArgs, keras.layers.Layer):
    """[N, H] -> LayerNorm(act(dense(x))) [N, H]; variables ``dense/*``, ``LayerNorm/*``.

    Args:
        hidden_size: H.
        hidden_act: the activation's name (``BertConfig.hidden_act``).
        initializer_range: stddev of the dense kernel's init.
        layer_norm_eps: LayerNorm's epsilon.
    """

    CONFIG_ARGS = ("hidden_size", "hidden_act", "initializer_range", "layer_norm_eps")

    def __init__(self, hidden_size: int, hidden_act: str = "gelu",
                 initializer_range: float = 0.02, layer_norm_eps: float = 1e-12, **kwargs):
        kwargs.setdefault("name", "predictions_transform")
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.activation = activations.get_activation(hidden_act)
        self.dense = keras.layers.Dense(hidden_size, name="dense", dtype=self.dtype_policy,
                                        kernel_initializer=truncated_normal(initializer_range))
        self.layer_norm = BertLayerNorm(epsilon=layer_norm_eps, dtype=self.dtype_policy,
                                        name="LayerNorm")

    def build(self, input_shape):
        """Args:
            input_shape: [N, H].
        """
        self.dense.build(input_shape)
        self.layer_norm.build(tuple(input_shape[:-1]) + (self.hidden_size,))

    def call(self, x):
        """Args:
            x: [N, H].

        Returns:
            [N, H].
        """
        return self.layer_norm(self.activation(self.dense(x)))  # [N, H]

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: [N, H].

        Returns:
            ``(N, H)``.
        """
        return tuple(input_shape[:-1]) + (self.hidden_size,)


@keras.saving.register_keras_serializable(package="bert_tf2")
class MaskedLMOutput(ConfigArgs, keras.layers.Layer):
    """Tied logits [N, V] -> log_softmax(float32(logits) + output_bias) float32 [N, V].

    Args:
        vocab_size: V, the size of ``output_bias``.
    """

    CONFIG_ARGS = ("vocab_size",)

    def __init__(self, vocab_size: int, **kwargs):
        kwargs.setdefault("name", "predictions")
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.vocab_size = vocab_size

    def build(self, input_shape):
        """Creates ``output_bias`` [V].

        Args:
            input_shape: [N, V].
        """
        self.output_bias = self.add_weight(name="output_bias", shape=(self.vocab_size,),
                                           initializer="zeros")

    def call(self, logits):
        """Args:
            logits: the tied logits [N, V].

        Returns:
            log-probabilities float32 [N, V].
        """
        logits = ops.cast(logits, "float32") + self.output_bias  # [N, V]
        return ops.log_softmax(logits, axis=-1)

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: [N, V].

        Returns:
            ``input_shape``.
        """
        return input_shape


@keras.saving.register_keras_serializable(package="bert_tf2")
class NextSentenceOutput(ConfigArgs, keras.layers.Layer):
    """pooled [B, H] -> log_softmax(x @ kernel + bias) float32 [B, 2].

    ``kernel`` is [H, 2] (Keras layout); Google's ``cls/seq_relationship/output_weights`` is its
    transpose [2, H] (``modeling.checkpoints.tf1`` transposes on load/save).

    Args:
        initializer_range: stddev of the kernel's init.
        num_classes: 2 (is next / is random).
    """

    CONFIG_ARGS = ("initializer_range", "num_classes")

    def __init__(self, initializer_range: float = 0.02, num_classes: int = 2, **kwargs):
        kwargs.setdefault("name", "seq_relationship")
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.num_classes = num_classes

    def build(self, input_shape):
        """Creates ``kernel`` [H, 2] and ``bias`` [2].

        Args:
            input_shape: [B, H].
        """
        self.kernel = self.add_weight(name="kernel", shape=(input_shape[-1], self.num_classes),
                                      initializer=truncated_normal(self.initializer_range))
        self.bias = self.add_weight(name="bias", shape=(self.num_classes,), initializer="zeros")

    def call(self, pooled):
        """Args:
            pooled: [B, H].

        Returns:
            log-probabilities float32 [B, 2].
        """
        logits = backend.matmul(ops.cast(pooled, "float32"), self.kernel) + self.bias  # [B, 2]
        return ops.log_softmax(logits, axis=-1)

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: [B, H].

        Returns:
            ``(B, 2)``.
        """
        return (input_shape[0], self.num_classes)


@keras.saving.register_keras_serializable(package="bert_tf2")
class MaskedLMLoss(keras.layers.Layer):
    """(log_probs [B*P, V], ids [B, P], weights [B, P]) -> (per-example [B*P], loss []).

    Args:
        **kwargs: ``keras.layers.Layer`` arguments (``name``; the dtype is float32).
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("name", "masked_lm_loss")
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)

    def call(self, log_probs, label_ids, label_weights):
        """Args:
            log_probs: float32 [B*P, V].
            label_ids: int [B, P].
            label_weights: [B, P], 1.0 for real predictions.

        Returns:
            ``(per_example_loss [B*P], loss [])``.
        """
        return masked_lm_loss(log_probs, label_ids, label_weights)

    def compute_output_spec(self, log_probs, label_ids, label_weights):
        """``(float32 [B*P], float32 [])`` (Keras' symbolic build on JAX cannot relate the
        two inputs' unknown sizes)."""
        return (keras.KerasTensor((log_probs.shape[0],), "float32"),
                keras.KerasTensor((), "float32"))


@keras.saving.register_keras_serializable(package="bert_tf2")
class NextSentenceLoss(keras.layers.Layer):
    """(log_probs [B, 2], labels [B, 1]) -> (per-example [B], mean loss []).

    Args:
        **kwargs: ``keras.layers.Layer`` arguments (``name``; the dtype is float32).
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("name", "next_sentence_loss")
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)

    def call(self, log_probs, labels):
        """Args:
            log_probs: float32 [B, 2].
            labels: int [B, 1] (0: is next, 1: random).

        Returns:
            ``(per_example_loss [B], loss [])``.
        """
        return next_sentence_loss(log_probs, labels)

    def compute_output_spec(self, log_probs, labels):
        """``(float32 [B], float32 [])``."""
        return (keras.KerasTensor((log_probs.shape[0],), "float32"),
                keras.KerasTensor((), "float32"))


@keras.saving.register_keras_serializable(package="bert_tf2")
class SumLosses(keras.layers.Layer):
    """(loss [], loss [], ...) -> their sum []: ``total_loss = masked_lm_loss + next_sentence_loss``.

    Args:
        **kwargs: ``keras.layers.Layer`` arguments (``name``; the dtype is float32).
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("name", "total_loss")
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)

    def call(self, losses):
        """Args:
            losses: a list of scalar losses.

        Returns:
            Their sum [].
        """
        total = losses[0]
        for loss in losses[1:]:
            total = total + loss
        return total

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: the losses' shapes.

        Returns:
            ``()``.
        """
        return ()


# === Functional model ===

PRETRAINING_INPUT_NAMES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                           "next_sentence_labels")


def pretraining_inputs(seq_length: Optional[int] = None,
                       max_predictions_per_seq: Optional[int] = None) -> Dict[str, object]:
    """Symbolic inputs of ``BertPretrainingModel`` (dtypes and shapes as in the TFRecords).

    Args:
        seq_length: static S, or None.
        max_predictions_per_seq: static P, or None.

    Returns:
        The encoder's three inputs plus ``masked_lm_positions``/``masked_lm_ids`` int32 [B, P],
        ``masked_lm_weights`` float32 [B, P] and ``next_sentence_labels`` int32 [B, 1].
    """
    inputs = bert_inputs(seq_length)
    inputs["masked_lm_positions"] = keras.Input((max_predictions_per_seq,), dtype="int32",
                                                name="masked_lm_positions")
    inputs["masked_lm_ids"] = keras.Input((max_predictions_per_seq,), dtype="int32",
                                          name="masked_lm_ids")
    inputs["masked_lm_weights"] = keras.Input((max_predictions_per_seq,), dtype="float32",
                                              name="masked_lm_weights")
    inputs["next_sentence_labels"] = keras.Input((1,), dtype="int32", name="next_sentence_labels")
    return inputs


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertPretrainingModel(FlatExportMixin, keras.Model):
    """Encoder + MLM/NSP heads, run_pretraining's graph (see the module docstring for I/O).

    A ``keras.Model`` subclass built functionally in its constructor, like ``BertModel``:
    ``get_config``/``from_config`` store the constructor arguments, and ``export`` flattens the
    ``encoder_outputs`` list (``modeling.encoder.FlatExportMixin``).

    Args:
        config: the ``BertConfig`` (or its dict).
        seq_length: static S, or None. max_predictions_per_seq: static P, or None.
        dtype: Keras dtype policy of the encoder and the transform (heads compute their
            log-softmax and losses in float32 whatever it is); None = the global policy.
        name: the model name.
    """

    def __init__(self, config: Union[BertConfig, Mapping[str, Any]],
                 seq_length: Optional[int] = None,
                 max_predictions_per_seq: Optional[int] = None, dtype=None,
                 name: str = "bert_pretraining", **kwargs):
        config = as_bert_config(config)
        config.validate("BertPretrainingModel config")
        policy = resolve_dtype_policy(dtype)
        inputs = pretraining_inputs(seq_length, max_predictions_per_seq)
        encoder, word_layer = build_encoder(config, inputs, dtype=dtype)

        gathered = GatherIndexes(dtype=dtype)(encoder["sequence_output"],
                                              inputs["masked_lm_positions"])  # [B*P, H]
        transformed = MaskedLMTransform(config.hidden_size, config.hidden_act,
                                        config.initializer_range, config.layer_norm_eps,
                                        dtype=dtype)(gathered)  # [B*P, H]
        tied_logits = word_layer(transformed, reverse=True)  # [B*P, V]
        mlm_log_probs = MaskedLMOutput(config.vocab_size)(tied_logits)  # [B*P, V] float32
        mlm_example_loss, mlm_loss = MaskedLMLoss()(
            mlm_log_probs, inputs["masked_lm_ids"], inputs["masked_lm_weights"])

        nsp_log_probs = NextSentenceOutput(config.initializer_range)(
            encoder["pooled_output"])  # [B, 2] float32
        nsp_example_loss, nsp_loss = NextSentenceLoss()(nsp_log_probs,
                                                        inputs["next_sentence_labels"])
        total_loss = SumLosses(name="total_loss")([mlm_loss, nsp_loss])  # []

        outputs = dict(encoder)
        outputs.update({
            "masked_lm_log_probs": mlm_log_probs,
            "masked_lm_example_loss": mlm_example_loss,
            "masked_lm_loss": mlm_loss,
            "next_sentence_log_probs": nsp_log_probs,
            "next_sentence_example_loss": nsp_example_loss,
            "next_sentence_loss": nsp_loss,
            "total_loss": total_loss,
        })
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        self.config = config
        self.seq_length = seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        self.bert_dtype_policy = policy

    def get_config(self) -> Dict[str, Any]:
        # Constructor arguments only (see BertModel.get_config).
        return {"name": self.name, "trainable": self.trainable,
                "config": config_dict(self.config), "seq_length": self.seq_length,
                "max_predictions_per_seq": self.max_predictions_per_seq,
                "dtype": keras.dtype_policies.serialize(self.bert_dtype_policy)}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuilds the model from ``get_config``'s dict.

        Args:
            config: the ``get_config`` dict.
            custom_objects: unused (Keras' signature).

        Returns:
            A ``BertPretrainingModel``.
        """
        return cls(**deserialize_dtype(config))
