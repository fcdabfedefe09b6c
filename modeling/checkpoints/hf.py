"""Hugging Face BERT folders in and out, under Google's TF1 names.

In: ``read_hf_weights`` / ``read_hf_config`` (``model.safetensors`` + ``config.json``). Out:
``write_hf_folder`` writes ``model.safetensors``, ``config.json``, ``vocab.txt`` and
``tokenizer_config.json`` that ``transformers`` loads as ``BertModel``, ``BertForPreTraining``,
``BertForSequenceClassification`` or ``BertForQuestionAnswering`` (``hf_architecture`` tells
which from the TF1 names present). The writer's names come from ``tf1_to_hf_name``, which is
checked against the reader's map below, so the two directions cannot drift apart.

Mapping (a leading ``bert.`` is dropped): ``embeddings.{word,position,token_type}_embeddings.weight``
-> ``bert/embeddings/..._embeddings``; ``*.LayerNorm.{weight,bias}`` (or ``gamma``/``beta``) ->
``*/LayerNorm/{gamma,beta}``; ``encoder.layer.N.*`` -> ``bert/encoder/layer_N/*``; torch Linear
``*.weight`` [out, in] -> ``*/kernel`` [in, out] (transposed), ``*.bias`` -> ``*/bias``;
``pooler.dense`` -> ``bert/pooler/dense``; heads: ``cls.predictions.transform.*`` ->
``cls/predictions/transform/*``, ``cls.predictions.bias`` -> ``cls/predictions/output_bias``,
``cls.seq_relationship.{weight,bias}`` -> ``cls/seq_relationship/output_{weights,bias}`` (kept
[2, H]), ``classifier.*`` -> ``output_{weights,bias}``, ``qa_outputs.*`` ->
``cls/squad/output_{weights,bias}``. ``cls.predictions.decoder.weight`` is the tied word-embedding
table and ``embeddings.position_ids`` a buffer: neither is mapped.

The HF config says ``"gelu"`` for the exact erf GELU, ``"gelu_new"`` for Google's tanh form
(``BertConfig.to_hf_dict``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bert_common import atomic, files
from bert_common.errors import first_line
from modeling.checkpoints.tf1 import CheckpointError
from modeling.config import BertConfig

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
VOCAB_NAME = "vocab.txt"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"

_NOT_MAPPED = {"embeddings.position_ids", "cls.predictions.decoder.weight",
               "cls.predictions.decoder.bias"}
_HEAD_SCOPES = {"cls.seq_relationship": "cls/seq_relationship/", "classifier": "",
                "qa_outputs": "cls/squad/"}


@dataclasses.dataclass
class HFWeights:
    """Arrays in TF1 names and layout, the HF tensors that were not mapped, and the file."""

    source: str
    arrays: Dict[str, np.ndarray]
    unmapped: List[str]


def hf_to_tf1_name(hf_name: str) -> Optional[Tuple[str, bool]]:
    """HF tensor name -> (TF1 name, transpose) or None if not mapped."""
    name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
    if name in _NOT_MAPPED or hf_name in _NOT_MAPPED:
        return None
    parts = name.split(".")
    if len(parts) < 2:
        return None
    body, leaf = ".".join(parts[:-1]), parts[-1]
    if body in _HEAD_SCOPES:
        scope = _HEAD_SCOPES[body]
        return {"weight": (scope + "output_weights", False),
                "bias": (scope + "output_bias", False)}.get(leaf)
    if name == "cls.predictions.bias":
        return "cls/predictions/output_bias", False
    scope_parts = re.sub(r"(^|\.)layer\.(\d+)(?=\.)", r"\1layer_\2", body).split(".")
    if scope_parts[0] == "cls":
        scope = "/".join(scope_parts)
    elif scope_parts[0] in ("embeddings", "encoder", "pooler"):
        scope = "bert/" + "/".join(scope_parts)
    else:
        return None
    if scope_parts[-1] == "LayerNorm":
        leaf_name = {"weight": "gamma", "gamma": "gamma", "bias": "beta", "beta": "beta"}.get(leaf)
        return (scope + "/" + leaf_name, False) if leaf_name else None
    if scope_parts[-1].endswith("_embeddings") and leaf == "weight":
        return scope, False
    if leaf == "weight":
        return scope + "/kernel", True
    if leaf == "bias":
        return scope + "/bias", False
    return None


def is_hf_checkpoint(path: str) -> bool:
    """True for a ``.safetensors`` file or a folder holding ``model.safetensors``."""
    return path.endswith(".safetensors") or (
        files.isdir(path) and files.isfile(os.path.join(path, WEIGHTS_NAME)))


def _weights_file(path: str) -> str:
    weights = os.path.join(path, WEIGHTS_NAME) if files.isdir(path) else path
    if not files.isfile(weights):
        raise CheckpointError("%s: no such safetensors file" % weights)
    return weights


def read_hf_weights(path: str) -> HFWeights:
    """Reads a HF folder or ``.safetensors`` file into TF1-named float32 arrays."""
    from safetensors.numpy import load, load_file

    weights = _weights_file(path)
    try:
        if files.is_url(weights):  # safetensors reads local files only
            with files.open(weights, "rb") as f:
                tensors = load(f.read())
        else:
            tensors = load_file(weights)
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a bad file
        raise CheckpointError("%s: cannot read safetensors file (%s)"
                              % (weights, first_line(e))) from None
    arrays, unmapped = {}, []
    for hf_name in sorted(tensors):
        mapped = hf_to_tf1_name(hf_name)
        if mapped is None:
            unmapped.append(hf_name)
            continue
        name, transpose = mapped
        value = tensors[hf_name]
        if transpose:
            value = value.T
        arrays[name] = np.ascontiguousarray(value, dtype=np.float32)
    return HFWeights(weights, arrays, unmapped)


def read_hf_config(path: str) -> BertConfig:
    """``config.json`` of a HF folder (or the folder of a ``.safetensors`` file)."""
    folder = path if files.isdir(path) else os.path.dirname(files.abspath(path))
    config_file = os.path.join(folder, CONFIG_NAME) if not path.endswith(".json") else path
    return BertConfig.from_json_file(config_file)


def read_hf_casing(path: str) -> Optional[bool]:
    """``do_lower_case`` of the folder's ``tokenizer_config.json``; None without one (or key)."""
    folder = path if files.isdir(path) else os.path.dirname(files.abspath(path))
    config_file = os.path.join(folder, TOKENIZER_CONFIG_NAME)
    if not files.isfile(config_file):
        return None
    try:
        value = json.loads(files.read_text(config_file)).get("do_lower_case")
    except (ValueError, AttributeError, OSError, UnicodeDecodeError) as e:
        raise CheckpointError("%s: cannot read tokenizer config (%s)" % (config_file, e)) from None
    return value if isinstance(value, bool) else None


