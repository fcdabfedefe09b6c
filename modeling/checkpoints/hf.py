"""Hugging Face BERT folders in, under Google's TF1 names.

``read_hf_weights`` / ``read_hf_config`` (``model.safetensors`` + ``config.json``),
``read_hf_casing`` (``tokenizer_config.json``). Writing such a folder (``write_hf_folder``,
``export_hf_model``) is an export: ``bert_tasks.exports.hf``, whose names (``tf1_to_hf_name``)
are checked against ``hf_to_tf1_name`` below, so the two directions cannot drift apart.

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
from typing import Dict, List, Optional, Tuple

import numpy as np

from bert_common import files
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
    """Arrays in TF1 names and layout, the HF tensors that were not mapped, and the file.

    Attributes:
        source: the file the arrays were read from.
        arrays: TF1 variable name -> float32 array, in TF1 layout.
        unmapped: the HF tensor names that have no TF1 variable.
    """

    source: str
    arrays: Dict[str, np.ndarray]
    unmapped: List[str]


def hf_to_tf1_name(hf_name: str) -> Optional[Tuple[str, bool]]:
    """HF tensor name -> (TF1 name, transpose) or None if not mapped.

    Args:
        hf_name: a HF tensor name (``bert.`` prefix optional).

    Returns:
        ``(tf1_name, transpose)``, or None.
    """
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
    """True for a ``.safetensors`` file or a folder holding ``model.safetensors``.

    Args:
        path: a file or folder path (local or ``gs://``).

    Returns:
        A bool.
    """
    return path.endswith(".safetensors") or (
        files.isdir(path) and files.isfile(os.path.join(path, WEIGHTS_NAME)))


def _weights_file(path: str) -> str:
    weights = os.path.join(path, WEIGHTS_NAME) if files.isdir(path) else path
    if not files.isfile(weights):
        raise CheckpointError("%s: no such safetensors file" % weights)
    return weights


def read_hf_weights(path: str) -> HFWeights:
    """Reads a HF folder or ``.safetensors`` file into TF1-named float32 arrays.

    Args:
        path: a HF folder or ``.safetensors`` file.

    Returns:
        An ``HFWeights``.

    Raises:
        CheckpointError: the file is missing or cannot be read.
    """
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
    """``config.json`` of a HF folder (or the folder of a ``.safetensors`` file).

    Args:
        path: a HF folder, ``.safetensors`` file or ``config.json``.

    Returns:
        The ``BertConfig``.
    """
    folder = path if files.isdir(path) else os.path.dirname(files.abspath(path))
    config_file = os.path.join(folder, CONFIG_NAME) if not path.endswith(".json") else path
    return BertConfig.from_json_file(config_file)


def read_hf_casing(path: str) -> Optional[bool]:
    """``do_lower_case`` of the folder's ``tokenizer_config.json``; None without one (or key).

    Args:
        path: a HF folder or ``.safetensors`` file.

    Returns:
        ``do_lower_case`` (a bool), or None.

    Raises:
        CheckpointError: ``tokenizer_config.json`` cannot be read.
    """
    folder = path if files.isdir(path) else os.path.dirname(files.abspath(path))
    config_file = os.path.join(folder, TOKENIZER_CONFIG_NAME)
    if not files.isfile(config_file):
        return None
    try:
        value = json.loads(files.read_text(config_file)).get("do_lower_case")
    except (ValueError, AttributeError, OSError, UnicodeDecodeError) as e:
        raise CheckpointError("%s: cannot read tokenizer config (%s)" % (config_file, e)) from None
    return value if isinstance(value, bool) else None
