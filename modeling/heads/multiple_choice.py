"""Multiple-choice head (SWAG, BERT paper §4.4): one learned vector scores each choice.

The C choices of an example are run through the encoder as C sequences; the head takes their
pooled outputs [B*C, H], applies dropout (rate 0.1, training only), scores each with
``output_weights`` [1, H] and ``output_bias`` [1] and reshapes the scores to logits [B, C]; a
softmax over the C choices gives the probabilities. The Keras layer is named
``multiple_choice`` and mapped to the TF1 names ``cls/multiple_choice/output_weights`` and
``.../output_bias``. Loss: per-example cross-entropy over the choices
(``modeling.heads.classifier.classification_loss``).

``BertMultipleChoice(encoder, num_choices)`` puts the head on an existing ``modeling.BertModel``;
``build_multiple_choice_model(config, num_choices)`` builds both.
"""

from __future__ import annotations

from typing import Dict, Optional

import keras
from keras import ops

from modeling import backend

from modeling import checkpoints
from modeling import encoder as bert_model
from modeling.heads.classifier import CLASSIFIER_DROPOUT, HEAD_STDDEV, ClassifierHead
from modeling.heads.task import EncoderTask, encoder_output, head_dtype

HEAD_NAME = "multiple_choice"
checkpoints.register_tf1_head(HEAD_NAME, "cls/multiple_choice/")


