"""The BERT encoder as a Keras 3 functional model (the original ``modeling.BertModel``).

``BertModel(config, seq_length=None, dtype=None)`` is a ``keras.Model`` subclass built
functionally in its constructor (as keras-hub's backbones): ``isinstance`` works, it serializes
to ``.keras`` through ``get_config``/``from_config``, and ``model.export(path)`` writes a
SavedModel.

Inputs (dict, int32 [B, S]): ``input_ids``, ``input_mask`` (1 = real token, 0 = padding) and
``segment_ids`` (token types). Outputs (dict):

* ``embedding_output`` [B, S, H]: word + segment + position embeddings, LayerNorm, dropout;
* ``encoder_outputs``: list of the L block outputs, each [B, S, H] (the original's
  ``get_all_encoder_layers()``);
* ``sequence_output`` [B, S, H]: the last block's output;
* ``pooled_output`` [B, H]: tanh(dense(sequence_output[:, 0])).

Exported artifacts (``export``) have flat outputs instead: ``encoder_outputs`` becomes
``encoder_outputs_0`` ... ``encoder_outputs_{L-1}`` (see ``flat_outputs``).

Top-level layer names (``word_embeddings``, ``embeddings``, ``attention_bias``, ``layer_N``,
``pooler``) are what ``modeling.checkpoints.tf1`` maps to Google's TF1 variable names. Dropout is
active only when the model is called with ``training=True``.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Union

import keras

from modeling.config import BertConfig
from modeling.layers import ConfigArgs
from modeling.layers.attention import AttentionBias
from modeling.layers.embeddings import EmbeddingPostprocessor, WordEmbedding, truncated_normal
from modeling.layers.transformer import TransformerLayer

INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


@keras.saving.register_keras_serializable(package="bert_tf2")
class Pooler(ConfigArgs, keras.layers.Layer):
    """sequence_output [B, S, H] -> tanh(dense(sequence_output[:, 0])) [B, H].

    Args:
        hidden_size: H.
        initializer_range: stddev of the dense kernel's truncated-normal init.
    """

    CONFIG_ARGS = ("hidden_size", "initializer_range")

    def __init__(self, hidden_size: int, initializer_range: float = 0.02, **kwargs):
        kwargs.setdefault("name", "pooler")
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(hidden_size, activation="tanh", name="dense",
                                        dtype=self.dtype_policy,
                                        kernel_initializer=truncated_normal(initializer_range))

    def build(self, input_shape):
        """Builds the dense layer.

        Args:
            input_shape: the sequence output's shape [B, S, H].
        """
        self.dense.build((input_shape[0], input_shape[-1]))

    def call(self, sequence_output):
        """The pooled output: tanh(dense(first token)).

        Args:
            sequence_output: [B, S, H].

        Returns:
            [B, H].
        """
        return self.dense(sequence_output[:, 0, :])  # [B, H]

    def compute_output_shape(self, input_shape):
        """Args:
            input_shape: [B, S, H].

        Returns:
            ``(B, H)``.
        """
        return (input_shape[0], self.hidden_size)


def bert_inputs(seq_length: Optional[int] = None) -> Dict[str, keras.KerasTensor]:
    """The encoder's symbolic inputs: int32 [B, S] each (S = ``seq_length`` or dynamic).

    Args:
        seq_length: static S, or None.

    Returns:
        ``{"input_ids", "input_mask", "segment_ids"}`` -> ``keras.Input``.
    """
    return {name: keras.Input(shape=(seq_length,), dtype="int32", name=name)
            for name in INPUT_NAMES}


def build_encoder(config: BertConfig, inputs: Dict[str, keras.KerasTensor],
                  dtype=None) -> Tuple[Dict[str, object], WordEmbedding]:
    """Calls fresh encoder layers on symbolic ``inputs``; returns (outputs dict, word layer).

    The word-embedding layer is returned so that heads can reuse (tie) its table.

    Args:
        config: the ``BertConfig``.
        inputs: the symbolic inputs (``bert_inputs``, or any int32 [B, S] tensors).
        dtype: the layers' dtype policy; None = the global policy.

    Returns:
        ``(outputs, word_layer)``: the outputs dict of the module docstring (symbolic) and the
        ``WordEmbedding`` layer.
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


