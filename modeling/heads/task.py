"""The base of the task models that take an existing encoder (``BertClassifier``,
``BertSpanLabeler``, ``BertMultipleChoice``), as keras-hub's ``Task`` takes a backbone.

A task model is a ``keras.Model`` subclass built functionally in its constructor. ``encoder``
is the ``modeling.BertModel`` it was built on; ``get_config`` stores the encoder's own config
and ``from_config`` rebuilds it first, so a task model round-trips through ``.keras``.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import keras

from modeling.encoder import deserialize_dtype


class _Untracked:
    """Holds an object out of Keras' and TensorFlow's attribute tracking."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def encoder_output(encoder: keras.Model, key: str) -> keras.KerasTensor:
    """The symbolic ``encoder.output[key]`` of a functional encoder (``BertModel``).

    Args:
        encoder: the encoder model.
        key: the output's name (``"pooled_output"``, ``"sequence_output"``, ...).

    Returns:
        The symbolic tensor.

    Raises:
        TypeError: ``encoder`` is not a functional model with that output.
    """
    outputs = getattr(encoder, "output", None) if isinstance(encoder, keras.Model) else None
    if not isinstance(outputs, dict) or key not in outputs:
        raise TypeError("the encoder must be a functional keras.Model whose output dict holds "
                        "%r (a modeling.BertModel), got %s" % (key, type(encoder).__name__))
    return outputs[key]


def head_dtype(encoder: keras.Model, dtype=None):
    """The dtype policy of a head on ``encoder``: ``dtype``, else the encoder's own policy
    (``BertModel.bert_dtype_policy``), else None (the global policy).

    Args:
        encoder: the encoder model.
        dtype: the caller's policy, or None.

    Returns:
        A policy, its name, or None.
    """
    if dtype is not None:
        return dtype
    return getattr(encoder, "bert_dtype_policy", None)


class EncoderTask(keras.Model):
    """Base of the task models: keeps ``encoder`` and (de)serializes it.

    Subclasses build their graph, call ``super().__init__(inputs=..., outputs=..., name=...)``,
    then ``self._set_encoder(encoder, dtype)`` and list their own constructor arguments in
    ``CONFIG_ARGS`` (kept as attributes of the same names).
    """

    CONFIG_ARGS: Tuple[str, ...] = ()

    def _set_encoder(self, encoder: keras.Model, dtype) -> None:
        # Not a tracked attribute: the task model already owns every encoder layer it uses
        # (through its graph). Tracking the encoder object too would add the variables of
        # layers the task does not use (the span model has no pooler) to ``weights``, to the
        # optimizer's variables and to TF checkpoints, and change the TF checkpoint layout.
        self._encoder_holder = _Untracked(encoder)
        self.head_dtype = dtype

    @property
    def encoder(self) -> keras.Model:
        """The encoder this task model was built on (shares its variables)."""
        return self._encoder_holder.value

    def __dir__(self):
        # Keras' weight files (.keras, .weights.h5) walk dir(model) for objects with state:
        # leaving ``encoder`` out keeps their layout exactly the model's own layers (else the span
        # model would also write the unused pooler and no longer read files written before).
        return [name for name in super().__dir__() if name != "encoder"]

    def get_config(self) -> Dict[str, Any]:
        """The arguments every task model has (name, trainable, encoder, dtype), then the
        subclass's own (``CONFIG_ARGS``).

        Returns:
            The ``get_config`` dict.
        """
        dtype = self.head_dtype
        config = {"name": self.name, "trainable": self.trainable,
                  "encoder": keras.saving.serialize_keras_object(self.encoder),
                  "dtype": (None if dtype is None
                            else keras.dtype_policies.serialize(keras.dtype_policies.get(dtype)))}
        config.update({name: getattr(self, name) for name in self.CONFIG_ARGS})
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuilds the task model (its encoder deserialized first) from ``get_config``'s dict.

        Args:
            config: the ``get_config`` dict.
            custom_objects: passed on to the encoder's deserialization.

        Returns:
            An instance of ``cls``.
        """
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"],
                                                                  custom_objects=custom_objects)
        return cls(**deserialize_dtype(config))
