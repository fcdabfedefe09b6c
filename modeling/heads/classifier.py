"""run_classifier's head: pooled output -> dropout -> logits, and its losses.

As the original ``run_classifier.create_model``: ``output_weights`` [K, H] (truncated normal,
stddev 0.02) and ``output_bias`` [K] (zeros) at the top level of the TF1 checkpoint (the Keras
layer is named ``classifier``, which ``modeling.checkpoints.tf1`` maps to those names); dropout with
rate 0.1 on the pooled output during training only; ``logits = pooled @ W^T + b`` [B, K].
``BertClassifier(encoder, num_labels)`` puts it on an existing ``modeling.BertModel``;
``build_classifier_model(config, num_labels)`` builds both.

Classification: ``probabilities = softmax(logits)``; per-example loss
``-sum(one_hot(label) * log_softmax(logits))`` [B]. Regression (STS-B, K = 1, not in the
original): ``predictions = logits[:, 0]`` [B] and squared-error loss [B]. Logits,
probabilities and losses are float32 whatever the compute dtype.
"""

from __future__ import annotations

from typing import Any, Optional

import keras
from keras import ops

from modeling import backend

from modeling.encoder import BertModel
from modeling.heads.task import EncoderTask, encoder_output, head_dtype
from modeling.layers import ConfigArgs
from modeling.layers.dropout import Dropout

CLASSIFIER_DROPOUT = 0.1  # the original's keep_prob=0.9, independent of the config
HEAD_STDDEV = 0.02  # the original's output_weights initializer, independent of the config


