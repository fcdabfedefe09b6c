"""Fixed contextual features from BERT (the paper's feature-based approach): the job of
``extract_features.py``, the original's JSONL output.

``extract(input_file, output_file, ...)`` writes one JSON object per input line,
``{"linex_index": i, "features": [{"token": t, "layers": [{"index": l, "values": [...]},
...]}, ...]}`` for every real token, values rounded to 6 decimals, atomically (the file appears
only when complete), with a progress line. Bad input fails before any work, naming the flag or
the file.
"""

from __future__ import annotations

import collections
import json
import os
import sys
from typing import List

from bert_common.errors import FlagError
from bert_common.progress import Progress

INFERENCE_DTYPES = ("float32", "bfloat16")


def parse_layers(text: str, num_layers: int) -> List[int]:
    """'-1,-2' -> [-1, -2]; every index must address one of the ``num_layers`` encoder layers.

    Args:
        text: comma-separated layer indexes (negative: from the top).
        num_layers: the encoder's layer count.

    Returns:
        The indexes, as given.

    Raises:
        FlagError: an index that is not an int or out of range.
    """
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
    existing writable folder (checked before any work).

    Args:
        output_file: the ``--output_file`` path.

    Raises:
        FlagError: it cannot be written.
    """
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
    """One output line; ``layer_values[j]`` is [S, H] for ``layer_indexes[j]``.

    Args:
        unique_id: the example's ``linex_index``.
        tokens: the example's tokens, [S].
        layer_indexes: the layers written.
        layer_values: per layer of ``layer_indexes``, an array [S, H].

    Returns:
        The JSON line (with its newline).
    """
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

    Args:
        input_file: text, one example per line, ``text_a ||| text_b`` for pairs.
        output_file: the JSONL file to write.
        bert_config_file: the model's ``bert_config.json``.
        init_checkpoint: any checkpoint ``load_checkpoint`` reads (None: random weights, with
            a warning).
        vocab_file: the model's WordPiece vocab.
        layers: comma-separated encoder layer indexes (-1 = the last).
        max_seq_length: longer inputs are truncated.
        do_lower_case: lower-case the input (uncased models).
        batch_size: examples per forward pass.
        inference_dtype: ``float32`` (XLA), or ``bfloat16``: the encoder built with bfloat16
            weights (the checkpoint's float32 values rounded) and run in graph mode, where
            oneDNN fuses its bf16 matmuls with their bias and GELU (XLA's CPU bf16 matmuls are
            slower); values are written as float32.

    Returns:
        The number of input lines (= output lines).
    """
    from data.sentence_features import convert_examples_to_features

    check_output_file(output_file)  # before any work, not after every feature is computed
    config, layer_indexes, tokenizer, examples = _inputs(
        input_file, bert_config_file, init_checkpoint, vocab_file, layers, max_seq_length,
        do_lower_case, batch_size, inference_dtype)
    predict = _encoder(config, init_checkpoint, max_seq_length, layer_indexes, inference_dtype)
    features = convert_examples_to_features(examples, max_seq_length, tokenizer)
    _write(output_file, features, len(examples), batch_size, predict, layer_indexes)
    return len(examples)


def _inputs(input_file, bert_config_file, init_checkpoint, vocab_file, layers, max_seq_length,
            do_lower_case, batch_size, inference_dtype):
    """Every setting and input checked: (config, layer indexes, tokenizer, examples)."""
    from data.sentence_features import read_examples
    from data.tokenization import special_tokens
    from data.tokenization import wordpiece as tokenization
    from modeling.config import BertConfig

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
    return config, layer_indexes, tokenizer, examples


def _encoder(config, init_checkpoint, max_seq_length, layer_indexes, inference_dtype):
    """The encoder with its weights, as a function from a batch to the chosen layers'
    values, each float32 [B, S, H] (the backend's compiled forward: XLA or a TensorFlow graph,
    ``jax.jit`` on JAX)."""
    from modeling import checkpoints
    from modeling.encoder import BertModel
    from modeling.training import backends

    model = BertModel(config, seq_length=max_seq_length, dtype=inference_dtype)
    if init_checkpoint:
        checkpoints.load_checkpoint(model, init_checkpoint)
    else:
        print("extract_features.py: warning: no --init_checkpoint, random weights",
              file=sys.stderr)
    return backends.current("predict").encoder_layers(model, layer_indexes, inference_dtype)


def _write(output_file, features, total, batch_size, predict, layer_indexes) -> None:
    """The features' lines, batch by batch, into ``output_file`` (atomically), with progress."""
    import numpy as np

    from bert_common.atomic import atomic_open

    done = 0
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
