"""Token classification (NER, BERT paper section 5.3): fine-tuned, and feature-based.

* ``BertTokenClassifier(encoder, num_labels)``: ``sequence_output`` [B, S, H] -> dropout 0.1
  -> one linear layer -> ``logits`` [B, S, K] (the classifier's head applied to every token;
  Keras layer ``classifier``, TF1 names ``output_weights`` [K, H] / ``output_bias`` [K]). All
  of BERT trains.
* ``BertFeatureTagger(encoder, num_labels, feature_mode)``: the paper's feature-based approach
  (Table 7): activations of the **frozen** encoder (``FEATURE_MODES``) feed a two-layer
  bidirectional LSTM and the same linear classifier; only the LSTM (and a learned layer mix)
  and the classifier train. The features are taken without dropout: the encoder must be
  built with dropout 0 (``feature_encoder_config``), as ``extract_features.py`` runs it.

The loss (``token_classification_loss``) is the cross-entropy per token [B, S]; the fine-tuning
loop averages it over the scored tokens (``label_weights``: the first sub-token of each word).

Example::

    encoder = modeling.BertModel(config)
    modeling.load_checkpoint(encoder, "uncased_L-12_H-768_A-12/bert_model.ckpt")
    tagger = BertTokenClassifier(encoder, num_labels=9)
    logits = tagger(inputs)["logits"]                                     # [B, S, 9]

    frozen = modeling.BertModel(feature_encoder_config(config))
    modeling.load_checkpoint(frozen, "uncased_L-12_H-768_A-12/bert_model.ckpt")
    tagger = BertFeatureTagger(frozen, 9, feature_mode="concat_last_four_hidden")
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import keras
from keras import ops

from modeling import backend

from modeling.config import BertConfig
from modeling.encoder import BertModel
from modeling.heads.classifier import CLASSIFIER_DROPOUT, ClassifierHead, classification_loss
from modeling.heads.task import EncoderTask, encoder_output, head_dtype

# Table 7's rows (plus a learned mix of the last four): which encoder activations feed the
# BiLSTM. "hidden" = a transformer layer's output; "embeddings" = the embedding output.
FEATURE_MODES = ("embeddings", "second_to_last_hidden", "last_hidden", "sum_last_four_hidden",
                 "concat_last_four_hidden", "weighted_sum_last_four_hidden",
                 "weighted_sum_all_layers")


def token_classification_loss(outputs: Dict[str, Any],
                              batch: Dict[str, Any]) -> Any:
    """Cross-entropy per token [B, S] of ``outputs["logits"]`` [B, S, K] against
    ``batch["label_ids"]`` [B, S] (weight it by ``label_weights`` to score the first
    sub-tokens only).

    Args:
        outputs: the model's output dict (``logits`` [B, S, K]).
        batch: the input batch dict (``label_ids`` int [B, S]).

    Returns:
        float32 [B, S].
    """
    logits = outputs["logits"]
    shape = backend.shape(logits)
    flat = classification_loss(ops.reshape(logits, (-1, shape[-1])),
                               ops.reshape(batch["label_ids"], (-1,)))  # [B*S]
    return ops.reshape(flat, shape[:-1])  # [B, S]


def tag_outputs(x: keras.KerasTensor, num_labels: int, dropout_rate: float,
                dtype=None) -> Dict[str, keras.KerasTensor]:
    """Per-token [B, S, F] -> ``logits`` / ``probabilities`` float32 [B, S, K]: the classifier
    head (layer ``classifier``) on every token, then a softmax.

    Args:
        x: symbolic per-token features [B, S, F].
        num_labels: K.
        dropout_rate: on ``x``, training only.
        dtype: the head's dtype policy.

    Returns:
        The dict of symbolic ``logits`` and ``probabilities``.
    """
    logits = ClassifierHead(num_labels, dropout_rate, dtype=dtype, name="classifier")(x)
    probabilities = keras.layers.Softmax(name="probabilities", dtype="float32")(logits)
    return {"logits": logits, "probabilities": probabilities}


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertTokenClassifier(EncoderTask):
    """A label per token on an existing encoder: ``BertTokenClassifier(encoder, num_labels)``.

    Inputs: the encoder's (dict of int32 [B, S] ``input_ids``, ``input_mask``,
    ``segment_ids``). Outputs (dict, float32): ``logits`` [B, S, K], ``probabilities``
    [B, S, K]. Built on the encoder's own graph as ``BertClassifier`` (its layers at the top
    level, the variables shared; no pooler). Dropout only with ``training=True``.

    Args:
        encoder: the ``modeling.BertModel``.
        num_labels: K, the tags (e.g. CoNLL-2003's 9 BIO tags).
        dropout_rate: on the sequence output (the original classifier's 0.1).
        dtype: the head's dtype policy; None = the encoder's (``bert_dtype_policy``).
        name: the model name.

    Raises:
        ValueError: ``num_labels`` < 1.
        TypeError: ``encoder`` has no ``sequence_output``.

    Example::

        import numpy as np
        from modeling import BertConfig, BertModel
        from modeling.heads.token_classifier import BertTokenClassifier

        encoder = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=37))
        tagger = BertTokenClassifier(encoder, num_labels=9)
        ids = np.array([[2, 17, 41, 42, 3], [2, 9, 3, 0, 0]])             # [B, S]
        outputs = tagger({"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
                          "segment_ids": np.zeros_like(ids)})
        outputs                             # {logits: [B, S, 9], probabilities: [B, S, 9]}
    """

    CONFIG_ARGS = ("num_labels", "dropout_rate")

    def __init__(self, encoder: keras.Model, num_labels: int,
                 dropout_rate: float = CLASSIFIER_DROPOUT, dtype=None,
                 name: str = "bert_token_classifier", **kwargs):
        if num_labels < 1:
            raise ValueError("num_labels must be positive, got %d" % num_labels)
        sequence = encoder_output(encoder, "sequence_output")  # [B, S, H]
        dtype = head_dtype(encoder, dtype)
        super().__init__(inputs=encoder.input,
                         outputs=tag_outputs(sequence, num_labels, dropout_rate, dtype),
                         name=name, **kwargs)
        self._set_encoder(encoder, dtype)
        self.num_labels = num_labels
        self.dropout_rate = dropout_rate


# ============================================================================ feature-based


def feature_encoder_config(config: BertConfig) -> BertConfig:
    """``config`` with both dropout rates 0: the frozen encoder of ``BertFeatureTagger``.

    Args:
        config: the model's ``BertConfig``.

    Returns:
        A new ``BertConfig`` (``config`` is unchanged).
    """
    return config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@keras.saving.register_keras_serializable(package="bert_tf2")
class LayerMix(keras.layers.Layer):
    """ELMo's scalar mix: ``gamma * Σ_j softmax(s)_j · h_j`` over N inputs [B, S, H]; ``s`` [N]
    starts at 0 (an equal-weight mean), ``gamma`` at 1."""

    def build(self, input_shape):
        """Creates ``scalars`` [N] and ``gamma`` [].

        Args:
            input_shape: the N inputs' shapes, [B, S, H] each.
        """
        count = len(input_shape)
        self.scalars = self.add_weight(name="scalars", shape=(count,), initializer="zeros")
        self.gamma = self.add_weight(name="gamma", shape=(), initializer="ones")

    def call(self, inputs):
        """Args:
            inputs: N tensors [B, S, H].

        Returns:
            The mix [B, S, H].
        """
        weights = ops.softmax(ops.cast(self.scalars, inputs[0].dtype), axis=-1)  # [N]
        stacked = ops.stack(inputs, axis=0)  # [N, B, S, H]
        mixed = ops.tensordot(weights, stacked, axes=1)  # [B, S, H]
        return ops.cast(self.gamma, mixed.dtype) * mixed

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: the N inputs' shapes.

        Returns:
            The first input's shape.
        """
        return tuple(input_shape[0])


