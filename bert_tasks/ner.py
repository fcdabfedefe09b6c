"""Named-entity recognition (CoNLL-2003): windows, records, per-word predictions and the
``conlleval`` scores.

* ``dataset(record_file, ...)``: batches of NER records (ids/mask/segments, ``label_ids`` and
  ``label_weights`` [B, S]; length-aware off TPU, the per-token labels cut with the ids).
* ``per_token_loss``: the loss of ``finetune(..., loss_weights="label_weights")``: the mean
  cross-entropy over the batch's scored tokens (first sub-tokens of target words).
* ``predict_sentences(model, sentences, ...)``: one IOB2 tag per word of every sentence (every
  word is a target of exactly one window), plus the eval loss when the sentences are labelled.
* ``score(sentences, predictions)``: ``conlleval`` on the predictions file's lines (the file
  ``conlleval`` would read); ``eval_metrics`` adds ``eval_loss``.
* ``labels_for(...)``: the label list of a run: ``labels.txt`` beside the checkpoint, else the
  training file's tags.

Example::

    sentences = conll.read_conll("valid.txt")
    tags, loss = predict_sentences(model, sentences, labels, tokenizer, "eval.tf_record",
                                   max_seq_length=128, batch_size=32)
    print(score(sentences, tags).report())     # conlleval's report
"""

from __future__ import annotations

import functools
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from bert_common import files
from data.glue import dataset as glue_dataset
from data.ner import conll, conlleval
from data.ner import features as ner_features
from modeling.heads.token_classifier import token_classification_loss
from modeling.training import distribution, finetuning

LABELS_FILE = "labels.txt"
LOSS_WEIGHTS = ner_features.LABEL_WEIGHTS
per_token_loss = token_classification_loss


def dataset(record_file: str, max_seq_length: int, batch_size: int, is_training: bool, *,
            length_aware: bool = True, static_shapes: bool = False,
            seed: Optional[int] = None, shuffle_buffer: int = 100) -> tf.data.Dataset:
    """Batches of NER records: ``input_ids``/``input_mask``/``segment_ids``/``label_ids``
    int32 and ``label_weights`` float32 [B, S], ``example_index`` [B] off training.
    ``shuffle_buffer``: run_ner passes the number of windows (a full shuffle, see there)."""
    decode = functools.partial(ner_features.parse_example, max_seq_length=max_seq_length)
    return glue_dataset.task_dataset(record_file, decode, batch_size, is_training,
                                     length_aware=length_aware,
                                     static_shapes=static_shapes, seed=seed,
                                     sequence_names=ner_features.SEQUENCE_FEATURES,
                                     shuffle_buffer=shuffle_buffer)


def convert_all(sentences: Dict[str, Sequence[conll.Sentence]], label_list: Sequence[str],
                tokenizer, *, max_seq_length: int, document_context: bool = True,
                split_long_sentences: bool = True) -> Dict[str, List[ner_features.NerWindow]]:
    """The windows of each split (``{"train": sentences, ...}``); raises
    ``conll.NerDataError`` for a sentence or word that does not fit (see ``data.ner.features``)."""
    return {split: ner_features.convert_sentences(items, label_list, max_seq_length, tokenizer,
                                                  document_context, split_long_sentences)
            for split, items in sentences.items()}


def write_records(windows: Sequence[ner_features.NerWindow], record_file: str) -> int:
    """One record per window (``data.ner.features.write_tf_records``)."""
    return ner_features.write_tf_records(windows, record_file)


def predict_windows(model, sentences: Sequence[conll.Sentence],
                    windows: Sequence[ner_features.NerWindow], label_list: Sequence[str],
                    record_file: str, *, max_seq_length: int, batch_size: int,
                    strategy: Optional[tf.distribute.Strategy] = None,
                    length_aware: bool = True) -> Tuple[List[List[str]], Optional[float]]:
    """Writes the ``windows`` of ``sentences`` to ``record_file``, runs ``model`` and returns
    (an IOB2 tag per word of each sentence, the mean cross-entropy over the scored words, or
    None when the sentences are unlabelled). On TPU the last window is repeated up to a full
    batch (static shapes) and the copies are dropped."""
    strategy = strategy or tf.distribute.get_strategy()
    tpu = distribution.is_tpu(strategy)
    n = len(windows)
    padded = list(windows)
    if tpu and n % batch_size:
        padded += [windows[-1]] * (-n % batch_size)
    ner_features.write_tf_records(padded, record_file)
    batches = dataset(record_file, max_seq_length, batch_size, False,
                      length_aware=length_aware, static_shapes=tpu)
    out = finetuning.predict(model, batches, ["logits"], total=len(padded), strategy=strategy,
                             label=os.path.basename(record_file))
    order = out.pop(glue_dataset.EXAMPLE_INDEX)
    logits = glue_dataset.restore_order(order, out["logits"])[:n]  # [N, S', K]
    return window_predictions(sentences, windows, logits, label_list)


