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
* ``NerTask``: the task as the one driver (``bert_tasks.driver``) runs it.

Example::

    sentences = conll.read_conll("valid.txt")
    tags, loss = predict_sentences(model, sentences, labels, tokenizer, "eval.tf_record",
                                   max_seq_length=128, batch_size=32)
    print(score(sentences, tags).report())     # conlleval's report
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, TYPE_CHECKING, Tuple

import numpy as np
from absl import logging

from bert_common import atomic, files
from bert_tasks import driver
from bert_tasks.task import Context, Task, resolve_strategy
from modeling.checkpoints import tf1
from data.glue import dataset as glue_dataset
from data.ner import conll, conlleval
from data.ner import features as ner_features
from modeling.heads.token_classifier import token_classification_loss
from modeling.training import finetuning

if TYPE_CHECKING:  # (annotations only: TensorFlow is imported where it is used)
    import tensorflow as tf

LABELS_FILE = "labels.txt"
LOSS_WEIGHTS = ner_features.LABEL_WEIGHTS
per_token_loss = token_classification_loss


def dataset(record_file: str, max_seq_length: int, batch_size: int, is_training: bool, *,
            length_aware: bool = True, static_shapes: bool = False,
            seed: Optional[int] = None, shuffle_buffer: int = 100) -> "tf.data.Dataset":
    """Batches of NER records: ``input_ids``/``input_mask``/``segment_ids``/``label_ids``
    int32 and ``label_weights`` float32 [B, S], ``example_index`` [B] off training.
    ``shuffle_buffer``: run_ner passes the number of windows (a full shuffle, see there).

    Args:
        record_file: the NER TFRecord file.
        max_seq_length: S of the records.
        batch_size: B.
        is_training: repeated, shuffled full batches (else every record once).
        length_aware: batch records of similar length, each batch cut to its longest.
        static_shapes: every batch [B, S] (TPU).
        seed: the shuffle seed.
        shuffle_buffer: the training shuffle buffer, in records.

    Returns:
        A ``tf.data.Dataset`` of feature dicts (without TensorFlow installed, a
        ``data.glue.numpy_dataset.NumpyDataset`` of the same batches).
    """
    return glue_dataset.task_dataset(record_file, ner_features.record_spec(max_seq_length),
                                     batch_size, is_training,
                                     length_aware=length_aware,
                                     static_shapes=static_shapes, seed=seed,
                                     sequence_names=ner_features.SEQUENCE_FEATURES,
                                     shuffle_buffer=shuffle_buffer)


def convert_all(sentences: Dict[str, Sequence[conll.Sentence]], label_list: Sequence[str],
                tokenizer, *, max_seq_length: int, document_context: bool = True,
                split_long_sentences: bool = True) -> Dict[str, List[ner_features.NerWindow]]:
    """The windows of each split (``{"train": sentences, ...}``); raises
    ``conll.NerDataError`` for a sentence or word that does not fit (see ``data.ner.features``).

    Args:
        sentences: split name -> the split's sentences.
        label_list: the tag names, by label id.
        tokenizer: the ``FullTokenizer``.
        max_seq_length: S of a window.
        document_context: fill each window with the document's neighbouring sentences.
        split_long_sentences: split a sentence too long for a window (else an error).

    Returns:
        split name -> its ``NerWindow``s.

    Raises:
        NerDataError: a sentence or word that does not fit.
    """
    return {split: ner_features.convert_sentences(items, label_list, max_seq_length, tokenizer,
                                                  document_context, split_long_sentences)
            for split, items in sentences.items()}


