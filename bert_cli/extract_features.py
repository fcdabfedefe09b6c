"""Extract fixed contextual features from BERT (the paper's feature-based approach).

Same flags and JSONL output as the original ``extract_features.py``: one JSON object per input
line, ``{"linex_index": i, "features": [{"token": t, "layers": [{"index": l, "values": [...]},
...]}, ...]}`` for every real token (``[CLS]`` ... ``[SEP]``), values rounded to 6 decimals.
``--layers`` are encoder-layer indexes (-1 = the last layer). ``--init_checkpoint`` takes a TF1
prefix, a Hugging Face folder/.safetensors, or a .keras file. Progress goes to stderr; the output
file appears only when complete. Before any work: an ``--output_file`` that is a directory or
in a missing folder, an ``--input_file`` without text (empty, or blank lines only) and a vocab
without ``[CLS]``/``[SEP]`` are one error line naming the flag or file (exit status 1).
"""

from __future__ import annotations

import collections
import json
import os
import sys
from typing import List

from absl import flags

from bert_cli import flags as cli_flags
from bert_cli import runner
from bert_common import checks
from bert_cli.flags import FlagError
from bert_common.progress import Progress

FLAGS = flags.FLAGS
TOOL = "extract_features.py"


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus ``--inference_dtype``."""
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
           enum_values=list(INFERENCE_DTYPES))


INFERENCE_DTYPES = ("float32", "bfloat16")


def parse_layers(text: str, num_layers: int) -> List[int]:
    """'-1,-2' -> [-1, -2]; every index must address one of the ``num_layers`` encoder layers."""
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise FlagError("--layers=%s: expected comma-separated integers" % text) from None
    for index in layers:
        if not -num_layers <= index < num_layers:
            raise FlagError("--layers=%s: index %d is out of range for %d encoder layers"
                             % (text, index, num_layers))
    return layers


def check_output_file(output_file: str) -> None:
    """``FlagError`` naming ``--output_file`` unless it can be written: not a directory, in an
    existing writable folder (checked before any work)."""
    from bert_common import atomic, files

    if files.isdir(output_file):
        raise FlagError("--output_file=%s is a directory" % output_file)
    folder = os.path.dirname(files.abspath(output_file)) or "."
    if not files.is_url(folder) and not files.isdir(folder):
        raise FlagError("--output_file=%s: folder %s does not exist" % (output_file, folder))
    try:
        atomic.check_output_folder(output_file)
    except OSError as e:
        raise FlagError("--output_file=%s: %s" % (output_file, e.strerror or e)) from None


def feature_json(unique_id: int, tokens: List[str], layer_indexes: List[int], layer_values) -> str:
    """One output line; ``layer_values[j]`` is [S, H] for ``layer_indexes[j]``."""
    features = []
    for i, token in enumerate(tokens):
        layers = []
        for j, layer_index in enumerate(layer_indexes):
            layers.append(collections.OrderedDict([
                ("index", layer_index),
                ("values", [round(float(x), 6) for x in layer_values[j][i]]),
            ]))
        features.append(collections.OrderedDict([("token", token), ("layers", layers)]))
    return json.dumps(collections.OrderedDict([("linex_index", unique_id),
                                               ("features", features)])) + "\n"


def extract(input_file: str, output_file: str, bert_config_file: str, init_checkpoint: str,
        vocab_file: str, layers: str = "-1,-2,-3,-4", max_seq_length: int = 128,
        do_lower_case: bool = True, batch_size: int = 32,
        inference_dtype: str = "float32") -> int:
    """Writes the features of every line of ``input_file``; returns the number of lines.

    ``inference_dtype="bfloat16"`` builds the encoder with bfloat16 weights (the checkpoint's
    float32 values rounded) and runs it in graph mode, where oneDNN fuses its bf16 matmuls with
    their bias and GELU (XLA's CPU bf16 matmuls are slower); values are written as float32.
    """
    import numpy as np
    import tensorflow as tf

    from data.tokenization import special_tokens
    from data.tokenization import wordpiece as tokenization
    from bert_common.atomic import atomic_open
    from data.sentence_features import convert_examples_to_features, read_examples
    from modeling import checkpoints
    from modeling.encoder import BertModel
    from modeling.config import BertConfig
    from modeling.kernels import switch
    from modeling.training import distribution

    check_output_file(output_file)  # before any work, not after every feature is computed
    config = BertConfig.from_json_file(bert_config_file)
    if max_seq_length > config.max_position_embeddings:
        raise FlagError("--max_seq_length=%d exceeds max_position_embeddings=%d of %s"
                         % (max_seq_length, config.max_position_embeddings, bert_config_file))
    if inference_dtype not in INFERENCE_DTYPES:
        raise FlagError("--inference_dtype=%s: one of %s" % (inference_dtype,
                                                            ", ".join(INFERENCE_DTYPES)))
    if max_seq_length < 3 or batch_size < 1:
        raise FlagError("--max_seq_length must be >= 3 and --batch_size >= 1")
    layer_indexes = parse_layers(layers, config.num_hidden_layers)
    tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
    tokenizer = tokenization.FastFullTokenizer(vocab_file, do_lower_case=do_lower_case)
    # Every input is [CLS] a [SEP] (b [SEP]): a vocab without them fails before any work.
    tokenization.require_tokens(tokenizer, (special_tokens.CLS, special_tokens.SEP))
    examples = read_examples(input_file)  # strict UTF-8: a SentenceFileError names file:line
    if not any(e.text_a or e.text_b for e in examples):
        raise FlagError("--input_file=%s has no text to extract features from (%s)"
                        % (input_file, "blank lines only" if examples else "an empty file"))

    model = BertModel(config, seq_length=max_seq_length, dtype=inference_dtype)
    if init_checkpoint:
        checkpoints.load_checkpoint(model, init_checkpoint)
    else:
        print("extract_features.py: warning: no --init_checkpoint, random weights",
              file=sys.stderr)

    # bfloat16 runs as a graph, with the fused LayerNorm on a CPU (float32: XLA, which
    # compiles TensorFlow's ops and cannot take the kernel library's)
    fused = (inference_dtype != "float32" and distribution.prediction_kernels_apply(
        tf.distribute.get_strategy(), model.variables))

    @tf.function(jit_compile=inference_dtype == "float32", reduce_retracing=True)
    def predict(batch):
        with switch.use_kernels(model, switch.Kernels(inference=fused)):  # read when traced
            outputs = model(batch, training=False)["encoder_outputs"]
        return [tf.cast(outputs[index], tf.float32) for index in layer_indexes]  # [B, S, H]
    features = convert_examples_to_features(examples, max_seq_length, tokenizer)
    total, done = len(examples), 0
    progress = Progress("extract_features", total, unit="lines")
    with atomic_open(output_file) as writer:
        while done < total:
            chunk = [f for _, f in zip(range(batch_size), features)]
            batch = {
                "input_ids": np.asarray([f.input_ids for f in chunk], np.int32),
                "input_mask": np.asarray([f.input_mask for f in chunk], np.int32),
                "segment_ids": np.asarray([f.input_type_ids for f in chunk], np.int32),
            }
            values = [np.asarray(v) for v in predict(batch)]
            for row, feature in enumerate(chunk):
                writer.write(feature_json(feature.unique_id, feature.tokens, layer_indexes,
                                          [v[row] for v in values]))
            done += len(chunk)
            progress.update(done)
        progress.finish()  # the final line, also for an empty input file
    return total


def run(fv: flags.FlagValues) -> int:
    """Writes ``--output_file``; returns the number of lines."""
    cli_flags.require(fv, ("input_file", "output_file", "bert_config_file", "vocab_file"))
    checks.check_values(fv)
    return extract(fv.input_file, fv.output_file, fv.bert_config_file, fv.init_checkpoint,
                   fv.vocab_file, fv.layers, fv.max_seq_length, fv.do_lower_case, fv.batch_size,
                   fv.inference_dtype)


def main(argv) -> None:
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python extract_features.py`` / the ``bert-extract-features`` command."""
    runner.start(define_flags, main)
