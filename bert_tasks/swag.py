"""SWAG multiple choice: records, datasets, in-order predictions and the eval metrics.

* ``dataset(record_file, ...)``: batches of SWAG records (ids/mask/segments [B, 4, S]).
* ``predict_examples(model, examples, ...)``: writes the records, returns ``logits`` /
  ``probabilities`` [N, 4] in example order.
* ``eval_metrics(examples, result)``: ``eval_accuracy``, ``eval_loss`` and ``loss``.
"""

from __future__ import annotations

import functools
import os
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from data import swag
from data.glue import dataset as glue_dataset
from data.glue import metrics as glue_metrics
from modeling.heads.classifier import per_example_classifier_loss
from modeling.training import distribution, finetuning

# Cross-entropy over the 4 endings' logits [B, 4]: the classifier's loss.
per_example_loss = per_example_classifier_loss


def dataset(record_file: str, max_seq_length: int, batch_size: int, is_training: bool, *,
            length_aware: bool = True, static_shapes: bool = False,
            seed: Optional[int] = None) -> tf.data.Dataset:
    """Batches of ``record_file``: ``input_ids``/``input_mask``/``segment_ids`` [B, 4, S],
    ``label_ids`` [B], ``is_real_example`` [B], ``example_index`` [B] off training."""
    decode = functools.partial(swag.parse_example, max_seq_length=max_seq_length)
    return glue_dataset.task_dataset(record_file, decode, batch_size, is_training,
                                     length_aware=length_aware,
                                     static_shapes=static_shapes, seed=seed)


def predict_examples(model, examples: List, tokenizer, record_file: str, *, max_seq_length: int,
                     batch_size: int, strategy: Optional[tf.distribute.Strategy] = None,
                     length_aware: bool = True) -> Dict[str, np.ndarray]:
    """Writes ``record_file``; returns ``logits``/``probabilities`` [N, 4] and ``label_ids``
    [N] in example order. On TPU the last example is repeated up to a full batch (static
    shapes) and the copies are dropped from the result."""
    strategy = strategy or tf.distribute.get_strategy()
    tpu = distribution.is_tpu(strategy)
    n = len(examples)
    if tpu and n % batch_size:
        examples = list(examples) + [examples[-1]] * (-n % batch_size)
    swag.write_tf_records(examples, max_seq_length, tokenizer, record_file)
    batches = dataset(record_file, max_seq_length, batch_size, False, length_aware=length_aware,
                      static_shapes=tpu)
    out = finetuning.predict(model, batches, ["logits", "probabilities"], total=len(examples),
                             strategy=strategy, label=os.path.basename(record_file))
    order = out.pop(glue_dataset.EXAMPLE_INDEX)
    return {k: glue_dataset.restore_order(order, v)[:n] for k, v in out.items()}


def eval_metrics(examples: List, result: Dict[str, np.ndarray]) -> Dict[str, float]:
    """``eval_accuracy`` of the highest-scoring ending, ``eval_loss`` (mean cross-entropy) and
    ``loss`` for labelled ``examples`` and their ``result`` (``logits`` [N, 4])."""
    labels = np.array([e.label for e in examples])
    logits = result["logits"]
    loss = glue_metrics.mean_cross_entropy(logits, labels)
    return {"eval_accuracy": glue_metrics.accuracy(np.argmax(logits, -1), labels),
            "eval_loss": loss, "loss": loss}
