"""The SQuAD span head: start/end logits from BERT's sequence output, and its loss.

As the original ``run_squad.create_model``: one weight matrix
``cls/squad/output_weights`` [2, H] (truncated normal, stddev 0.02) and bias
``cls/squad/output_bias`` [2] (zeros); ``logits = sequence_output @ W^T + b``
[B, S, 2] split into ``start_logits`` and ``end_logits`` [B, S]. Logits are
returned in float32 whatever the compute dtype. ``BertSpanLabeler(encoder)`` puts the head on
an existing ``modeling.BertModel``; ``build_squad_model(config)`` builds both.

The loss is the original's: for start and end each,
``-mean_over_batch(sum(one_hot(position) * log_softmax(logits)))``, and the
total is their average. Nothing is masked: padding positions take part in
the softmax, as in the original (the model learns to push them down).
"""

from __future__ import annotations

from typing import Any, Optional

import keras
from keras import ops

from modeling.encoder import BertModel
from modeling.heads.classifier import classification_loss
from modeling.heads.task import EncoderTask, encoder_output, head_dtype
from modeling.layers import ConfigArgs


@keras.saving.register_keras_serializable(package="bert_tf2")
class SquadHead(ConfigArgs, keras.layers.Layer):
    """[B, S, H] sequence output -> (start_logits [B, S], end_logits [B, S]) float32.

    Args:
        initializer_range: stddev of ``output_weights`` [2, H].
    """

    CONFIG_ARGS = ("initializer_range",)

    def __init__(self, initializer_range: float = 0.02, **kwargs):
        kwargs.setdefault("name", "squad")
        super().__init__(**kwargs)
        self.initializer_range = initializer_range

    def build(self, input_shape):
        """Creates ``output_weights`` [2, H] and ``output_bias`` [2].

        Args:
            input_shape: [B, S, H].
        """
        hidden_size = int(input_shape[-1])
        # Stored [2, H] as the original, so TF1 checkpoints map without a transpose.
        self.output_weights = self.add_weight(
            name="output_weights", shape=(2, hidden_size),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range))
        self.output_bias = self.add_weight(name="output_bias", shape=(2,), initializer="zeros")

    def call(self, sequence_output):
        """Args:
            sequence_output: [B, S, H].

        Returns:
            ``(start_logits, end_logits)``, float32 [B, S] each.
        """
        x = ops.cast(sequence_output, self.compute_dtype)  # [B, S, H]
        w = ops.cast(self.output_weights, self.compute_dtype)  # [2, H]
        b = ops.cast(self.output_bias, self.compute_dtype)  # [2]
        logits = ops.einsum("bsh,kh->bsk", x, w) + b  # [B, S, 2]
        logits = ops.cast(logits, "float32")
        return logits[..., 0], logits[..., 1]  # [B, S], [B, S]

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: [B, S, H].

        Returns:
            ``((B, S), (B, S))``.
        """
        return tuple(input_shape[:-1]), tuple(input_shape[:-1])


def position_loss(logits: Any, positions: Any) -> Any:
    """Mean over the batch of the cross-entropy of the true position among the S tokens
    (``classification_loss``; the original's ``compute_loss``).

    Args:
        logits: float [B, S].
        positions: int [B].

    Returns:
        float32 scalar.
    """
    return ops.mean(classification_loss(logits, positions))  # []


def per_example_squad_loss(outputs, batch) -> Any:
    """(start + end cross-entropy) / 2 per example [B]; its batch mean is ``squad_loss``.

    ``outputs``: the model's dict (``start_logits``/``end_logits`` [B, S]);
    ``batch``: the input dict (``start_positions``/``end_positions`` [B]).
    This is the ``per_example_loss`` of ``modeling.training.finetuning.finetune``.

    Args:
        outputs: the model's output dict.
        batch: the input batch dict.

    Returns:
        float32 [B].
    """
    return (classification_loss(outputs["start_logits"], batch["start_positions"])
            + classification_loss(outputs["end_logits"], batch["end_positions"])) / 2.0


def squad_loss(start_logits: Any, end_logits: Any, start_positions: Any,
               end_positions: Any) -> Any:
    """(start loss + end loss) / 2, each ``position_loss`` (scalar float32).

    Args:
        start_logits: float [B, S].
        end_logits: float [B, S].
        start_positions: int [B].
        end_positions: int [B].

    Returns:
        float32 scalar.
    """
    return (position_loss(start_logits, start_positions)
            + position_loss(end_logits, end_positions)) / 2.0


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertSpanLabeler(EncoderTask):
    """run_squad's model on an existing encoder: ``BertSpanLabeler(encoder)``.

    ``encoder`` is a ``modeling.BertModel`` (any functional model with its inputs and a dict
    output holding ``sequence_output`` [B, S, H]). Inputs: the encoder's (dict of int32 [B, S]
    ``input_ids``, ``input_mask``, ``segment_ids``). Outputs: dict ``start_logits``,
    ``end_logits`` float32 [B, S]. Dropout only with ``training=True``.

    As ``BertClassifier``, the head goes on the encoder's own graph, so the model's layers are
    the encoder's (at the top level) plus ``squad`` (-> ``cls/squad/...``). The pooler is not on
    the path to the span logits and so is not part of this model (not in ``weights``, not
    trained, not saved), as in the original's SQuAD graph, which never read it.

    Args:
        encoder: the encoder.
        initializer_range: stddev of the head's truncated-normal init; None = the encoder's
            ``config.initializer_range`` (0.02 when it has no ``config``).
        dtype: the head's dtype policy; None = the encoder's (``bert_dtype_policy``).
        name: the model name.

    Raises:
        TypeError: ``encoder`` has no ``sequence_output``.

    Example::

        import numpy as np
        from modeling import BertConfig, BertModel, BertSpanLabeler

        encoder = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=37))
        span_labeler = BertSpanLabeler(encoder)
        ids = np.array([[2, 17, 3, 41, 42, 3], [2, 9, 3, 50, 3, 0]])      # [B, S]
        segments = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0]])     # question, context
        outputs = span_labeler({"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
                                "segment_ids": segments})
        outputs                               # {start_logits: [B, S], end_logits: [B, S]}
    """

    CONFIG_ARGS = ("initializer_range",)

    def __init__(self, encoder: keras.Model, initializer_range: Optional[float] = None,
                 dtype=None, name: str = "bert_squad", **kwargs):
        sequence_output = encoder_output(encoder, "sequence_output")  # [B, S, H]
        if initializer_range is None:
            config = getattr(encoder, "config", None)
            initializer_range = config.initializer_range if config is not None else 0.02
        dtype = head_dtype(encoder, dtype)
        start_logits, end_logits = SquadHead(initializer_range, dtype=dtype, name="squad")(
            sequence_output)  # [B, S] each
        super().__init__(inputs=encoder.input,
                         outputs={"start_logits": start_logits, "end_logits": end_logits},
                         name=name, **kwargs)
        self._set_encoder(encoder, dtype)
        self.initializer_range = initializer_range


def build_squad_model(config, seq_length: Optional[int] = None, dtype=None,
                      name: str = "bert_squad") -> keras.Model:
    """``BertSpanLabeler(BertModel(config, seq_length, dtype))``.

    Inputs: dict of int32 [B, S] ``input_ids``, ``input_mask``, ``segment_ids``.
    Outputs: dict ``start_logits``, ``end_logits`` float32 [B, S]. The layer
    names are those ``modeling.checkpoints.tf1`` maps to the original's TF1 names
    (the head is ``squad`` -> ``cls/squad/...``). Dropout only with ``training=True``.

    Args:
        config: the encoder's ``BertConfig``.
        seq_length: static S, or None for any length.
        dtype: the dtype policy of the encoder and the head; None = the global policy.
        name: the model name.

    Returns:
        The ``BertSpanLabeler`` (its ``encoder`` a fresh ``BertModel``).
    """
    config.validate("SQuAD model config")
    encoder = BertModel(config, seq_length=seq_length, dtype=dtype)
    return BertSpanLabeler(encoder, config.initializer_range, dtype=dtype, name=name)
