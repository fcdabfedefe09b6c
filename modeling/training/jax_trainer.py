"""The training job on Keras' JAX backend, shared by ``run_pretraining.py`` and the fine-tuning
tools under ``KERAS_BACKEND=jax`` (docs/jax.md): the JAX twin of ``modeling.training.trainer``.

* ``distribute(batch_size, flag)``: ``keras.distribution.DataParallel`` over the local devices
  (GPUs, TPU cores) when there are several; set before the model is built. ``shard(batch,
  distribution)`` (``jax_training``'s) places a numpy batch split over them.
* Checkpoints ``<output_dir>/jax-ckpt-<step>.npz``, written atomically: every model and optimizer
  value (the dropout seed generators among them), the step and the records read (the input
  position); ``save_checkpoint`` / ``restore_checkpoint`` / ``checkpoints_in`` /
  ``restore_newest_model``.
* ``train(...)``: the loop. From the newest checkpoint of ``output_dir`` if there is one (the
  step log cut back to it, the input positioned where it was: ``TFDataInput`` restores its
  tf.data iterator, ``ReReadInput`` re-reads the numpy input up to the position), host
  loops of ``steps_per_loop`` compiled steps, the step log (``modeling.training.step_log``),
  TensorBoard in ``output_dir/train``, a progress line per loop, a checkpoint every
  ``save_checkpoints_steps`` and at the end. A rerun of a killed job ends bit for bit where an
  uninterrupted one ends (CPU).

Example (``KERAS_BACKEND=jax``)::

    step_fn = jax_training.make_train_step(model, optimizer)
    data = ReReadInput(lambda records: my_batches(skip=records))   # or TFDataInput(dataset)
    step = train(model, optimizer, step_fn, data, output_dir="out", num_train_steps=1000,
                 batch_size=32)
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import zipfile
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
from absl import logging

from bert_common import atomic
from bert_common import files as fs
from bert_common.errors import FlagError, InputError
from bert_common.progress import Progress
from bert_common.results import ScalarWriter
from modeling.training.jax_training import shard

CHECKPOINT_PATTERN = re.compile(r"^jax-ckpt-(\d+)\.npz$")


# ------------------------------------------------------------------------------ devices

def distribute(batch_size: int, flag: str = "--train_batch_size"):
    """``keras.distribution.DataParallel`` over the local devices when there are several, set
    as Keras' distribution (before the model is built), else None.

    Args:
        batch_size: the global batch, split evenly over the devices.
        flag: the flag that sets it, for the message.

    Returns:
        The distribution, or None on one device.

    Raises:
        FlagError: the batch does not split evenly.
    """
    import jax
    import keras

    devices = jax.local_devices()
    if len(devices) <= 1:
        return None
    if batch_size % len(devices):
        raise FlagError("%s=%d is not divisible by the %d local devices"
                        % (flag, batch_size, len(devices)))
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    return distribution


def device_names() -> str:
    """The local devices, for the log (``cpu:0, cpu:1``)."""
    import jax

    return ", ".join(str(d) for d in jax.local_devices())


# ------------------------------------------------------------------------------ checkpoints

def checkpoints_in(folder: str) -> List[Tuple[int, str]]:
    """``(step, path)`` of the JAX checkpoints in ``folder``, oldest first.

    Args:
        folder: the output folder.
    """
    found = []
    for path in fs.glob(os.path.join(folder, "jax-ckpt-*.npz")):
        match = CHECKPOINT_PATTERN.match(os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def save_checkpoint(folder: str, state, model, optimizer, step: int, records: int,
                    keep: int, data=None) -> str:
    """``folder/jax-ckpt-<step>.npz`` (atomic), then only the newest ``keep`` kept.

    Args:
        folder: the output folder.
        state: the ``TrainState``.
        model: the model (its variable paths are recorded, checked on restore).
        optimizer: the optimizer (likewise).
        step: the global step.
        records: examples read so far (the input position).
        keep: checkpoints kept (``--keep_checkpoint_max``; 0 keeps all).
        data: the training input (``TFDataInput`` saves its iterator state first), or None.

    Returns:
        The path written.
    """
    import jax

    arrays = {}
    for prefix, values in (("t", state.trainable), ("n", state.non_trainable),
                           ("o", state.optimizer)):
        for index, value in enumerate(jax.device_get(values)):
            arrays["%s%d" % (prefix, index)] = np.asarray(value)
    meta = {"step": step, "records": records,
            "variables": [v.path for v in model.trainable_variables],
            "non_trainable": [v.path for v in model.non_trainable_variables],
            "optimizer": [v.path for v in optimizer.variables]}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path = os.path.join(folder, "jax-ckpt-%d.npz" % step)
    if data is not None:
        data.save(path)  # before the checkpoint: a checkpoint found has its input state
    with atomic.atomic_open(path, "wb") as f:
        f.write(buffer.getvalue())
    if keep > 0:
        for _, old in checkpoints_in(folder)[:-keep]:
            fs.remove(old)
            if data is not None:
                data.remove(old)
    return path


def remove_orphan_input_states(folder: str, checkpoints: List[str]) -> List[str]:
    """Removes the input states (``jax-ckpt-<step>.input.*``) whose checkpoint is not in
    ``checkpoints``: a run killed between writing the state and its checkpoint leaves one.

    Args:
        folder: the output folder.
        checkpoints: the checkpoint paths found there.

    Returns:
        The paths removed.
    """
    kept = {os.path.basename(path)[:-len(".npz")] for path in checkpoints}
    removed = []
    for path in fs.glob(os.path.join(folder, "jax-ckpt-*.input.*")):
        name = os.path.basename(path)
        step = name[:name.index(".input.")]
        if CHECKPOINT_PATTERN.match(step + ".npz") and step not in kept:
            fs.remove(path)
            removed.append(path)
    return removed


def _read_checkpoint(path: str, model) -> Tuple[Dict[str, np.ndarray], dict]:
    try:
        with fs.open(path, "rb") as f:
            data = np.load(io.BytesIO(f.read()))
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(bytes(arrays.pop("meta")).decode("utf-8"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise InputError("%s: damaged checkpoint (%s)" % (path, e)) from None
    if meta["variables"] != [v.path for v in model.trainable_variables]:
        raise InputError("%s: a checkpoint of another model (its variables differ from this "
                         "run's); use another --output_dir" % path)
    return arrays, meta


def _take(arrays, prefix: str, count: int) -> List[np.ndarray]:
    return [arrays["%s%d" % (prefix, i)] for i in range(count)]


def restore_checkpoint(path: str, model, optimizer):
    """The ``TrainState`` and ``(step, records)`` of a checkpoint written by this run's model.

    Args:
        path: the checkpoint.
        model: the model.
        optimizer: its optimizer, built.

    Returns:
        ``(state, step, records)``.

    Raises:
        InputError: a damaged file, or one of another model or optimizer.
    """
    from modeling.training.jax_training import TrainState

    arrays, meta = _read_checkpoint(path, model)
    if meta["optimizer"] != [v.path for v in optimizer.variables]:
        raise InputError("%s: a checkpoint of another optimizer (its variables differ from this "
                         "run's); use another --output_dir" % path)
    # Through the variables, as a fresh run's state is made (``TrainState.from_model``): the
    # values placed and laid out alike, so a resumed run calls the step a fresh run compiles
    # (numpy values would make it trace and compile programs of its own).
    for prefix, variables in (("t", model.trainable_variables),
                              ("n", model.non_trainable_variables), ("o", optimizer.variables)):
        for variable, value in zip(variables, _take(arrays, prefix, len(variables))):
            variable.assign(value)
    state = TrainState.from_model(model, optimizer)
    return state, meta["step"], meta["records"]


def restore_newest_model(folder: str, model) -> Optional[Tuple[str, int]]:
    """The model's values from the newest checkpoint in ``folder`` (evaluating or predicting
    without training), or None when there is none.

    Args:
        folder: the output folder.
        model: the model.

    Returns:
        ``(path, step)`` of the checkpoint read, or None.

    Raises:
        InputError: as ``restore_checkpoint``.
    """
    own = checkpoints_in(folder)
    if not own:
        return None
    step, path = own[-1]
    arrays, _ = _read_checkpoint(path, model)
    for prefix, variables in (("t", model.trainable_variables),
                              ("n", model.non_trainable_variables)):
        for variable, value in zip(variables, _take(arrays, prefix, len(variables))):
            variable.assign(value)
    return path, step


# ------------------------------------------------------------------------------------ input

class ReReadInput:
    """Training input that a resumed run re-reads up to its position (numpy, no TensorFlow).

    Args:
        batches_after: ``records -> iterator`` of numpy batches after the first ``records``
            examples of the input.
    """

    def __init__(self, batches_after: Callable[[int], Iterator]):
        self._batches_after = batches_after

    def open(self, checkpoint: Optional[str], records: int) -> Iterator:
        """The batches from the position ``records`` (``checkpoint``: unused).

        Args:
            checkpoint: the checkpoint resumed from, or None.
            records: the examples read before it.
        """
        return self._batches_after(records)

    def save(self, checkpoint: str) -> None:
        """Nothing: the position is the checkpoint's record count.

        Args:
            checkpoint: the checkpoint being written.
        """

    def remove(self, checkpoint: str) -> None:
        """Nothing to remove.

        Args:
            checkpoint: a checkpoint being dropped.
        """


class TFDataInput:
    """Training input from a ``tf.data`` pipeline (where TensorFlow is installed), read as numpy
    batches; its iterator state (shuffle buffers included) is saved beside each checkpoint
    (``jax-ckpt-<step>.input.*``, a ``tf.train.Checkpoint``) and restored on resume, as the
    TensorFlow trainer does: nothing is re-read. A checkpoint without it (written by
    ``ReReadInput``) is resumed by skipping the batches read.

    Args:
        dataset: the repeated training batches.
        transform: applied to each numpy batch (e.g. ``jax_training.pad_batch``), or None.
    """

    def __init__(self, dataset, transform: Optional[Callable] = None):
        self.dataset = dataset
        self.transform = transform
        self._iterator = None
        self._batch_size: Optional[int] = None

    @staticmethod
    def state_prefix(checkpoint: str) -> str:
        """The iterator state's checkpoint prefix beside ``checkpoint``."""
        return checkpoint[:-len(".npz")] + ".input"

    def open(self, checkpoint: Optional[str], records: int) -> Iterator:
        """The batches from the checkpoint's position.

        Args:
            checkpoint: the checkpoint resumed from, or None (from the start).
            records: the examples read before it.
        """
        import tensorflow as tf

        dataset = self.dataset
        prefix = self.state_prefix(checkpoint) if checkpoint else None
        restore = prefix is not None and fs.exists(prefix + ".index")
        if checkpoint and not restore and records:
            batch = int(dataset.element_spec[next(iter(dataset.element_spec))].shape[0] or 0)
            if not batch:
                raise InputError("%s: no input state beside it, and the batches have no static "
                                 "size to skip by" % checkpoint)
            dataset = dataset.skip(records // batch)
        self._iterator = iter(dataset)
        if restore:
            tf.train.Checkpoint(input=self._iterator).read(prefix).assert_consumed()
        return self._batches()

    def _batches(self):
        for batch in self._iterator:
            values = {name: value.numpy() for name, value in batch.items()}
            yield self.transform(values) if self.transform else values

    def save(self, checkpoint: str) -> None:
        """The iterator's state beside ``checkpoint`` (before it is written).

        Args:
            checkpoint: the checkpoint being written.
        """
        import tensorflow as tf

        tf.train.Checkpoint(input=self._iterator).write(self.state_prefix(checkpoint))

    def remove(self, checkpoint: str) -> None:
        """The iterator state of a checkpoint being dropped.

        Args:
            checkpoint: the checkpoint.
        """
        for path in fs.glob(self.state_prefix(checkpoint) + ".*"):
            fs.remove(path)


# ------------------------------------------------------------------------------------ loop

def train(model, optimizer, step_fn: Callable, data, *,
          output_dir: str, num_train_steps: int, batch_size: int, steps_per_loop: int = 1000,
          save_checkpoints_steps: int = 1000, keep_checkpoint_max: int = 5,
          distribution=None) -> int:
    """Trains to ``num_train_steps`` from the newest checkpoint in ``output_dir`` (if any); the
    trained values are left in the model's variables. See the module.

    Args:
        model: the model.
        optimizer: its optimizer, built on ``model.trainable_variables``.
        step_fn: ``jax_training.make_train_step``'s step.
        data: the training input, ``ReReadInput`` or ``TFDataInput`` (positioned at the
            checkpoint resumed from).
        output_dir: checkpoints, the step log and ``train/`` TensorBoard events.
        num_train_steps: the step to train to.
        batch_size: the global batch (the records a step reads).
        steps_per_loop: steps per host loop (and per log line).
        save_checkpoints_steps: steps between checkpoints (0: at the end only).
        keep_checkpoint_max: checkpoints kept (0: all).
        distribution: ``distribute``'s result.

    Returns:
        The global step reached.
    """
    import jax

    from modeling.training import jax_training, step_log

    own = checkpoints_in(output_dir)
    remove_orphan_input_states(output_dir, [path for _, path in own])
    resumed = own[-1][1] if own else None
    if resumed:
        state, step, records = restore_checkpoint(resumed, model, optimizer)
        logging.info("Resuming from %s (step %d, %d records read)", resumed, step, records)
    else:
        state, step, records = jax_training.TrainState.from_model(model, optimizer), 0, 0
    log_path = step_log.path_in(output_dir)
    step_log.truncate(log_path, step)
    total = num_train_steps
    import keras

    logging.info("***** Running training on JAX *****  batch size %d, %d steps (from %d)",
                 batch_size, total, step)
    print("Training on JAX: devices %s, dtype policy %s" % (
        device_names(), keras.config.dtype_policy().name), file=sys.stderr, flush=True)
    progress = Progress("train step", total, unit="steps")
    batches = data.open(resumed, records)
    loop = max(1, steps_per_loop)
    save_every = save_checkpoints_steps or total
    writer = ScalarWriter(os.path.join(output_dir, "train"))
    try:
        while step < total:
            n = min(loop, total - step, save_every - step % save_every)
            pending = []
            for _ in range(n):
                state, logs = step_fn(state, shard(next(batches), distribution))
                pending.append(logs)
            pending = jax.device_get(pending)
            first = step + 1
            step += n
            records += n * batch_size
            step_log.append(log_path, first, [float(r["loss"]) for r in pending],
                            [float(r["learning_rate"]) for r in pending],
                            [float(r["global_norm"]) for r in pending])
            for offset, r in enumerate(pending):
                writer.write(first + offset, {k: float(v) for k, v in r.items()})
            last = pending[-1]
            progress.update(step, "loss %.4f lr %.5g" % (float(last["loss"]),
                                                         float(last["learning_rate"])))
            if step % save_every == 0 or step == total:
                path = save_checkpoint(output_dir, state, model, optimizer, step, records,
                                       keep_checkpoint_max, data)
                print("Saved checkpoint for step %d: %s" % (step, path), file=sys.stderr,
                      flush=True)
    finally:
        writer.close()
    progress.finish()
    state.assign_to(model, optimizer)
    return step


__all__ = ["ReReadInput", "TFDataInput", "checkpoints_in", "device_names",
           "distribute", "remove_orphan_input_states", "restore_checkpoint",
           "restore_newest_model", "save_checkpoint", "shard", "train"]
