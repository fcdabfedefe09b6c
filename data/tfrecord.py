"""``tf.train.Feature`` helpers for the TFRecords the data generators write (GLUE, SWAG, NER,
SQuAD features; the writer is ``bert_common.atomic.AtomicTFRecordWriters``). TensorFlow is
imported on first use, as in the generators."""

from __future__ import annotations


def int64_feature(values) -> "tf.train.Feature":
    """An int64 list feature of ``values`` (an iterable of ints).

    Args:
        values: the ints.

    Returns:
        A ``tf.train.Feature`` holding an ``int64_list``.
    """
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values) -> "tf.train.Feature":
    """A float list feature of ``values`` (an iterable of numbers).

    Args:
        values: the numbers.

    Returns:
        A ``tf.train.Feature`` holding a ``float_list``.
    """
    import tensorflow as tf

    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
