"""Checkpoint conversion: any format in; a Google TF1 checkpoint, a ``.keras`` file or a Hugging
Face folder out.

``convert(input_path, output, ...)`` is the ``convert_checkpoint.py`` tool's one call. The output
format is ``output_format``: ``"tf1"`` (a checkpoint prefix, ``bert_config.json`` and, when the
input has one, ``vocab.txt`` beside it: a Google release folder), ``"keras"`` (a model file,
written atomically), ``"hf"`` (a folder: ``bert_tasks.exports.hf.write_hf_folder``) or
``"auto"`` (``.keras`` for an output ending so, else TF1). A tf1 output name ending in a file
extension (``out.h5``, ``out.json``, ``.safetensors``, ``.pt``, ``.bin`` ...) is refused: it would
be written as ``out.h5.index``; a ``bert_config.json`` or ``vocab.txt`` of another model already
beside a tf1 output is never overwritten (refused before anything is written; an identical one
stays).

HF -> TF1 and HF -> HF copy exactly the tensors of the file (no heads are invented; HF -> HF
keeps the source ``config.json``'s other keys). Every other conversion goes through a Keras
model, which checks every tensor's presence and shape: ``model_kind`` ``"bert"``
(``BertModel``), ``"pretraining"`` (``BertPretrainingModel``), ``"classifier"``
(``BertClassifier``: ``labels`` or ``regression`` give its outputs, else a TF1
``output_weights``' rows) or ``"squad"`` (``BertSpanLabeler``); ``"auto"`` picks from the
head tensors the source holds (a trainer checkpoint holds no names: pre-training, or the
classifier when ``labels`` are given).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

from bert_common.errors import InputError
from bert_common import atomic, files
from bert_tasks.exports import hf as hf_export
from modeling import checkpoints
from modeling.checkpoints import hf as hf_import
from modeling.checkpoints.folders import (CONFIG_NAME, check_input, config_for,
                                          default_vocab_file, input_folder)
from modeling.config import BertConfig
from modeling.encoder import BertModel
from modeling.heads.classifier import build_classifier_model
from modeling.heads.pretraining import BertPretrainingModel
from modeling.heads.squad import build_squad_model

OUTPUT_FORMATS = ("auto", "tf1", "keras", "hf")
MODEL_KINDS = ("auto", "bert", "pretraining", "classifier", "squad")


def convert(input_path: str, output: str, config_file: Optional[str] = None,
            model_kind: str = "auto", hidden_act: Optional[str] = None, *,
            output_format: str = "auto", vocab_file: Optional[str] = None,
            do_lower_case: bool = True, labels: Optional[Sequence[str]] = None,
            regression: bool = False) -> str:
    """Runs one conversion; returns a one-line summary. Raises ``InputError`` subclasses
    (``CheckpointError``, ``ConfigError``) on bad input, before anything is written.

    ``vocab_file`` (default: the input folder's ``vocab.txt``) and ``do_lower_case`` go into
    an HF folder; ``labels`` / ``regression`` name a classifier's outputs.

    Args:
        input_path: the source: a TF1 checkpoint, a trainer checkpoint, a ``.keras`` or
            ``.weights.h5`` file, or HF weights.
        output: the output path (a TF1 prefix, a ``.keras`` file or an HF folder).
        config_file: the model's config; None: found beside the input (``config_for``).
        model_kind: one of ``MODEL_KINDS`` (``auto``: from the source's head tensors).
        hidden_act: overrides the config's ``hidden_act``.
        output_format: one of ``OUTPUT_FORMATS`` (``auto``: by ``output``'s name).
        vocab_file: the vocab for an HF folder (or copied beside a TF1 output).
        do_lower_case: the casing written to an HF folder.
        labels: a classifier's label names.
        regression: a regression classifier.

    Returns:
        A one-line summary.

    Raises:
        ValueError: an unknown ``output_format`` or ``model_kind``.
        CheckpointError: bad input or output (nothing written).
    """
    if output_format not in OUTPUT_FORMATS or model_kind not in MODEL_KINDS:
        raise ValueError("output_format %r / model_kind %r" % (output_format, model_kind))
    if output_format == "auto":
        output_format = "keras" if output.endswith(".keras") else "tf1"
    check_output_name(output, output_format)
    check_input(input_path)
    try:
        atomic.check_output_folder(output)  # an HF output folder itself is made if missing
    except OSError as e:
        raise checkpoints.CheckpointError("%s: %s" % (output, e)) from None
    config = config_for(input_path, config_file, hidden_act)
    vocab_file = vocab_file or default_vocab_file(input_path)
    if output_format == "hf" and not vocab_file:
        raise checkpoints.CheckpointError("%s: no vocab.txt beside the checkpoint: a Hugging "
                                         "Face folder needs one (--vocab_file)" % input_path)
    if output_format == "tf1":  # never overwrite another model's files beside the output
        check_google_folder_files(config, vocab_file, os.path.dirname(files.abspath(output)))

    copy_tensors = hf_import.is_hf_checkpoint(input_path) and model_kind == "auto"
    if copy_tensors and output_format in ("tf1", "hf"):
        weights = hf_import.read_hf_weights(input_path)
        arrays, source = weights.arrays, weights.source
        detail = "%d tensors (not mapped: %s)" % (len(arrays), ", ".join(weights.unmapped) or "none")
        base_config = _read_json(os.path.join(input_folder(input_path), hf_import.CONFIG_NAME))
    else:
        model = _build_model(config, input_path, model_kind, labels, regression)
        try:
            report = checkpoints.load_checkpoint(model, input_path, log=False)
        except checkpoints.CheckpointError:
            if model_kind == "auto" and checkpoints.is_training_checkpoint(input_path):
                raise checkpoints.CheckpointError(
                    "%s: not a pre-training checkpoint; for a fine-tuned one pass --model="
                    "classifier with --task_name or --labels (or --model=squad)"
                    % input_path) from None
            raise
        if report.missing:
            raise checkpoints.CheckpointError(
                "%s: the checkpoint lacks %d variables of the %s model (%s ...); use --model=bert"
                % (input_path, len(report.missing), model.name, report.missing[0]))
        if output_format == "keras":
            _atomic_keras_save(model, output)
            return "%s -> %s: %d variables" % (report.source, output, len(report.loaded))
        arrays, source = checkpoints.model_tf1_arrays(model), report.source
        detail = "%d variables" % len(report.loaded)
        base_config = None

    if output_format == "hf":
        summary = hf_export.write_hf_folder(arrays, config, output, vocab_file, do_lower_case,
                                            labels=labels, regression=regression,
                                            base_config=base_config)
        return "%s -> %s (%s)" % (source, summary, detail)
    checkpoints.write_tf1_arrays(arrays, output)
    _write_google_folder_files(config, vocab_file, os.path.dirname(files.abspath(output)))
    return "%s -> %s: %s" % (source, output, detail)


def _read_json(path: str) -> Optional[dict]:
    import json

    try:
        value = json.loads(files.read_text(path))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _source_names(input_path: str):
    """The TF1 names (with shapes or arrays) the input holds; None when it holds no names (a
    trainer checkpoint or ``.weights.h5``: object paths only)."""
    from modeling.checkpoints.load import keras_file_source

    if hf_import.is_hf_checkpoint(input_path):
        return hf_import.read_hf_weights(input_path).arrays
    if input_path.endswith(".keras"):
        return keras_file_source(input_path).shapes
    if input_path.endswith(".h5") or checkpoints.is_training_checkpoint(input_path):
        return None
    return checkpoints.tf1_checkpoint_source(input_path).shapes


def _build_model(config: BertConfig, input_path: str, model_kind: str,
                 labels: Optional[Sequence[str]], regression: bool):
    names = _source_names(input_path) if model_kind == "auto" else None
    if model_kind == "auto":
        if names is None:  # a trainer checkpoint or a .keras file: no TF1 names to look at
            model_kind = "classifier" if (labels or regression) else "pretraining"
        else:
            architecture = hf_export.hf_architecture(names)
            model_kind = {"BertForPreTraining": "pretraining",
                          "BertForSequenceClassification": "classifier",
                          "BertForQuestionAnswering": "squad"}.get(architecture, "bert")
    if model_kind == "pretraining":
        return BertPretrainingModel(config)
    if model_kind == "squad":
        return build_squad_model(config)
    if model_kind == "classifier":
        if regression:
            num_labels = 1
        elif labels:
            num_labels = len(labels)
        else:
            names = names if names is not None else _source_names(input_path)
            if not names or "output_weights" not in names:
                raise checkpoints.CheckpointError(
                    "%s: the number of classes is not in the checkpoint: give the labels "
                    "(--task_name or --labels)" % input_path)
            shape = getattr(names["output_weights"], "shape", names["output_weights"])
            num_labels = int(shape[0])
        return build_classifier_model(config, num_labels, regression=regression)
    return BertModel(config)


# Endings of files that are not a TF1 checkpoint prefix (a prefix names the .index and
# .data-* files written beside it): refused as a tf1 --output, which would write
# "out.h5.index". Only .keras is a file output.
FILE_EXTENSIONS = (".h5", ".hdf5", ".json", ".safetensors", ".pt", ".pth", ".bin", ".pb",
                   ".pbtxt", ".onnx", ".npz", ".npy", ".pkl", ".pickle", ".msgpack", ".txt",
                   ".tflite", ".zip", ".tar", ".gz", ".index", ".keras")
_OUTPUTS = ("a TF1 checkpoint prefix (e.g. out/bert_model.ckpt: --output_format=tf1), a .keras "
            "file (--output_format=keras) or a folder (--output_format=hf or tfhub)")


def check_output_name(output: str, output_format: str) -> None:
    """``CheckpointError`` for an output name the format cannot write: a tf1 prefix ending in a
    file extension (``out.h5`` would become ``out.h5.index``), a keras output not ending in
    ``.keras``.

    Args:
        output: the output path.
        output_format: ``"tf1"``, ``"keras"`` or ``"hf"``.

    Raises:
        CheckpointError: a name the format cannot write.
    """
    name = os.path.basename(output.rstrip("/"))
    ending = os.path.splitext(name)[1].lower()
    if output_format == "tf1" and (ending in FILE_EXTENSIONS or ".data-" in name):
        raise checkpoints.CheckpointError(
            "%s: a %s file is not an output of this tool; it writes %s"
            % (output, ending or name, _OUTPUTS))
    if output_format == "keras" and not name.endswith(".keras"):
        raise checkpoints.CheckpointError("%s: a Keras model file must end in .keras; the "
                                         "outputs are %s" % (output, _OUTPUTS))


def _same_config(path: str, config: BertConfig) -> bool:
    try:
        return BertConfig.from_json_file(path) == config  # layer_norm_eps included
    except InputError:
        return False


def _same_bytes(path: str, other: str) -> bool:
    try:
        with files.open(path, "rb") as a, files.open(other, "rb") as b:
            return a.read() == b.read()
    except OSError:
        return False


def check_google_folder_files(config: BertConfig, vocab_file: Optional[str],
                              folder: str) -> None:
    """``CheckpointError`` (before anything is written) when ``folder`` already holds a
    ``bert_config.json`` of another model, or a ``vocab.txt`` other than ``vocab_file``: a TF1
    output never overwrites them (an identical one stays as it is).

    Args:
        config: the model's ``BertConfig``.
        vocab_file: the vocab to copy beside the output, or None.
        folder: the TF1 output's folder.

    Raises:
        CheckpointError: a conflicting ``bert_config.json`` or ``vocab.txt`` is there.
    """
    existing = os.path.join(folder, CONFIG_NAME)
    if files.exists(existing) and not _same_config(existing, config):
        raise checkpoints.CheckpointError(
            "%s exists and differs from the config being written beside the checkpoint: not "
            "overwritten; write to another folder (or remove it)" % existing)
    target = os.path.join(folder, hf_import.VOCAB_NAME)
    if vocab_file and files.exists(target) and not _same_bytes(target, vocab_file):
        raise checkpoints.CheckpointError(
            "%s exists and differs from %s (the vocab of the checkpoint being written): not "
            "overwritten; write to another folder (or remove it)" % (target, vocab_file))


def _write_google_folder_files(config: BertConfig, vocab_file: Optional[str], folder: str) -> None:
    """``bert_config.json`` and the vocab beside a TF1 checkpoint, as in Google's release
    folders; an identical one already there is left as it is, a different one is refused
    (``check_google_folder_files``, called before the checkpoint is written)."""
    check_google_folder_files(config, vocab_file, folder)
    config_path = os.path.join(folder, CONFIG_NAME)
    if not files.exists(config_path):
        with atomic.atomic_open(config_path) as f:
            f.write(config.to_json_string())
    target = os.path.join(folder, hf_import.VOCAB_NAME)
    if vocab_file and not files.exists(target):
        with files.open(vocab_file, "rb") as src, atomic.atomic_open(target, "wb") as dst:
            dst.write(src.read())


def _atomic_keras_save(model, output: str) -> None:
    # The temporary path keeps the ".keras" name that model.save requires.
    with atomic.atomic_path(output) as tmp:
        model.save(tmp)
