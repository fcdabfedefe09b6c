"""tf.data pipelines over the fine-tuning TFRecords, with length-aware batching: classifier,
SWAG and NER records here, SQuAD's through ``data.squad.dataset`` (which documents what cutting
padding changes for a span head).

The records on disk stay as the original writes them: one per example, in processor order,
padded to ``max_seq_length``. Length awareness happens only here:

* ``trim_batch``: a batch is cut to the longest real sequence in it (rounded up to a multiple
  of ``multiple``; positions past it are padding in every row: id 0, mask 0, segment 0). The
  model masks padding with -10000 before the softmax, whose exp underflows to exactly 0 in
  float32, so a real token's output does not depend on how much padding follows (up to float
  summation order).
* ``sort_by_length`` (eval/predict): examples are read in windows of ``SORT_WINDOW_BATCHES`` batches,
  each window sorted by length and cut into full batches, then each batch is trimmed: batches
  hold examples of nearly the same length and all but a window's last are full (grouping into
  length buckets instead, ``bucket_by_sequence_length``, left a part-filled batch per bucket
  and a spread of lengths within each, and ran MRPC dev 1.7x slower). Batches come out of file
  order, so every element carries ``example_index`` (its record number) and the caller
  restores the order (``restore_order``).

Training batches are never reordered (the original's shuffle-then-batch), only trimmed.

Where TensorFlow is not installed (``KERAS_BACKEND=jax``), ``make_dataset`` / ``task_dataset``
return the same batches read with numpy (``data.glue.numpy_dataset.NumpyDataset``); for that
the records are described by their spec (``data.records.tf_example``; each task's
``record_spec``), which both pipelines decode, rather than by a TensorFlow ``decode`` function.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, TYPE_CHECKING, Union

import numpy as np

from bert_common.installed import tensorflow_installed
from data.records import tf_example
from data.glue import features as cf

if TYPE_CHECKING:  # (annotations only: TensorFlow is imported where it is used)
    import tensorflow as tf

EXAMPLE_INDEX = cf.EXAMPLE_INDEX
# Eval/predict examples sorted by length per window of this many batches (both pipelines read
# this module's value when make_dataset builds them).
SORT_WINDOW_BATCHES = cf.SORT_WINDOW_BATCHES


def sequence_lengths(batch_or_example: Dict[str, tf.Tensor]) -> tf.Tensor:
    """Real tokens per sequence: ``sum(input_mask, -1)`` (any leading shape).

    Args:
        batch_or_example: a dict with ``input_mask`` [..., S].

    Returns:
        int [...].
    """
    import tensorflow as tf

    return tf.reduce_sum(batch_or_example[cf.INPUT_MASK], axis=-1)


def trim_batch(batch: Dict[str, tf.Tensor], multiple: int = 8,
               sequence_names: Sequence[str] = cf.MODEL_INPUT_NAMES) -> Dict[str, tf.Tensor]:
    """Cuts the last axis of ``sequence_names`` (the id features; NER adds its per-token labels)
    to the batch's longest real sequence (see module doc).

    Args:
        batch: the batch dict.
        multiple: round the cut length up to a multiple of this.
        sequence_names: the features cut along their last axis.

    Returns:
        The batch with those features [B, S'] (S' <= S).
    """
    import tensorflow as tf

    full = tf.shape(batch[cf.INPUT_IDS])[-1]
    longest = tf.reduce_max(sequence_lengths(batch))
    length = tf.minimum(full, (longest + multiple - 1) // multiple * multiple)
    length = tf.maximum(length, 1)
    out = dict(batch)
    for name in sequence_names:
        out[name] = batch[name][..., :length]
    return out


def _sorted_batches(window: Dict[str, tf.Tensor], batch_size: int,
                    drop_remainder: bool) -> tf.data.Dataset:
    """A window of examples (each feature [W, ...]) sorted by length (the longest sequence of
    an example: SWAG's have one per choice), stable, cut into batches."""
    import tensorflow as tf

    lengths = sequence_lengths(window)  # [W] or [W, choices]
    lengths = tf.reduce_max(tf.reshape(lengths, [tf.shape(lengths)[0], -1]), axis=1)  # [W]
    order = tf.argsort(lengths, stable=True)
    return tf.data.Dataset.from_tensor_slices(
        {name: tf.gather(value, order) for name, value in window.items()}).batch(
            batch_size, drop_remainder=drop_remainder)


Decode = Union[tf_example.RecordSpec, Callable[["tf.Tensor"], Dict[str, "tf.Tensor"]]]


def make_dataset(input_file: str, decode: Decode,
                 batch_size: int, is_training: bool, drop_remainder: bool = False,
                 trim: bool = True, sort_by_length: bool = False,
                 seed: Optional[int] = None, shuffle_buffer: int = 100,
                 trim_multiple: int = 8,
                 sequence_names: Sequence[str] = cf.MODEL_INPUT_NAMES) -> "tf.data.Dataset":
    """Batches of decoded records (see the module docstring).

    Training: repeat, shuffle (buffer ``shuffle_buffer`` as the original), batch, trim.
    Eval/predict: adds ``example_index``; with ``sort_by_length`` sorts windows of examples by length
    (``SORT_WINDOW_BATCHES`` batches each), else keeps file order; then trims
    ``sequence_names`` (``trim_batch``).

    Args:
        input_file: a TFRecord file (or files).
        decode: the records' spec (``data.records.tf_example``: name -> ``FixedLen``), or a function
            serialized record -> feature dict (TensorFlow only).
        batch_size: examples per batch.
        is_training: repeat and shuffle.
        drop_remainder: only full batches.
        trim: cut each batch to its longest sequence.
        sort_by_length: eval/predict: sort windows of examples by length.
        seed: the shuffle's seed.
        shuffle_buffer: the shuffle buffer (the original's 100).
        trim_multiple: round the cut length up to a multiple of this.
        sequence_names: the features ``trim_batch`` cuts.

    Returns:
        A ``tf.data.Dataset`` of feature dicts; without TensorFlow installed, a
        ``data.glue.numpy_dataset.NumpyDataset`` of the same batches (``decode`` a spec).

    Raises:
        ValueError: no TensorFlow, and ``decode`` is a function.
    """
    if not tensorflow_installed():
        from data.glue.numpy_dataset import NumpyDataset

        if callable(decode):
            raise ValueError("without TensorFlow the records are read by their spec "
                             "(data.records.tf_example.FixedLen), not by a decode function")
        return NumpyDataset(input_file, decode, batch_size, is_training,
                            drop_remainder=drop_remainder, trim=trim,
                            sort_by_length=sort_by_length, seed=seed,
                            shuffle_buffer=shuffle_buffer, trim_multiple=trim_multiple,
                            sequence_names=sequence_names,
                            sort_window_batches=SORT_WINDOW_BATCHES)
    import tensorflow as tf

    if not callable(decode):
        spec = dict(decode)
        decode = lambda record: tf_example.decode_tf(record, spec)  # noqa: E731
    dataset = tf.data.TFRecordDataset(input_file)
    if is_training:
        dataset = dataset.repeat().shuffle(shuffle_buffer, seed=seed)
        dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    else:
        dataset = dataset.enumerate().map(
            lambda i, record: dict(decode(record), **{EXAMPLE_INDEX: tf.cast(i, tf.int32)}),
            num_parallel_calls=tf.data.AUTOTUNE)
        if sort_by_length:
            dataset = dataset.batch(batch_size * SORT_WINDOW_BATCHES).flat_map(
                lambda window: _sorted_batches(window, batch_size, drop_remainder))
        else:
            dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    if trim:
        dataset = dataset.map(lambda b: trim_batch(b, trim_multiple, sequence_names),
                              num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    if not is_training:
        dataset = dataset.with_options(_one_pass_options())
    return dataset


def _one_pass_options() -> tf.data.Options:
    """Options of an eval/predict pipeline, read once while a model runs: no tf.data autotuning.
    With it, dropping the iterator after a pass whose batches came seconds apart blocked for
    ~5 s (BERT-base on SQuAD windows: a 5 s pass took 10 s, every other pass); the parallel map
    and prefetch then use their default sizes, which a pipeline this light does not notice."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def task_dataset(input_file: str, decode: Decode, batch_size: int, is_training: bool, *,
                 length_aware: bool = True, static_shapes: bool = False,
                 seed: Optional[int] = None,
                 sequence_names: Sequence[str] = cf.MODEL_INPUT_NAMES,
                 shuffle_buffer: int = 100) -> "tf.data.Dataset":
    """The fine-tuning tools' rule for ``make_dataset`` (classifier, SWAG, NER records alike).

    Training batches are always full (``drop_remainder``: one update = one global batch).
    ``length_aware``: each batch is cut to its longest example, and eval/predict examples are
    sorted by length first (``restore_order`` puts results back). ``static_shapes`` (TPU):
    neither, and every batch is full.

    Args:
        input_file: a TFRecord file.
        decode: the records' spec, or a decode function (``make_dataset``).
        batch_size: examples per batch.
        is_training: training input (repeat, shuffle, full batches).
        length_aware: cut and sort by length (above).
        static_shapes: TPU: fixed shapes, full batches.
        seed: the shuffle's seed.
        sequence_names: the features cut to the batch's longest sequence.
        shuffle_buffer: the shuffle buffer.

    Returns:
        A ``tf.data.Dataset`` (without TensorFlow: a ``NumpyDataset``).
    """
    length_aware = length_aware and not static_shapes
    return make_dataset(input_file, decode, batch_size, is_training,
                        drop_remainder=static_shapes or is_training, trim=length_aware,
                        sort_by_length=length_aware and not is_training, seed=seed,
                        sequence_names=sequence_names, shuffle_buffer=shuffle_buffer)


def restore_order(example_indices: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` [N, ...] gathered in sorted order -> file order by ``example_indices`` [N].

    Args:
        example_indices: int [N], each value's example index (``example_index`` of the batches).
        values: [N, ...] in dataset order.

    Returns:
        [N, ...] in file order.

    Raises:
        ValueError: the indices are not a permutation.
    """
    example_indices = np.asarray(example_indices).reshape(-1)
    out = np.empty_like(values)
    if sorted(example_indices.tolist()) != list(range(len(example_indices))):
        raise ValueError("example indices are not a permutation of 0..%d"
                         % (len(example_indices) - 1))
    out[example_indices] = values
    return out
