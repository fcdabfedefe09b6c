"""data/tfrecord.py: the ``tf.train.Feature`` helpers of the data generators' TFRecords."""

import numpy as np
import tensorflow as tf

from data.tfrecord import float_feature, int64_feature


def test_features_hold_the_values_and_parse_back():
    example = tf.train.Example(features=tf.train.Features(feature={
        "ids": int64_feature(np.array([3, 0, 2**40])),
        "weights": float_feature([1.0, 0.5]),
        "none": int64_feature([]),
    }))
    assert list(example.features.feature["ids"].int64_list.value) == [3, 0, 2**40]
    assert list(example.features.feature["weights"].float_list.value) == [1.0, 0.5]
    parsed = tf.io.parse_single_example(example.SerializeToString(), {
        "ids": tf.io.FixedLenFeature([3], tf.int64),
        "weights": tf.io.FixedLenFeature([2], tf.float32),
        "none": tf.io.FixedLenFeature([0], tf.int64),
    })
    assert parsed["ids"].numpy().tolist() == [3, 0, 2**40]
    assert parsed["weights"].numpy().tolist() == [1.0, 0.5]
