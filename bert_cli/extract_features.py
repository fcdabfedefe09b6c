"""Extract fixed contextual features from BERT (the paper's feature-based approach).

Same flags and JSONL output as the original ``extract_features.py``: one JSON object per input
line, ``{"linex_index": i, "features": [{"token": t, "layers": [{"index": l, "values": [...]},
...]}, ...]}`` for every real token (``[CLS]`` ... ``[SEP]``), values rounded to 6 decimals.
``--layers`` are encoder-layer indexes (-1 = the last layer). ``--init_checkpoint`` takes a TF1
prefix, a Hugging Face folder/.safetensors, or a .keras file. Progress goes to stderr; the output
file appears only when complete. Before any work: an ``--output_file`` that is a directory or
in a missing folder, an ``--input_file`` without text (empty, or blank lines only) and a vocab
without ``[CLS]``/``[SEP]`` are one error line naming the flag or file (exit status 1).

The job is ``bert_tasks.features.extract``; this module holds its flags.
"""

from __future__ import annotations

from absl import flags

from bert_cli import flags as cli_flags
from bert_cli import runner
from bert_common import checks

FLAGS = flags.FLAGS
TOOL = "extract_features.py"


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus ``--inference_dtype``.

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define = cli_flags.definer(flag_values)

    define("string", "input_file", None, "Text file: one example per line, 'text_a ||| text_b' "
           "for pairs.")
    define("string", "output_file", None, "Output JSONL file.")
    define("string", "layers", "-1,-2,-3,-4", "Comma-separated encoder layer indexes.")
    define("string", "bert_config_file", None, "bert_config.json of the pre-trained model.")
    define("integer", "max_seq_length", 128, "Maximum total input length after WordPiece; "
           "longer inputs are truncated.")
    define("string", "init_checkpoint", None, "Initial checkpoint (usually a pre-trained BERT).")
    define("string", "vocab_file", None, "WordPiece vocabulary of the model.")
    define("bool", "do_lower_case", True, "Lower-case the input (uncased models).")
    define("integer", "batch_size", 32, "Batch size for predictions.")
    define("enum", "inference_dtype", "float32", "float32 (XLA-compiled), or bfloat16: weights "
           "stored and matmuls run in bfloat16 (graph mode, oneDNN; faster on CPUs with "
           "AVX-512 BF16 or AMX, about 3 significant digits; docs/model.md).",
           enum_values=["float32", "bfloat16"])  # = bert_tasks.features.INFERENCE_DTYPES


def run(fv: flags.FlagValues) -> int:
    """Writes ``--output_file``; returns the number of lines.

    Args:
        fv: the parsed flag values.

    Returns:
        The number of lines written.
    """
    cli_flags.require(fv, ("input_file", "output_file", "bert_config_file", "vocab_file"))
    checks.check_values(fv)
    from bert_tasks.features import extract

    return extract(fv.input_file, fv.output_file, fv.bert_config_file, fv.init_checkpoint,
                   fv.vocab_file, fv.layers, fv.max_seq_length, fv.do_lower_case, fv.batch_size,
                   fv.inference_dtype)


# absl's main(argv), and the console command / ``python extract_features.py``
main, entry = runner.entry_points(TOOL, define_flags, run)