def predict_windows(model, sentences: Sequence[conll.Sentence],
                    windows: Sequence[ner_features.NerWindow], label_list: Sequence[str],
                    record_file: str, *, max_seq_length: int, batch_size: int,
                    strategy: Optional["tf.distribute.Strategy"] = None,
                    length_aware: bool = True) -> Tuple[List[List[str]], Optional[float]]:
    """Writes the ``windows`` of ``sentences`` to ``record_file``, runs ``model`` and returns
    (an IOB2 tag per word of each sentence, the mean cross-entropy over the scored words, or
    None when the sentences are unlabelled). On TPU the last window is repeated up to a full
    batch (static shapes) and the copies are dropped.

    Args:
        model: the token classifier.
        sentences: the sentences.
        windows: their ``NerWindow``s (``convert_all``).
        label_list: the tag names.
        record_file: the TFRecord file to write.
        max_seq_length: S.
        batch_size: B.
        strategy: the ``tf.distribute.Strategy`` (None: the default).
        length_aware: length-aware batching (off on a TPU).

    Returns:
        ``(tags, loss)``: a list of tags per sentence, and a float or None.
    """
    strategy, tpu = resolve_strategy(strategy)
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
    ``logits`` [N, S', K] (argmax at each target word's first sub-token).

    Args:
        sentences: the sentences.
        windows: their ``NerWindow``s.
        logits: float [N, S', K], one row per window.
        label_list: the tag names.

    Returns:
        ``(tags, loss)``: a list of tags per sentence, and a float or None.

    Raises:
        RuntimeError: a word without a prediction (windows that do not cover the sentences).
    """
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
                      strategy: Optional["tf.distribute.Strategy"] = None,
                      length_aware: bool = True) -> Tuple[List[List[str]], Optional[float]]:
    """``convert_all`` then ``predict_windows``: a tag per word of ``sentences`` (and the loss).

    Args:
        model: the token classifier.
        sentences: the sentences.
        label_list: the tag names.
        tokenizer: the ``FullTokenizer``.
        record_file: the TFRecord file to write.
        max_seq_length: S.
        batch_size: B.
        document_context: see ``convert_all``.
        split_long_sentences: see ``convert_all``.
        strategy: the ``tf.distribute.Strategy`` (None: the default).
        length_aware: length-aware batching.

    Returns:
        ``(tags, loss)`` as ``predict_windows``.
    """
    windows = convert_all({"x": sentences}, label_list, tokenizer, max_seq_length=max_seq_length,
                          document_context=document_context,
                          split_long_sentences=split_long_sentences)["x"]
    return predict_windows(model, sentences, windows, label_list, record_file,
                           max_seq_length=max_seq_length, batch_size=batch_size,
                           strategy=strategy, length_aware=length_aware)


def score(sentences: Sequence[conll.Sentence],
          predictions: Sequence[Sequence[str]]) -> conlleval.ConllEvalResult:
    """``conlleval`` on the lines of the predictions file (gold = the file's own tags).

    Args:
        sentences: the tagged sentences.
        predictions: a list of predicted tags per sentence.

    Returns:
        The ``ConllEvalResult``.
    """
    return conlleval.evaluate_lines(conll.prediction_lines(sentences, predictions),
                                    source="predictions")


def eval_metrics(result: conlleval.ConllEvalResult, loss: Optional[float]) -> Dict[str, float]:
    """``conlleval``'s overall and per-type scores (percent: ``f1``, ``precision``,
    ``recall``, ``accuracy``, ``<TYPE>_f1`` ...) plus ``eval_loss`` and ``loss``.

    Args:
        result: conlleval's ``ConllEvalResult``.
        loss: the mean cross-entropy, or None.

    Returns:
        name -> float.
    """
    metrics = dict(result.metrics())
    if loss is not None:
        metrics["eval_loss"] = loss
        metrics["loss"] = loss
    return metrics


def write_labels(path: str, label_list: Sequence[str]) -> None:
    """One label per line, in label-id order (atomically).

    Args:
        path: the labels file.
        label_list: the tag names.
    """
    with atomic.atomic_open(path) as f:
        f.write("".join(label + "\n" for label in label_list))


def read_labels(path: str) -> List[str]:
    """The labels of a ``write_labels`` file, in label-id order.

    Args:
        path: the labels file.

    Returns:
        The tag names.
    """
    return [line.strip() for line in files.read_text(path).splitlines() if line.strip()]


def labels_for(checkpoint: Optional[str], output_dir: str,
               train_file: Optional[str]) -> Tuple[List[str], str]:
    """(label list, where it came from): ``labels.txt`` in the checkpoint's folder, else in
    ``output_dir``, else the tags of ``train_file``; ``conll.NerDataError`` if none exists.

    Args:
        checkpoint: the checkpoint to predict with, or None.
        output_dir: the run's output folder.
        train_file: the training file, or None.

    Returns:
        ``(label_list, source)``.

    Raises:
        NerDataError: no labels are found.
    """
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


# CoNLL-2003's file names by split.
SPLIT_FILES = {"train": "train.txt", "eval": "valid.txt", "predict": "test.txt"}


@dataclasses.dataclass
class NerTask(Task):
    """CoNLL-2003 named entities as the driver runs it (run_ner): the first sub-token of each
    word is classified (IOB2), with document context around each sentence.

    ``do_train`` writes ``labels.txt`` (the training file's tag set) beside the checkpoints;
    ``do_eval`` writes ``eval_predictions.txt`` and ``eval_report.txt`` and returns conlleval's
    scores; ``do_predict`` writes ``test_predictions.txt`` (and ``test_report.txt`` when the
    file has tags); ``export_dir``: a SavedModel from words or text to a tag per word.

    Args:
        data_dir: the folder of ``train.txt``, ``valid.txt`` (eval) and ``test.txt``
            (predict).
        train_file, eval_file, predict_file: a split's file, instead of ``data_dir``'s.
        document_context: pack the document's sentences around each sentence (the paper).
        split_long_sentences: a sentence longer than the window is split (else an error).
        feature_mode: train the feature-based BiLSTM tagger on these activations of the frozen
            encoder (``modeling.heads.token_classifier``); None fine-tunes BERT.
        lstm_units: the tagger's LSTM units per direction (0: the hidden size).

    Example::

        driver.run(NerTask(data_dir="conll2003"), settings)
    """

    loss_weights = LOSS_WEIGHTS

    data_dir: Optional[str] = None
    train_file: Optional[str] = None
    eval_file: Optional[str] = None
    predict_file: Optional[str] = None
    _: dataclasses.KW_ONLY
    document_context: bool = True
    split_long_sentences: bool = True
    feature_mode: Optional[str] = None
    lstm_units: int = 0

    def split_file(self, split: str) -> str:
        """The file of ``split`` (train/eval/predict): its own, else found in ``data_dir``.

        Args:
            split: ``"train"``, ``"eval"`` or ``"predict"``.

        Returns:
            The file's path.
        """
        return driver.split_file(self, split, (SPLIT_FILES[split],))

    def read(self, ctx: Context) -> None:
        """See ``Task.read``: the sentences of each split and the label list.
        """
        s = ctx.settings
        wanted = [("train", s.do_train), ("eval", s.do_eval), ("predict", s.do_predict)]
        self.sentences = {split: conll.read_conll(self.split_file(split),
                                                  labelled=split != "predict")
                          for split, want in wanted if want}
        if s.do_train:
            self.label_list = conll.label_list(self.sentences["train"])
            label_source = self.split_file("train")
        else:
            train_file = None
            if self.train_file or (self.data_dir and files.isfile(
                    os.path.join(self.data_dir, SPLIT_FILES["train"]))):
                train_file = self.split_file("train")
            self.label_list, label_source = labels_for(
                s.init_checkpoint or tf1.latest_checkpoint(s.output_dir), s.output_dir,
                train_file)
        for split in ("eval", "predict"):
            if split in self.sentences:
                conll.check_labels(self.sentences[split], self.label_list, label_source)

    def prepare(self, ctx: Context) -> None:
        """See ``Task.prepare``: the windows of every split (each sentence checked to fit).
        """
        self.windows = convert_all(  # checks every sentence fits, before anything is written
            self.sentences, self.label_list, ctx.tokenizer,
            max_seq_length=ctx.settings.max_seq_length, document_context=self.document_context,
            split_long_sentences=self.split_long_sentences)

    def build_model(self, ctx: Context):
        """See ``Task.build_model``: a ``TokenClassifier``.
        """
        from modeling.heads import token_classifier

        return token_classifier.build_token_classifier_model(
            ctx.bert_config, len(self.label_list), seq_length=ctx.seq_length,
            feature_mode=self.feature_mode, lstm_units=self.lstm_units or None)

    def train_dataset(self, ctx: Context):
        """See ``Task.train_dataset``: also writes ``labels.txt``.
        """
        s = ctx.settings
        windows = self.windows["train"]
        write_labels(ctx.path(LABELS_FILE), self.label_list)
        train_file = ctx.path("train.tf_record")
        ner_features.write_tf_records(windows, train_file)
        logging.info("%d training windows from %d sentences", len(windows),
                     len(self.sentences["train"]))
        # The whole training set is shuffled, not the classifier's buffer of 100 (the
        # original's): CoNLL windows come in document order, grouped by topic (sports results,
        # then politics...), and batches of 100 neighbours cost ~2.5 F1 in one epoch.
        batches = dataset(train_file, s.max_seq_length, s.train_batch_size, True,
                          length_aware=s.length_aware_batching, static_shapes=ctx.tpu,
                          seed=s.random_seed, shuffle_buffer=len(windows))
        return batches, len(windows)

    def per_example_loss(self, outputs, batch):
        """See ``Task.per_example_loss``: the cross-entropy per scored token [B, S].
        """
        return per_token_loss(outputs, batch)

    def _tag(self, ctx: Context, model, split: str, prefix: str):
        """Tags ``split``, writes ``<prefix>_predictions.txt`` and, for a tagged file,
        ``<prefix>_report.txt``; returns (conlleval's result or None, the loss)."""
        s = ctx.settings
        sentences = self.sentences[split]
        tags, loss = predict_windows(
            model, sentences, self.windows[split], self.label_list,
            ctx.path("%s.tf_record" % split), batch_size=getattr(s, "%s_batch_size" % split),
            max_seq_length=s.max_seq_length, strategy=ctx.strategy,
            length_aware=s.length_aware_batching)
        predictions_file = ctx.path("%s_predictions.txt" % prefix)
        if ctx.writer:
            conll.write_predictions(predictions_file, sentences, tags)
            logging.info("wrote %s", predictions_file)
        if sentences[0].tags is None:
            return None, loss
        result = score(sentences, tags)
        if ctx.writer:
            with atomic.atomic_open(ctx.path("%s_report.txt" % prefix)) as f:
                f.write(result.report())
        for line in result.report().splitlines():
            logging.info("conlleval: %s", line)
        return result, loss

    def evaluate(self, ctx: Context, model) -> Dict[str, float]:
        """See ``Task.evaluate``: conlleval's scores of the eval split.
        """
        result, loss = self._tag(ctx, model, "eval", "eval")
        return eval_metrics(result, loss)

    def predict(self, ctx: Context, model) -> None:
        """See ``Task.predict``: ``test_predictions.txt`` (and a report for a tagged file).
        """
        self._tag(ctx, model, "predict", "test")

    def export(self, ctx: Context, model) -> None:
        """See ``Task.export``: a SavedModel in ``export_dir``.
        """
        s = ctx.settings
        if not s.export_dir:
            return
        from bert_tasks.exports import ner as serving

        serving.NerServingModule(model, s.vocab_file, s.do_lower_case, s.max_seq_length,
                                 self.label_list).export_version(s.export_dir)