# Keyword arguments of the original TF1 constructor; passing them gets a TypeError that names
# the TF2 call instead of a confusing one about Keras arguments.
_TF1_ARGUMENTS = ("is_training", "input_ids", "input_mask", "token_type_ids",
                  "use_one_hot_embeddings", "scope")


def as_bert_config(config: Union[BertConfig, Mapping[str, Any]]) -> BertConfig:
    """A ``BertConfig`` from a ``BertConfig`` or its ``to_dict()`` (what ``get_config`` stores).

    Args:
        config: a ``BertConfig`` (returned as is) or a dict of its fields.

    Returns:
        The ``BertConfig``.

    Raises:
        TypeError: neither. ConfigError: a bad dict.
    """
    if isinstance(config, BertConfig):
        return config
    if isinstance(config, Mapping):
        return BertConfig.from_dict(dict(config), source="<model config>")
    raise TypeError("config must be a BertConfig or a dict, got %s" % type(config).__name__)


def config_dict(config: BertConfig) -> Dict[str, Any]:
    """``config.to_dict()`` with ``layer_norm_eps`` always present (exact round trip).

    Args:
        config: the ``BertConfig``.

    Returns:
        A JSON-able dict.
    """
    values = config.to_dict()
    values["layer_norm_eps"] = config.layer_norm_eps
    return values


def resolve_dtype_policy(dtype) -> "keras.dtype_policies.DTypePolicy":
    """The policy a layer built with ``dtype`` gets: ``dtype`` itself, else the global policy.

    Args:
        dtype: a policy, its name (``"mixed_bfloat16"``) or None.

    Returns:
        A ``keras.dtype_policies.DTypePolicy``.
    """
    return keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()


def deserialize_dtype(config: Dict[str, Any]) -> Dict[str, Any]:
    """``config`` with a serialized ``dtype`` policy (dict) turned back into a policy object.

    Args:
        config: a ``get_config`` dict.

    Returns:
        ``config`` itself, or a copy with ``dtype`` deserialized.
    """
    if isinstance(config.get("dtype"), dict):
        config = dict(config)
        config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
    return config


def flat_outputs(outputs: Mapping[str, Any]) -> Dict[str, Any]:
    """A model output dict with every list value spread into ``<key>_<i>`` entries.

    ``{"encoder_outputs": [a, b], "pooled_output": p}`` -> ``{"encoder_outputs_0": a,
    "encoder_outputs_1": b, "pooled_output": p}``: the form a SavedModel signature accepts.

    Args:
        outputs: a model's output dict.

    Returns:
        A new flat dict.
    """
    flat = {}
    for key, value in outputs.items():
        if isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                flat["%s_%d" % (key, index)] = item
        else:
            flat[key] = value
    return flat