@keras.saving.register_keras_serializable(package="bert_tf2")
class ClassifierHead(ConfigArgs, keras.layers.Layer):
    """pooled_output [B, H] -> logits float32 [B, num_labels]; on a sequence [B, S, H] (the
    token classifier) -> [B, S, num_labels], the same weights applied to every token.

    Args:
        num_labels: K.
        dropout_rate: on the input, training only.
        initializer_range: stddev of ``output_weights`` [K, H].
    """

    CONFIG_ARGS = ("num_labels", "dropout_rate", "initializer_range")

    def __init__(self, num_labels: int, dropout_rate: float = CLASSIFIER_DROPOUT,
                 initializer_range: float = HEAD_STDDEV, **kwargs):
        kwargs.setdefault("name", "classifier")
        super().__init__(**kwargs)
        self.num_labels = num_labels
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy)
        # After the feature tagger's masked BiLSTM: the mask ends here (``compute_mask``).
        self.supports_masking = True

    def build(self, input_shape):
        """Creates ``output_weights`` [K, H] and ``output_bias`` [K].

        Args:
            input_shape: [B, H] or [B, S, H].
        """
        hidden_size = int(input_shape[-1])
        # [K, H] as the original, so TF1 checkpoints map without a transpose.
        self.output_weights = self.add_weight(
            name="output_weights", shape=(self.num_labels, hidden_size),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range))
        self.output_bias = self.add_weight(name="output_bias", shape=(self.num_labels,),
                                           initializer="zeros")

    def call(self, pooled_output, training=None):
        """Args:
            pooled_output: [B, H], or a sequence [B, S, H].
            training: apply dropout.

        Returns:
            logits float32 [B, K] (or [B, S, K]).
        """
        x = self.dropout(pooled_output, training=training)  # [B, H] (or [B, S, H]: per token)
        w = ops.cast(self.output_weights, x.dtype)  # [K, H]
        b = ops.cast(self.output_bias, x.dtype)  # [K]
        if len(x.shape) == 2:
            logits = backend.matmul(x, w, transpose_b=True) + b  # [B, K]
        else:  # one GEMM over all tokens: [B*S, H] x [H, K]
            shape = backend.shape(x)
            flat = ops.reshape(x, (-1, shape[-1]))  # [B*S, H]
            logits = backend.matmul(flat, w, transpose_b=True) + b  # [B*S, K]
            logits = ops.reshape(logits, backend.with_last_axis(shape, self.num_labels))  # [B,S,K]
        return ops.cast(logits, "float32")

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: [B, H] or [B, S, H].

        Returns:
            ``(B, K)`` or ``(B, S, K)``.
        """
        return tuple(input_shape[:-1]) + (self.num_labels,)

    def compute_mask(self, inputs, mask=None):
        """The mask ends here.

        Args:
            inputs: the input.
            mask: the incoming mask, if any.

        Returns:
            None.
        """
        return None


def classification_loss(logits: Any, labels: Any) -> Any:
    """Per-example cross-entropy [B]: logits float [B, K], labels int [B].

    Args:
        logits: float [B, K].
        labels: int [B] (any shape with B elements), in [0, K).

    Returns:
        float32 [B]: ``-log_softmax(logits)[label]``.
    """
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # [B, K]
    one_hot = ops.one_hot(ops.cast(ops.reshape(labels, (-1,)), "int32"),
                          backend.shape(logits)[-1], dtype="float32")  # [B, K]
    return -ops.sum(one_hot * log_probs, axis=-1)  # [B]


def regression_loss(predictions: Any, labels: Any) -> Any:
    """Per-example squared error [B]: predictions [B], labels float [B].

    Args:
        predictions: float [B].
        labels: float [B] (any shape with B elements).

    Returns:
        float32 [B]: ``(predictions - labels) ** 2``.
    """
    labels = ops.cast(ops.reshape(labels, (-1,)), "float32")
    return ops.square(ops.cast(predictions, "float32") - labels)  # [B]


def per_example_classifier_loss(outputs, batch, regression: bool = False) -> Any:
    """The loss per example [B] of a classifier's ``outputs`` (``logits`` [B, C], or
    ``predictions`` [B] for regression) against ``batch["label_ids"]`` [B]; the
    ``per_example_loss`` of ``modeling.training.finetuning.finetune`` (bind ``regression`` with
    ``functools.partial``). Multiple choice (``logits`` [B, choices]) uses it too.

    Args:
        outputs: the model's output dict.
        batch: the input batch dict (``label_ids`` [B]).
        regression: use ``predictions`` and the squared error.

    Returns:
        float32 [B].
    """
    if regression:
        return regression_loss(outputs["predictions"], batch["label_ids"])
    return classification_loss(outputs["logits"], batch["label_ids"])


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertClassifier(EncoderTask):
    """run_classifier's model on an existing encoder: ``BertClassifier(encoder, num_labels)``.

    ``encoder`` is a ``modeling.BertModel`` (any functional model with its inputs and a dict
    output holding ``pooled_output`` [B, H]). Inputs: the encoder's (dict of int32 [B, S]
    ``input_ids``, ``input_mask``, ``segment_ids``). Outputs (dict, float32): ``logits``
    [B, K] and ``probabilities`` [B, K]; with ``regression`` (K = 1) ``logits`` [B, 1] and
    ``predictions`` [B]. Dropout only when called with ``training=True``.

    The head is put on the encoder's own graph (``encoder.input`` -> ``encoder.output``) rather
    than calling ``encoder`` as one nested layer: the classifier then has the encoder's layers
    at its top level (``word_embeddings``, ``layer_N``, ``pooler``, then ``classifier``), the
    same layers and variables as the encoder (training one trains the other), and the same
    layer list, ``.weights.h5`` layout and TF checkpoint layout as ``build_classifier_model``
    had before this class existed. The ``classifier`` layer maps to run_classifier's top-level
    ``output_weights``/``output_bias`` TF1 names.

    Args:
        encoder: the encoder.
        num_labels: K, the number of classes (1 with ``regression``).
        regression: one output, squared-error loss (STS-B).
        dropout_rate: on the pooled output (the original's 0.1).
        dtype: the head's dtype policy; None = the encoder's (``bert_dtype_policy``).
        name: the model name.

    Raises:
        ValueError: ``num_labels`` < 1, or not 1 with ``regression``.
        TypeError: ``encoder`` has no ``pooled_output``.

    Example::

        import numpy as np
        from modeling import BertClassifier, BertConfig, BertModel

        encoder = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=37))
        classifier = BertClassifier(encoder, num_labels=3)   # shares the encoder's variables
        ids = np.array([[2, 17, 41, 3], [2, 9, 3, 0]])                    # [B, S]
        outputs = classifier({"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
                              "segment_ids": np.zeros_like(ids)})
        outputs                                   # {logits: [B, 3], probabilities: [B, 3]}
    """

    CONFIG_ARGS = ("num_labels", "regression", "dropout_rate")

    def __init__(self, encoder: keras.Model, num_labels: int, regression: bool = False,
                 dropout_rate: float = CLASSIFIER_DROPOUT, dtype=None,
                 name: str = "bert_classifier", **kwargs):
        if regression and num_labels != 1:
            raise ValueError("a regression head has one output, got num_labels=%d" % num_labels)
        if num_labels < 1:
            raise ValueError("num_labels must be positive, got %d" % num_labels)
        pooled = encoder_output(encoder, "pooled_output")  # [B, H]
        dtype = head_dtype(encoder, dtype)
        logits = ClassifierHead(num_labels, dropout_rate, dtype=dtype,
                                name="classifier")(pooled)  # [B, K]
        if regression:
            predictions = keras.layers.Reshape((), name="predictions")(logits)  # [B]
            outputs = {"logits": logits, "predictions": predictions}
        else:
            probabilities = keras.layers.Softmax(name="probabilities", dtype="float32")(logits)
            outputs = {"logits": logits, "probabilities": probabilities}
        super().__init__(inputs=encoder.input, outputs=outputs, name=name, **kwargs)
        self._set_encoder(encoder, dtype)
        self.num_labels = num_labels
        self.regression = regression
        self.dropout_rate = dropout_rate


def build_classifier_model(config, num_labels: int, seq_length: Optional[int] = None,
                           dtype=None, regression: bool = False,
                           name: str = "bert_classifier") -> keras.Model:
    """``BertClassifier(BertModel(config, seq_length, dtype), num_labels, regression)``.

    Inputs: dict of int32 [B, S] ``input_ids``, ``input_mask``, ``segment_ids``. Outputs (dict,
    float32): ``logits`` [B, K] and ``probabilities`` [B, K]; with ``regression`` (K = 1)
    ``logits`` [B, 1] and ``predictions`` [B]. Dropout only when called with ``training=True``.

    Args:
        config: the encoder's ``BertConfig``.
        num_labels: K (1 with ``regression``).
        seq_length: static S, or None for any length.
        dtype: the dtype policy of the encoder and the head; None = the global policy.
        regression: one output, squared-error loss.
        name: the model name.

    Returns:
        The ``BertClassifier`` (its ``encoder`` a fresh ``BertModel``).

    Raises:
        ValueError: ``num_labels`` < 1, or not 1 with ``regression``.
        ConfigError: an invalid ``config``.

    Example::

        import numpy as np
        from modeling import BertConfig
        from modeling.heads.classifier import build_classifier_model

        config = BertConfig.from_json_file("uncased_L-12_H-768_A-12/bert_config.json")
        model = build_classifier_model(config, num_labels=1, regression=True)   # STS-B
        ids = np.array([[101, 7592, 102], [101, 2088, 102]])              # [B, S]
        outputs = model({"input_ids": ids, "input_mask": np.ones_like(ids),
                         "segment_ids": np.zeros_like(ids)})
        outputs                                       # {logits: [B, 1], predictions: [B]}
    """
    if regression and num_labels != 1:
        raise ValueError("a regression head has one output, got num_labels=%d" % num_labels)
    if num_labels < 1:
        raise ValueError("num_labels must be positive, got %d" % num_labels)
    config.validate("classifier model config")
    encoder = BertModel(config, seq_length=seq_length, dtype=dtype)
    return BertClassifier(encoder, num_labels, regression=regression, dtype=dtype, name=name)
