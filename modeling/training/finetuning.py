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
* ``Predictor(model, output_names).run(dataset)`` / ``predict(...)``: runs the model
  (``training=False``) over every batch and returns numpy arrays of the chosen outputs plus the
  batch's non-model features (``label_ids``, ``is_real_example``, ``example_index``),
  concatenated in dataset order (per-token outputs of trimmed batches zero-padded to the
  longest).

Under ``KERAS_BACKEND=jax`` (docs/jax.md) ``predict`` reads the dataset as numpy batches and
runs ``backends.jax.predict.Predictor`` (the same outputs and features); training on
JAX is ``bert_tasks.driver``'s JAX part.

Batches may differ in sequence length (length-aware batching): the training loop is traced for
the dataset's element spec (unknown length) and the prediction step with a relaxed signature, so
that a new length builds no new graph.

Example (a classifier on your own records; ``make_dataset`` from ``data.glue.dataset``)::

    model = modeling.BertClassifier(encoder, num_classes=2)
    optimizer = modeling.create_optimizer(2e-5, num_train_steps, num_warmup_steps)
    result = finetune(model, optimizer, train_dataset,
                      lambda out, batch: classification_loss(out["logits"], batch["label_ids"]),
                      model_dir="out", num_train_steps=num_train_steps)
    probabilities = predict(model, eval_dataset, ["probabilities"])["probabilities"]  # [N, 2]
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, TYPE_CHECKING

import numpy as np
from absl import logging

from bert_common.progress import Progress
from modeling.kernels import switch

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

    if loss_weights:
        objective = objectives.WeightedMeanLossObjective(per_example_loss, loss_weights,
                                                         MODEL_INPUT_NAMES)
    else:
        objective = objectives.MeanLossObjective(per_example_loss, MODEL_INPUT_NAMES)
    config = job.TrainerConfig(
        model_dir=model_dir, num_train_steps=num_train_steps, steps_per_loop=steps_per_loop,
        save_checkpoints_steps=save_checkpoints_steps, keep_checkpoint_max=keep_checkpoint_max,
        use_xla=use_xla, progress=progress, checkpoint_name=CHECKPOINT_NAME,
        fuse_optimizer=fuse_optimizer, fused_kernels=fused_kernels)
    return trainer.Trainer(model, optimizer, objective, strategy, config).train(dataset)


def relaxed_spec(element_spec):
    """The dataset's element spec with every dimension unknown (one trace for all shapes).

    Args:
        element_spec: a ``tf.data`` element spec (nested).
    """
    import tensorflow as tf

    return tf.nest.map_structure(
        lambda spec: tf.TensorSpec([None] * spec.shape.rank, spec.dtype, name=spec.name),
        element_spec)


