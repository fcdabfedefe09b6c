"""The eval step on TensorFlow: streaming means of metrics over batches (the loop is
``job.streaming_means``, every backend's).

``evaluate(model, dataset, metrics_fn, num_steps, strategy)`` runs ``num_steps`` batches with
``training=False`` and returns ``{name: Σnumerator/Σdenominator}`` of ``metrics_fn(outputs,
batch)`` (``{name: (numerator, denominator)}`` per batch, the trainer's log pairs: streaming
means like ``tf.metrics.mean``). ``bert_common.results.write_eval_summaries`` writes the results
as TensorBoard scalars in ``model_dir/eval``, beside the trainer's ``model_dir/train``.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import tensorflow as tf

from modeling.kernels import switch
from modeling.training import job, strategies
from modeling.training.objectives import Logs


def evaluate(model, dataset: tf.data.Dataset,
             metrics_fn: Callable[[Dict, Dict], Logs], num_steps: int,
             strategy: Optional[tf.distribute.Strategy] = None,
             model_inputs: Optional[Callable[[Dict], Dict]] = None,
             progress: bool = True) -> Dict[str, float]:
    """Runs ``num_steps`` batches (``training=False``) and averages ``metrics_fn`` over them.

    Args:
      model: the Keras model, called on ``model_inputs(batch)``.
      dataset: batches (global batches under a strategy of several replicas).
      metrics_fn: ``(outputs, batch) -> {name: (numerator, denominator)}``.
      num_steps: batches to run (fewer, with a warning, when the data runs out).
      strategy: the distribution strategy (default: the current one).
      model_inputs: batch -> the model's inputs (default: the batch itself).
      progress: whether to show a progress line.

    Returns:
      Σnumerator/Σdenominator per name (float64 sums of per-batch float32 values; NaN where
      Σdenominator is 0).
    """
    strategy = strategy or tf.distribute.get_strategy()
    model_inputs = model_inputs or (lambda batch: batch)

    fused = strategies.prediction_kernels_apply(strategy, model.variables)

    def replica_fn(batch):
        outputs = model(model_inputs(batch), training=False)
        return {n: (tf.cast(a, tf.float32), tf.cast(b, tf.float32))
                for n, (a, b) in metrics_fn(outputs, batch).items()}

    @tf.function(autograph=False)  # no Python control flow on tensors: nothing to convert
    def step(iterator):
        # The layers read their kernels while the step is traced: the model carries them for
        # the trace (the replica threads of a MirroredStrategy see the model's value).
        with switch.use_kernels(model, switch.Kernels(inference=fused)):
            per_replica = strategy.run(replica_fn, args=(next(iterator),))
        return {n: (strategy.reduce(tf.distribute.ReduceOp.SUM, a, axis=None),
                    strategy.reduce(tf.distribute.ReduceOp.SUM, b, axis=None))
                for n, (a, b) in per_replica.items()}

    if strategy.num_replicas_in_sync == 1 and not strategies.is_multi_worker(strategy):
        iterator = iter(dataset)
    else:
        iterator = iter(strategy.experimental_distribute_dataset(dataset))

    def batches():
        while True:
            try:
                yield step(iterator)
            except (StopIteration, tf.errors.OutOfRangeError):
                return

    return job.streaming_means(batches(), num_steps, progress)