# ---------------------------------------------------------------------------------- writing

# Which transformers class a set of TF1 names is: the first whose head tensor is present.
_ARCHITECTURES = (("cls/predictions/output_bias", "BertForPreTraining"),
                  ("output_weights", "BertForSequenceClassification"),
                  ("cls/squad/output_weights", "BertForQuestionAnswering"))
_EXPORT_HEADS = {"output_": "classifier.", "cls/squad/output_": "qa_outputs.",
                 "cls/seq_relationship/output_": "cls.seq_relationship."}


def hf_architecture(tf1_names) -> str:
    """``"BertForPreTraining"`` (MLM + NSP heads), ``"BertForSequenceClassification"``
    (run_classifier's ``output_weights``), ``"BertForQuestionAnswering"`` (``cls/squad``) or
    ``"BertModel"`` (encoder and pooler only)."""
    names = set(tf1_names)
    for head, architecture in _ARCHITECTURES:
        if head in names:
            return architecture
    return "BertModel"


def tf1_to_hf_name(tf1_name: str, prefix: str = "") -> Optional[Tuple[str, bool]]:
    """TF1 name -> (HF tensor name, transpose) or None; ``prefix`` (``"bert."`` for the task
    classes, ``""`` for ``BertModel``) goes before the encoder's names. The inverse of
    ``hf_to_tf1_name``, and checked against it."""
    if tf1_name == "cls/predictions/output_bias":
        hf_name = "cls.predictions.bias"
    elif any(tf1_name.startswith(h) for h in _EXPORT_HEADS):
        head = max((h for h in _EXPORT_HEADS if tf1_name.startswith(h)), key=len)
        leaf = {"weights": "weight", "bias": "bias"}.get(tf1_name[len(head):])
        if leaf is None:
            return None
        hf_name = _EXPORT_HEADS[head] + leaf
    else:
        if tf1_name.startswith("bert/"):
            body = prefix + tf1_name[len("bert/"):]
        elif tf1_name.startswith("cls/"):
            body = tf1_name
        else:
            return None
        parts = [re.sub(r"^layer_(\d+)$", r"layer.\1", part) for part in body.split("/")]
        leaf = parts[-1]
        if leaf.endswith("_embeddings"):
            parts.append("weight")
        else:
            parts[-1] = {"gamma": "weight", "beta": "bias", "kernel": "weight",
                         "bias": "bias"}.get(leaf, "")
            if not parts[-1]:
                return None
        hf_name = ".".join(parts)
    mapped = hf_to_tf1_name(hf_name)
    return (hf_name, mapped[1]) if mapped is not None and mapped[0] == tf1_name else None


