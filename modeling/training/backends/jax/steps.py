"""JAX's steps of the one training job (``modeling.training.job``): the compiled step, the
local devices, and the ``job.Steps`` that runs it between Orbax checkpoints.

``TrainState`` holds the values of the model's trainable and non-trainable variables (dropout
seed generators included) and of the optimizer's (iteration counter, slots);
``make_train_step(model, optimizer)`` returns a compiled ``step(state, batch) -> (state, logs)``:

1. ``model.stateless_call(..., training=True)``, and the loss: the TensorFlow trainer's
   ``Objective`` of the outputs (``modeling.training.objectives``: pre-training's MLM + NSP,
   the fine-tuning tasks' mean of the per-example losses), or the model's own scalar output
   ``loss_key`` (``"total_loss"`` for ``BertPretrainingModel``);
2. ``jax.value_and_grad`` of it;
3. ``optimizer.stateless_apply``: the clipping and the update rule of
   ``modeling.training.optimizers`` (``update_rules``, as on TensorFlow).

``logs`` holds the loss, the objective's ``(numerator, denominator)`` logs (or every other scalar
output of the model), ``global_norm`` (before clipping) and ``learning_rate`` (the rate this
update used). The batch is a dict of arrays (numpy or JAX) with the model's input names.
``TrainState.from_model``/``assign_to`` move values between the Keras variables and a state, so
that a checkpoint or an export reads the variables.

* ``distribute(batch_size, flag)``: ``keras.distribution.DataParallel`` over the local devices
  (GPUs, TPU cores) when there are several; set before the model is built. ``shard(batch,
  distribution)`` places a numpy batch split over them (training and prediction alike).
* ``Steps``: the job's steps. It restores the newest checkpoint of the job's ``model_dir``
  (``backends.jax.checkpoints``; the input positioned where it was: ``inputs.TFDataInput``
  restores its tf.data iterator, ``inputs.ReReadInput`` re-reads the numpy input up to the
  position), runs host loops of the compiled step, and saves. A rerun of a killed job ends bit
  for bit where an uninterrupted one ends (CPU).

Example (``KERAS_BACKEND=jax``)::

    model = modeling.BertPretrainingModel(config)
    optimizer = modeling.create_optimizer(1e-4, 1000, 100)
    optimizer.build(model.trainable_variables)
    step_fn = make_train_step(model, optimizer)
    data = inputs.ReReadInput(lambda records: my_batches(skip=records))  # or TFDataInput
    config = job.TrainerConfig(model_dir="out", num_train_steps=1000, keep_checkpoint_max=5)
    result = job.train(Steps(model, optimizer, step_fn, data, config, batch_size=32), config)
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import keras
import numpy as np
from absl import logging

from bert_common.errors import FlagError
from modeling.training import job
from modeling.training.backends.jax import checkpoints, cluster
from modeling.training.objectives import Objective
from modeling.training.optimizers import global_norm


@dataclasses.dataclass
class TrainState:
    """The values a step reads and returns (JAX arrays; a pytree).

    Attributes:
        trainable: the model's trainable variables' values, in ``model.trainable_variables``
            order.
        non_trainable: ``model.non_trainable_variables``' (dropout seeds among them).
        optimizer: ``optimizer.variables``' (the iteration counter, the slots).
    """

    trainable: List[Any]
    non_trainable: List[Any]
    optimizer: List[Any]

    @classmethod
    def from_model(cls, model: keras.Model, optimizer: keras.optimizers.Optimizer
                   ) -> "TrainState":
        """Copies of the variables' current values (the optimizer built on the trainable ones).

        Args:
            model: the model.
            optimizer: its optimizer, built.
        """
        # Copies: a compiled step donates the state's buffers, which must not be the
        # variables' own (the model would be left holding deleted arrays).
        import jax.numpy as jnp

        return cls([jnp.array(v.value) for v in model.trainable_variables],
                   [jnp.array(v.value) for v in model.non_trainable_variables],
                   [jnp.array(v.value) for v in optimizer.variables])

    def assign_to(self, model: keras.Model, optimizer: keras.optimizers.Optimizer) -> None:
        """Writes the state into the Keras variables (before a checkpoint or an export).

        Args:
            model: the model the state came from.
            optimizer: its optimizer.
        """
        checkpoints.assign(model, optimizer, vars(self))


def _flatten(state: TrainState):
    return (state.trainable, state.non_trainable, state.optimizer), None


def _unflatten(_, children):
    return TrainState(*children)


def _register_pytree():
    import jax

    try:
        jax.tree_util.register_pytree_node(TrainState, _flatten, _unflatten)
    except ValueError:  # registered already
        pass


def make_train_step(model: keras.Model, optimizer: keras.optimizers.Optimizer,
                    objective: Optional[Objective] = None, *, loss_key: str = "total_loss",
                    jit: bool = True, occurrence_norm: Sequence[Any] = ()
                    ) -> Callable[[TrainState, Mapping[str, Any]],
                                  Tuple[TrainState, Dict[str, Any]]]:
    """The compiled step ``(state, batch) -> (state, logs)`` (see the module docstring).

    Args:
        model: the model.
        optimizer: a ``modeling.training.optimizers`` optimizer, built on
            ``model.trainable_variables``.
        objective: what is minimised, a ``modeling.training.objectives.Objective`` (the
            TensorFlow trainer's: its share of the batch, which is the global batch here, and
            its ``(numerator, denominator)`` logs); None: the model's own scalar output
            ``loss_key``, its other scalar outputs logged.
        loss_key: the output minimised without an ``objective``.
        jit: compile with ``jax.jit`` (the state's buffers are donated: use the returned one).
        occurrence_norm: tables whose gradient the original's clipping norm counts once per
            looked-up position (``embeddings.sparse_gradient_tables`` of a task model, whose
            word table has no other use; not a pre-training model's, whose tied output makes
            it dense): the global norm that clips and is logged is then the original's
            (``modeling.backend.jax.occurrence_norm_tap``), where JAX's own gradient sums a
            repeated id's rows first.

    Returns:
        The step function (``KERAS_BACKEND=jax``: this module is the JAX backend's).
    """
    import jax

    _register_pytree()
    schedule = optimizer._learning_rate  # noqa: SLF001 - a float or a schedule of the iteration
    iterations_index = next(i for i, v in enumerate(optimizer.variables)
                            if v is optimizer.iterations)

    from modeling.backend import jax as jax_ops

    tapped_paths = [v.path for v in occurrence_norm]
    tapped = [any(v is t for t in occurrence_norm) for v in model.trainable_variables]

    def loss_fn(trainable, non_trainable, batch, tap):
        inputs = batch if objective is None else objective.model_inputs(batch)
        with jax_ops.occurrence_norm_tap(tapped_paths, tap):
            outputs, non_trainable = model.stateless_call(trainable, non_trainable, inputs,
                                                          training=True)
        if objective is None:  # the loss once, as ``loss``
            logs = {key: value for key, value in outputs.items()
                    if hasattr(value, "shape") and value.shape == () and key != loss_key}
            return outputs[loss_key], (logs, non_trainable)
        value, logs = objective(outputs, batch, objective.totals(batch))
        return value, (logs, non_trainable)

    grad_fn = jax.value_and_grad(loss_fn, argnums=(0, 3), has_aux=True)

    def step(state: TrainState, batch):
        (value, (logs, non_trainable)), (grads, squares) = grad_fn(
            state.trainable, state.non_trainable, batch, keras.ops.zeros((), "float32"))
        if tapped_paths:  # the original's norm: the tapped tables per occurrence
            norm = keras.ops.sqrt(keras.ops.square(global_norm(
                [g for g, t in zip(grads, tapped) if not t])) + squares)
        else:
            norm = global_norm(grads)
        iteration = state.optimizer[iterations_index]
        rate = schedule(iteration) if callable(schedule) else schedule
        # This project's optimizers clip by the norm given; another Keras optimizer by its own.
        clipping = getattr(optimizer, "clipping_norm", None)
        with clipping(norm) if clipping else contextlib.nullcontext():
            trainable, optimizer_values = optimizer.stateless_apply(state.optimizer, grads,
                                                                    state.trainable)
        logs = dict(logs, loss=value, global_norm=norm, learning_rate=rate)
        return TrainState(trainable, non_trainable, optimizer_values), logs

    return jax.jit(step, donate_argnums=0) if jit else step


def distribute(batch_size: int, flag: str = "--train_batch_size"):
    """``keras.distribution.DataParallel`` over every device of the run (every process's:
    ``cluster``) when there are several, set as Keras' distribution (before the model is
    built), else None.

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

    devices = cluster.mesh_devices()
    if len(devices) <= 1:
        return None
    if batch_size % len(devices):
        raise FlagError("%s=%d is not divisible by the %d devices%s"
                        % (flag, batch_size, len(devices),
                           " of the %d processes" % jax.process_count()
                           if jax.process_count() > 1 else ""))
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    return distribution


def device_names() -> str:
    """This process's devices, for the log (``cpu:0, cpu:1``; with the process among
    several)."""
    import jax

    names = ", ".join(str(d) for d in jax.local_devices())
    if jax.process_count() > 1:
        names += " (process %d of %d, %d devices in all)" % (
            jax.process_index(), jax.process_count(), jax.device_count())
    return names


def shard(batch: Mapping[str, np.ndarray], distribution, local: bool = False
          ) -> Mapping[str, Any]:
    """A global batch placed split over the devices along its first axis (as is without
    them); among several processes, each places its own rows (``cluster.local_rows``).

    Args:
        batch: name -> array [B, ...], the global batch; with ``local``, this process's rows
            of it [B / N, ...] (an input that each process reads for its own devices).
        distribution: ``distribute``'s result (None: as is).
        local: ``batch`` holds this process's rows only.
    """
    import jax

    if distribution is None:
        return batch
    several = jax.process_count() > 1
    rows = cluster.local_rows(batch) if several and not local else batch

    def place(value, rows_of_all):
        shape = (rows_of_all,) + np.shape(value)[1:]  # the global batch's
        layout = distribution.get_data_layout(shape)  # batch axis split, per rank
        sharding = getattr(layout, "backend_layout", layout)
        if several:
            return jax.make_array_from_process_local_data(sharding, np.asarray(value), shape)
        return jax.device_put(value, sharding)

    return {name: place(value, np.shape(value)[0] * jax.process_count() if local
                        else np.shape(batch[name])[0]) for name, value in rows.items()}


class Steps:
    """JAX's ``job.Steps``: the compiled step over the input's batches, between
    checkpoints in ``model_dir/jax_checkpoints`` (``backends.jax.checkpoints``: Orbax).

    Args:
        model: the model.
        optimizer: its optimizer, built on ``model.trainable_variables``.
        step_fn: ``make_train_step``'s step.
        data: the training input (``modeling.training.inputs``: ``ReReadInput`` or
            ``TFDataInput``), opened at the checkpoint resumed from.
        config: the job's settings (the ``TrainerConfig`` given to ``job.train``): its
            ``model_dir`` holds the checkpoints, ``keep_checkpoint_max`` of them kept.
        batch_size: the global batch (the records a step reads).
        distribution: ``distribute``'s result.
    """

    @property
    def is_chief(self) -> bool:
        """Process 0 writes the step log, summaries and progress (``cluster.is_writer``)."""
        return cluster.is_writer()

    @property
    def timed(self) -> bool:
        """Loop lengths by this process's clock in one process only: several take the same
        fixed lengths (``job.loop_steps``), so that they save at the same steps."""
        return cluster.process_count() == 1

    def __init__(self, model, optimizer, step_fn: Callable, data, config: job.TrainerConfig, *,
                 batch_size: int, distribution=None):
        self.model = model
        self.optimizer = optimizer
        self.step_fn = step_fn
        self.data = data
        self.output_dir = config.model_dir
        self.batch_size = batch_size
        self.keep_checkpoint_max = config.keep_checkpoint_max
        self.distribution = distribution
        self.state: Optional[TrainState] = None
        self.step = self.records = 0
        self._batches = None

    def restore(self) -> int:
        own = checkpoints.checkpoints_in(self.output_dir)
        if self.is_chief:
            checkpoints.remove_orphan_input_states(self.output_dir, [path for _, path in own])
        resumed = own[-1][1] if own else None
        self.step = self.records = 0
        if resumed:
            self.step, self.records = checkpoints.restore_checkpoint(resumed, self.model,
                                                                     self.optimizer)
            logging.info("Resuming from %s (step %d, %d records read)", resumed, self.step,
                         self.records)
        self.state = TrainState.from_model(self.model, self.optimizer)
        print("Training on JAX: devices %s, dtype policy %s" % (
            device_names(), keras.config.dtype_policy().name), file=sys.stderr, flush=True)
        self._batches = self.data.open(resumed, self.records)
        return self.step

    def run(self, num_steps: int) -> job.LoopOutput:
        import jax

        pending = []
        for _ in range(num_steps):
            self.state, logs = self.step_fn(self.state, shard(next(self._batches),
                                                              self.distribution,
                                                              getattr(self.data, "local", False)))
            pending.append(logs)
        pending = jax.device_get(pending)  # the loop's one wait for the device
        self.step += num_steps
        self.records += num_steps * self.batch_size
        means = {name: _loop_mean([r[name] for r in pending]) for name in pending[0]
                 if name not in ("learning_rate", "global_norm")}
        return job.LoopOutput([float(r["loss"]) for r in pending],
                              [float(r["learning_rate"]) for r in pending],
                              [float(r["global_norm"]) for r in pending], means)

    def global_batch(self) -> int:
        return self.batch_size

    def save(self) -> str:
        # every process: each writes its shards (process 0 the input state)
        return checkpoints.save_checkpoint(self.output_dir, self.state, self.model,
                                           self.optimizer, self.step, self.records,
                                           self.keep_checkpoint_max, self.data,
                                           writer=self.is_chief)

    def close(self, completed: bool) -> None:
        # After a failure the state's buffers may be donated to a step that never returned.
        if completed and self.state is not None:
            self.state.assign_to(self.model, self.optimizer)
        self._batches = None


def _loop_mean(values) -> float:
    """A loop's mean of one log: Σnumerator/Σdenominator of an objective's pairs (a streaming
    mean, as TensorFlow's steps sum them), else the mean of the steps' scalars."""
    if isinstance(values[0], (tuple, list)):
        denominator = sum(float(b) for _, b in values)
        return sum(float(a) for a, _ in values) / denominator if denominator else float("nan")
    return float(np.mean([float(v) for v in values]))
