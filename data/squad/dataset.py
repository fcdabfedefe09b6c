"""tf.data pipelines over the SQuAD TFRecords written by ``data.squad.features.FeatureWriter``.

As the original ``input_fn_builder``: training repeats the file and shuffles
with a buffer of 100, eval reads it once in order; records are parsed with
``data.squad.schema.feature_spec`` and every int64 becomes int32. Batches are
dicts of int32 tensors: ``unique_ids`` [B], ``input_ids``/``input_mask``/
``segment_ids`` [B, S] and, in training, ``start_positions``/``end_positions`` [B].
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import tensorflow as tf

from data.squad import schema as squad_schema

SHUFFLE_BUFFER = 100


def make_dataset(input_files: Union[str, Sequence[str]], seq_length: int, is_training: bool,
                 batch_size: int, drop_remainder: bool, seed: Optional[int] = None) -> tf.data.Dataset:
    """Batched dataset of parsed SQuAD features (see the module docstring)."""
    spec = squad_schema.feature_spec(seq_length, is_training)
    d = tf.data.TFRecordDataset(input_files)
    if is_training:
        d = d.repeat()
        d = d.shuffle(buffer_size=SHUFFLE_BUFFER, seed=seed)
    d = d.map(lambda record: squad_schema.decode_record(record, spec),
              num_parallel_calls=tf.data.AUTOTUNE)
    d = d.batch(batch_size, drop_remainder=drop_remainder)
    return d.prefetch(tf.data.AUTOTUNE)

