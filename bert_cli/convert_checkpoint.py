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

import sys

from absl import flags

from bert_cli import flags as cli_flags
from bert_cli import runner

FLAGS = flags.FLAGS
TOOL = "convert_checkpoint.py"


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """``--input``, ``--output``, ``--bert_config_file``, ``--model``, ``--hidden_act``."""
    define = cli_flags.definer(flag_values)

    define("string", "input", None, "TF1 checkpoint prefix/folder, HF folder or .safetensors "
           "file, or a .keras / .weights.h5 file of this project.")
    define("string", "output", None, "Output: a .keras file, or a TF1 checkpoint prefix.")
    define("string", "bert_config_file", None, "Google bert_config.json (or HF config.json); "
           "default for HF input: its config.json.")
    define("enum", "model", "auto", "Keras model to build: encoder only, with pre-training "
           "heads, or auto (pre-training when the source has cls/predictions weights).",
           enum_values=["auto", "bert", "pretraining"])
    define("string", "hidden_act", None, "Override hidden_act of the written config (e.g. 'gelu' "
           "= tanh GELU as the original computes, 'gelu_exact' = erf).")


def run(fv: flags.FlagValues) -> str:
    """Converts ``--input`` to ``--output``; prints and returns the summary."""
    from modeling.checkpoints.convert import convert

    cli_flags.require(fv, ("input", "output"))
    summary = convert(fv.input, fv.output, fv.bert_config_file, fv.model, fv.hidden_act)
    print(summary, file=sys.stderr)
    return summary


def main(argv) -> None:
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python convert_checkpoint.py`` / the ``bert-convert-checkpoint`` command."""
    runner.start(define_flags, main)
