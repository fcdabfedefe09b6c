"""SQuAD v1.1 / v2.0: training records, datasets, raw logits and the prediction files.

* ``write_train_records(examples, tokenizer, path, options, seed)``: the examples shuffled
  (as the original, so that a small shuffle buffer suffices) and written as training features;
  returns the number of features (windows).
* ``dataset(record_file, seq_length, batch_size, is_training, length_aware=...)``: batches of
  SQuAD records (``length_aware``: each cut to its longest window; see ``data.squad.dataset``).
* ``predict_raw_results(model, eval_file, ...)``: one ``RawResult`` per eval feature.
* ``predict(model, examples, tokenizer, output_dir, options)``: ``eval.tf_record``,
  ``predictions.json``, ``nbest_predictions.json``, ``null_odds.json`` (v2.0) and, with
  ``score_against`` (a SQuAD file with answers), the official scores in ``eval_results.json``;
  every input is checked before the first write, and the JSON files are written together (all
  renamed into place only when every one is written).
* ``scoring_dataset(squad_file)``: the checked SQuAD file to score against, or None.
* ``SquadTask``: the task as the one driver (``bert_tasks.driver``) runs it.

Example::

    options = SquadOptions(max_seq_length=384, version_2_with_negative=False)
    scores = predict(model, read_squad_examples("dev-v1.1.json", False), tokenizer, "out",
                     options, score_against="dev-v1.1.json")          # {"exact_match", "f1"}
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from typing import Callable, List, Optional, TYPE_CHECKING, Union

import numpy as np
from absl import logging

from bert_common import files
from bert_common.errors import FlagError, InputError
from bert_tasks.task import Context, Task, resolve_strategy
from data import squad
from data.records import numpy_reader
from data.squad import dataset as squad_dataset
from data.squad import evaluate as squad_eval
from data.squad import postprocess
from data.squad import schema as squad_schema
from modeling.heads.squad import per_example_squad_loss
from modeling.training import finetuning

if TYPE_CHECKING:  # (annotations only: TensorFlow is imported where it is used)
    import tensorflow as tf

per_example_loss = per_example_squad_loss  # (start + end cross-entropy) / 2 [B]


@dataclasses.dataclass
class SquadOptions:
    """The original run_squad's feature and answer settings (its flags and defaults).

    Attributes:
        max_seq_length: S of a window (question + context).
        doc_stride: the context tokens between the starts of two windows.
        max_query_length: the most question tokens kept.
        predict_batch_size: B of prediction.
        n_best_size: the start/end candidates kept per window.
        max_answer_length: the longest answer span, in tokens.
        do_lower_case: the tokenizer's casing (for mapping answers back to text).
        version_2_with_negative: SQuAD 2.0: questions may have no answer.
        null_score_diff_threshold: "no answer" when null score - best score exceeds it.
        verbose_logging: log the answer-mapping failures.
        length_aware_batching: batch windows of similar length (this port's; not on a TPU).
    """

    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    predict_batch_size: int = 8
    n_best_size: int = 20
    max_answer_length: int = 30
    do_lower_case: bool = True
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0
    verbose_logging: bool = False
    # This port's: sort the windows by length and run each batch at its longest window
    # (ignored under a TPU strategy: static shapes). False: the original's padded path exactly.
    length_aware_batching: bool = True


def write_train_records(examples: List, tokenizer, path: str, options: SquadOptions,
                        seed: int) -> int:
    """Shuffles ``examples`` in place (``random.Random(seed)``) and writes their training
    features to ``path``; returns the number of features.

    Args:
        examples: the training ``SquadExample``s (shuffled in place).
        tokenizer: the ``FullTokenizer``.
        path: the TFRecord file to write.
        options: the ``SquadOptions``.
        seed: the shuffle seed.

    Returns:
        The number of features (windows) written.
    """
    random.Random(seed).shuffle(examples)
    with squad.FeatureWriter(path, is_training=True) as writer:
        squad.convert_examples_to_features(
            examples, tokenizer, options.max_seq_length, options.doc_stride,
            options.max_query_length, is_training=True, output_fn=writer.process_feature,
            show_progress=True)
    return writer.num_features


def dataset(record_file: str, seq_length: int, batch_size: int, is_training: bool,
            seed: Optional[int] = None, length_aware: bool = False) -> "tf.data.Dataset":
    """Training: repeated, shuffled full batches; else every record once (in file order unless
    ``length_aware``, which also cuts every batch to its longest window).

    Args:
        record_file: the SQuAD TFRecord file.
        seq_length: S of the records.
        batch_size: B.
        is_training: training batches (with start/end positions).
        seed: the shuffle seed.
        length_aware: see above (prediction only).

    Returns:
        A ``tf.data.Dataset`` of feature dicts (without TensorFlow installed, a
        ``data.glue.numpy_dataset.NumpyDataset`` of the same batches).
    """
    return squad_dataset.make_dataset(record_file, seq_length, is_training, batch_size,
                                      drop_remainder=is_training, seed=seed,
                                      length_aware=length_aware)


SEQUENCE_LENGTH = "sequence_length"


def _with_sequence_lengths(batch):
    """The batch with each window's real length [B] (tf.data's tensors or numpy arrays)."""
    mask = batch[squad_schema.INPUT_MASK]
    if isinstance(mask, np.ndarray):
        lengths = mask.sum(axis=-1).astype(np.int32)
    else:
        import tensorflow as tf

        lengths = tf.reduce_sum(mask, axis=-1)
    return dict(batch, **{SEQUENCE_LENGTH: lengths})


def predict_raw_results(model, eval_file: str, seq_length: int, batch_size: int,
                        strategy: Optional["tf.distribute.Strategy"] = None,
                        length_aware: bool = False) -> List:
    """``RawResult``s (float32 logits as python floats) for every record of an eval TFRecord.

    Padded (the original): every window runs at ``seq_length`` and its logits cover every
    position, padding included; padding positions cannot be an answer, but they still take
    part in choosing the ``n_best_size`` best start and end positions. ``length_aware``:
    windows of similar length are batched together, each batch runs at its longest window, and
    each result's logits cover the window's real positions only (the same for any batching):
    the answer can differ from the padded path only where the original let a padding
    position take one of those ``n_best_size`` slots.

    Args:
        model: the SQuAD model.
        eval_file: the eval TFRecord file.
        seq_length: S of the records.
        batch_size: B.
        strategy: the ``tf.distribute.Strategy`` (None: the default).
        length_aware: see above.

    Returns:
        A list of ``RawResult``, in record order.
    """
    batches = dataset(eval_file, seq_length, batch_size, False, length_aware=length_aware)
    if length_aware:
        batches = batches.map(_with_sequence_lengths)
    total = sum(1 for _ in numpy_reader.read_records(eval_file, check_crc=False))
    if total == 0:  # e.g. questions on empty contexts only: no window to run
        return []
    out = finetuning.predict(model, batches, ["start_logits", "end_logits"], total=total,
                             strategy=strategy)
    start_logits = out["start_logits"].astype(np.float32)  # [N, S] (S: longest batch)
    end_logits = out["end_logits"].astype(np.float32)  # [N, S]
    lengths = (out[SEQUENCE_LENGTH] if length_aware
               else np.full(len(start_logits), start_logits.shape[1]))  # [N]
    return [squad.RawResult(unique_id=int(u), start_logits=s[:n].tolist(),
                            end_logits=e[:n].tolist())
            for u, s, e, n in zip(out["unique_ids"], start_logits, end_logits, lengths)]


@dataclasses.dataclass
class Scoring:
    """A SQuAD file to score predictions against: its name (for messages) and its checked
    top-level object (``data.squad.evaluate.load_dataset``).

    Attributes:
        name: the file's name.
        dataset_json: its checked top-level object.
    """

    name: str
    dataset_json: dict


def _dicts_at(obj, keys) -> List[dict]:
    """The dicts reached from ``obj`` through the lists under ``keys`` (badly formed parts
    skipped: ``load_dataset`` reports them)."""
    level = [obj]
    for key in keys:
        level = [item for o in level if isinstance(o, dict) and isinstance(o.get(key), list)
                 for item in o[key]]
    return [o for o in level if isinstance(o, dict)]


def scoring_dataset(squad_file: Optional[str],
                    warn: Callable[[str], None] = logging.warning) -> Optional[Scoring]:
    """The SQuAD file to score predictions against, read and checked (``SquadEvalError``
    naming the file) before any output is written; None when there is nothing to score: no
    ``squad_file``, no question with answers (a test file), or questions the official scorer
    cannot score (one without an ``answers`` list, or, for v1.1 scoring (no question has
    ``is_impossible``), one with an empty list): then ``warn`` gets one line naming the file
    and the question. Predictions need no answers (the original reads them only for
    training), so these files are still predicted.

    Args:
        squad_file: the SQuAD JSON file, or None.
        warn: called with the line saying why nothing is scored.

    Returns:
        A ``Scoring``, or None.

    Raises:
        SquadEvalError: the file cannot be read or is not a SQuAD file.
    """
    if not squad_file:
        return None
    root = squad_eval.load_json(squad_file, "the dataset")
    questions = _dicts_at(root, ("data", "paragraphs", "qas"))
    if not any(qa.get("answers") for qa in questions):
        logging.info("%s has no answers: no official scores", squad_file)
        return None
    no_list = [qa for qa in questions if "answers" not in qa]
    if no_list:
        unscorable = [qa.get("id") for qa in no_list]
        reason = "has no 'answers' list"
    else:
        dataset_json = squad_eval.load_dataset(squad_file, root)
        unscorable = squad_eval.unscorable_v1_questions(dataset_json)
        reason = "has no answers (v1.1 scoring: no question has 'is_impossible')"
    if unscorable:
        warn("%s: question %r%s %s, so the official scorer cannot score the file: "
             "predictions only, no eval_results.json" % (
                 squad_file, unscorable[0],
                 " (and %d more)" % (len(unscorable) - 1) if len(unscorable) > 1 else "",
                 reason))
        return None
    return Scoring(squad_file, dataset_json)


def predict(model, examples: List, tokenizer, output_dir: str, options: SquadOptions,
            score_against: Union[str, Scoring, None] = None,
            strategy: Optional["tf.distribute.Strategy"] = None,
            write: bool = True) -> Optional[dict]:
    """Features, logits and the prediction files of ``examples`` in ``output_dir`` (see the
    module); returns the official scores when ``score_against`` (a SQuAD file, or what
    ``scoring_dataset`` made of it) can be scored, else None.

    Every input is checked before the first file is written (``score_against`` included);
    ``predictions.json``, ``nbest_predictions.json``, ``null_odds.json`` and
    ``eval_results.json`` are written together: all renamed into place only when every one is
    written, so a failure leaves the previous ones as they were.

    Args:
        model: the SQuAD model.
        examples: the ``SquadExample``s to predict.
        tokenizer: the ``FullTokenizer``.
        output_dir: where the prediction files are written.
        options: the ``SquadOptions``.
        score_against: a SQuAD file or ``Scoring`` to score against, or None.
        strategy: the ``tf.distribute.Strategy`` (None: the default).
        write: write the prediction files and score them (False: only the predictions' share
            of the computation, for a process of several that is not the writer).

    Returns:
        The official scores (a dict), or None (also without ``write``).

    Raises:
        InputError: bad input (e.g. an unscorable ``score_against``), before any file is written.
    """
    if not examples:
        raise InputError("no question to predict")
    scoring = (score_against if isinstance(score_against, Scoring)
               else scoring_dataset(score_against))
    eval_features = []
    eval_file = os.path.join(output_dir, "eval.tf_record")
    with squad.FeatureWriter(eval_file, is_training=False) as writer:
        def append_feature(feature):
            eval_features.append(feature)
            writer.process_feature(feature)

        squad.convert_examples_to_features(
            examples, tokenizer, options.max_seq_length, options.doc_stride,
            options.max_query_length, is_training=False, output_fn=append_feature,
            show_progress=True)
    logging.info("***** Running predictions *****")
    logging.info("  Num orig examples = %d", len(examples))
    logging.info("  Num split examples = %d", len(eval_features))
    logging.info("  Batch size = %d", options.predict_batch_size)

    length_aware = (options.length_aware_batching
                    and not (strategy is not None and resolve_strategy(strategy)[1]))
    all_results = predict_raw_results(model, writer.filename, options.max_seq_length,
                                      options.predict_batch_size, strategy=strategy,
                                      length_aware=length_aware)
    if not write:  # a process of several that is not the writer: its part is done
        return None
    prediction_file = os.path.join(output_dir, "predictions.json")
    null_odds_file = os.path.join(output_dir, "null_odds.json")
    triple = postprocess.compute_predictions(
        examples, eval_features, all_results, options.n_best_size, options.max_answer_length,
        options.do_lower_case, version_2_with_negative=options.version_2_with_negative,
        null_score_diff_threshold=options.null_score_diff_threshold,
        verbose_logging=options.verbose_logging)
    texts = postprocess.prediction_texts(
        triple, prediction_file, os.path.join(output_dir, "nbest_predictions.json"),
        null_odds_file, version_2_with_negative=options.version_2_with_negative)

    scores = None
    if scoring is not None:
        # Scored as the files will read (JSON keys are strings), before any is written.
        notes: List[str] = []
        scores = squad_eval.evaluate_dataset(
            scoring.dataset_json, json.loads(texts[0][1]),
            na_probs=json.loads(texts[2][1]) if options.version_2_with_negative else None,
            notify=notes.append, dataset_name=scoring.name, na_prob_name=null_odds_file)
        for note in notes[:5]:
            logging.warning("squad_eval: %s", note)
        texts.append((os.path.join(output_dir, "eval_results.json"),
                      json.dumps(scores, indent=2) + "\n"))
    logging.info("Writing %s", ", ".join(os.path.basename(path) for path, _ in texts))
    postprocess.write_files_together(texts)
    # An earlier run's null_odds.json / eval_results.json that this run does not write are
    # kept, as every tool keeps older results: run_outputs.json names them ("earlier") and
    # the tool warns (bert_cli.runner.mark_outputs).
    return scores


@dataclasses.dataclass
class SquadTask(Task):
    """SQuAD v1.1 / v2.0 as the driver runs it (run_squad).

    ``do_train`` reads ``train_file``; ``do_predict`` writes the prediction files of
    ``predict_file`` and, when that file has answers, prints and writes the official scores
    (``eval_results.json``); ``export_dir``: a raw-text SavedModel (question, context -> answer).
    The other arguments are the original run_squad's flags of the same names and defaults.

    Example::

        driver.run(SquadTask(predict_file="dev-v1.1.json"), settings)   # max_seq_length=384

    Args:
        train_file: the SQuAD training JSON (``do_train``).
        predict_file: the SQuAD JSON to predict (``do_predict``).
        doc_stride: see ``SquadOptions``.
        max_query_length: see ``SquadOptions``.
        n_best_size: see ``SquadOptions``.
        max_answer_length: see ``SquadOptions``.
        version_2_with_negative: see ``SquadOptions``.
        null_score_diff_threshold: see ``SquadOptions``.
        verbose_logging: see ``SquadOptions``.
    """

    actions = ("do_train", "do_predict", "export_dir")

    train_file: Optional[str] = None
    predict_file: Optional[str] = None
    _: dataclasses.KW_ONLY
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0
    verbose_logging: bool = False

    def options(self, ctx: Context) -> SquadOptions:
        """The feature and answer settings of this run.

        Args:
            ctx: the run's ``Context``.

        Returns:
            The ``SquadOptions``.
        """
        s = ctx.settings
        return SquadOptions(
            max_seq_length=s.max_seq_length, doc_stride=self.doc_stride,
            max_query_length=self.max_query_length, predict_batch_size=s.predict_batch_size,
            n_best_size=self.n_best_size, max_answer_length=self.max_answer_length,
            do_lower_case=s.do_lower_case, version_2_with_negative=self.version_2_with_negative,
            null_score_diff_threshold=self.null_score_diff_threshold,
            verbose_logging=self.verbose_logging,
            length_aware_batching=s.length_aware_batching)

    def check(self, ctx: Context) -> None:
        """See ``Task.check``: the files ``do_train``/``do_predict`` need, and ``max_seq_length``.
        """
        s = ctx.settings
        if s.do_train and not self.train_file:
            raise FlagError("If `do_train` is True, then `train_file` must be specified.")
        if s.do_predict and not self.predict_file:
            raise FlagError("If `do_predict` is True, then `predict_file` must be specified.")
        for name, used in (("train_file", s.do_train), ("predict_file", s.do_predict)):
            path = getattr(self, name)
            if used and files.isdir(path):
                raise FlagError("--%s=%s is a directory, not a SQuAD JSON file" % (name, path))
            if used and not files.isfile(path):
                raise FlagError("--%s=%s: no such file" % (name, path))
        if s.max_seq_length <= self.max_query_length + 3:
            raise FlagError("The max_seq_length (%d) must be greater than max_query_length (%d)"
                            " + 3" % (s.max_seq_length, self.max_query_length))

    def read(self, ctx: Context) -> None:
        """See ``Task.read``: the examples of ``train_file`` and ``predict_file``.
        """
        s = ctx.settings
        self.train_examples = self.eval_examples = self.scoring = None
        if s.do_train:
            self.train_examples = squad.read_squad_examples(
                self.train_file, is_training=True,
                version_2_with_negative=self.version_2_with_negative)
            if not self.train_examples:
                raise FlagError("--train_file=%s: no usable training question" % self.train_file)
        if s.do_predict:
            self.eval_examples = squad.read_squad_examples(
                self.predict_file, is_training=False,
                version_2_with_negative=self.version_2_with_negative)
            if not self.eval_examples:
                raise FlagError("--predict_file=%s: no question to predict (no 'qas' entry "
                                "under 'data')" % self.predict_file)
            # None: predictions only (a warning says why)
            self.scoring = scoring_dataset(self.predict_file, warn=ctx.warn)

    def build_model(self, ctx: Context):
        """See ``Task.build_model``: a ``BertSpanLabeler``.
        """
        from modeling.heads import squad as squad_head

        # static shapes on TPU; any window length elsewhere
        return squad_head.build_squad_model(ctx.bert_config, seq_length=ctx.seq_length)

    def train_dataset(self, ctx: Context):
        """See ``Task.train_dataset``.
        """
        s = ctx.settings
        train_file = ctx.path("train.tf_record")
        num_features = write_train_records(self.train_examples, ctx.tokenizer, train_file,
                                           self.options(ctx), seed=s.random_seed)
        logging.info("  Num split examples = %d", num_features)
        batches = dataset(train_file, s.max_seq_length, s.train_batch_size, True,
                          seed=s.random_seed,
                          length_aware=s.length_aware_batching and not ctx.tpu)
        return batches, len(self.train_examples)

    def per_example_loss(self, outputs, batch):
        """See ``Task.per_example_loss``: the mean of the start and end cross-entropies.
        """
        return per_example_squad_loss(outputs, batch)

    def predict(self, ctx: Context, model) -> None:
        """See ``Task.predict``: the prediction files and, when scorable, the official scores.
        """
        scores = predict(model, self.eval_examples, ctx.tokenizer, ctx.settings.output_dir,
                         self.options(ctx), score_against=self.scoring, strategy=ctx.strategy,
                         write=ctx.writer)
        if scores is None:
            return
        print(json.dumps(scores))
        if "best_f1_thresh" in scores:
            print("best null_score_diff_threshold on %s: %.6f (best_f1 %.2f, best_exact %.2f "
                  "at %.6f); rerun with --null_score_diff_threshold=%.6f to use it"
                  % (self.predict_file, scores["best_f1_thresh"], scores["best_f1"],
                     scores["best_exact"], scores["best_exact_thresh"],
                     scores["best_f1_thresh"]))

    def export(self, ctx: Context, model) -> None:
        """See ``Task.export``: a raw-text SavedModel in ``export_dir``.
        """
        s = ctx.settings
        if not s.export_dir:
            return
        from bert_tasks.exports import squad as squad_serving

        squad_serving.SquadServingModule(
            model, s.vocab_file, do_lower_case=s.do_lower_case,
            max_seq_length=s.max_seq_length, max_query_length=self.max_query_length,
            max_answer_length=self.max_answer_length,
            version_2_with_negative=self.version_2_with_negative,
            null_score_diff_threshold=self.null_score_diff_threshold).export_version(s.export_dir)
