"""tf.data pipelines over the SQuAD TFRecords written by ``data.squad.features.FeatureWriter``.

As the original ``input_fn_builder``: training repeats the file and shuffles
with a buffer of 100, eval reads it once in order; records are parsed with
``data.squad.schema.record_spec`` and every int64 becomes int32. Batches are
dicts of int32 tensors: ``unique_ids`` [B], ``input_ids``/``input_mask``/
``segment_ids`` [B, S] and, in training, ``start_positions``/``end_positions`` [B];
eval batches also carry ``example_index`` [B] (the record number).

``length_aware`` (the pipeline of ``data.glue.dataset.make_dataset``, shared by every
fine-tuning task): every batch is cut to its longest window (rounded up to a multiple of 8),
and eval windows are first sorted by length (out of file order; SQuAD results are matched by
``unique_ids``). Training batches stay the same batches. What this changes for SQuAD, unlike
a classifier: the span head's softmax runs over the positions the model sees, so in training
the padding positions cut away no longer add to the loss's denominator (the original's
``[B, max_seq_length]`` logits include every padding position), and at prediction time
padding positions are not scored at all (see ``bert_tasks.squad.predict_raw_results``).
"""

from __future__ import annotations

from typing import Optional, Sequence, TYPE_CHECKING, Union

from data.glue import dataset as length_aware_dataset
from data.squad import schema as squad_schema

if TYPE_CHECKING:  # (annotations only: TensorFlow is imported where it is used)
    import tensorflow as tf

SHUFFLE_BUFFER = 100


def make_dataset(input_files: Union[str, Sequence[str]], seq_length: int, is_training: bool,
                 batch_size: int, drop_remainder: bool, seed: Optional[int] = None,
                 length_aware: bool = False) -> "tf.data.Dataset":
    """Batched dataset of parsed SQuAD features (see the module docstring).

    Args:
        input_files: a TFRecord path or paths.
        seq_length: S, the records' sequence length.
        is_training: training layout (positions), repeat and shuffle.
        batch_size: B.
        drop_remainder: drop a last partial batch.
        seed: the shuffle seed, or None.
        length_aware: cut batches to their longest window (see above).

    Returns:
        A ``tf.data.Dataset`` of dicts of int32 tensors ([B] and [B, S]) (without TensorFlow
        installed: ``data.glue.numpy_dataset.NumpyDataset``'s numpy batches).
    """
    return length_aware_dataset.make_dataset(
        input_files, squad_schema.record_spec(seq_length, is_training), batch_size,
        is_training, drop_remainder=drop_remainder, trim=length_aware,
        sort_by_length=length_aware and not is_training, seed=seed,
        shuffle_buffer=SHUFFLE_BUFFER)
