"""Sentence (pair) classification and regression: records, datasets, in-order predictions.

* ``write_train_records(examples, ...)``: the training examples shuffled once, then written as
  records (see there why).
* ``dataset(record_file, ...)``: batches of classifier records (``data.glue.dataset``'s rule
  for training / eval / predict, length-aware off TPU).
* ``predict_examples(model, examples, ...)``: writes the examples' records and returns the
  model's outputs for the real examples, in example order.

Example::

    result = predict_examples(model, dev_examples, ["0", "1"], tokenizer, "eval.tf_record",
                              max_seq_length=128, batch_size=8)
    metrics = data.glue.metrics.eval_metrics("mrpc", result)   # eval_accuracy, eval_f1, ...
"""

from __future__ import annotations

import functools
import os
import random
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from data.glue import dataset as glue_dataset
from data.glue import features as glue_features
from data.glue.processors import PaddingInputExample
from modeling.heads.classifier import per_example_classifier_loss
from modeling.training import distribution, finetuning


def write_train_records(examples: List, label_list: List[str], max_seq_length: int, tokenizer,
                        path: str, seed: int) -> None:
    """Writes the training ``examples`` to ``path`` as classifier records, in an order shuffled
    with ``random.Random(seed)`` (``examples`` itself is left as it is).

    The training input shuffles with the original's buffer of 100 records, which only mixes
    neighbours: GLUE files can come sorted (STS-B by genre and source, CoLA by source), and then
    each stretch of an epoch trains on one genre (README "Benchmarks", the quality table, has
    what it cost on STS-B). The original's run_squad shuffles its training
    examples before writing them for the same reason ("to avoid having to make a very large
    shuffle buffer"); the classifier does the same here. The records of each example are the
    original's (``file_based_convert_examples_to_features``)."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    glue_features.file_based_convert_examples_to_features(order, label_list, max_seq_length,
                                                          tokenizer, path)


def per_example_loss(regression: bool):
    """The ``per_example_loss`` of ``finetune`` for this task (squared error for STS-B)."""
    return functools.partial(per_example_classifier_loss, regression=regression)


def dataset(record_file: str, max_seq_length: int, batch_size: int, is_training: bool, *,
            regression: bool = False, length_aware: bool = True, static_shapes: bool = False,
            seed: Optional[int] = None) -> tf.data.Dataset:
    """Batches of ``record_file`` (``input_ids``/``input_mask``/``segment_ids`` [B, S],
    ``label_ids`` [B], ``is_real_example`` [B], ``example_index`` [B] off training)."""
    decode = functools.partial(glue_dataset.decode_classifier_record,
                               max_seq_length=max_seq_length, regression=regression)
    return glue_dataset.task_dataset(record_file, decode, batch_size, is_training,
                                     length_aware=length_aware,
                                     static_shapes=static_shapes, seed=seed)


def predict_examples(model, examples: List, label_list: List[str], tokenizer, record_file: str,
                     *, max_seq_length: int, batch_size: int, regression: bool = False,
                     strategy: Optional[tf.distribute.Strategy] = None,
                     length_aware: bool = True) -> Dict[str, np.ndarray]:
    """Writes ``record_file`` and returns the model's outputs (``logits``/``probabilities``
    [N, K], or ``predictions`` [N]) with ``label_ids`` [N] for the N real examples, in order.

    On TPU the examples are padded with ``PaddingInputExample`` to a multiple of the batch
    size, as the original (static shapes); padding rows are dropped from the result.
    """
    strategy = strategy or tf.distribute.get_strategy()
    tpu = distribution.is_tpu(strategy)
    padded = list(examples)
    if tpu:
        padded += [PaddingInputExample()] * (-len(examples) % batch_size)
    glue_features.file_based_convert_examples_to_features(
        padded, label_list, max_seq_length, tokenizer, record_file)
    logging.info("  Num examples = %d (%d actual, %d padding)", len(padded), len(examples),
                 len(padded) - len(examples))
    names = ["predictions"] if regression else ["logits", "probabilities"]
    batches = dataset(record_file, max_seq_length, batch_size, False, regression=regression,
                      length_aware=length_aware, static_shapes=tpu)
    out = finetuning.predict(model, batches, names, total=len(padded), strategy=strategy,
                             label=os.path.basename(record_file))
    order = out.pop(glue_dataset.EXAMPLE_INDEX)
    result = {k: glue_dataset.restore_order(order, v) for k, v in out.items()}
    real = np.asarray(result.pop("is_real_example")) > 0
    if int(real.sum()) != len(examples):
        raise RuntimeError("lost examples in the input pipeline: %d of %d"
                           % (int(real.sum()), len(examples)))
    return {k: v[real] for k, v in result.items()}