def window_predictions(sentences: Sequence[conll.Sentence],
                       windows: Sequence[ner_features.NerWindow], logits: np.ndarray,
                       label_list: Sequence[str]) -> Tuple[List[List[str]], Optional[float]]:
    """(a tag per word, mean cross-entropy of the scored words or None) from the windows'
    ``logits`` [N, S', K] (argmax at each target word's first sub-token)."""
    predictions: List[List[Optional[str]]] = [[None] * len(s.words) for s in sentences]
    losses: List[float] = []
    labelled = bool(sentences) and sentences[0].tags is not None
    for window, window_logits in zip(windows, logits):
        scored = window_logits[window.positions].astype(np.float64)  # [T, K]
        best = np.argmax(scored, axis=-1)
        for word, label_id in zip(window.words, best):
            predictions[window.sentence][word] = label_list[int(label_id)]
        if labelled:
            gold = [window.label_ids[p] for p in window.positions]
            log_z = np.logaddexp.reduce(scored, axis=-1)
            losses.extend(log_z - scored[np.arange(len(gold)), gold])
    for i, tags in enumerate(predictions):  # every word is a target of one window
        if None in tags:
            raise RuntimeError("%s:%d: no window predicts this word" % (
                sentences[i].path, sentences[i].line_numbers[tags.index(None)]))
    return predictions, (float(np.mean(losses)) if losses else None)


def predict_sentences(model, sentences: Sequence[conll.Sentence], label_list: Sequence[str],
                      tokenizer, record_file: str, *, max_seq_length: int, batch_size: int,
                      document_context: bool = True, split_long_sentences: bool = True,
                      strategy: Optional[tf.distribute.Strategy] = None,
                      length_aware: bool = True) -> Tuple[List[List[str]], Optional[float]]:
    """``convert_all`` then ``predict_windows``: a tag per word of ``sentences`` (and the loss)."""
    windows = convert_all({"x": sentences}, label_list, tokenizer, max_seq_length=max_seq_length,
                          document_context=document_context,
                          split_long_sentences=split_long_sentences)["x"]
    return predict_windows(model, sentences, windows, label_list, record_file,
                           max_seq_length=max_seq_length, batch_size=batch_size,
                           strategy=strategy, length_aware=length_aware)


def score(sentences: Sequence[conll.Sentence],
          predictions: Sequence[Sequence[str]]) -> conlleval.ConllEvalResult:
    """``conlleval`` on the lines of the predictions file (gold = the file's own tags)."""
    return conlleval.evaluate_lines(conll.prediction_lines(sentences, predictions),
                                    source="predictions")


def eval_metrics(result: conlleval.ConllEvalResult, loss: Optional[float]) -> Dict[str, float]:
    """``conlleval``'s overall and per-type scores (percent: ``f1``, ``precision``,
    ``recall``, ``accuracy``, ``<TYPE>_f1`` ...) plus ``eval_loss`` and ``loss``."""
    metrics = dict(result.metrics())
    if loss is not None:
        metrics["eval_loss"] = loss
        metrics["loss"] = loss
    return metrics


def write_labels(path: str, label_list: Sequence[str]) -> None:
    """One label per line, in label-id order (atomically)."""
    with files.atomic_open(path) as f:
        f.write("".join(label + "\n" for label in label_list))


def read_labels(path: str) -> List[str]:
    return [line.strip() for line in files.read_text(path).splitlines() if line.strip()]


def labels_for(checkpoint: Optional[str], output_dir: str,
               train_file: Optional[str]) -> Tuple[List[str], str]:
    """(label list, where it came from): ``labels.txt`` in the checkpoint's folder, else in
    ``output_dir``, else the tags of ``train_file``; ``conll.NerDataError`` if none exists."""
    folders = []
    if checkpoint:
        folders.append(checkpoint if files.isdir(checkpoint) and not
                       files.exists(checkpoint + ".index") else os.path.dirname(checkpoint))
    folders.append(output_dir)
    for folder in folders:
        path = os.path.join(folder, LABELS_FILE)
        if folder and files.isfile(path):
            return read_labels(path), path
    if train_file and files.isfile(train_file):
        return conll.label_list(conll.read_conll(train_file)), train_file
    raise conll.NerDataError("no label list: %s is written by --do_train into --output_dir; "
                             "else --data_dir needs train.txt" % LABELS_FILE)