class FlatExportMixin:
    """``export()`` for functional models whose output dict holds a list (``encoder_outputs``).

    A SavedModel signature (and every other ``keras.Model.export`` format, which all trace
    ``model.__call__`` through ``keras.export.ExportArchive``) takes only a flat dict of tensors,
    so exporting the model as is fails on the list. Python callers keep the list (the original's
    ``get_all_encoder_layers()``, indexed by ``extract_features.py``); ``export`` instead exports
    a plain functional model over the *same* graph (same layers, same variables, no new nodes)
    whose outputs are ``flat_outputs(self.output)``.
    """

    def flat_output_model(self) -> keras.Model:
        """A ``keras.Model`` sharing this model's layers, with ``flat_outputs`` as outputs."""
        return keras.Model(inputs=self.input, outputs=flat_outputs(self.output), name=self.name)

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None,
               **kwargs):
        """``keras.Model.export`` with list outputs flattened (``encoder_outputs_<i>``).

        With the default format the artifact's ``serve(inputs)`` returns the dict of
        ``flat_outputs``; reload it with ``tf.saved_model.load(filepath)``.

        Args:
            filepath: the folder (or file) to write.
            format: ``keras.Model.export``'s format (``"tf_saved_model"``, ...).
            verbose: as ``keras.Model.export``.
            input_signature: as ``keras.Model.export``; None = the model's inputs.
            **kwargs: passed to ``keras.Model.export``.

        Returns:
            What ``keras.Model.export`` returns.
        """
        return self.flat_output_model().export(filepath, format=format, verbose=verbose,
                                               input_signature=input_signature, **kwargs)


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertModel(FlatExportMixin, keras.Model):
    """The encoder (see the module docstring for I/O): ``BertModel(config)(inputs) -> dict``.

    Args:
        config: the ``BertConfig`` (or its dict, as ``get_config`` stores it).
        seq_length: static S of the inputs, or None for any length up to
            ``max_position_embeddings``.
        dtype: Keras dtype policy of every layer (``"bfloat16"``, ``"mixed_bfloat16"``...);
            None = the global policy at construction.
        name: the model name.

    Attributes: ``config`` (the ``BertConfig``), ``seq_length``, ``bert_dtype_policy`` (the
    policy of its layers; task models put their heads under the same one).

    Raises:
        TypeError: the original's TF1 arguments (``is_training``, ``input_ids``, ...).
        ConfigError: an invalid ``config``.

    A Google release's encoder: ``BertModel(BertConfig.from_json_file(".../bert_config.json"))``
    then ``modeling.load_checkpoint(encoder, ".../bert_model.ckpt")``.

    Example::

        import numpy as np
        from modeling import BertConfig, BertModel

        config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=37)
        encoder = BertModel(config)
        ids = np.array([[2, 17, 41, 3, 0], [2, 9, 3, 0, 0]])              # [B, S]
        outputs = encoder({"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
                           "segment_ids": np.zeros_like(ids)})
        outputs["encoder_outputs"][-1]                                   # [B, S, 32]
        outputs["pooled_output"]                                         # [B, 32]
    """

    def __init__(self, config: Union[BertConfig, Mapping[str, Any]],
                 seq_length: Optional[int] = None, dtype=None, name: str = "bert", **kwargs):
        tf1_args = sorted(set(kwargs) & set(_TF1_ARGUMENTS))
        if tf1_args or isinstance(seq_length, bool):
            raise TypeError(
                "BertModel(config, seq_length=None, dtype=None) builds the Keras model; call it "
                "on a dict: BertModel(config)({'input_ids': ..., 'input_mask': ..., "
                "'segment_ids': ...}, training=...) (the original's TF1 call was "
                "BertModel(config, is_training, input_ids, input_mask, token_type_ids); got %s)"
                % (", ".join(tf1_args) if tf1_args else "a bool seq_length"))
        config = as_bert_config(config)
        config.validate("BertModel config")
        policy = resolve_dtype_policy(dtype)
        inputs = bert_inputs(seq_length)
        outputs, _ = build_encoder(config, inputs, dtype=dtype)
        trainable = kwargs.pop("trainable", True)
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        if not trainable:
            # The setter freezes every layer (as a constructor argument Keras only marks the
            # model, and a task model built on it would still train the encoder's layers).
            self.trainable = False
        self.config = config
        self.seq_length = seq_length
        self.bert_dtype_policy = policy

    def get_config(self) -> Dict[str, Any]:
        # The constructor arguments, not the layer graph: from_config rebuilds the graph, so a
        # .keras file stays valid when layer internals change (as keras-hub's backbones).
        return {"name": self.name, "trainable": self.trainable,
                "config": config_dict(self.config), "seq_length": self.seq_length,
                "dtype": keras.dtype_policies.serialize(self.bert_dtype_policy)}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuilds a ``BertModel`` from ``get_config``'s dict.

        Args:
            config: the ``get_config`` dict.
            custom_objects: unused (Keras' signature).

        Returns:
            A ``BertModel``.
        """
        return cls(**deserialize_dtype(config))
