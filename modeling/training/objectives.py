"""Pre-training loss shares for ``training_loop.Trainer`` and the original's eval metrics.

Model outputs used (``modeling.heads.pretraining.BertPretrainingModel``):
``masked_lm_example_loss`` [B*P], ``masked_lm_log_probs`` [B*P, V],
``next_sentence_example_loss`` [B], ``next_sentence_log_probs`` [B, 2], ``total_loss`` [].

Training loss (the original's ``total_loss``)::

    masked_lm_loss     = Σ w·ℓ / (Σ w + 1e-5)       (w = masked_lm_weights, over the batch)
    next_sentence_loss = mean over examples of ℓ_nsp
    total_loss         = masked_lm_loss + next_sentence_loss

``PretrainingObjective`` returns the share of ``total_loss`` carried by a (micro-)batch given
the global totals Σw and B (see ``training_loop``): Σ_part w·ℓ / (Σw + 1e-5) + Σ_part ℓ_nsp / B.
On one replica without accumulation this is the original's ``total_loss`` of the batch. Every
gradient is made dense before clipping, as in the original graph (``dense_gradient``).

Metrics (``eval_metrics``; (numerator, denominator) pairs, i.e. streaming means over batches as
the original ``metric_fn``'s ``tf.metrics``): ``masked_lm_accuracy`` = Σ w·[argmax = id] / Σ w,
``masked_lm_loss`` = Σ w·ℓ / Σ w (no +1e-5), ``next_sentence_accuracy``, ``next_sentence_loss``
(plain means over examples) and ``loss`` = mean over batches of ``total_loss``. Training logs
are the same four metrics over the training batches.
"""

from __future__ import annotations

from typing import Dict, Tuple

import tensorflow as tf

from modeling.encoder import INPUT_NAMES
from modeling.heads.pretraining import MLM_LOSS_EPSILON, PRETRAINING_INPUT_NAMES
from modeling.training import trainer as training_loop

# The model's inputs, named as the pre-training records' features (data.pretraining.schema):
# the model defines the names, the records follow them.
MODEL_INPUT_NAMES = tuple(INPUT_NAMES) + tuple(PRETRAINING_INPUT_NAMES)

EVAL_KEYS = ("loss", "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
             "next_sentence_loss")


def _flat_weights(batch) -> tf.Tensor:
    return tf.reshape(tf.cast(batch["masked_lm_weights"], tf.float32), [-1])  # [B*P]


def head_metrics(outputs, batch) -> Dict[str, Tuple[tf.Tensor, tf.Tensor]]:
    """The four head metrics as (numerator, denominator) sums over ``batch``."""
    weights = _flat_weights(batch)  # [B*P]
    mlm_ids = tf.reshape(tf.cast(batch["masked_lm_ids"], tf.int32), [-1])  # [B*P]
    mlm_pred = tf.argmax(outputs["masked_lm_log_probs"], axis=-1, output_type=tf.int32)
    mlm_correct = tf.cast(tf.equal(mlm_pred, mlm_ids), tf.float32)  # [B*P]
    mlm_loss = tf.cast(outputs["masked_lm_example_loss"], tf.float32)  # [B*P]
    nsp_labels = tf.reshape(tf.cast(batch["next_sentence_labels"], tf.int32), [-1])  # [B]
    nsp_pred = tf.argmax(outputs["next_sentence_log_probs"], axis=-1, output_type=tf.int32)
    nsp_correct = tf.cast(tf.equal(nsp_pred, nsp_labels), tf.float32)  # [B]
    nsp_loss = tf.cast(outputs["next_sentence_example_loss"], tf.float32)  # [B]
    weight_sum = tf.reduce_sum(weights)
    count = tf.cast(tf.size(nsp_labels), tf.float32)
    return {
        "masked_lm_accuracy": (tf.reduce_sum(weights * mlm_correct), weight_sum),
        "masked_lm_loss": (tf.reduce_sum(weights * mlm_loss), weight_sum),
        "next_sentence_accuracy": (tf.reduce_sum(nsp_correct), count),
        "next_sentence_loss": (tf.reduce_sum(nsp_loss), count),
    }


def eval_metrics(outputs, batch) -> Dict[str, Tuple[tf.Tensor, tf.Tensor]]:
    """``head_metrics`` plus ``loss`` = (total_loss of the batch, 1)."""
    metrics = head_metrics(outputs, batch)
    metrics["loss"] = (tf.cast(outputs["total_loss"], tf.float32), tf.constant(1.0))
    return metrics


def model_inputs(batch) -> Dict[str, tf.Tensor]:
    """The pre-training model's inputs: the 7 record features."""
    return {name: batch[name] for name in MODEL_INPUT_NAMES}


class PretrainingObjective(training_loop.Objective):
    """MLM + NSP loss shares over global-batch totals (see the module docstring)."""

    log_names = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                 "next_sentence_loss")

    def model_inputs(self, batch):
        return model_inputs(batch)

    def totals(self, batch):
        labels = batch["next_sentence_labels"]
        return {"masked_lm_weight": tf.reduce_sum(_flat_weights(batch)),
                "examples": tf.cast(tf.shape(labels)[0], tf.float32)}

    def __call__(self, outputs, batch, totals):
        weights = _flat_weights(batch)  # [B*P]
        mlm_example = tf.cast(outputs["masked_lm_example_loss"], tf.float32)  # [B*P]
        nsp_example = tf.cast(outputs["next_sentence_example_loss"], tf.float32)  # [B]
        mlm = tf.reduce_sum(weights * mlm_example) / (totals["masked_lm_weight"]
                                                      + MLM_LOSS_EPSILON)
        nsp = tf.reduce_sum(nsp_example) / totals["examples"]
        return mlm + nsp, head_metrics(outputs, batch)

    def dense_gradient(self, variable) -> bool:
        """All dense, as in the original pre-training graph: the word-embedding gradient is
        summed with the tied output layer's (dense), token types go through a one-hot matmul,
        positions through a slice. Clipping then uses the norm of the summed rows."""
        return True
