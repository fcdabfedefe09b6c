"""TensorFlow's steps of the one training job (``modeling.training.job``): host loops of a
compiled step under any ``tf.distribute`` strategy, and the ``model.ckpt-N`` checkpoint store.

The job (loop lengths, step log, progress, TensorBoard, checkpoint cadence) is
``job.train``'s, the same on every backend; run_pretraining.py uses ``Trainer`` directly, the
fine-tuning tools through ``modeling.training.finetuning.finetune`` (a mean-of-examples
objective). The step knows nothing about BERT: an ``Objective``
(``modeling.training.objectives``: the contract, ``MeanLossObjective``,
``WeightedMeanLossObjective``, ``PretrainingObjective``) says what to feed the model and how to
turn its outputs into the share of the global batch's loss and ``{name: (numerator,
denominator)}`` logs; the loop adds ``loss``.

**Trainer**::

    with strategy.scope():
        model = ...; optimizer = optimizers.create_optimizer(...)
    loop = steps.Trainer(model, optimizer, objective, strategy,
                         job.TrainerConfig(model_dir, num_train_steps))
    if loop.restore() == 0 and init_checkpoint: load weights ...
    result = loop.train(dataset)   # dataset: global batches, drop_remainder, repeated

* One optimizer update per global batch of the dataset. ``num_accumulation_steps`` = k splits
  each replica's batch into k micro-batches run one after the other (dense gradients summed),
  then one update: same math, 1/k of the activation memory.
* Host loops: one ``tf.function`` call runs the loop's steps (``tf.range`` loop, the iterator
  inside), so accelerators are fed without Python between steps; ``job.loop_steps`` says how
  many. Under MultiWorker the loops keep their fixed lengths: each worker's clock is its own,
  and workers whose loops differ in length wait for ever in each other's collectives.
* How the step runs (``use_xla``, ``fuse_optimizer``, ``fused_kernels``; all off by default:
  the op-by-op step that reproduces the original's rounding) is decided once, for this
  strategy, device and optimizer, into an ``execution.Execution`` value that the loop is built
  from (``backends/tensorflow/execution.py`` has the rules): XLA for the replica step or its
  forward/backward, the XLA-fused clipping + update, the fused CPU kernels, which the layers
  get as a ``switch.Kernels`` value while the step is traced.
* Checkpoints (``tf.train.CheckpointManager`` in ``model_dir``, prefix ``checkpoint_name``
  (``ckpt``; the fine-tuning tools use the original Estimator's ``model.ckpt``)): model,
  optimizer (slots, iteration counter = global step, loss scale), the data position and the
  dropout seeds (``RngState``: every layer's Keras ``SeedGenerator`` state). TensorFlow writes
  the files under temporary names and updates the ``checkpoint`` index last (an atomic
  rename), so a run killed at any point leaves the previous checkpoint intact; ``restore()``
  continues from the latest, and a resumed run ends with the bits of an uninterrupted one,
  dropout on (a checkpoint without seed states, from before they were saved, restores with a
  warning and this run's seeds).
  Data position: except on TPUs, each host's input is a plain tf.data iterator over its
  replicas' per-replica batches, handed to them in replica order
  (``experimental_distribute_values_from_function``), and its state is saved (in the model
  checkpoint; under MultiWorker, where every worker's differs, in
  ``model_dir/input_state/worker-<i>-of-<n>/input-<step>``): a resume reads no record twice.
  On a TPU, and from a checkpoint without that state (another worker count, an older run),
  the number of global batches consumed is skipped on restore (exact when the pipeline is
  deterministic for its seed; its cost grows with the steps done).
* Multi-worker: every worker saves (collective variables); only the chief writes into
  ``model_dir``, the others into a temporary folder that is deleted. Summaries, the step log and
  results: chief only.

The eval step is ``modeling.training.evaluation.evaluate`` (its loop, ``job.streaming_means``,
every backend's).
"""

from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple, Union

import tensorflow as tf
from absl import logging

from bert_common import atomic, files
from bert_common.errors import InputError, first_line
from modeling.layers import embeddings
from modeling.checkpoints.tf1 import checkpoint_reader, latest_checkpoint
from modeling.kernels import switch
from modeling.training import host_input, job, strategies
from modeling.training.backends.tensorflow import execution
from modeling.training.host_input import DatasetFn
from modeling.training.objectives import Logs, Objective