def hf_config_dict(config: BertConfig, architecture: str,
                   labels: Optional[Sequence[str]] = None, regression: bool = False,
                   base: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The ``config.json`` of an exported folder: ``base`` (the source folder's config, so
    keys this project does not model are kept), the config's values (``to_hf_dict``), the
    architecture and, for a classifier, ``id2label``/``label2id`` (``regression``: one output,
    ``problem_type`` ``"regression"``)."""
    out = dict(base or {})
    out.update(config.to_hf_dict())
    out["architectures"] = [architecture]
    if architecture == "BertForSequenceClassification":
        if regression:
            out.update(problem_type="regression", id2label={"0": "LABEL_0"},
                       label2id={"LABEL_0": 0})
        elif labels:
            out["id2label"] = {str(i): str(label) for i, label in enumerate(labels)}
            out["label2id"] = {str(label): i for i, label in enumerate(labels)}
    return out


def tokenizer_config_dict(do_lower_case: bool, model_max_length: int) -> Dict[str, Any]:
    """``tokenizer_config.json`` for ``transformers``' ``BertTokenizer``: the casing (which
    also strips accents, as the original ``BasicTokenizer``) and Google's special tokens."""
    return {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(do_lower_case),
            "do_basic_tokenize": True, "tokenize_chinese_chars": True, "strip_accents": None,
            "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "cls_token": "[CLS]", "mask_token": "[MASK]", "model_max_length": model_max_length}


def write_hf_folder(arrays: Mapping[str, np.ndarray], config: BertConfig, output_dir: str,
                    vocab_file: str, do_lower_case: bool, *,
                    labels: Optional[Sequence[str]] = None, regression: bool = False,
                    base_config: Optional[Mapping[str, Any]] = None) -> str:
    """Writes a Hugging Face BERT folder from TF1-named arrays; returns a one-line summary.

    ``output_dir`` gets ``model.safetensors`` (float32, torch layout: kernels [out, in]; the
    tied MLM decoder is not stored, as ``transformers`` saves it), ``config.json``
    (``hf_config_dict``), ``vocab.txt`` (a copy of ``vocab_file``) and
    ``tokenizer_config.json``; other files in the folder are left alone. The four files are
    staged and renamed in only when all are written. Raises ``CheckpointError`` for a tensor
    without an HF name or a vocab whose size differs from the config's.
    """
    from safetensors.numpy import save

    architecture = hf_architecture(arrays)
    prefix = "" if architecture == "BertModel" else "bert."
    tensors, unnamed = {}, []
    for name in sorted(arrays):
        mapped = tf1_to_hf_name(name, prefix)
        if mapped is None:
            unnamed.append(name)
            continue
        hf_name, transpose = mapped
        value = np.asarray(arrays[name], dtype=np.float32)
        tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    if unnamed:
        raise CheckpointError("%s: no Hugging Face name for %s" % (output_dir, ", ".join(unnamed)))
    if not files.isfile(vocab_file):
        raise CheckpointError("%s: no such vocab file" % vocab_file)
    with files.open(vocab_file, "rb") as f:
        vocab = f.read()  # copied byte for byte: load_vocab's lines are "\n"-separated
    vocab_tokens = vocab.count(b"\n") + (0 if vocab.endswith(b"\n") or not vocab else 1)
    if vocab_tokens > config.vocab_size:
        raise CheckpointError("%s: %d tokens, more than the model's vocab_size %d"
                              % (vocab_file, vocab_tokens, config.vocab_size))
    hf_config = hf_config_dict(config, architecture, labels, regression, base_config)
    contents = {
        WEIGHTS_NAME: save(tensors, metadata={"format": "pt"}),
        CONFIG_NAME: json.dumps(hf_config, indent=2, sort_keys=True) + "\n",
        VOCAB_NAME: vocab,
        TOKENIZER_CONFIG_NAME: json.dumps(tokenizer_config_dict(
            do_lower_case, config.max_position_embeddings), indent=2, sort_keys=True) + "\n",
    }
    files.makedirs(output_dir)
    names = sorted(contents)
    with atomic.atomic_paths([os.path.join(output_dir, n) for n in names]) as temps:
        for name, tmp in zip(names, temps):
            data = contents[name]
            with files.open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
                f.write(data)
    return "%s: %s, %d tensors, hidden_act %s, do_lower_case %s" % (
        output_dir, architecture, len(tensors), hf_config["hidden_act"], bool(do_lower_case))


def export_hf_model(model, config: BertConfig, output_dir: str, vocab_file: str,
                    do_lower_case: bool, *, labels: Optional[Sequence[str]] = None,
                    regression: bool = False) -> str:
    """``write_hf_folder`` of a Keras model's variables (encoder, pre-training or fine-tuning
    heads, under their TF1 names): the fine-tuning tools' ``--export_hf_dir``."""
    from modeling.checkpoints.tf1 import model_tf1_arrays

    return write_hf_folder(model_tf1_arrays(model), config, output_dir, vocab_file,
                           do_lower_case, labels=labels, regression=regression)
