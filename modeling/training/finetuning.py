"""A small fine-tuning loop and batched prediction (run_classifier, run_swag, run_squad).

* ``make_optimizer(init_lr, num_train_steps, num_warmup_steps, loss_scale, use_tpu)``: the
  project's ``modeling.training.optimization.create_optimizer`` (the original's AdamWeightDecay).
* ``train(model, optimizer, dataset, num_train_steps, loss_fn, ...)``: one optimizer update per
  batch, loss = mean of ``loss_fn(outputs, batch)`` [B] (the original's
  ``tf.reduce_mean(per_example_loss)``), gradients averaged over replicas; progress (step,
  loss, steps/s, ETA) on stderr; an optional callback every ``save_every`` steps and at the end;
  ``use_xla`` compiles the step (one replica). A deliberately small loop: fine-tuning runs are
  short and not resumed (``modeling.training.trainer.Trainer`` is the resumable pre-training loop).
* ``Predictor(model, output_names).run(dataset)`` / ``predict(...)``: runs the model
  (``training=False``) over every batch and returns numpy arrays of the chosen outputs plus the
  batch's non-model features (``label_ids``, ``is_real_example``, ``example_index``),
  concatenated in dataset order.

The tools' flag plumbing (seeds, ``--init_checkpoint``, step counts) is in ``bert_cli.finetuning``.

Batches may differ in sequence length (length-aware batching): the step functions are traced
with ``reduce_retracing`` so that a new length does not build a new graph.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from modeling.training import distribution

MODEL_INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


def make_optimizer(init_lr: float, num_train_steps: int, num_warmup_steps: int,
                   loss_scale=None, use_tpu: bool = False):
    """The original's optimizer and schedule: ``modeling.training.optimization.create_optimizer``
    (AdamWeightDecay, clipping by global norm 1.0; ``loss_scale`` from
    ``modeling.training.distribution.Precision`` for float16; ``use_tpu`` for the TPU reduction)."""
    from modeling.training import optimization

    return optimization.create_optimizer(init_lr, num_train_steps, num_warmup_steps,
                                         loss_scale=loss_scale, use_tpu=use_tpu)


def progress(label: str, done: int, total: int, start: float, extra: str = "") -> None:
    """One progress line on stderr: done/total, rate, ETA."""
    elapsed = max(time.time() - start, 1e-9)
    rate = done / elapsed
    eta = (total - done) / rate if rate > 0 else float("inf")
    print("%s %d/%d, %.2f/s, ETA %.0fs%s" % (label, done, total, rate, eta, extra),
          file=sys.stderr, flush=True)


def relaxed_spec(element_spec):
    """The dataset's element spec with every dimension unknown (one trace for all shapes)."""
    return tf.nest.map_structure(
        lambda spec: tf.TensorSpec([None] * spec.shape.rank, spec.dtype, name=spec.name),
        element_spec)