def model_inputs(batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The model's three inputs of a batch (``input_ids``, ``input_mask``, ``segment_ids``).

    Args:
        batch: a batch dict with more features (labels, weights, indexes).
    """
    return {name: batch[name] for name in MODEL_INPUT_NAMES}


class Predictor:
    """Runs ``model`` (``training=False``) over datasets, one compiled step reused by every call.

    ``run(dataset)`` returns numpy arrays of ``output_names`` and of the batches' other features
    (``label_ids``, ``is_real_example``, ``example_index``), concatenated in dataset order.

    Args:
        model: the model (dict in, dict out).
        output_names: the model outputs to collect.
        strategy: the distribution strategy; None = the default.
    """

    def __init__(self, model, output_names: Sequence[str], strategy=None):
        import tensorflow as tf

        from modeling.training import strategies

        self._model = model
        self.output_names = list(output_names)
        self.strategy = strategy or tf.distribute.get_strategy()
        self.distributed = (self.strategy.num_replicas_in_sync > 1
                            or strategies.is_tpu(self.strategy))
        self._steps = {}
        self.fused_kernels = strategies.prediction_kernels_apply(self.strategy, model.variables)

    @property
    def model(self):
        return self._model

    def _forward(self, batch):
        outputs = self.model(model_inputs(batch), training=False)
        result = {name: outputs[name] for name in self.output_names}
        for name, value in batch.items():
            if name not in MODEL_INPUT_NAMES:
                result[name] = value
        return result

    def _step(self, element_spec):
        import tensorflow as tf

        key = repr(relaxed_spec(element_spec))
        if key not in self._steps:
            kernels = switch.Kernels(inference=self.fused_kernels)

            # The layers read their kernels while the step is traced: the model carries them
            # for the trace (the replica threads of a MirroredStrategy see the model's value).
            def forward(batch):
                with switch.use_kernels(self.model, kernels):
                    if self.distributed:
                        return self.strategy.run(self._forward, args=(batch,))
                    return self._forward(batch)

            if self.distributed:
                self._steps[key] = tf.function(forward, reduce_retracing=True)
            else:
                self._steps[key] = tf.function(forward,
                                               input_signature=[relaxed_spec(element_spec)])
        return self._steps[key]

    def run(self, dataset: tf.data.Dataset, total: Optional[int] = None,
            label: str = "predict") -> Dict[str, np.ndarray]:
        """The outputs and features of every batch of ``dataset``, concatenated in order.

        Args:
            dataset: finite batches of feature dicts.
            total: the number of examples, for the progress line's ETA (None: unknown).
            label: the progress line's prefix.

        Returns:
            Name -> numpy array [N, ...] (per-token outputs zero-padded to the longest).
        """
        step = self._step(dataset.element_spec)
        if self.distributed:
            dataset = self.strategy.experimental_distribute_dataset(dataset)
        chunks: Dict[str, List[np.ndarray]] = {}
        done = 0
        reporter = Progress(label, total, unit="examples") if total else None
        for batch in dataset:
            out = step(batch)  # traced on the first call
            for name, value in out.items():
                parts = (self.strategy.experimental_local_results(value) if self.distributed
                         else [value])
                chunks.setdefault(name, []).extend(np.asarray(p) for p in parts)
            done = sum(len(c) for c in chunks[self.output_names[0]])
            if reporter is not None:
                reporter.update(done)
        if total and done != total:
            logging.info("%s: %d of %d examples", label, done, total)
        return {name: concatenate_padded(parts) for name, parts in chunks.items()}


def concatenate_padded(parts: Sequence[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts, axis=0)``; parts whose other axes are shorter (per-token outputs
    of length-trimmed batches, [b, s, ...]) are zero-padded at the end to the longest first.

    Args:
        parts: arrays [b_i, ...].

    Returns:
        [sum b_i, ...].
    """
    rank = parts[0].ndim
    longest = [max(p.shape[axis] for p in parts) for axis in range(1, rank)]
    padded = [p if list(p.shape[1:]) == longest else
              np.pad(p, [(0, 0)] + [(0, n - p.shape[axis + 1]) for axis, n in enumerate(longest)])
              for p in parts]
    return np.concatenate(padded, axis=0)


class _CachedPredictor(Predictor):
    """A Predictor kept in ``_PREDICTORS``: it holds its model weakly (the cache entry must not
    keep the model, its key, alive)."""

    def __init__(self, model, output_names: Sequence[str], strategy=None):
        super().__init__(model, output_names, strategy)
        self._model = weakref.ref(model)

    @property
    def model(self):
        return self._model()


# model -> {(output names, strategy id): predictor}: one traced step per model and outputs, so
# that predicting again (an eval per epoch, a benchmark's passes) does not trace the model again.
_PREDICTORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def predict(model, dataset: tf.data.Dataset, output_names: Sequence[str],
            total: Optional[int] = None, strategy=None,
            label: str = "predict") -> Dict[str, np.ndarray]:
    """``Predictor(model, output_names, strategy).run(dataset, total, label)``, the Predictor
    kept with the model for the next call.

    Args:
        model: the model.
        dataset: finite batches.
        output_names: the outputs to collect.
        total: the number of examples (for the ETA), or None.
        strategy: the distribution strategy, or None.
        label: the progress line's prefix.

    Returns:
        As ``Predictor.run``.
    """
    from modeling import backend

    if not backend.TENSORFLOW:
        return _predict_on_jax(model, dataset, output_names, total, label)
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    per_model = _PREDICTORS.setdefault(model, {})
    key = (tuple(output_names), id(strategy), switch.inference_kernels_allowed())
    predictor = per_model.get(key)
    if predictor is None or predictor.strategy is not strategy:
        predictor = per_model[key] = _CachedPredictor(model, output_names, strategy)
    return predictor.run(dataset, total, label)


def _predict_on_jax(model, dataset: tf.data.Dataset, output_names: Sequence[str],
                    total: Optional[int], label: str) -> Dict[str, np.ndarray]:
    """``predict`` under ``KERAS_BACKEND=jax``: the dataset's numpy batches (a ``tf.data``
    pipeline's, or a ``NumpyDataset``'s where TensorFlow is not installed) feed
    ``backends.jax.predict.Predictor`` (over Keras' distribution, when one is set)."""
    import keras

    from modeling.training.backends.jax import predict

    predictor = predict.Predictor(model, output_names, MODEL_INPUT_NAMES)
    chunks: Dict[str, List[np.ndarray]] = {}
    reporter = Progress(label, total, unit="examples") if total else None
    done = 0
    for out in predictor.run(dataset.as_numpy_iterator(), keras.distribution.distribution()):
        for name, value in out.items():
            chunks.setdefault(name, []).append(value)
        done += len(out[predictor.output_names[0]])
        if reporter is not None:
            reporter.update(done)
    if total and done != total:
        logging.info("%s: %d of %d examples", label, done, total)
    return {name: concatenate_padded(parts) for name, parts in chunks.items()}
