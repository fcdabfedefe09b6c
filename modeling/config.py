"""BertConfig: the hyper-parameters of a BERT model, as in Google's ``bert_config.json``.

Google's file and the original ``BertConfig`` class are the reference: the same keys, the same
class defaults (including ``type_vocab_size=16``), ``to_json_string`` with sorted keys and an
indent of 2. A Hugging Face ``config.json`` (``"model_type": "bert"``) is read too, with its keys
mapped; the one semantic difference is GELU: Google's ``"gelu"`` is the tanh approximation, HF's
``"gelu"`` is the exact erf GELU, which this config names ``"gelu_exact"``.

Errors (missing file, bad JSON, missing or mistyped key, bad value) raise ``ConfigError`` with one
line that names the file and the key. A key missing from the file takes the original's class
default (BERT-Base's width and depth): faithful, but logged as one warning naming the file and
the keys that took defaults.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Dict, Optional

from absl import logging

from bert_common.errors import InputError
from bert_common import files
from modeling.layers import activations


class ConfigError(InputError):
    """A BERT config that cannot be used; the message names the file and the key."""


# Field name -> (type, class default). ``None`` default = required.
_FIELDS = {
    "vocab_size": (int, None),
    "hidden_size": (int, 768),
    "num_hidden_layers": (int, 12),
    "num_attention_heads": (int, 12),
    "intermediate_size": (int, 3072),
    "hidden_act": (str, "gelu"),
    "hidden_dropout_prob": (float, 0.1),
    "attention_probs_dropout_prob": (float, 0.1),
    "max_position_embeddings": (int, 512),
    "type_vocab_size": (int, 16),
    "initializer_range": (float, 0.02),
}
# Not in Google's file; written by to_dict only when it differs from the original's constant.
_DEFAULT_LAYER_NORM_EPS = 1e-12

# Hugging Face activation names -> this project's (Google's "gelu" is the tanh approximation).
_HF_ACTIVATIONS = {
    "gelu": "gelu_exact",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "gelu_fast": "gelu",
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
}
# And back: the name ``transformers`` computes the same function with (never HF's exact "gelu"
# for Google's tanh form).
_TO_HF_ACTIVATIONS = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu", "tanh": "tanh",
                      "linear": "linear"}


class BertConfig:
    """Configuration of a ``BertModel`` (the original's fields and defaults).

    Args:
        vocab_size: V, rows of the word-embedding table.
        hidden_size: H.
        num_hidden_layers: L, the Transformer blocks.
        num_attention_heads: A (H must be a multiple of A).
        intermediate_size: the feed-forward layer's width (4H in the releases).
        hidden_act: the feed-forward activation (``"gelu"``: the original's tanh form).
        hidden_dropout_prob: dropout on embeddings and every block output.
        attention_probs_dropout_prob: dropout on the attention probabilities.
        max_position_embeddings: the longest S the model takes.
        type_vocab_size: how many segment ids (2 in the releases).
        initializer_range: stddev of the truncated-normal initializers.
        layer_norm_eps: LayerNorm's epsilon (the original's 1e-12).

    The constructor checks nothing; ``validate`` (called by ``from_dict`` and ``BertModel``)
    does.
    """

    def __init__(self,
                 vocab_size: Optional[int],
                 hidden_size: int = 768,
                 num_hidden_layers: int = 12,
                 num_attention_heads: int = 12,
                 intermediate_size: int = 3072,
                 hidden_act: str = "gelu",
                 hidden_dropout_prob: float = 0.1,
                 attention_probs_dropout_prob: float = 0.1,
                 max_position_embeddings: int = 512,
                 type_vocab_size: int = 16,
                 initializer_range: float = 0.02,
                 layer_norm_eps: float = _DEFAULT_LAYER_NORM_EPS):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_dict(cls, json_object: Dict[str, Any], source: str = "<dict>") -> "BertConfig":
        """Builds a config from a Google-style dict; missing keys take the class defaults
        (BERT-Base's, as the original), with one warning logged naming ``source`` and the keys.

        A dict with ``"model_type"`` is taken as a Hugging Face config (see ``from_hf_dict``).
        Unknown keys are ignored. ``source`` names the origin in error messages.

        Args:
            json_object: the parsed ``bert_config.json`` (or Hugging Face ``config.json``).
            source: where it came from, for messages.

        Returns:
            The validated ``BertConfig``.

        Raises:
            ConfigError: not a dict, a required key missing, a wrong type or value.
        """
        if not isinstance(json_object, dict):
            raise ConfigError("%s: a BERT config must be a JSON object, got %s"
                              % (source, type(json_object).__name__))
        if "model_type" in json_object:
            return cls.from_hf_dict(json_object, source=source)
        values, defaulted = {}, []
        for key, (kind, default) in _FIELDS.items():
            if key not in json_object:
                if default is None:
                    raise ConfigError("%s: required key %r is missing" % (source, key))
                values[key] = default
                defaulted.append(key)
                continue
            values[key] = _check_type(json_object[key], kind, key, source)
        if defaulted:
            # The original's class defaults are BERT-Base's: said, not silent (a config without
            # hidden_size builds a 768-wide model).
            logging.warning("%s: no %s: using the original BertConfig's class default%s (%s)",
                            source, ", ".join(defaulted), "s" if len(defaulted) > 1 else "",
                            ", ".join("%s=%r" % (key, values[key]) for key in defaulted))
        if "layer_norm_eps" in json_object:
            values["layer_norm_eps"] = _check_type(json_object["layer_norm_eps"], float,
                                                   "layer_norm_eps", source)
        config = cls(**values)
        config.validate(source)
        return config

    @classmethod
    def from_hf_dict(cls, json_object: Dict[str, Any], source: str = "<dict>") -> "BertConfig":
        """Builds a config from a Hugging Face BERT ``config.json`` dict (HF ``gelu`` = exact).

        Args:
            json_object: the parsed ``config.json``.
            source: where it came from, for messages.

        Returns:
            The validated ``BertConfig``.

        Raises:
            ConfigError: not a BERT config, or an activation or position type not supported.
        """
        model_type = json_object.get("model_type", "bert")
        if model_type != "bert":
            raise ConfigError("%s: model_type %r is not a BERT model" % (source, model_type))
        act = json_object.get("hidden_act", "gelu")
        if act not in _HF_ACTIVATIONS:
            raise ConfigError("%s: key 'hidden_act': unsupported Hugging Face activation %r"
                              % (source, act))
        google = {key: json_object[key] for key in _FIELDS if key in json_object}
        google["hidden_act"] = _HF_ACTIVATIONS[act]
        # HF's class default differs from Google's for type_vocab_size (2 vs 16).
        google.setdefault("type_vocab_size", 2)
        if "layer_norm_eps" in json_object:
            google["layer_norm_eps"] = json_object["layer_norm_eps"]
        embedding_type = json_object.get("position_embedding_type", "absolute")
        if embedding_type != "absolute":
            raise ConfigError("%s: key 'position_embedding_type': only 'absolute' is supported, "
                              "got %r" % (source, embedding_type))
        return cls.from_dict(google, source=source)

    @classmethod
    def from_json_file(cls, json_file: str) -> "BertConfig":
        """Reads a Google ``bert_config.json`` (or a Hugging Face ``config.json``).

        Args:
            json_file: local path or ``gs://`` URL.

        Returns:
            The validated ``BertConfig``.

        Raises:
            ConfigError: no such file, invalid UTF-8 or JSON, or a bad config.
        """
        if not files.exists(json_file):
            raise ConfigError("%s: config file not found" % json_file)
        text = files.read_utf8(json_file, ConfigError)
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError("%s: line %d: invalid JSON (%s)" % (json_file, e.lineno, e.msg)) from None
        return cls.from_dict(obj, source=json_file)

    # ------------------------------------------------------------------ checks and output

    def validate(self, source: str = "<config>") -> None:
        """Raises ``ConfigError`` for values the model cannot be built with.

        Args:
            source: what to name in the message (a file, ``"BertModel config"``).

        Raises:
            ConfigError: a size not positive, H not a multiple of A, a rate outside [0, 1),
                an unknown activation.
        """
        for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            if getattr(self, key) <= 0:
                raise ConfigError("%s: key %r must be positive, got %r"
                                  % (source, key, getattr(self, key)))
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                "%s: key 'hidden_size': %d is not a multiple of num_attention_heads (%d)"
                % (source, self.hidden_size, self.num_attention_heads))
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError("%s: key %r must be in [0, 1), got %r"
                                  % (source, key, getattr(self, key)))
        if self.initializer_range <= 0 or self.layer_norm_eps <= 0:
            raise ConfigError("%s: initializer_range and layer_norm_eps must be positive" % source)
        if self.hidden_act not in activations.NAMES:
            raise ConfigError("%s: key 'hidden_act': unsupported activation %r (known: %s)"
                              % (source, self.hidden_act, ", ".join(sorted(activations.NAMES))))

    @property
    def size_per_head(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> Dict[str, Any]:
        """The Google ``bert_config.json`` keys (plus ``layer_norm_eps`` if not 1e-12)."""
        out = {key: getattr(self, key) for key in _FIELDS}
        if self.layer_norm_eps != _DEFAULT_LAYER_NORM_EPS:
            out["layer_norm_eps"] = self.layer_norm_eps
        return copy.deepcopy(out)

    def to_hf_dict(self) -> Dict[str, Any]:
        """The keys of a Hugging Face ``BertConfig`` (``model_type`` ``"bert"``): the same
        values, GELU named as ``transformers`` computes it (Google's tanh ``"gelu"`` ->
        ``"gelu_new"``, ``"gelu_exact"`` -> ``"gelu"``), ``layer_norm_eps`` always written."""
        out = {key: getattr(self, key) for key in _FIELDS}
        out["hidden_act"] = _TO_HF_ACTIVATIONS[self.hidden_act]
        out.update(layer_norm_eps=self.layer_norm_eps, model_type="bert", pad_token_id=0,
                   position_embedding_type="absolute")
        return out

    def to_json_string(self) -> str:
        """JSON as the original writes it: indent 2, sorted keys, trailing newline."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def replace(self, **changes: Any) -> "BertConfig":
        """A copy with some fields changed (e.g. dropout 0 for evaluation).

        Args:
            **changes: field name -> new value.

        Returns:
            The new, validated ``BertConfig``.
        """
        values = self.to_dict()
        values["layer_norm_eps"] = self.layer_norm_eps
        values.update(changes)
        config = BertConfig(**values)
        config.validate("<replace>")
        return config

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BertConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return "BertConfig(%s)" % ", ".join("%s=%r" % kv for kv in sorted(self.to_dict().items()))


def _check_type(value: Any, kind: type, key: str, source: str) -> Any:
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is str and isinstance(value, str):
        return value
    raise ConfigError("%s: key %r must be %s, got %r" % (source, key, kind.__name__, value))
