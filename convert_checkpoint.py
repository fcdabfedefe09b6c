"""Convert BERT checkpoints: Hugging Face -> TF1 (Google names), TF1/HF/Keras -> Keras or TF1.

Examples::

    # HF folder (model.safetensors + config.json) -> Google-format TF1 checkpoint + bert_config.json
    python convert_checkpoint.py --input=../shared/data/minilm --output=/tmp/minilm/bert_model.ckpt

    # TF1 checkpoint -> .keras model file (pre-training model if the checkpoint has cls/ heads)
    python convert_checkpoint.py --input=/tmp/minilm/bert_model.ckpt \
        --bert_config_file=/tmp/minilm/bert_config.json --output=/tmp/minilm/bert.keras

``--output`` ending in ``.keras`` writes a Keras model file; anything else is a TF1 checkpoint
prefix. HF -> TF1 copies exactly the tensors in the file (no heads are invented). Errors are one
line on stderr and exit code 1.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the CLI flags (only when run as a script, so importing the module for its
    functions never collides with other entry points' flags)."""
    flags.DEFINE_string("input", None, "TF1 checkpoint prefix/folder, HF folder or .safetensors "
                        "file, or a .keras / .weights.h5 file of this project.")
    flags.DEFINE_string("output", None, "Output: a .keras file, or a TF1 checkpoint prefix.")
    flags.DEFINE_string("bert_config_file", None, "Google bert_config.json (or HF config.json); "
                        "default for HF input: its config.json.")
    flags.DEFINE_enum("model", "auto", ["auto", "bert", "pretraining"],
                      "Keras model to build: encoder only, with pre-training heads, or auto "
                      "(pre-training when the source has cls/predictions weights).")
    flags.DEFINE_string("hidden_act", None, "Override hidden_act of the written config (e.g. 'gelu' "
                        "= tanh GELU as the original computes, 'gelu_exact' = erf).")


def _config_for(input_path: str, config_file: str | None, hidden_act: str | None):
    from modeling.checkpoints import hf as hf_import
    from modeling.config import BertConfig

    if config_file:
        config = BertConfig.from_json_file(config_file)
    elif hf_import.is_hf_checkpoint(input_path):
        config = hf_import.read_hf_config(input_path)
    else:
        raise ValueError("--bert_config_file is required for input %s" % input_path)
    return config.replace(hidden_act=hidden_act) if hidden_act else config


def convert(input_path: str, output: str, config_file: str | None = None,
            model_kind: str = "auto", hidden_act: str | None = None) -> str:
    """Runs one conversion; returns a one-line summary. Raises ValueError subclasses on bad input."""
    from modeling import checkpoints
    from modeling.checkpoints import hf as hf_import

    if not os.path.exists(input_path) and not os.path.exists(input_path + ".index"):
        raise checkpoints.CheckpointError("%s: no such file, folder or checkpoint" % input_path)
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise checkpoints.CheckpointError("%s: output folder %s does not exist" % (output, out_dir))
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
    from modeling import checkpoints
    from modeling.checkpoints import hf as hf_import
    from modeling.encoder import BertModel
    from modeling.heads.pretraining import BertPretrainingModel

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
    from bert_common.files import atomic_open

    with atomic_open(path) as f:
        f.write(config.to_json_string())


def _atomic_keras_save(model, output: str) -> None:
    folder, base = os.path.split(os.path.abspath(output))
    tmp = os.path.join(folder, ".%s.tmp%d.keras" % (base[:-len(".keras")], os.getpid()))
    try:
        model.save(tmp)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv):
    del argv
    for name in ("input", "output"):
        if not getattr(FLAGS, name):
            print("convert_checkpoint.py: --%s is required" % name, file=sys.stderr)
            sys.exit(1)
    try:
        summary = convert(FLAGS.input, FLAGS.output, FLAGS.bert_config_file, FLAGS.model,
                          FLAGS.hidden_act)
    except (ValueError, OSError) as e:
        print("convert_checkpoint.py: error: %s" % e, file=sys.stderr)
        sys.exit(1)
    print(summary, file=sys.stderr)


if __name__ == "__main__":
    define_flags()
    app.run(main)
