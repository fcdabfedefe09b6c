"""Fine-tuning on the one trainer, and batched prediction (classifier, SQuAD, SWAG, your task).

* ``finetune(model, optimizer, dataset, per_example_loss, model_dir=..., num_train_steps=...)``:
  ``backends.tensorflow.steps.Trainer`` with a mean-of-examples objective: loss = mean over the
  global batch of ``per_example_loss(outputs, batch)`` [B] (the original's
  ``tf.reduce_mean(per_example_loss)``). Everything the trainer does comes with it: host loops,
  checkpoints with the optimizer state and the data position in ``model_dir`` (a restarted run
  resumes from the newest; ``keep_checkpoint_max`` are kept), TensorBoard scalars in
  ``model_dir/train``, ``train_steps.jsonl``, a progress line per loop, and the gradient
  reduction of the optimizer (``use_tpu=True``: each core clips its own gradient, then the
  clipped gradients are summed, as the original's ``CrossShardOptimizer``).
* ``predict(model, dataset, output_names)``: runs the model (``training=False``) over every
  batch and returns numpy arrays of the chosen outputs plus the batch's non-model features
  (``label_ids``, ``is_real_example``, ``example_index``), concatenated in dataset order
  (per-token outputs of trimmed batches zero-padded to the longest): on TensorFlow
  ``backends.tensorflow.predict.Predictor`` (one step traced with a relaxed signature: a new
  batch length builds no new graph), under ``KERAS_BACKEND=jax`` (docs/jax.md)
  ``backends.jax.predict`` (the dataset read as numpy batches, the same outputs and features).
  Training on JAX is ``bert_tasks.driver``'s JAX part.

Batches may differ in sequence length (length-aware batching): the training loop is traced for
the dataset's element spec (unknown length).

Example (a classifier on your own records; ``make_dataset`` from ``data.glue.dataset``)::

    model = modeling.BertClassifier(encoder, num_classes=2)
    optimizer = modeling.create_optimizer(2e-5, num_train_steps, num_warmup_steps)
    result = finetune(model, optimizer, train_dataset,
                      lambda out, batch: classification_loss(out["logits"], batch["label_ids"]),
                      model_dir="out", num_train_steps=num_train_steps)
    probabilities = predict(model, eval_dataset, ["probabilities"])["probabilities"]  # [N, 2]
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # (annotations only: TensorFlow is imported where it is used)
    import tensorflow as tf
    from modeling.training import job

# TensorFlow and the TensorFlow trainer are imported where they are used: ``predict`` serves
# the JAX backend too, where TensorFlow may not be installed.

MODEL_INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
CHECKPOINT_NAME = "model.ckpt"  # the original Estimator's model_dir/model.ckpt-<step>

PerExampleLoss = Callable[[Dict[str, Any], Dict[str, Any]], Any]  # (outputs, batch) -> [B]


def finetune(model, optimizer, dataset: tf.data.Dataset, per_example_loss: PerExampleLoss, *,
             model_dir: str, num_train_steps: int,
             strategy: Optional[tf.distribute.Strategy] = None, steps_per_loop: int = 100,
             save_checkpoints_steps: int = 1000, keep_checkpoint_max: int = 5,
             use_xla: bool = False, progress: bool = True,
             loss_weights: Optional[str] = None, fuse_optimizer: bool = False,
             fused_kernels: bool = False) -> job.TrainResult:
    """Trains ``model`` to ``num_train_steps`` (resuming from ``model_dir``); see the module.

    ``dataset``: global batches of dicts holding ``input_ids``/``input_mask``/``segment_ids``
    [B, S] plus what ``per_example_loss`` reads (e.g. ``label_ids`` [B]); repeated, with
    ``drop_remainder`` (every update sees a full batch, as the original on TPU).
    ``per_example_loss(outputs, batch)``: [B] losses. Checkpoints are
    ``model_dir/model.ckpt-<step>`` (model, optimizer, data position).
    ``loss_weights``: a feature of the batch with the shape of the losses (e.g. per-token
    losses [B, S] and ``label_weights`` [B, S]): the loss is then Σ w·ℓ / Σ w over the global
    batch instead of the mean over examples.
    ``fuse_optimizer`` / ``fused_kernels``: the trainer's fast path for one local replica
    (``TrainerConfig``; the tools' ``--xla_optimizer`` / ``--xla_kernels``, on by default):
    values within float rounding of the op-by-op step, other dropout masks.

    Args:
        model: the task model, built in ``strategy``'s scope.
        optimizer: ``create_optimizer``'s.
        dataset: the training batches (above).
        per_example_loss: ``(outputs, batch) -> [B]`` losses.
        model_dir: where checkpoints and TensorBoard logs go.
        num_train_steps: the step to train to.
        strategy: the distribution strategy; None = the default.
        steps_per_loop: steps per compiled loop (and per log line).
        save_checkpoints_steps: steps between checkpoints.
        keep_checkpoint_max: checkpoints kept.
        use_xla: compile the step with XLA.
        progress: log progress lines.
        loss_weights: the weighting feature, or None (above).
        fuse_optimizer: the fused optimizer step (above).
        fused_kernels: the fused CPU kernels (above).

    Returns:
        The trainer's ``TrainResult`` (``global_step``, ``logs``, ``step_losses``,
    ``examples_per_sec``).
    """
    from modeling.training import job, objectives
    from modeling.training.backends.tensorflow import steps as trainer

    objective = objectives.mean_loss_objective(per_example_loss, loss_weights,
                                               MODEL_INPUT_NAMES)
    config = job.TrainerConfig(
        model_dir=model_dir, num_train_steps=num_train_steps, steps_per_loop=steps_per_loop,
        save_checkpoints_steps=save_checkpoints_steps, keep_checkpoint_max=keep_checkpoint_max,
        use_xla=use_xla, progress=progress, checkpoint_name=CHECKPOINT_NAME,
        fuse_optimizer=fuse_optimizer, fused_kernels=fused_kernels)
    return trainer.Trainer(model, optimizer, objective, strategy, config).train(dataset)


def predict(model, dataset, output_names: Sequence[str], total: Optional[int] = None,
            strategy=None, label: str = "predict") -> Dict[str, np.ndarray]:
    """The outputs ``output_names`` of ``model`` (``training=False``) over every batch of
    ``dataset``, with the batches' other features, concatenated in order (see the module); on
    the running backend (``backends.current("predict")``: TensorFlow's ``Predictor``, kept
    with the model for the next call, or JAX's compiled forward).

    Args:
        model: the model.
        dataset: finite batches (a ``tf.data.Dataset``; on JAX without TensorFlow a
            ``data.glue.numpy_dataset.NumpyDataset``).
        output_names: the outputs to collect.
        total: the number of examples (for the ETA), or None.
        strategy: the distribution strategy (TensorFlow), or None.
        label: the progress line's prefix.

    Returns:
        Name -> numpy array [N, ...] (per-token outputs zero-padded to the longest).
    """
    from modeling.training import backends

    return backends.current("predict").predict(model, dataset, output_names, total=total,
                                               strategy=strategy, label=label)
