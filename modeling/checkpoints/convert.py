"""Checkpoint conversion: Hugging Face -> TF1 (Google names), TF1/HF/Keras -> Keras or TF1.

``convert(input_path, output, config_file=None, model_kind="auto", hidden_act=None)`` is the
``convert_checkpoint.py`` tool's one call: ``output`` ending in ``.keras`` writes a Keras model
file (atomically), anything else a TF1 checkpoint prefix plus ``bert_config.json`` beside it.
HF -> TF1 copies exactly the tensors of the file (no heads are invented); other inputs go
through a Keras model (``BertModel``, or ``BertPretrainingModel`` when the source has
``cls/predictions`` weights or ``model_kind="pretraining"``).
"""

from __future__ import annotations

import os

from bert_common.files import atomic_open, atomic_path
from bert_common import files
from modeling import checkpoints
from modeling.checkpoints import hf as hf_import
from modeling.config import BertConfig
from modeling.encoder import BertModel
from modeling.heads.pretraining import BertPretrainingModel


def _config_for(input_path: str, config_file: str | None, hidden_act: str | None):
    if config_file:
        config = BertConfig.from_json_file(config_file)
    elif hf_import.is_hf_checkpoint(input_path):
        config = hf_import.read_hf_config(input_path)
    else:
        raise checkpoints.CheckpointError("%s: not a Hugging Face folder: a bert_config.json "
                                         "is needed (--bert_config_file)" % input_path)
    return config.replace(hidden_act=hidden_act) if hidden_act else config


def convert(input_path: str, output: str, config_file: str | None = None,
            model_kind: str = "auto", hidden_act: str | None = None) -> str:
    """Runs one conversion; returns a one-line summary. Raises ``InputError`` subclasses on bad input."""
    if not files.exists(input_path) and not files.exists(input_path + ".index"):
        raise checkpoints.CheckpointError("%s: no such file, folder or checkpoint" % input_path)
    out_dir = os.path.dirname(files.abspath(output))
    try:
        files.check_output_folder(output)
    except OSError as e:
        raise checkpoints.CheckpointError("%s: %s" % (output, e)) from None
    config = _config_for(input_path, config_file, hidden_act)
    config_out = os.path.join(out_dir, "bert_config.json")

    if not output.endswith(".keras") and hf_import.is_hf_checkpoint(input_path):
        weights = hf_import.read_hf_weights(input_path)
        checkpoints.write_tf1_arrays(weights.arrays, output)
        _write_config(config, config_out)
        return "%s -> %s: %d tensors (not mapped: %s)" % (
            weights.source, output, len(weights.arrays), ", ".join(weights.unmapped) or "none")

    model = _build_model(config, input_path, model_kind)
    report = checkpoints.load_checkpoint(model, input_path, log=False)
    if report.missing:
        raise checkpoints.CheckpointError(
            "%s: the checkpoint lacks %d variables of the %s model (%s ...); use --model=bert"
            % (input_path, len(report.missing), model_kind, report.missing[0]))
    if output.endswith(".keras"):
        _atomic_keras_save(model, output)
    else:
        checkpoints.save_tf1_checkpoint(model, output)
        _write_config(config, config_out)
    return "%s -> %s: %d variables" % (report.source, output, len(report.loaded))


def _build_model(config, input_path: str, model_kind: str):
    if model_kind == "auto":
        if hf_import.is_hf_checkpoint(input_path):
            names = hf_import.read_hf_weights(input_path).arrays
        elif input_path.endswith((".keras", ".h5")):
            names = {"cls/predictions/output_bias": None}
        else:
            names = checkpoints.tf1_checkpoint_source(input_path).shapes
        model_kind = "pretraining" if "cls/predictions/output_bias" in names else "bert"
    return BertPretrainingModel(config) if model_kind == "pretraining" else BertModel(config)


def _write_config(config, path: str) -> None:
    with atomic_open(path) as f:
        f.write(config.to_json_string())


def _atomic_keras_save(model, output: str) -> None:
    # The temporary path keeps the ".keras" name that model.save requires.
    with atomic_path(output) as tmp:
        model.save(tmp)
