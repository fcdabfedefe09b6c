"""Per-host input: every input pipeline (host) builds only the batches of its own replicas.

``distribute(strategy, data, skip)`` gives the iterator source of a training or eval loop under
any strategy through ``strategy.distribute_datasets_from_function``: each input pipeline (one
per host: a TPU pod slice's hosts, MultiWorker's workers) calls the dataset function once with
its ``tf.distribute.InputContext`` and yields per-replica batches, which the strategy hands to
its local replicas in order. ``data`` is either

* a ``tf.data.Dataset`` of global batches (the same stream on every host, e.g. the fine-tuning
  records in ``--output_dir``): each pipeline cuts every global batch into per-replica pieces
  (``rebatch``) and keeps the pieces of its own replicas. The global batches are exactly those
  of the dataset, whatever the number of hosts and replicas; each host reads the whole stream
  (cheap for fine-tuning sets) but parses and feeds only its share of it when the dataset
  parses after batching; or
* a function ``input_context -> tf.data.Dataset`` of per-replica batches, for pipelines that
  read only their own share (pre-training: files sharded by pipeline).

``skip``: global batches already consumed (resume): each pipeline skips its share of them.
"""

from __future__ import annotations

from typing import Callable, Union

import tensorflow as tf

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


def global_batch_size(dataset: tf.data.Dataset) -> int:
    """The static leading dimension of the dataset's first component (0 when unknown).

    Args:
        dataset: a batched ``tf.data.Dataset``.

    Returns:
        B, an int.
    """
    first = tf.nest.flatten(dataset.element_spec)[0]
    size = first.shape[0] if first.shape.rank else None
    return int(size) if size is not None else 0


def replica_pieces(dataset: tf.data.Dataset, context: tf.distribute.InputContext
                   ) -> tf.data.Dataset:
    """The per-replica batches of this input pipeline's replicas, from global batches.

    Global batch ``[B, ...]`` -> ``N`` pieces ``[B / N, ...]`` in replica order (N = replicas
    in sync); pipeline ``w`` of ``W`` keeps pieces ``w * N/W .. (w + 1) * N/W - 1`` of each
    batch, which the strategy gives to its local replicas in that order: replica ``r`` gets
    rows ``r * B/N .. (r + 1) * B/N - 1``, as ``experimental_distribute_dataset`` splits a batch.

    Args:
        dataset: a ``tf.data.Dataset`` of global batches [B, ...].
        context: this input pipeline's ``tf.distribute.InputContext``.

    Returns:
        A ``tf.data.Dataset`` of per-replica batches [B / N, ...].

    Raises:
        ValueError: B is not static or not divisible by N.
    """
    replicas = context.num_replicas_in_sync
    pipelines = context.num_input_pipelines
    batch = global_batch_size(dataset)
    if not batch or batch % replicas:
        raise ValueError("the global batch (%s) must be static and divisible by the %d "
                         "replicas" % (batch or "unknown", replicas))
    if replicas % pipelines:
        raise ValueError("%d replicas do not split evenly over %d input pipelines"
                         % (replicas, pipelines))
    pieces = dataset.rebatch(batch // replicas, drop_remainder=True) if replicas > 1 else dataset
    if pipelines > 1:
        per_pipeline = replicas // pipelines
        pipeline = context.input_pipeline_id
        pieces = pieces.enumerate().filter(
            lambda index, _: (index % replicas) // per_pipeline == pipeline
        ).map(lambda _, piece: piece)
    return pieces


def distribute(strategy: tf.distribute.Strategy,
               data: Union[tf.data.Dataset, DatasetFn], skip: int = 0):
    """A distributed dataset of ``data`` for ``strategy`` (see the module docstring).

    Args:
        strategy: the ``tf.distribute.Strategy``.
        data: a ``tf.data.Dataset`` of global batches, or a ``DatasetFn`` of per-replica ones.
        skip: global batches to skip first (resuming).

    Returns:
        A distributed dataset (``strategy.distribute_datasets_from_function``).
    """
    replicas = strategy.num_replicas_in_sync

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        if isinstance(data, tf.data.Dataset):
            dataset = replica_pieces(data.skip(skip) if skip else data, context)
        else:
            dataset = data(context)
            per_pipeline = replicas // context.num_input_pipelines
            if skip:
                dataset = dataset.skip(skip * per_pipeline)
        options = tf.data.Options()
        # Each pipeline already holds only its share: no automatic sharding on top.
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
        return dataset.with_options(options)

    return strategy.distribute_datasets_from_function(dataset_fn)
