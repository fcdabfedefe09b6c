"""The original's pre-training metrics (``metric_fn``), for every Keras backend.

``head_metrics(outputs, batch)`` and ``eval_metrics`` return ``{name: (numerator,
denominator)}`` float32 sums over a batch, streamed over batches as the original's
``tf.metrics`` means: ``masked_lm_accuracy`` = Σ w·[argmax = id] / Σ w, ``masked_lm_loss`` =
Σ w·ℓ / Σ w (no +1e-5), ``next_sentence_accuracy`` and ``next_sentence_loss`` (means over
examples), and (``eval_metrics``) ``loss`` = the mean over batches of ``total_loss``. The
TensorFlow trainer and evaluation (``modeling.training.objectives``) and the JAX pre-training
(``bert_tasks.pretraining``) both use these.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from keras import ops

from modeling import backend

EVAL_KEYS = ("loss", "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
             "next_sentence_loss")


def _flat_weights(batch) -> Any:
    return ops.reshape(ops.cast(batch["masked_lm_weights"], "float32"), (-1,))  # [B*P]


def head_metrics(outputs, batch) -> Dict[str, Tuple[Any, Any]]:
    """The four head metrics as (numerator, denominator) sums over ``batch``.

    Args:
        outputs: the pre-training model's outputs (``masked_lm_log_probs`` [B*P, V],
            ``masked_lm_example_loss`` [B*P], ``next_sentence_log_probs`` [B, 2],
            ``next_sentence_example_loss`` [B]).
        batch: the record features (``masked_lm_ids``/``masked_lm_weights`` [B, P],
            ``next_sentence_labels`` [B] or [B, 1]).

    Returns:
        name -> (numerator, denominator) float32 scalars.
    """
    weights = _flat_weights(batch)  # [B*P]
    mlm_ids = ops.reshape(ops.cast(batch["masked_lm_ids"], "int32"), (-1,))  # [B*P]
    mlm_pred = backend.argmax(outputs["masked_lm_log_probs"])  # [B*P]
    mlm_correct = ops.cast(ops.equal(mlm_pred, mlm_ids), "float32")  # [B*P]
    mlm_loss = ops.cast(outputs["masked_lm_example_loss"], "float32")  # [B*P]
    nsp_labels = ops.reshape(ops.cast(batch["next_sentence_labels"], "int32"), (-1,))  # [B]
    nsp_pred = backend.argmax(outputs["next_sentence_log_probs"])  # [B]
    nsp_correct = ops.cast(ops.equal(nsp_pred, nsp_labels), "float32")  # [B]
    nsp_loss = ops.cast(outputs["next_sentence_example_loss"], "float32")  # [B]
    weight_sum = ops.sum(weights)
    count = ops.cast(ops.size(nsp_labels), "float32")
    return {
        "masked_lm_accuracy": (ops.sum(weights * mlm_correct), weight_sum),
        "masked_lm_loss": (ops.sum(weights * mlm_loss), weight_sum),
        "next_sentence_accuracy": (ops.sum(nsp_correct), count),
        "next_sentence_loss": (ops.sum(nsp_loss), count),
    }


def eval_metrics(outputs, batch) -> Dict[str, Tuple[Any, Any]]:
    """``head_metrics`` plus ``loss`` = (total_loss of the batch, 1).

    Args:
        outputs: the pre-training model's outputs, with ``total_loss``.
        batch: the record features.

    Returns:
        name -> (numerator, denominator) float32 scalars.
    """
    metrics = head_metrics(outputs, batch)
    metrics["loss"] = (ops.cast(outputs["total_loss"], "float32"), ops.ones((), "float32"))
    return metrics