@keras.saving.register_keras_serializable(package="bert_tf2")
class FlattenChoices(keras.layers.Layer):
    """int [B, C, S] -> [B*C, S]."""

    def call(self, x):
        """Args:
            x: int [B, C, S].

        Returns:
            [B*C, S].
        """
        return ops.reshape(x, (-1, backend.shape(x)[-1]))  # [B*C, S]

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: ``(B, C, S)``.

        Returns:
            ``(None, S)``.
        """
        return (None, input_shape[-1])


@keras.saving.register_keras_serializable(package="bert_tf2")
class MultipleChoiceHead(ClassifierHead):
    """pooled_output [B*C, H] -> logits float32 [B, C]: ``ClassifierHead`` with one label (the
    original's ``output_weights`` [1, H] and ``output_bias`` [1]), one score per choice.

    Args:
        num_choices: C.
        dropout_rate: on the pooled output, training only.
        initializer_range: stddev of ``output_weights`` [1, H].
    """

    CONFIG_ARGS = ("num_choices", "dropout_rate", "initializer_range")

    def __init__(self, num_choices: int, dropout_rate: float = CLASSIFIER_DROPOUT,
                 initializer_range: float = HEAD_STDDEV, **kwargs):
        kwargs.setdefault("name", HEAD_NAME)
        super().__init__(1, dropout_rate, initializer_range, **kwargs)
        self.supports_masking = False  # (the classifier's is for the feature tagger's mask)
        self.num_choices = num_choices

    def call(self, pooled_output, training=None):
        """Args:
            pooled_output: [B*C, H].
            training: apply dropout.

        Returns:
            logits float32 [B, C].
        """
        scores = super().call(pooled_output, training=training)  # [B*C, 1]
        return ops.reshape(scores, (-1, self.num_choices))  # [B, C]

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: [B*C, H].

        Returns:
            ``(None, C)``.
        """
        return (None, self.num_choices)


def _choice_outputs(pooled_output, num_choices: int, dropout_rate: float,
                    dtype) -> Dict[str, keras.KerasTensor]:
    """pooled [B*C, H] -> {"logits", "probabilities"} float32 [B, C] (the head + softmax)."""
    logits = MultipleChoiceHead(num_choices, dropout_rate, dtype=dtype, name=HEAD_NAME)(
        pooled_output)  # [B, C]
    probabilities = keras.layers.Softmax(name="probabilities", dtype="float32")(logits)
    return {"logits": logits, "probabilities": probabilities}


def choice_inputs(num_choices: int, seq_length: Optional[int]) -> Dict[str, keras.KerasTensor]:
    """The symbolic inputs: int32 [B, C, S] ``input_ids``, ``input_mask``, ``segment_ids``.

    Args:
        num_choices: C.
        seq_length: S, or None for a dynamic length.

    Returns:
        The dict of three ``keras.Input`` s.
    """
    return {n: keras.Input(shape=(num_choices, seq_length), dtype="int32", name=n)
            for n in bert_model.INPUT_NAMES}


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertMultipleChoice(EncoderTask):
    """run_swag's model on an existing encoder: ``BertMultipleChoice(encoder, num_choices)``.

    Inputs: dict of int32 [B, C, S] ``input_ids``, ``input_mask``, ``segment_ids`` (S = the
    encoder's ``seq_length``). Outputs (dict, float32): ``logits`` [B, C] and
    ``probabilities`` [B, C]. Dropout only with ``training=True``.

    The C choices are flattened to [B*C, S] *before* the encoder, so the encoder cannot run on
    its own inputs as in ``BertClassifier``: it is called as one nested layer (keras-hub style),
    named ``encoder.name``. Its variables are the encoder's (shared); their paths, hence their
    TF1 names, are unchanged. ``build_multiple_choice_model`` keeps the earlier flat layout
    (encoder layers at the top level), which ``.weights.h5`` files and TF checkpoints of
    ``run_swag.py`` were written with.

    Args:
        encoder: the ``modeling.BertModel``.
        num_choices: C, the choices per example.
        dropout_rate: on the pooled output (the original's classifier rate, 0.1).
        dtype: the head's dtype policy; None = the encoder's (``bert_dtype_policy``).
        name: the model name.

    Raises:
        ValueError: ``num_choices`` < 1.
        TypeError: ``encoder`` has no ``pooled_output``.

    Example::

        import numpy as np
        from modeling import BertConfig, BertModel, BertMultipleChoice

        encoder = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=37))
        model = BertMultipleChoice(encoder, num_choices=4)
        ids = np.random.randint(5, 100, size=(2, 4, 6))     # [B, 4, S]: context + each ending
        outputs = model({"input_ids": ids, "input_mask": np.ones_like(ids),
                         "segment_ids": np.zeros_like(ids)})
        outputs                                   # {logits: [B, 4], probabilities: [B, 4]}
    """

    CONFIG_ARGS = ("num_choices", "dropout_rate")

    def __init__(self, encoder: keras.Model, num_choices: int = 4,
                 dropout_rate: float = CLASSIFIER_DROPOUT, dtype=None,
                 name: str = "bert_multiple_choice", **kwargs):
        if num_choices < 1:
            raise ValueError("num_choices must be positive, got %d" % num_choices)
        encoder_output(encoder, "pooled_output")  # checks the encoder type
        seq_length = encoder.input["input_ids"].shape[-1]
        dtype = head_dtype(encoder, dtype)
        inputs = choice_inputs(num_choices, seq_length)
        flat = {n: FlattenChoices(name="flatten_" + n)(inputs[n])
                for n in bert_model.INPUT_NAMES}  # [B*C, S] each
        pooled = encoder(flat)["pooled_output"]  # [B*C, H]
        super().__init__(inputs=inputs,
                         outputs=_choice_outputs(pooled, num_choices, dropout_rate, dtype),
                         name=name, **kwargs)
        self._set_encoder(encoder, dtype)
        self.num_choices = num_choices
        self.dropout_rate = dropout_rate


def build_multiple_choice_model(config, num_choices: int = 4, seq_length: Optional[int] = None,
                                dtype=None, name: str = "bert_multiple_choice") -> keras.Model:
    """BERT encoder + ``MultipleChoiceHead`` as a functional ``keras.Model``.

    Inputs: dict of int32 [B, C, S] ``input_ids``, ``input_mask``, ``segment_ids``. Outputs
    (dict, float32): ``logits`` [B, C] and ``probabilities`` [B, C]. Unlike
    ``BertMultipleChoice`` the encoder layers are built on the flattened inputs and sit at the
    model's top level (``word_embeddings``, ``layer_N``, ``pooler``, ``multiple_choice``), the
    layout run_swag's checkpoints have.

    Args:
        config: the encoder's ``BertConfig``.
        num_choices: C.
        seq_length: static S, or None for any length.
        dtype: the dtype policy of every layer; None = the global policy.
        name: the model name.

    Returns:
        A functional ``keras.Model``.
    """
    config.validate("multiple-choice model config")
    inputs = choice_inputs(num_choices, seq_length)
    flat = {n: FlattenChoices(name="flatten_" + n)(inputs[n]) for n in bert_model.INPUT_NAMES}
    outputs, _ = bert_model.build_encoder(config, flat, dtype=dtype)
    return keras.Model(inputs=inputs,
                       outputs=_choice_outputs(outputs["pooled_output"], num_choices,
                                               CLASSIFIER_DROPOUT, dtype),
                       name=name)