INPUT_STATE_DIR = "input_state"  # multi-worker: per-worker iterator states


class RngState(tf.Module):
    """The state of every Keras ``SeedGenerator`` of a model's layers (the dropout layers': each
    mask is drawn from ``seed_generator.next()``, by TensorFlow's stateless dropout or the fused
    CPU kernel alike), as one entry of the trainer's checkpoint: ``rng/seed_states/<i>``, in
    layer order. Keras layers do not expose their seed generators to ``tf.train.Checkpoint``,
    so without it a resumed run would draw the masks of step 1 again.

    Args:
        states: the seed generators' state variables, in layer order.
    """

    PREFIX = "rng/seed_states/"

    def __init__(self, states):
        super().__init__(name="rng")
        self.seed_states = list(states)

    @classmethod
    def of(cls, model) -> Optional["RngState"]:
        """The seed states of ``model``'s layers (None when it has none, e.g. dropout 0).

        Args:
            model: a Keras model.

        Returns:
            An ``RngState``, or None.
        """
        states, seen = [], set()
        # Keras keeps a layer's generators in ``_seed_generators`` (not checkpoint-tracked).
        for layer in model._flatten_layers(include_self=True, recursive=True):
            for generator in getattr(layer, "_seed_generators", ()):
                if id(generator) not in seen:
                    seen.add(id(generator))
                    states.append(generator.state)
        return cls(states) if states else None

    def found_in(self, path: str) -> bool:
        """Whether checkpoint ``path`` holds these states (False: written without them);
        raises ValueError when it holds another number of them (another model).

        Args:
            path: a checkpoint prefix.

        Returns:
            Whether the checkpoint holds the seed states.

        Raises:
            ValueError: it holds a different number of seed states.
        """
        saved = {name.split("/")[2] for name in checkpoint_reader(path).get_variable_to_shape_map()
                 if name.startswith(self.PREFIX)}
        if saved and len(saved) != len(self.seed_states):
            raise ValueError("%d dropout seed states in the checkpoint, %d in the model"
                             % (len(saved), len(self.seed_states)))
        return bool(saved)