def model_inputs(batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    return {name: batch[name] for name in MODEL_INPUT_NAMES}


def train(model, optimizer, dataset: tf.data.Dataset, num_train_steps: int,
          loss_fn: Callable[[Dict[str, tf.Tensor], Dict[str, tf.Tensor]], tf.Tensor],
          strategy=None, log_every: int = 10,
          on_save: Optional[Callable[[int], None]] = None, save_every: int = 0,
          use_xla: bool = False) -> List[float]:
    """Runs ``num_train_steps`` updates; returns the loss of every step (see module doc)."""
    strategy = strategy or tf.distribute.get_strategy()
    spec = relaxed_spec(dataset.element_spec)
    dataset = strategy.experimental_distribute_dataset(dataset)
    variables = model.trainable_variables
    scales_loss = hasattr(optimizer, "scale_loss")

    def step_fn(batch):
        with tf.GradientTape() as tape:
            outputs = model(model_inputs(batch), training=True)
            loss = tf.reduce_mean(loss_fn(outputs, batch))  # []
            scaled = loss / strategy.num_replicas_in_sync
            if scales_loss:
                scaled = optimizer.scale_loss(scaled)
        grads = tape.gradient(scaled, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    def train_step_fn(batch):
        per_replica = strategy.run(step_fn, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

    if strategy.num_replicas_in_sync > 1 or distribution.is_tpu(strategy):
        train_step = tf.function(train_step_fn, reduce_retracing=True)
    else:
        # One trace for every batch shape; with XLA one compilation per distinct length.
        train_step = tf.function(train_step_fn, input_signature=[spec], jit_compile=use_xla)

    losses: List[float] = []
    start = time.time()
    iterator = iter(dataset)
    for step in range(1, num_train_steps + 1):
        losses.append(float(train_step(next(iterator))))
        if step % log_every == 0 or step == num_train_steps:
            progress("train step", step, num_train_steps, start, ", loss %.4f" % losses[-1])
        if on_save is not None and ((save_every and step % save_every == 0)
                                    or step == num_train_steps):
            on_save(step)
    return losses


class Predictor:
    """Runs ``model`` (``training=False``) over datasets, one compiled step reused by every call.

    ``run(dataset)`` returns numpy arrays of ``output_names`` and of the batches' other features
    (``label_ids``, ``is_real_example``, ``example_index``), concatenated in dataset order.
    """

    def __init__(self, model, output_names: Sequence[str], strategy=None):
        self.model = model
        self.output_names = list(output_names)
        self.strategy = strategy or tf.distribute.get_strategy()
        self.distributed = (self.strategy.num_replicas_in_sync > 1
                            or distribution.is_tpu(self.strategy))
        self._steps = {}

    def _forward(self, batch):
        outputs = self.model(model_inputs(batch), training=False)
        result = {name: outputs[name] for name in self.output_names}
        for name, value in batch.items():
            if name not in MODEL_INPUT_NAMES:
                result[name] = value
        return result

    def _step(self, element_spec):
        key = repr(relaxed_spec(element_spec))
        if key not in self._steps:
            if self.distributed:
                self._steps[key] = tf.function(
                    lambda batch: self.strategy.run(self._forward, args=(batch,)),
                    reduce_retracing=True)
            else:
                self._steps[key] = tf.function(self._forward,
                                               input_signature=[relaxed_spec(element_spec)])
        return self._steps[key]

    def run(self, dataset: tf.data.Dataset, total: Optional[int] = None,
            label: str = "predict") -> Dict[str, np.ndarray]:
        step = self._step(dataset.element_spec)
        if self.distributed:
            dataset = self.strategy.experimental_distribute_dataset(dataset)
        chunks: Dict[str, List[np.ndarray]] = {}
        done = 0
        start = time.time()
        next_report = 0
        for batch in dataset:
            out = step(batch)
            for name, value in out.items():
                parts = (self.strategy.experimental_local_results(value) if self.distributed
                         else [value])
                chunks.setdefault(name, []).extend(np.asarray(p) for p in parts)
            done = sum(len(c) for c in chunks[self.output_names[0]])
            if total and done >= next_report:
                progress(label, done, total, start)
                next_report = done + max(1, total // 10)
        if total and done != total:
            logging.info("%s: %d of %d examples", label, done, total)
        return {name: np.concatenate(parts, axis=0) for name, parts in chunks.items()}


def predict(model, dataset: tf.data.Dataset, output_names: Sequence[str],
            total: Optional[int] = None, strategy=None,
            label: str = "predict") -> Dict[str, np.ndarray]:
    """``Predictor(model, output_names, strategy).run(dataset, total, label)`` (one-off)."""
    return Predictor(model, output_names, strategy).run(dataset, total, label)



def write_eval_results(path: str, metrics: Dict) -> None:
    """``eval_results.txt`` as the original: ``key = value`` lines in sorted key order (atomic);
    each line is logged too."""
    from bert_common.files import atomic_open

    with atomic_open(path) as writer:
        logging.info("***** Eval results *****")
        for key in sorted(metrics):
            logging.info("  %s = %s", key, metrics[key])
            writer.write("%s = %s\n" % (key, metrics[key]))
