"""The Hugging Face export: a BERT folder that ``transformers`` loads, under Google's TF1 names.

``write_hf_folder`` writes ``model.safetensors``, ``config.json``, ``vocab.txt`` and
``tokenizer_config.json`` that ``transformers`` loads as ``BertModel``, ``BertForPreTraining``,
``BertForSequenceClassification`` or ``BertForQuestionAnswering`` (``hf_architecture`` tells
which from the TF1 names present); ``export_hf_model`` writes a Keras model's variables (the
fine-tuning tools' ``--export_hf_dir``). The writer's names come from ``tf1_to_hf_name``, which
is checked against the reader's map (``modeling.checkpoints.hf.hf_to_tf1_name``), so the two
directions cannot drift apart. Reading such a folder is checkpoint loading
(``modeling.checkpoints.hf``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from bert_common import atomic, files
from modeling.checkpoints.hf import (CONFIG_NAME, TOKENIZER_CONFIG_NAME, VOCAB_NAME, WEIGHTS_NAME,
                                     hf_to_tf1_name)
from modeling.checkpoints.tf1 import CheckpointError
from modeling.config import BertConfig

# Which transformers class a set of TF1 names is: the first whose head tensor is present.
_ARCHITECTURES = (("cls/predictions/output_bias", "BertForPreTraining"),
                  ("output_weights", "BertForSequenceClassification"),
                  ("cls/squad/output_weights", "BertForQuestionAnswering"))
_EXPORT_HEADS = {"output_": "classifier.", "cls/squad/output_": "qa_outputs.",
                 "cls/seq_relationship/output_": "cls.seq_relationship."}


def hf_architecture(tf1_names) -> str:
    """``"BertForPreTraining"`` (MLM + NSP heads), ``"BertForSequenceClassification"``
    (run_classifier's ``output_weights``), ``"BertForQuestionAnswering"`` (``cls/squad``) or
    ``"BertModel"`` (encoder and pooler only).

    Args:
        tf1_names: the TF1 variable names of the model (an iterable).

    Returns:
        The HF architecture name.
    """
    names = set(tf1_names)
    for head, architecture in _ARCHITECTURES:
        if head in names:
            return architecture
    return "BertModel"


def tf1_to_hf_name(tf1_name: str, prefix: str = "") -> Optional[Tuple[str, bool]]:
    """TF1 name -> (HF tensor name, transpose) or None; ``prefix`` (``"bert."`` for the task
    classes, ``""`` for ``BertModel``) goes before the encoder's names. The inverse of
    ``hf_to_tf1_name``, and checked against it.

    Args:
        tf1_name: a TF1 variable name.
        prefix: the HF prefix of the encoder's names.

    Returns:
        ``(hf_name, transpose)``, or None.
    """
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
    ``problem_type`` ``"regression"``).

    Args:
        config: the model's ``BertConfig``.
        architecture: the HF architecture (``hf_architecture``).
        labels: a classifier's label names, or None.
        regression: a regression classifier.
        base: the source folder's ``config.json``, or None.

    Returns:
        The ``config.json`` dict.
    """
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
    also strips accents, as the original ``BasicTokenizer``) and Google's special tokens.

    Args:
        do_lower_case: the tokenizer's casing.
        model_max_length: the longest input (``max_position_embeddings``).

    Returns:
        The ``tokenizer_config.json`` dict.
    """
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

    Args:
        arrays: TF1 variable name -> array.
        config: the model's ``BertConfig``.
        output_dir: the HF folder (created if missing).
        vocab_file: the vocab copied in as ``vocab.txt``.
        do_lower_case: the tokenizer's casing.
        labels: a classifier's label names, or None.
        regression: a regression classifier.
        base_config: the source's ``config.json`` to keep keys of, or None.

    Returns:
        A one-line summary.

    Raises:
        CheckpointError: a tensor without an HF name, or a vocab of the wrong size.
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
    heads, under their TF1 names): the fine-tuning tools' ``--export_hf_dir``.

    Args:
        model: a Keras model of this project (encoder, pre-training or a task model).
        config: its ``BertConfig``.
        output_dir: the HF folder.
        vocab_file: the vocab copied in.
        do_lower_case: the tokenizer's casing.
        labels: a classifier's label names, or None.
        regression: a regression classifier.

    Returns:
        A one-line summary.

    Raises:
        CheckpointError: as ``write_hf_folder``.
    """
    from modeling.checkpoints.tf1 import model_tf1_arrays

    return write_hf_folder(model_tf1_arrays(model), config, output_dir, vocab_file,
                           do_lower_case, labels=labels, regression=regression)
