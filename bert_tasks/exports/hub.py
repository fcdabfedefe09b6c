"""A checkpoint -> the two TF Hub-style SavedModels of a BERT release: encoder and preprocessor.

``export_hub(input_path, output_dir, ...)`` (``convert_checkpoint.py --output_format=tfhub``)
loads any checkpoint the project reads into a ``modeling.BertModel`` and writes

* ``<output_dir>/encoder``: ``bert_tasks.exports.hub_encoder`` (dict ``input_word_ids`` /
  ``input_mask`` / ``input_type_ids`` -> ``pooled_output``, ``sequence_output``,
  ``encoder_outputs``, ``default_output``);
* ``<output_dir>/preprocessor``: ``bert_tasks.exports.hub_preprocessor`` (raw text -> those
  inputs, in graph; load it after ``import tensorflow_text``),

used from Python as TF Hub's BERT models are::

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the preprocessor's ops)

    preprocessor = tf.saved_model.load("out/preprocessor")
    encoder = tf.saved_model.load("out/encoder")
    outputs = encoder(preprocessor(tf.constant(["hello world"])), training=False)
    outputs["pooled_output"]  # [1, H]
"""

from __future__ import annotations

import numbers
import os
from typing import Optional

from bert_common import files
from bert_common.errors import InputError
from bert_tasks.exports import hub_encoder, hub_preprocessor, saved_model
from data.tokenization import wordpiece
from modeling import checkpoints
from modeling.checkpoints import folders
from modeling.encoder import BertModel

ENCODER_DIR = "encoder"
PREPROCESSOR_DIR = "preprocessor"


def _vocab_file(input_path: str, vocab_file: Optional[str]) -> str:
    """``vocab_file``, else ``vocab.txt`` in the input folder / beside the prefix."""
    if vocab_file:
        if not files.isfile(vocab_file):
            raise wordpiece.VocabError("vocab file %s: no such file (--vocab_file)" % vocab_file)
        return vocab_file
    beside = folders.default_vocab_file(input_path)
    if beside is None:
        raise InputError("%s: no vocab.txt in the checkpoint's folder %s: the TF Hub "
                         "preprocessor needs the vocabulary (--vocab_file)"
                         % (input_path, folders.input_folder(input_path)))
    return beside


def export_hub(input_path: str, output_dir: str, config_file: Optional[str] = None,
               vocab_file: Optional[str] = None, do_lower_case: bool = True,
               seq_length: int = 128, hidden_act: Optional[str] = None,
               keep_empty_segments: bool = False) -> str:
    """Writes ``<output_dir>/encoder`` and ``<output_dir>/preprocessor``; returns a one-line
    summary.

    Args:
      input_path: a checkpoint ``modeling.load_checkpoint`` reads: a Google TF1 prefix or
        folder (a pre-training or classifier checkpoint too: its head tensors are left
        unused), a Hugging Face folder, a trainer checkpoint of an encoder, a ``.keras`` file.
      output_dir: the folder to write (created if needed). ``encoder`` and ``preprocessor``
        in it may be new, empty folders or SavedModels, which are replaced: both SavedModels
        are staged, then renamed into place together (``saved_model.save_saved_models``), so the
        folder holds both new ones or both previous ones, never a mix; anything else there
        is refused (``InputError``) before anything is loaded or written.
      config_file: a Google ``bert_config.json`` or an HF ``config.json``; default: the HF
        folder's, else ``bert_config.json`` beside the checkpoint.
      vocab_file: the WordPiece vocabulary; default ``vocab.txt`` in the input folder (or
        beside the checkpoint prefix).
      do_lower_case: whether the preprocessor lower-cases (the model's casing).
      seq_length: the preprocessor's default output length (``preprocessor(text)`` and its
        signatures), 3 to the model's ``max_position_embeddings``.
      hidden_act: overrides the config's activation (``convert_checkpoint --hidden_act``).
      keep_empty_segments: the preprocessor packs as TF Hub's ``bert_pack_inputs`` where a
        segment is empty too (``bert_tasks.exports.hub_preprocessor``); default: as
        run_classifier (an empty second segment is a single text).
    Raises:
      InputError (or its subclasses ``CheckpointError``, ``ConfigError``, ``VocabError``):
        one line naming the file or the flag, before anything is written.
    """
    if not files.exists(input_path) and not files.exists(input_path + ".index"):
        raise checkpoints.CheckpointError("%s: no such file, folder or checkpoint" % input_path)
    vocab_file = _vocab_file(input_path, vocab_file)
    encoder_dir = os.path.join(output_dir, ENCODER_DIR)
    preprocessor_dir = os.path.join(output_dir, PREPROCESSOR_DIR)
    if files.exists(output_dir) and not files.isdir(output_dir):
        raise InputError("--output=%s is a file: the TF Hub export writes a folder (encoder/ "
                         "and preprocessor/ in it)" % output_dir)
    for destination in (encoder_dir, preprocessor_dir):  # both, before writing either
        saved_model.check_saved_model_destination(destination, "--output")
    config = folders.config_for(input_path, config_file, hidden_act)
    if isinstance(seq_length, bool) or not isinstance(seq_length, numbers.Integral) or not (
            3 <= seq_length <= config.max_position_embeddings):
        raise InputError("--seq_length must be an integer from 3 to the model's "
                         "max_position_embeddings (%d), got %r"
                         % (config.max_position_embeddings, seq_length))
    vocab_size = max(wordpiece.load_vocab(vocab_file).values()) + 1
    if vocab_size > config.vocab_size:
        raise InputError("vocab file %s has %d tokens but the model's vocab_size is %d "
                         "(--vocab_file)" % (vocab_file, vocab_size, config.vocab_size))

    encoder = BertModel(config)
    report = checkpoints.load_checkpoint(encoder, input_path, log=False)
    if report.missing:
        raise checkpoints.CheckpointError(
            "%s: the checkpoint lacks %d variables of the encoder (%s ...)"
            % (input_path, len(report.missing), report.missing[0]))

    files.makedirs(output_dir)
    encoder_module = hub_encoder.HubEncoder(encoder, vocab_file, do_lower_case)
    preprocessor_module = hub_preprocessor.HubPreprocessor(vocab_file, do_lower_case,
                                                           int(seq_length), keep_empty_segments)
    # Both staged, then renamed into place together: never a new encoder beside an old
    # preprocessor (the destinations are checked again there).
    saved_model.save_saved_models([
        (encoder_module, encoder_dir, encoder_module.trace),
        (preprocessor_module, preprocessor_dir, preprocessor_module.trace)])
    return ("%s -> %s (L=%d, H=%d; %d variables loaded, %d unused) and %s (seq_length=%d, "
            "%s, vocab %s)" % (report.source, encoder_dir, config.num_hidden_layers,
                               config.hidden_size, len(report.loaded), len(report.unused),
                               preprocessor_dir, seq_length,
                               "lower case" if do_lower_case else "cased", vocab_file))
