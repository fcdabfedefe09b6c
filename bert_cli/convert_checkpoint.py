"""Convert BERT checkpoints between Google TF1, Hugging Face, Keras and TF Hub-style SavedModels.

Examples::

    # HF folder (model.safetensors + config.json) -> a Google release folder (TF1 checkpoint,
    # bert_config.json, vocab.txt)
    python convert_checkpoint.py --input=../shared/data/minilm --output=/tmp/minilm/bert_model.ckpt

    # any checkpoint -> a Hugging Face folder transformers loads (a fine-tuned classifier with
    # its label names: --task_name or --labels)
    python convert_checkpoint.py --output_format=hf --input=/tmp/minilm/bert_model.ckpt \
        --bert_config_file=/tmp/minilm/bert_config.json --output=/tmp/minilm_hf
    python convert_checkpoint.py --output_format=hf --input=mrpc_out/model.ckpt-343 \
        --bert_config_file=bert_config.json --vocab_file=vocab.txt --task_name=mrpc \
        --output=mrpc_hf

    # TF Hub-style encoder + preprocessor SavedModels (<output>/encoder, <output>/preprocessor)
    python convert_checkpoint.py --output_format=tfhub --input=/tmp/minilm/bert_model.ckpt \
        --output=/tmp/minilm_hub

    # TF1 checkpoint -> .keras model file
    python convert_checkpoint.py --input=/tmp/minilm/bert_model.ckpt \
        --bert_config_file=/tmp/minilm/bert_config.json --output=/tmp/minilm/bert.keras

``--output_format=auto`` writes a Keras model file for an ``--output`` ending in ``.keras``,
else a TF1 checkpoint prefix. A TF1 ``--output`` ending in another file extension (``out.h5``,
``.json``, ``.safetensors``, ``.pt``, ``.bin`` ...) is refused (it would be written as
``out.h5.index``), and so is one beside a ``bert_config.json`` or ``vocab.txt`` of another model
(never overwritten; an identical one stays). Errors are one line on stderr and exit code 1,
before anything is written.
"""

from __future__ import annotations

import sys

from absl import flags

from bert_cli import flags as cli_flags
from bert_cli import runner

FLAGS = flags.FLAGS
TOOL = "convert_checkpoint.py"


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """``--input``, ``--output``, ``--output_format``, ``--bert_config_file``, ``--model``,
    ``--hidden_act``, ``--vocab_file``, ``--do_lower_case``, ``--task_name``, ``--labels``,
    ``--seq_length``.

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define = cli_flags.definer(flag_values)

    define("string", "input", None, "TF1 checkpoint prefix/folder, HF folder or .safetensors "
           "file, a checkpoint of this project's trainer, or a .keras / .weights.h5 file.")
    define("string", "output", None, "Output: a TF1 checkpoint prefix (no file extension: "
           "e.g. out/bert_model.ckpt), a .keras file, or a folder (hf, tfhub).")
    define("enum", "output_format", "auto", "tf1, keras, hf (a Hugging Face BERT folder), "
           "tfhub (TF Hub-style encoder and preprocessor SavedModels), or auto (keras for "
           "an --output ending in .keras, else tf1).",
           enum_values=["auto", "tf1", "keras", "hf", "tfhub"])
    define("string", "bert_config_file", None, "Google bert_config.json (or HF config.json); "
           "default for HF input: its config.json.")
    define("enum", "model", "auto", "Model the weights are read into: encoder only, with "
           "pre-training heads, a fine-tuned classifier or SQuAD model, or auto (told by the "
           "head tensors of the source; a trainer checkpoint: pretraining, or classifier when "
           "labels are given).",
           enum_values=["auto", "bert", "pretraining", "classifier", "squad"])
    define("string", "hidden_act", None, "Override hidden_act of the written config (e.g. 'gelu' "
           "= tanh GELU as the original computes, 'gelu_exact' = erf).")
    define("string", "vocab_file", None, "Vocab for hf/tfhub outputs (and copied beside a tf1 "
           "output); default: vocab.txt in the input's folder.")
    define("bool", "do_lower_case", None, "Casing for hf/tfhub outputs; default: the input "
           "folder's tokenizer_config.json or Google release name, else True.")
    define("string", "task_name", None, "A run_classifier task (mrpc, mnli, ...): its labels "
           "name a classifier's outputs (HF id2label).")
    define("list", "labels", None, "Label names of a classifier, in output order (instead of "
           "--task_name).")
    define("integer", "seq_length", 128, "tfhub: the preprocessor's default sequence length.")
    define("bool", "hub_keep_empty_segments", False,
           "tfhub: the preprocessor packs exactly as TF Hub's bert_pack_inputs, an empty "
           "segment too ([CLS] a [SEP] [SEP]); default: as run_classifier ([CLS] a [SEP]).")


def _labels(fv: flags.FlagValues):
    """(labels, regression) from --labels or --task_name."""
    if fv.labels and fv.task_name:
        raise cli_flags.FlagError("give --labels or --task_name, not both")
    if fv.task_name:
        from data.glue import processors

        processor = processors.get_processor(fv.task_name)
        return processor.get_labels(), processor.is_regression
    return (list(fv.labels) if fv.labels else None), False


def run(fv: flags.FlagValues) -> str:
    """Converts ``--input`` to ``--output``; prints and returns the summary.

    Args:
        fv: the parsed flag values.

    Returns:
        The one-line summary.

    Raises:
        FlagError: a missing or bad flag.
    """
    from bert_tasks.pretrained import resolve_casing

    cli_flags.require(fv, ("input", "output"))
    labels, regression = _labels(fv)
    do_lower_case = resolve_casing(fv.input, fv.do_lower_case)
    if fv.output_format == "tfhub":
        from bert_tasks.exports.hub import export_hub

        wrong = ((["--model=%s" % fv.model] if fv.model not in ("auto", "bert") else [])
                 + (["--labels"] if fv.labels else [])
                 + (["--task_name"] if fv.task_name else []))
        if wrong:
            raise cli_flags.FlagError("--output_format=tfhub exports the encoder: %s does not "
                                      "apply" % ", ".join(wrong))
        summary = export_hub(fv.input, fv.output, fv.bert_config_file, fv.vocab_file,
                             do_lower_case, fv.seq_length, hidden_act=fv.hidden_act,
                             keep_empty_segments=fv.hub_keep_empty_segments)
    else:
        from bert_tasks.exports.convert import convert

        summary = convert(fv.input, fv.output, fv.bert_config_file, fv.model, fv.hidden_act,
                          output_format=fv.output_format, vocab_file=fv.vocab_file,
                          do_lower_case=do_lower_case, labels=labels, regression=regression)
    print(summary, file=sys.stderr)
    return summary


# absl's main(argv), and the console command / ``python convert_checkpoint.py``
main, entry = runner.entry_points(TOOL, define_flags, run)
