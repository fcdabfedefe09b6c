"""data/records/tf_example.py: the ``tf.train.Feature`` helpers of the data generators' TFRecords;
``encode_example`` (a ``tf.train.Example`` serialized by hand) against TensorFlow's protobuf;
``decode_numpy`` against ``decode_tf`` on the same record (values, int32/float32, shapes); and
``decode_numpy``'s errors, which name the file and the record."""

import numpy as np
import pytest
import tensorflow as tf

from bert_common.errors import InputError
from data.records import numpy_reader
from data.records.tf_example import FixedLen, decode_numpy, decode_tf, encode_example, tf_parse_spec
from tests.support.features import float_feature, int64_feature


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


INTS = [0, 127, 128, 2**40, -1, -2**63, 2**63 - 1, 300]
FLOATS = [0.0, -1.5, 3.25e-8, 1e30]


def _reference_example(int64s, floats):
    """The tf.train.Example that TensorFlow builds of the same features."""
    feature = {name: int64_feature(values) for name, values in int64s.items()}
    feature.update({name: float_feature(values) for name, values in floats.items()})
    return tf.train.Example(features=tf.train.Features(feature=feature))


@pytest.mark.parametrize("int64s, floats", [
    ({"ids": INTS, "empty": [], "one": [5], "big": [2**40] * 3}, {"w": FLOATS, "nil": []}),
    ({"small": list(range(128))}, {}),  # every value one varint byte
    ({"neg": [-1]}, None),
    ({}, {"f": [1.0]}),
])
def test_encode_example_parses_as_tensorflows_example(int64s, floats):
    record = encode_example(int64s, floats)
    parsed = tf.train.Example.FromString(record)
    assert parsed == _reference_example(int64s, floats or {})
    for name, values in int64s.items():  # the list kind is set, even for an empty list
        assert parsed.features.feature[name].WhichOneof("kind") == "int64_list"
        assert list(parsed.features.feature[name].int64_list.value) == values
    for name, values in (floats or {}).items():
        assert parsed.features.feature[name].WhichOneof("kind") == "float_list"
        np.testing.assert_array_equal(parsed.features.feature[name].float_list.value,
                                      np.float32(values))


def test_encode_example_of_numpy_arrays():
    record = encode_example({"ids": np.array([[1, 2], [300, -7]], np.int32)},
                            {"w": np.array([0.5, 2.0], np.float64)})
    assert tf.train.Example.FromString(record) == _reference_example(
        {"ids": [1, 2, 300, -7]}, {"w": [0.5, 2.0]})


SPEC = {
    "ids": FixedLen((4,)),
    "grid": FixedLen((2, 3)),
    "label": FixedLen(()),
    "score": FixedLen((), is_float=True),
    "weights": FixedLen((3,), is_float=True),
}
VALUES = {"ids": [101, 2**40, -1, 0], "grid": [1, 2, 3, 4, 5, 600], "label": [1],
          "extra": [9, 9]}  # a feature the spec does not name is ignored
FLOAT_VALUES = {"score": [0.25], "weights": [1.0, 0.0, -2.5]}


def test_decode_numpy_equals_decode_tf():
    record = encode_example(VALUES, FLOAT_VALUES)
    ours = decode_numpy(numpy_reader.parse_example(record), SPEC, "x.tf_record", 0)
    theirs = {k: v.numpy() for k, v in decode_tf(tf.constant(record), SPEC).items()}
    assert set(ours) == set(theirs) == set(SPEC)
    for name in SPEC:
        assert ours[name].dtype == theirs[name].dtype, name
        assert ours[name].shape == theirs[name].shape == SPEC[name].shape, name
        np.testing.assert_array_equal(ours[name], theirs[name])
    assert ours["grid"].dtype == np.int32 and ours["grid"].tolist() == [[1, 2, 3], [4, 5, 600]]
    assert ours["label"].shape == () and int(ours["label"]) == 1
    assert ours["score"].dtype == np.float32 and float(ours["score"]) == 0.25
    assert ours["ids"].tolist() == [101, 0, -1, 0]  # int64 -> int32 wraps as tf.cast does


def test_tf_parse_spec_flat_lists_and_scalars():
    parse = tf_parse_spec(SPEC)
    assert parse["grid"].shape == [6] and parse["grid"].dtype == tf.int64
    assert parse["label"].shape == [] and parse["score"].dtype == tf.float32
    assert FixedLen((2, 3)).size == 6 and FixedLen(()).size == 1


@pytest.mark.parametrize("values, floats, expected", [
    ({k: v for k, v in VALUES.items() if k != "grid"}, FLOAT_VALUES, "no feature grid"),
    (dict(VALUES, ids=[1, 2, 3]), FLOAT_VALUES, "feature ids has 3 int64 values, expected 4"),
    (dict(VALUES, grid=[]), FLOAT_VALUES, "feature grid has 0 int64 values, expected 6"),
    (VALUES, dict(FLOAT_VALUES, score=[1.0, 2.0]), "feature score has 2 float"),
    ({k: v for k, v in VALUES.items() if k != "label"}, dict(FLOAT_VALUES, label=[1.0]),
     "feature label has 1 float values, expected 1 int64"),
    (dict(VALUES, weights=[1, 0, 2]), {"score": [0.25]},
     "feature weights has 3 int64 values, expected 3 float"),
])
def test_decode_numpy_errors_name_file_and_record(values, floats, expected):
    example = numpy_reader.parse_example(encode_example(values, floats))
    with pytest.raises(InputError) as raised:
        decode_numpy(example, SPEC, "/data/dev.tf_record", 7)
    message = str(raised.value)
    assert "/data/dev.tf_record" in message and "record 7" in message
    assert expected in message
