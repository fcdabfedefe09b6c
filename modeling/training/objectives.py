"""What a training step optimizes, on every backend: the ``Objective`` contract, mean-loss
objectives, pre-training's (``keras.ops``: TensorFlow's steps and JAX's call the same ones).

**Objective contract.** The steps (``backends.tensorflow.steps.Trainer``,
``backends.jax.steps.make_train_step``) know nothing about BERT; an ``Objective`` says what to
feed the model and how to turn its outputs into a loss::

    class MyObjective(objectives.Objective):
        def model_inputs(self, batch):            # dict of tensors -> the model's inputs
            return {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
        def totals(self, batch):                   # float32 scalars summed over a batch
            return {"examples": ops.cast(ops.shape(batch["label_ids"])[0], "float32")}
        def __call__(self, outputs, batch, totals):
            per_example = ...                                        # [b]
            share = ops.sum(per_example) / totals["examples"]        # this part's share
            logs = {"accuracy": (num_correct, count)}                # (numerator, denominator)
            return share, logs

``totals`` is evaluated on the replica's whole batch and, in the default ``mean_then_clip``
gradient reduction, summed over all replicas: it is the *global batch*'s totals (on JAX, one
program over the devices, the batch is the global batch). The objective
returns the share of the global-batch loss carried by the (micro-)batch it is given, so the
shares of all micro-batches and replicas add up to the loss of the global batch and the summed
gradients are its gradient: N replicas x k accumulation steps give the same update as one
replica on the whole batch, for weighted means too (the MLM loss). With the optimizer's
``clip_then_sum`` reduction (the original's TPU semantics) totals are per replica: each replica
gets the gradient of its own loss, clips it, and the clipped gradients are summed.
``MeanLossObjective(per_example_fn, input_names)`` covers the plain mean-of-examples case,
``WeightedMeanLossObjective`` a weighted mean (per-token losses of the scored tokens);
``mean_loss_objective`` picks the fine-tuning tools' one.

Logs are ``{name: (numerator, denominator)}`` pairs, summed over micro-batches, replicas and the
steps of a loop; the value shown is Σnumerator/Σdenominator (a streaming mean, like
``tf.metrics.mean``). The loop adds ``loss`` (the mean global-batch loss per step).

**Pre-training.** Model outputs used (``modeling.heads.pretraining.BertPretrainingModel``):
``masked_lm_example_loss`` [B*P], ``masked_lm_log_probs`` [B*P, V],
``next_sentence_example_loss`` [B], ``next_sentence_log_probs`` [B, 2], ``total_loss`` [].

Training loss (the original's ``total_loss``)::

    masked_lm_loss     = Σ w·ℓ / (Σ w + 1e-5)       (w = masked_lm_weights, over the batch)
    next_sentence_loss = mean over examples of ℓ_nsp
    total_loss         = masked_lm_loss + next_sentence_loss

``PretrainingObjective`` returns the share of ``total_loss`` carried by a (micro-)batch given
the global totals Σw and B (the contract above): Σ_part w·ℓ / (Σw + 1e-5) + Σ_part ℓ_nsp / B.
On one replica without accumulation this is the original's ``total_loss`` of the batch. Every
gradient is made dense before clipping, as in the original graph (``dense_gradient``).

Metrics (``eval_metrics``; (numerator, denominator) pairs, i.e. streaming means over batches as
the original ``metric_fn``'s ``tf.metrics``): ``masked_lm_accuracy`` = Σ w·[argmax = id] / Σ w,
``masked_lm_loss`` = Σ w·ℓ / Σ w (no +1e-5), ``next_sentence_accuracy``, ``next_sentence_loss``
(plain means over examples) and ``loss`` = mean over batches of ``total_loss``. Training logs
are the same four metrics over the training batches.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import keras
from keras import ops

from modeling.encoder import INPUT_NAMES
from modeling.training.pretraining_metrics import _flat_weights, head_metrics
from modeling.heads.pretraining import MLM_LOSS_EPSILON, PRETRAINING_INPUT_NAMES

Logs = Dict[str, Tuple[Any, Any]]  # {name: (numerator, denominator)}


# ------------------------------------------------------------------------- the contract


class Objective:
    """What to feed the model and how to score it (see the module docstring).

    ``log_names``: the names of the logs ``__call__`` returns (fixed, so that loops can start
    their sums at zero). ``model_inputs(batch)`` returns the model's inputs: the features
    named in ``input_names`` (None: the whole batch); ``totals(batch)`` float32 scalars
    summed over the global batch (default: ``examples``); ``__call__(outputs, batch,
    totals)`` returns ``(share, logs)``: the batch's share of the global-batch loss and
    ``{name: (numerator, denominator)}``.
    """

    log_names: Tuple[str, ...] = ()
    input_names: Optional[Tuple[str, ...]] = None

    def model_inputs(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        """The model's inputs from ``batch``: its ``input_names`` features, or the whole batch.

        Args:
            batch: the (micro-)batch's features, name -> [b, ...].

        Returns:
            The model's inputs, name -> tensor.
        """
        if self.input_names is None:
            return batch
        return {name: batch[name] for name in self.input_names}

    def totals(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        """Float32 scalars of ``batch`` that the loop sums over the global batch.

        Args:
            batch: the (micro-)batch's features, name -> [b, ...].

        Returns:
            name -> scalar (default: ``{"examples": b}``).
        """
        first = keras.tree.flatten(batch)[0]
        return {"examples": ops.cast(ops.shape(first)[0], "float32")}

    def __call__(self, outputs, batch, totals) -> Tuple[Any, Logs]:
        raise NotImplementedError

    def dense_gradient(self, variable) -> bool:
        """Whether ``variable``'s gradient is made dense before clipping even where the
        original's lookup keeps it sparse (``embeddings.sparse_gradient_tables``: the word
        embeddings off TPU). A ``tf.gather`` gradient (IndexedSlices) is clipped by a norm
        that counts repeated ids separately. Default: no, the original's rule alone.

        Args:
            variable: a trainable variable.

        Returns:
            True to make its gradient dense.
        """
        return False


class MeanLossObjective(Objective):
    """loss = mean over the global batch of ``per_example_fn(outputs, batch)`` [b].

    Args:
      per_example_fn: ``(outputs, batch) -> [b]`` per-example losses.
      input_names: the batch features fed to the model (default: the whole batch).
    """

    def __init__(self, per_example_fn: Callable, input_names: Optional[Sequence[str]] = None):
        self.per_example_fn = per_example_fn
        self.input_names = tuple(input_names) if input_names else None

    def __call__(self, outputs, batch, totals):
        per_example = ops.cast(self.per_example_fn(outputs, batch), "float32")  # [b]
        return ops.sum(per_example) / totals["examples"], {}


class WeightedMeanLossObjective(MeanLossObjective):
    """loss = Σ w·ℓ / Σ w over the global batch, ``ℓ = per_item_fn(outputs, batch)`` and
    ``w = batch[weight_name]`` of the same shape [b, ...] (e.g. per-token losses [b, s] with
    weight 1.0 where a token is scored: the mean over the batch's scored tokens).

    Args:
      per_item_fn: ``(outputs, batch) -> [b, ...]`` per-item losses.
      weight_name: the batch feature holding the weights, the shape of the losses.
      input_names: the batch features fed to the model (default: the whole batch).
    """

    def __init__(self, per_item_fn: Callable, weight_name: str,
                 input_names: Optional[Sequence[str]] = None):
        super().__init__(per_item_fn, input_names)
        self.weight_name = weight_name

    def totals(self, batch):
        """See ``Objective.totals``: the sum of the weights.

        Args:
            batch: the (micro-)batch's features.

        Returns:
            ``{"weight": Σ w}``.
        """
        return {"weight": ops.sum(ops.cast(batch[self.weight_name], "float32"))}

    def __call__(self, outputs, batch, totals):
        per_item = ops.cast(self.per_example_fn(outputs, batch), "float32")  # [b, ...]
        weights = ops.cast(batch[self.weight_name], "float32")  # [b, ...]
        return ops.divide_no_nan(ops.sum(weights * per_item), totals["weight"]), {}


def mean_loss_objective(per_example_fn: Callable, weight_name: Optional[str] = None,
                        input_names: Sequence[str] = INPUT_NAMES) -> MeanLossObjective:
    """The fine-tuning objective: the mean over the global batch of ``per_example_fn(outputs,
    batch)`` [b], or with ``weight_name`` Σ w·ℓ / Σ w over per-item losses and the batch's
    weights of the same shape (NER: the mean over the scored tokens).

    Args:
        per_example_fn: ``(outputs, batch) -> [b]`` (or [b, ...] with ``weight_name``).
        weight_name: the batch feature holding the weights, or None.
        input_names: the batch features fed to the model (the encoder's three).

    Returns:
        A ``MeanLossObjective`` or ``WeightedMeanLossObjective``.
    """
    if weight_name:
        return WeightedMeanLossObjective(per_example_fn, weight_name, input_names)
    return MeanLossObjective(per_example_fn, input_names)


# -------------------------------------------------------------------------- pre-training

# The model's inputs, named as the pre-training records' features (data.pretraining.schema):
# the model defines the names, the records follow them.
MODEL_INPUT_NAMES = tuple(INPUT_NAMES) + tuple(PRETRAINING_INPUT_NAMES)

def model_inputs(batch) -> Dict[str, Any]:
    """The pre-training model's inputs: the 7 record features.

    Args:
        batch: the pre-training record features.

    Returns:
        The ``MODEL_INPUT_NAMES`` features, name -> tensor.
    """
    return {name: batch[name] for name in MODEL_INPUT_NAMES}


class PretrainingObjective(Objective):
    """MLM + NSP loss shares over global-batch totals (see the module docstring)."""

    log_names = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                 "next_sentence_loss")
    input_names = MODEL_INPUT_NAMES

    def totals(self, batch):
        """See ``Objective.totals``: Σw of the masked LM weights and the example count B.

        Args:
            batch: the pre-training record features.

        Returns:
            ``{"masked_lm_weight", "examples"}`` float32 scalars.
        """
        labels = batch["next_sentence_labels"]
        return {"masked_lm_weight": ops.sum(_flat_weights(batch)),
                "examples": ops.cast(ops.shape(labels)[0], "float32")}

    def __call__(self, outputs, batch, totals):
        weights = _flat_weights(batch)  # [B*P]
        mlm_example = ops.cast(outputs["masked_lm_example_loss"], "float32")  # [B*P]
        nsp_example = ops.cast(outputs["next_sentence_example_loss"], "float32")  # [B]
        mlm = ops.sum(weights * mlm_example) / (totals["masked_lm_weight"] + MLM_LOSS_EPSILON)
        nsp = ops.sum(nsp_example) / totals["examples"]
        return mlm + nsp, head_metrics(outputs, batch)

    def dense_gradient(self, variable) -> bool:
        """All dense, as in the original pre-training graph: the word-embedding gradient is
        summed with the tied output layer's (dense), token types go through a one-hot matmul,
        positions through a slice. Clipping then uses the norm of the summed rows.

        Args:
            variable: a trainable variable.

        Returns:
            True.
        """
        return True