def _split_micro_batches(batch, k: int, index):
    """Micro-batch ``index`` of ``k`` equal, contiguous slices along axis 0: [b, ...] ->
    [b/k, ...]. Written as a reshape to [k, b/k, ...] and an index (a dynamic slice of static
    size) so that XLA keeps static shapes: a strided slice with loop-dependent bounds becomes a
    dynamically shaped computation there, ~100x slower on CPU."""

    def take(x):
        if x.shape.is_fully_defined():
            parts = tf.reshape(x, [k, x.shape[0] // k] + x.shape[1:].as_list())  # [k, b/k, ...]
        else:
            shape = tf.shape(x)
            parts = tf.reshape(x, tf.concat([[k, shape[0] // k], shape[1:]], 0))
        return parts[index]  # [b/k, ...]

    return tf.nest.map_structure(take, batch)


class Trainer:
    """Custom training loop (see the module docstring for the contract).

    Args:
        model: the Keras model, built under ``strategy.scope()``.
        optimizer: its optimizer (``modeling.optimization.create_optimizer``), same scope.
        objective: the ``Objective``: model inputs, loss share and logs.
        strategy: the ``tf.distribute.Strategy``; None: the default strategy.
        config: the ``job.TrainerConfig``.

    Raises:
        ValueError: ``config.num_accumulation_steps`` < 1.
    """

    def __init__(self, model, optimizer, objective: Objective,
                 strategy: Optional[tf.distribute.Strategy], config: job.TrainerConfig):
        self.model = model
        self.optimizer = optimizer
        self.objective = objective
        self.strategy = strategy or tf.distribute.get_strategy()
        self.config = config
        if config.num_accumulation_steps < 1:
            raise ValueError("num_accumulation_steps must be >= 1, got %d"
                             % config.num_accumulation_steps)
        self.num_replicas = self.strategy.num_replicas_in_sync
        self.is_chief = strategies.is_chief(self.strategy)
        self.clip_then_sum = getattr(optimizer, "gradient_reduction", "") == "clip_then_sum"
        with self.strategy.scope():
            self.optimizer.build(self.model.trainable_variables)
            self._batches_consumed = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="batches_consumed",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        # Which gradients reach clipping dense: as in the original graph (the one rule,
        # ``embeddings.sparse_gradient_tables``: the word embeddings stay sparse unless the
        # original would look them up one-hot, i.e. on a TPU), or where the objective says
        # (pre-training: every one, the word table's being summed with the tied output's).
        sparse = embeddings.sparse_gradient_tables(
            model, one_hot_embeddings=strategies.is_tpu(self.strategy))
        self._dense = [bool(objective.dense_gradient(v)) or not any(v is t for t in sparse)
                       for v in model.trainable_variables]
        self._rng = RngState.of(model)  # the dropout seeds, saved with the weights (or None)
        self._checkpoint = None
        self._manager = None
        self._input: Optional[IteratorInput] = None  # the input being trained on
        self._write_dir = None
        self._loop_fn = None
        # How the step runs, decided when the loop is first built (``decide_execution``).
        self.execution: Optional[execution.Execution] = None

    # -------------------------------------------------------------------------- checkpoints
    @property
    def global_step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    def _make_checkpoint(self, input_objects=None) -> None:
        """The checkpoint and its manager: model, optimizer, data position, dropout seeds and
        what the input keeps inside the checkpoint (``IteratorInput.checkpoint_objects``)."""
        objects = dict(self._objects(), **(input_objects or {}))
        if self._rng is not None:
            objects["rng"] = self._rng
        self._checkpoint = tf.train.Checkpoint(**objects)
        if self.is_chief:
            self._write_dir = self.config.model_dir
        else:
            self._write_dir = os.path.join(
                self.config.model_dir, ".worker_%d_tmp" % strategies.worker_index(
                    self.strategy))
        self._manager = tf.train.CheckpointManager(
            self._checkpoint, self._write_dir, max_to_keep=self.config.keep_checkpoint_max,
            checkpoint_name=self.config.checkpoint_name, step_counter=self.optimizer.iterations)
        if self.is_chief:
            self._remove_partial_saves()

    def _remove_partial_saves(self) -> None:
        """Removes ``<checkpoint_name>-<N>_temp`` folders: TensorFlow writes a checkpoint's shards
        there and merges them into ``<name>-<N>.*`` at the end of a save, so one left in
        ``model_dir`` is a save that was killed or failed (the checkpoints themselves, and the
        ``checkpoint`` state file, only change when a save completes)."""
        pattern = re.compile(r"^%s-\d+_temp$" % re.escape(self.config.checkpoint_name))
        try:
            names = files.listdir(self._write_dir)
        except Exception:  # noqa: BLE001 - no folder yet
            return
        for name in names:
            if pattern.match(name.rstrip("/")):
                files.rmtree(os.path.join(self._write_dir, name.rstrip("/")), ignore_errors=True)

    def latest_checkpoint(self) -> Optional[str]:
        """The newest checkpoint of this loop in ``model_dir`` (None if there is none; one
        whose files were removed is skipped: ``checkpoints.tf1.latest_checkpoint``)."""
        return latest_checkpoint(self.config.model_dir)

    def _objects(self) -> dict:
        return {"model": self.model, "optimizer": self.optimizer,
                "batches_consumed": self._batches_consumed}

    def restore(self) -> int:
        """Restores the newest checkpoint in ``model_dir`` (model, optimizer, data position,
        the dropout seeds; the input's state is ``IteratorInput.open``'s); returns the global
        step (0 when there is none: nothing is changed).

        Returns:
            The global step restored (an int; 0 without a checkpoint).

        Raises:
            InputError: a damaged checkpoint, or one that does not fit the model.
        """
        path = self.latest_checkpoint()
        if path is None:
            return 0
        objects = self._objects()
        try:
            if self._rng is not None and self._rng.found_in(path):
                objects["rng"] = self._rng
            elif self._rng is not None:
                logging.warning(
                    "%s holds no dropout RNG state (written before it was saved): dropout "
                    "continues from this run's seeds, so the run will not end with the bits "
                    "of an uninterrupted one", path)
            checkpoint = tf.train.Checkpoint(**objects)
            status = checkpoint.restore(path)
            status.assert_existing_objects_matched()
        except (IndexError, tf.errors.DataLossError) as e:
            raise _damaged(path, e) from None
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            # E.g. a checkpoint of another model or of an older version in the same folder.
            raise InputError("%s: cannot resume from this checkpoint, it does not fit the model "
                             "(%s); train into another folder or remove it"
                             % (path, first_line(e)[:200])) from None
        status.expect_partial()  # the input's state (IteratorInput restores it), or one this
        # strategy cannot use
        logging.info("Restored %s (global step %d)", path, self.global_step)
        return self.global_step

    def save(self) -> str:
        prefix = os.path.join(self._write_dir, "%s-%d" % (self.config.checkpoint_name,
                                                          self.global_step))
        try:
            atomic.fault_point("checkpoint", prefix)
            path = self._manager.save(checkpoint_number=self.optimizer.iterations)
            if self._input is not None:
                self._input.save(path)
        except BaseException:
            if self.is_chief:
                self._remove_partial_saves()  # the earlier checkpoints stay as they were
            raise
        if not self.is_chief:
            files.rmtree(self._write_dir, ignore_errors=True)
        return path

    # ---------------------------------------------------------------------------- step math
    def _grads_and_logs(self, batch, totals):
        """One (micro-)batch: its loss share, logs and gradients."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            outputs = self.model(self.objective.model_inputs(batch), training=True)
            share, logs = self.objective(outputs, batch, totals)
            share = tf.cast(share, tf.float32)
            scaled = self.optimizer.scale_loss(share) if hasattr(
                self.optimizer, "scale_loss") else share
        grads = tape.gradient(scaled, variables)
        grads = [tf.zeros_like(v) if g is None else
                 tf.convert_to_tensor(g) if self._dense[i] else g
                 for i, (g, v) in enumerate(zip(grads, variables))]
        return grads, share, logs

    def _replica_step(self, batch, grad_fn, apply_fn):
        """One replica's update: gradients of its (micro-)batches by ``grad_fn``, summed, then
        clipped and applied by ``apply_fn``; returns (logs, global norm)."""
        k = self.config.num_accumulation_steps
        totals = self.objective.totals(batch)
        context = tf.distribute.get_replica_context()
        if self.num_replicas > 1 and not self.clip_then_sum:
            totals = context.all_reduce(tf.distribute.ReduceOp.SUM, totals)
        if k == 1:
            grads, share, logs = grad_fn(batch, totals)
            logs = self._checked_logs(logs)
        else:
            # Dense sums over k micro-batches.
            def micro_batch(index, grads, share, logs):
                g, s, more = grad_fn(_split_micro_batches(batch, k, index), totals)
                more = self._checked_logs(more)
                grads = [a + tf.cast(tf.convert_to_tensor(b), tf.float32)
                         for a, b in zip(grads, g)]
                logs = {n: (logs[n][0] + a, logs[n][1] + b) for n, (a, b) in more.items()}
                return index + 1, grads, share + s, logs

            _, grads, share, logs = tf.while_loop(
                lambda index, *_: index < k, micro_batch,
                (tf.constant(0), [tf.zeros(v.shape, tf.float32)
                                  for v in self.model.trainable_variables],
                 tf.constant(0.0), self._zero_logs()), maximum_iterations=k)
        stats = apply_fn(grads)
        # The loss log: Σshares over one step = the step's loss (per replica in clip_then_sum).
        per_step = 1.0 if self.clip_then_sum else 1.0 / self.num_replicas
        logs["loss"] = (share, tf.constant(per_step, tf.float32))
        return logs, stats["global_norm"]

    def _zero_logs(self) -> Logs:
        return {n: (tf.constant(0.0), tf.constant(0.0)) for n in self.objective.log_names}

    def _checked_logs(self, logs) -> Logs:
        if set(logs) != set(self.objective.log_names):
            raise ValueError("objective returned logs %s but declares log_names %s"
                             % (sorted(logs), sorted(self.objective.log_names)))
        return {n: (tf.cast(a, tf.float32), tf.cast(b, tf.float32)) for n, (a, b) in logs.items()}

    def decide_execution(self) -> execution.Execution:
        """How this trainer's step runs: the config's ``use_xla``, ``fused_kernels`` and
        ``fuse_optimizer`` as far as its strategy, device and optimizer allow
        (``execution.decide``).

        Returns:
          The ``Execution`` the loop is built from.
        """
        cfg = self.config
        return execution.decide(self.strategy, self.optimizer, self.model.trainable_variables,
                                use_xla=cfg.use_xla, fused_kernels=cfg.fused_kernels,
                                fuse_optimizer=cfg.fuse_optimizer)

    def _build_loop(self, run: execution.Execution):
        """The host loop (a ``tf.function`` of an iterator and a step count) that runs the
        step as ``run`` says."""
        strategy = self.strategy
        variables = self.model.trainable_variables
        grad_fn = self._grads_and_logs
        # Every tf.function here without AutoGraph: the loops are tf.while_loop already, and
        # converting the ~40 functions a step calls cost about a second of every run's start.
        if run.xla_gradients:
            grad_fn = tf.function(self._grads_and_logs, jit_compile=True, autograph=False)

        def apply(grads):
            return self.optimizer.clip_and_apply(grads, variables,
                                                 cpu_kernel=run.optimizer_kernel)

        apply_fn = apply
        if run.fused_optimizer:
            # Clipping + update of every variable as XLA kernels: one pass over the memory of
            # each variable instead of one per elementwise op (the forward/backward keeps
            # TensorFlow's own kernels).
            apply_fn = tf.function(apply, jit_compile=True, autograph=False)

        def replica_step(batch):
            return self._replica_step(batch, grad_fn, apply_fn)

        if run.xla_step:
            replica_step = tf.function(replica_step, jit_compile=True, autograph=False)

        def reduce_sum(value):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

        def reduce_first(value):
            return strategy.experimental_local_results(value)[0]

        host_replicas, first_replica = (self._host_replicas() if self._can_save_iterator()
                                        else (1, 0))

        def next_batches(iterator):
            if self.num_replicas == 1 or not self._can_save_iterator():
                return next(iterator)
            # The host iterator's next per-replica batches, one per local replica in replica
            # order (as the strategy's own distributed iterator would hand them out).
            batches = [next(iterator) for _ in range(host_replicas)]
            return strategy.experimental_distribute_values_from_function(
                lambda context: batches[context.replica_id_in_sync_group - first_replica])

        def one_step(iterator):
            lr = tf.cast(self.optimizer.learning_rate, tf.float32)  # the rate this update uses
            per_replica_logs, norm = strategy.run(replica_step, args=(next_batches(iterator),))
            logs = {n: (reduce_sum(a), reduce_sum(b)) for n, (a, b) in per_replica_logs.items()}
            self._batches_consumed.assign_add(1)
            return logs, reduce_first(norm), lr

        @tf.function(autograph=False)
        def loop(iterator, num_steps):
            def step_into(i, sums, step_losses, step_norms, step_lrs):
                logs, norm, lr = one_step(iterator)
                step_losses = step_losses.write(i, logs["loss"][0] / logs["loss"][1])
                step_norms = step_norms.write(i, norm)
                step_lrs = step_lrs.write(i, lr)
                sums = {n: (sums[n][0] + a, sums[n][1] + b) for n, (a, b) in logs.items()}
                return i + 1, sums, step_losses, step_norms, step_lrs

            # The layers read their kernels while the step is traced: the model carries them
            # for the trace (the replica threads of a MirroredStrategy see the model's value).
            with switch.use_kernels(self.model, run.kernels):
                sums = self._zero_logs()
                sums["loss"] = (tf.constant(0.0), tf.constant(0.0))
                _, sums, step_losses, step_norms, step_lrs = tf.while_loop(
                    lambda i, *_: i < num_steps, step_into,
                    (tf.constant(0), sums, tf.TensorArray(tf.float32, size=num_steps),
                     tf.TensorArray(tf.float32, size=num_steps),
                     tf.TensorArray(tf.float32, size=num_steps)),
                    maximum_iterations=num_steps)
                return sums, step_losses.stack(), step_norms.stack(), step_lrs.stack()

        return loop

    # --------------------------------------------------------------------------------- train
    def make_iterator(self, dataset: tf.data.Dataset):
        """An iterator over ``dataset`` distributed for this trainer's strategy.

        Args:
            dataset: a ``tf.data.Dataset`` of global batches.

        Returns:
            A distributed iterator.
        """
        return self._distributed_iterator(dataset, 0)

    def run_steps(self, iterator, num_steps: int) -> List[float]:
        """``num_steps`` updates in one host loop, without checkpoints, summaries or logs
        (benchmarks, custom drivers); returns the per-step losses.

        Args:
            iterator: an iterator from ``make_iterator``.
            num_steps: the updates to run.

        Returns:
            The per-step losses (a list of floats).
        """
        _, losses, _, _ = self._run_loop(iterator, num_steps)
        return losses.numpy().tolist()

    def _run_loop(self, iterator, num_steps: int):
        """One host loop of ``num_steps`` steps (built and traced on first use, as
        ``decide_execution`` says); returns (sums, losses, norms, learning rates)."""
        if self._loop_fn is None:
            self.execution = self.decide_execution()
            self._loop_fn = self._build_loop(self.execution)
        return self._loop_fn(iterator, tf.constant(num_steps))

    def _can_save_iterator(self) -> bool:
        """Not a TPU: each host's input is a plain tf.data iterator over its replicas'
        batches, whose state is saved, so a resume reads nothing twice whatever the steps
        done (``_distributed_iterator``)."""
        return not strategies.is_tpu(self.strategy)

    def _host_replicas(self) -> Tuple[int, int]:
        """(this host's replicas, the global index of its first)."""
        local = self.num_replicas // strategies.num_workers(self.strategy)
        return local, strategies.worker_index(self.strategy) * local

    def _distributed_iterator(self, dataset: Union[tf.data.Dataset, DatasetFn], skip: int):
        """Not a TPU (``_can_save_iterator``): this host's plain iterator over its replicas'
        per-replica batches, in replica order, its pipeline's share of the input as
        ``host_input`` cuts it (its state goes into checkpoints); a TPU: the strategy's
        per-host input (``host_input``). ``skip`` global batches in (a checkpoint
        without an iterator state)."""
        if self._can_save_iterator():
            local, _ = self._host_replicas()
            pipelines = self.num_replicas // local
            context = tf.distribute.InputContext(
                num_input_pipelines=pipelines,
                input_pipeline_id=strategies.worker_index(self.strategy),
                num_replicas_in_sync=self.num_replicas)
            if not isinstance(dataset, tf.data.Dataset):
                pieces = dataset(context)
            elif self.num_replicas > 1:
                pieces = host_input.replica_pieces(dataset, context)
            else:
                pieces = dataset
            with tf.device("/cpu:0"):  # the host's iterator: its state is a checkpoint's
                return iter(pieces.skip(skip * local) if skip else pieces)
        return iter(host_input.distribute(self.strategy, dataset, skip))

    def _global_batch(self, dataset: Union[tf.data.Dataset, DatasetFn]) -> int:
        if isinstance(dataset, tf.data.Dataset):
            return host_input.global_batch_size(dataset)
        per_replica = dataset(tf.distribute.InputContext(
            num_replicas_in_sync=self.num_replicas))  # only its element spec is read
        return host_input.global_batch_size(per_replica) * self.num_replicas

    def train(self, dataset: Union[tf.data.Dataset, DatasetFn]) -> job.TrainResult:
        """Trains to ``num_train_steps`` from the latest checkpoint (if any): the one training
        job (``modeling.training.job.train``) with this trainer's steps; see the module.

        ``dataset``: global batches (the same stream on every host), or a function of a
        ``tf.distribute.InputContext`` returning that input pipeline's per-replica batches
        (see ``modeling.training.host_input``).

        Args:
            dataset: a ``tf.data.Dataset`` of global batches, or a ``DatasetFn`` (see above).

        Returns:
            A ``job.TrainResult``.

        Raises:
            InputError: a damaged or unfitting checkpoint in ``model_dir``, or bad input data.
        """
        return job.train(_Steps(self, dataset), self.config)

    def open_input(self, dataset: Union[tf.data.Dataset, DatasetFn]):
        """Restores the latest checkpoint, then opens the input at its position
        (``IteratorInput.open``: the saved iterator state if there is one this strategy can
        use, else the global batches consumed so far skipped). Returns ``(iterator, global
        step)``.

        Args:
            dataset: as ``train``'s.

        Returns:
            ``(iterator, step)``.

        Raises:
            InputError: a damaged or unfitting checkpoint.
        """
        if self.is_chief:
            files.makedirs(self.config.model_dir)
        path = self.latest_checkpoint()
        self._input = IteratorInput(self, dataset)
        start_step = self.restore()
        consumed = int(self._batches_consumed.numpy()) if path else 0
        iterator = self._input.open(path, batches=consumed)
        self._make_checkpoint(self._input.checkpoint_objects())
        return iterator, start_step

    def release_input(self) -> None:
        """Drops the input's iterator from the checkpoint at the end of ``train``, so that it is
        freed now. Left in the trainer (a reference cycle through its traced functions), it
        would be freed by some later garbage collection, and a tf.data iterator restored from a
        checkpoint was seen to block that collection for up to a minute (its autotuning thread
        is not woken), in a process that runs on. A failure here (the checkpoint folder gone
        unreachable) must not replace the run's own result or error: the trainer is then left
        without a checkpoint to save to."""
        if self._input is not None:
            self._input.close()
            self._input = None
        try:
            self._make_checkpoint(None)
        except Exception:  # noqa: BLE001 - see above
            self._checkpoint = self._manager = None


class IteratorInput:
    """TensorFlow's training input, behind the contract of ``modeling.training.inputs``
    (``open`` at a checkpoint's position, ``save`` with a checkpoint): this host's
    iterator over its replicas' batches (``Trainer._distributed_iterator``), whose state lives

    * on one host, inside the model checkpoint (``checkpoint_objects``: ``iterator/...``);
    * under MultiWorker, where each worker's differs, beside it:
      ``model_dir/input_state/worker-<i>-of-<n>/input-<step>`` (its own manager, which keeps as
      many as the model's);
    * nowhere on a TPU: there, and from a checkpoint without a state this strategy can use
      (another worker count, an older run), the global batches consumed are skipped.

    Args:
        trainer: the ``Trainer`` whose strategy, folder and step counter it follows.
        dataset: global batches, or a ``DatasetFn`` (``Trainer.train``'s).
    """

    def __init__(self, trainer: Trainer, dataset: Union[tf.data.Dataset, DatasetFn]):
        self.trainer = trainer
        self.dataset = dataset
        self.iterator = None
        self.saves_state = trainer._can_save_iterator()
        self.per_worker = self.saves_state and strategies.is_multi_worker(trainer.strategy)
        self._manager = None  # multi-worker: this worker's iterator states
        self._global_batch: Optional[int] = None

    def global_batch(self) -> int:
        """The records of one global batch (one optimizer update)."""
        if self._global_batch is None:
            self._global_batch = self.trainer._global_batch(self.dataset)
        return self._global_batch

    def _state_dir(self) -> str:
        """Multi-worker: where this worker's iterator states go (``model_dir`` is shared by
        the workers, which all restore the chief's checkpoint from it)."""
        strategy = self.trainer.strategy
        return os.path.join(self.trainer.config.model_dir, INPUT_STATE_DIR, "worker-%d-of-%d" % (
            strategies.worker_index(strategy), strategies.num_workers(strategy)))

    def _saved_state(self, checkpoint: Optional[str]) -> Optional[str]:
        """Where ``checkpoint``'s input state for this strategy is (the checkpoint itself, or
        this worker's file), or None where it has none."""
        if checkpoint is None or not self.saves_state:
            return None
        if self.per_worker:
            state = os.path.join(self._state_dir(), "input-%s" % checkpoint.rsplit("-", 1)[-1])
            return state if files.exists(state + ".index") else None
        try:
            names = checkpoint_reader(checkpoint).get_variable_to_shape_map()
        except (IndexError, tf.errors.DataLossError) as e:
            raise _damaged(checkpoint, e) from None
        return checkpoint if any(name.startswith("iterator/") for name in names) else None

    def open(self, checkpoint: Optional[str], records: int = 0,
             batches: Optional[int] = None):
        """The iterator at ``checkpoint``'s position: its saved state, else the global batches
        read before it skipped (``batches``, which the trainer counts; else ``records`` in
        global batches).

        Args:
            checkpoint: the checkpoint resumed from, or None (from the start).
            records: the records read before it (where ``batches`` is not given).
            batches: the global batches read before it.

        Returns:
            The iterator (restored; the loop's argument).

        Raises:
            InputError: a saved state that cannot be restored, or ``records`` to skip in
                batches of no static size.
        """
        state = self._saved_state(checkpoint)
        skip = 0
        if state is None and batches is not None:
            skip = batches
        elif state is None and records:
            if not self.global_batch():
                raise InputError("%s: no input state saved, and the batches have no static "
                                 "size to skip %d records by" % (checkpoint, records))
            skip = records // self.global_batch()
        self.iterator = self.trainer._distributed_iterator(self.dataset, skip)
        if state is not None:
            try:
                status = tf.train.Checkpoint(iterator=self.iterator).restore(state)
                if self.per_worker:  # a file of this worker's iterator only
                    status.assert_consumed()
                else:  # the model checkpoint: the trainer restores the rest
                    status.assert_existing_objects_matched()
            except (AssertionError, ValueError, tf.errors.OpError) as e:
                raise InputError("%s: cannot restore %s input position (%s)" % (
                    state, "this worker's" if self.per_worker else "the",
                    first_line(e)[:200])) from None
            status.expect_partial()
            if self.per_worker:
                logging.info("Restored this worker's input position from %s", state)
        elif skip:
            logging.info("No input position saved in %s: skipping the %d global batches "
                         "consumed (a cost that grows with the steps done)", checkpoint, skip)
        if self.per_worker:
            self._manager = tf.train.CheckpointManager(
                tf.train.Checkpoint(iterator=self.iterator), self._state_dir(),
                max_to_keep=self.trainer.config.keep_checkpoint_max, checkpoint_name="input",
                step_counter=self.trainer.optimizer.iterations)
        return self.iterator

    def checkpoint_objects(self) -> dict:
        """What goes into the model checkpoint: the iterator on one host, else nothing."""
        if self.saves_state and not self.per_worker:
            return {"iterator": self.iterator}
        return {}

    def save(self, checkpoint: str) -> None:
        """Multi-worker: this worker's iterator state for ``checkpoint`` (same step number);
        elsewhere nothing (inside the checkpoint, or none).

        Args:
            checkpoint: the checkpoint just written.
        """
        del checkpoint  # the step counter names it
        if self._manager is not None:
            self._manager.save(checkpoint_number=self.trainer.optimizer.iterations)

    def close(self) -> None:
        """Drops the iterator and its manager (``Trainer.release_input``)."""
        self.iterator = self._manager = None


class _Steps:
    """TensorFlow's ``job.Steps``: the trainer's host loops over one input."""

    def __init__(self, trainer: Trainer, dataset: Union[tf.data.Dataset, DatasetFn]):
        self.trainer = trainer
        self.dataset = dataset
        self.is_chief = trainer.is_chief
        self.timed = not strategies.is_multi_worker(trainer.strategy)  # job.loop_steps
        self._iterator = None
        self._global_batch: Optional[int] = None

    def restore(self) -> int:
        self._iterator, _ = self.trainer.open_input(self.dataset)
        return self.trainer.global_step  # the optimizer's count, checkpoint or not

    def run(self, num_steps: int) -> job.LoopOutput:
        sums, losses, norms, lrs = self.trainer._run_loop(self._iterator, num_steps)
        return job.LoopOutput(
            losses.numpy().tolist(), lrs.numpy().tolist(), norms.numpy().tolist(),
            {n: float(a) / float(b) if float(b) else float("nan") for n, (a, b) in sums.items()})

    def global_batch(self) -> int:
        if self._global_batch is None:
            self._global_batch = self.trainer._global_batch(self.dataset)
        return self._global_batch

    def save(self) -> str:
        return self.trainer.save()

    def close(self, completed: bool) -> None:
        del completed  # the trained values are the model's variables
        self._iterator = None
        self.trainer.release_input()


def _damaged(path: str, error: BaseException) -> InputError:
    """The one-line error for a checkpoint of this loop that cannot be read (a data file cut
    short or corrupted on disk: TensorFlow's own saves are put in place whole)."""
    return InputError("%s: cannot resume from this checkpoint: its data file is damaged or "
                      "truncated (%s); remove its files to resume from the one before"
                      % (path, first_line(error)))