@keras.saving.register_keras_serializable(package="bert_tf2")
class PaddingMask(keras.layers.Layer):
    """``input_mask`` [B, S] -> bool [B, S], the LSTMs' mask. A layer, not a bare ``keras.ops``
    call on the symbolic input: an op node in the functional graph hides the layers after it
    from the TF checkpoint's object graph (the BiLSTMs and the classifier were not saved)."""

    def call(self, input_mask):
        """Args:
            input_mask: int [B, S].

        Returns:
            bool [B, S].
        """
        return ops.not_equal(input_mask, 0)

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: ``(B, S)``.

        Returns:
            ``(B, S)``.
        """
        return tuple(input_shape)


def encoder_features(encoder: keras.Model, feature_mode: str, dtype=None) -> keras.KerasTensor:
    """The symbolic [B, S, F] activations ``feature_mode`` takes from ``encoder``'s outputs
    (F = H, or 4H for ``concat_last_four_hidden``).

    Args:
        encoder: a functional encoder (``BertModel``).
        feature_mode: one of ``FEATURE_MODES``.
        dtype: the dtype policy of the mixing layers.

    Returns:
        The symbolic [B, S, F] tensor.

    Raises:
        ValueError: an unknown ``feature_mode``, or too few encoder layers for it.
    """
    if feature_mode not in FEATURE_MODES:
        raise ValueError("feature_mode must be one of %s, got %r"
                         % (", ".join(FEATURE_MODES), feature_mode))
    layers: List[keras.KerasTensor] = list(encoder_output(encoder, "encoder_outputs"))
    if feature_mode == "embeddings":
        return encoder_output(encoder, "embedding_output")
    if feature_mode == "last_hidden":
        return layers[-1]
    if feature_mode == "second_to_last_hidden":
        if len(layers) < 2:
            raise ValueError("second_to_last_hidden needs 2 encoder layers, the encoder has 1")
        return layers[-2]
    if feature_mode == "weighted_sum_all_layers":
        return LayerMix(dtype=dtype, name="layer_mix")(layers)
    last_four = layers[-4:]
    if feature_mode == "sum_last_four_hidden":
        return keras.layers.Add(dtype=dtype, name="sum_last_four")(last_four) \
            if len(last_four) > 1 else last_four[0]
    if feature_mode == "concat_last_four_hidden":
        return keras.layers.Concatenate(dtype=dtype, name="concat_last_four")(last_four) \
            if len(last_four) > 1 else last_four[0]
    return LayerMix(dtype=dtype, name="layer_mix")(last_four)  # weighted_sum_last_four_hidden


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertFeatureTagger(EncoderTask):
    """The feature-based tagger of Table 7 on a frozen encoder.

    ``encoder``: a ``modeling.BertModel`` built with dropout 0 (``feature_encoder_config``);
    its layers are set non-trainable. ``feature_mode``: one of ``FEATURE_MODES``. Then
    ``lstm_layers`` bidirectional LSTMs of ``lstm_units`` per direction (the paper: two of 768
    for BERT-base; default: the encoder's hidden size), padding masked by ``input_mask``,
    dropout ``dropout_rate`` on the LSTM output, and the linear classifier per token.

    Inputs: the encoder's. Outputs (dict, float32): ``logits`` [B, S, K], ``probabilities``
    [B, S, K].

    Args:
        encoder: a ``modeling.BertModel`` built with dropout 0; frozen here.
        num_labels: K.
        feature_mode: one of ``FEATURE_MODES``.
        lstm_units: units per direction; None = the encoder's hidden size.
        lstm_layers: how many BiLSTMs.
        dropout_rate: on the last LSTM output, training only.
        dtype: the head's dtype policy; None = the encoder's.
        name: the model name.

    Raises:
        ValueError: ``num_labels`` or ``lstm_layers`` < 1, an encoder with dropout, an unknown
            ``feature_mode``.
    """

    CONFIG_ARGS = ("num_labels", "feature_mode", "lstm_units", "lstm_layers", "dropout_rate")

    def __init__(self, encoder: keras.Model, num_labels: int,
                 feature_mode: str = "concat_last_four_hidden",
                 lstm_units: Optional[int] = None, lstm_layers: int = 2,
                 dropout_rate: float = CLASSIFIER_DROPOUT, dtype=None,
                 name: str = "bert_feature_tagger", **kwargs):
        if num_labels < 1:
            raise ValueError("num_labels must be positive, got %d" % num_labels)
        if lstm_layers < 1:
            raise ValueError("lstm_layers must be positive, got %d" % lstm_layers)
        config = getattr(encoder, "config", None)
        if config is not None and (config.hidden_dropout_prob or
                                   config.attention_probs_dropout_prob):
            raise ValueError("the frozen encoder must be built without dropout (features are "
                             "taken as extract_features does): BertModel("
                             "feature_encoder_config(config))")
        # Frozen layer by layer: ``encoder.trainable = False`` alone does not reach the layers
        # of an encoder already built with trainable=False (e.g. one rebuilt by from_config:
        # Keras skips an assignment of the value the flag already has).
        encoder.trainable = False
        for layer in encoder.layers:
            layer.trainable = False
        dtype = head_dtype(encoder, dtype)
        if lstm_units is None:
            lstm_units = int(config.hidden_size) if config is not None else 768
        features = encoder_features(encoder, feature_mode, dtype)  # [B, S, F]
        mask = PaddingMask(name="padding_mask")(encoder.input["input_mask"])  # [B, S] bool
        x = features
        # The LSTMs given to Bidirectional are kept alive until every layer is made: under
        # keras.saving.load_model, Bidirectional's copies go through Keras' object-sharing
        # scope, keyed by id(); a freed LSTM's id taken by the next one made both copies of the
        # next layer one shared object ("forward and backward layer should have different
        # go_backwards"), depending on where the allocator put it.
        lstms = []
        for index in range(lstm_layers):
            lstms.append(keras.layers.LSTM(lstm_units, return_sequences=True, dtype=dtype))
            x = keras.layers.Bidirectional(lstms[-1], dtype=dtype,
                                           name="bilstm_%d" % index)(x, mask=mask)  # [B, S, 2U]
        super().__init__(inputs=encoder.input,
                         outputs=tag_outputs(x, num_labels, dropout_rate, dtype),
                         name=name, **kwargs)
        self._set_encoder(encoder, dtype)
        self.num_labels = num_labels
        self.feature_mode = feature_mode
        self.lstm_units = lstm_units
        self.lstm_layers = lstm_layers
        self.dropout_rate = dropout_rate


def build_token_classifier_model(config: BertConfig, num_labels: int,
                                 seq_length: Optional[int] = None, dtype=None,
                                 feature_mode: Optional[str] = None,
                                 lstm_units: Optional[int] = None) -> keras.Model:
    """``BertTokenClassifier(BertModel(config), num_labels)``; with ``feature_mode``,
    ``BertFeatureTagger(BertModel(feature_encoder_config(config)), num_labels, feature_mode,
    lstm_units)``. Inputs: dict of int32 [B, S]; outputs ``logits``/``probabilities``
    [B, S, K].

    Args:
        config: the encoder's ``BertConfig``.
        num_labels: K.
        seq_length: static S, or None for any length.
        dtype: the dtype policy of every layer; None = the global policy.
        feature_mode: None (fine-tuned), or one of ``FEATURE_MODES`` (feature-based).
        lstm_units: the feature tagger's LSTM units per direction.

    Returns:
        The ``BertTokenClassifier`` or ``BertFeatureTagger``.
    """
    config.validate("token classifier model config")
    if feature_mode is None:
        return BertTokenClassifier(BertModel(config, seq_length=seq_length, dtype=dtype),
                                   num_labels, dtype=dtype)
    encoder = BertModel(feature_encoder_config(config), seq_length=seq_length, dtype=dtype)
    return BertFeatureTagger(encoder, num_labels, feature_mode=feature_mode,
                             lstm_units=lstm_units, dtype=dtype)
