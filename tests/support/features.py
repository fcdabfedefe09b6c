"""``tf.train.Feature`` helpers for tests that build a ``tf.train.Example`` themselves (the
library writes records with ``data.records.tf_example.encode_example``, without TensorFlow)."""

from __future__ import annotations

import tensorflow as tf


def int64_feature(values) -> tf.train.Feature:
    """An int64 list feature of ``values`` (an iterable of ints)."""
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values) -> tf.train.Feature:
    """A float list feature of ``values`` (an iterable of numbers)."""
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
