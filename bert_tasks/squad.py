"""SQuAD v1.1 / v2.0: training records, datasets, raw logits and the prediction files.

* ``write_train_records(examples, tokenizer, path, options, seed)``: the examples shuffled
  (as the original, so that a small shuffle buffer suffices) and written as training features;
  returns the number of features (windows).
* ``dataset(record_file, seq_length, batch_size, is_training)``: batches of SQuAD records.
* ``predict_raw_results(model, eval_file, ...)``: one ``RawResult`` per eval feature.
* ``predict(model, examples, tokenizer, output_dir, options)``: ``eval.tf_record``,
  ``predictions.json``, ``nbest_predictions.json``, ``null_odds.json`` (v2.0) and, with
  ``score_against`` (a SQuAD file with answers), the official scores in ``eval_results.json``.

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
from typing import List, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from bert_common.files import atomic_open
from bert_common import files
from data.squad import dataset as squad_dataset
from data.squad import evaluate as squad_eval
from data.squad import features as squad
from modeling.heads.squad import per_example_squad_loss
from modeling.training import finetuning

per_example_loss = per_example_squad_loss  # (start + end cross-entropy) / 2 [B]


@dataclasses.dataclass
class SquadOptions:
    """The original run_squad's feature and answer settings (its flags and defaults)."""

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


def write_train_records(examples: List, tokenizer, path: str, options: SquadOptions,
                        seed: int) -> int:
    """Shuffles ``examples`` in place (``random.Random(seed)``) and writes their training
    features to ``path``; returns the number of features."""
    random.Random(seed).shuffle(examples)
    with squad.FeatureWriter(path, is_training=True) as writer:
        squad.convert_examples_to_features(
            examples, tokenizer, options.max_seq_length, options.doc_stride,
            options.max_query_length, is_training=True, output_fn=writer.process_feature,
            show_progress=True)
    return writer.num_features


def dataset(record_file: str, seq_length: int, batch_size: int, is_training: bool,
            seed: Optional[int] = None) -> tf.data.Dataset:
    """Training: repeated, shuffled full batches; else every record once, in file order."""
    return squad_dataset.make_dataset(record_file, seq_length, is_training, batch_size,
                                      drop_remainder=is_training, seed=seed)


def predict_raw_results(model, eval_file: str, seq_length: int, batch_size: int,
                        strategy: Optional[tf.distribute.Strategy] = None) -> List:
    """``RawResult``s (float32 logits as python floats) for every record of an eval TFRecord."""
    batches = dataset(eval_file, seq_length, batch_size, False)
    total = sum(1 for _ in tf.data.TFRecordDataset(eval_file))
    out = finetuning.predict(model, batches, ["start_logits", "end_logits"], total=total,
                             strategy=strategy)
    start_logits = out["start_logits"].astype(np.float32)  # [N, S]
    end_logits = out["end_logits"].astype(np.float32)  # [N, S]
    return [squad.RawResult(unique_id=int(u), start_logits=s.tolist(), end_logits=e.tolist())
            for u, s, e in zip(out["unique_ids"], start_logits, end_logits)]


def has_answers(squad_file: str) -> bool:
    """Whether any question of a SQuAD file carries a non-empty ``answers`` list."""
    with files.open(squad_file) as f:
        data = json.load(f)["data"]
    return any(qa.get("answers") for article in data for paragraph in article["paragraphs"]
               for qa in paragraph["qas"])


def predict(model, examples: List, tokenizer, output_dir: str, options: SquadOptions,
            score_against: Optional[str] = None,
            strategy: Optional[tf.distribute.Strategy] = None) -> Optional[dict]:
    """Features, logits and the prediction files of ``examples`` in ``output_dir`` (see the
    module); returns the official scores when ``score_against`` has answers, else None."""
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

    all_results = predict_raw_results(model, writer.filename, options.max_seq_length,
                                      options.predict_batch_size, strategy=strategy)
    prediction_file = os.path.join(output_dir, "predictions.json")
    null_odds_file = os.path.join(output_dir, "null_odds.json")
    squad.write_predictions(
        examples, eval_features, all_results, options.n_best_size, options.max_answer_length,
        options.do_lower_case, prediction_file, os.path.join(output_dir, "nbest_predictions.json"),
        null_odds_file, version_2_with_negative=options.version_2_with_negative,
        null_score_diff_threshold=options.null_score_diff_threshold,
        verbose_logging=options.verbose_logging)

    if not score_against or not has_answers(score_against):
        logging.info("predict file has no answers: no official scores")
        return None
    notes: List[str] = []
    scores = squad_eval.evaluate_files(
        score_against, prediction_file,
        na_prob_file=null_odds_file if options.version_2_with_negative else None,
        notify=notes.append)
    for note in notes[:5]:
        logging.warning("squad_eval: %s", note)
    with atomic_open(os.path.join(output_dir, "eval_results.json")) as f:
        f.write(json.dumps(scores, indent=2) + "\n")
    return scores
