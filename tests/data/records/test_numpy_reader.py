"""data/records/numpy_reader.py, the TensorFlow-free TFRecord/Example reader of the JAX path,
against TensorFlow's own parser: the pre-training records and the original's classifier features
read to the same values, whatever the block sizes; damaged and truncated files named with the
record's byte offset."""

import os

import numpy as np
import pytest
import tensorflow as tf

from data.records import numpy_reader
from data.pretraining import schema
from tests import paths

PRETRAINING = os.path.join(paths.GOLDEN, "pretraining_trajectory", "seq64_seed12345_dupe1.tfrecord")
CLASSIFIER = os.path.join(paths.GOLDEN, "classifier_features", "mrpc_dev_len32_0-100.tfrecord")


def _tensorflow_examples(path):
    out = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        example = tf.train.Example.FromString(record)
        row = {}
        for key, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            if kind == "int64_list":
                row[key] = np.array(feature.int64_list.value, np.int64)
            elif kind == "float_list":
                row[key] = np.array(feature.float_list.value, np.float32)
        out.append(row)
    return out


@pytest.mark.parametrize("path", [PRETRAINING, CLASSIFIER])
@pytest.mark.parametrize("block_records, block_bytes", [(256, 1 << 22), (3, 100), (256, 2000)])
def test_examples_equal_tensorflows_parse(monkeypatch, path, block_records, block_bytes):
    monkeypatch.setattr(numpy_reader, "BLOCK_RECORDS", block_records)
    monkeypatch.setattr(numpy_reader, "BLOCK_BYTES", block_bytes)
    ours = list(numpy_reader.examples(path))
    theirs = _tensorflow_examples(path)
    assert len(ours) == len(theirs) > 50
    for mine, want in zip(ours, theirs):
        assert sorted(mine) == sorted(want)
        for key, value in want.items():
            assert mine[key].dtype == value.dtype, key
            np.testing.assert_array_equal(mine[key], value, err_msg=key)
    assert [numpy_reader.parse_example(r) for r in numpy_reader.read_records(path)][3].keys() \
        == ours[3].keys()


def test_batches_equal_the_tensorflow_pipeline_in_file_order():
    from data.pretraining import dataset as pd

    ours = list(numpy_reader.batches([PRETRAINING], 32, schema.FEATURE_NAMES))
    theirs = pd.pretraining_dataset([PRETRAINING], 64, 10, 32, is_training=False)
    for mine, want in zip(ours, theirs.take(len(ours))):
        for name in schema.FEATURE_NAMES:
            np.testing.assert_array_equal(mine[name], want[name].numpy(), err_msg=name)
            assert mine[name].dtype == want[name].numpy().dtype


def _records(path):
    with open(path, "rb") as f:
        return f.read()


def test_damaged_and_truncated_files_name_the_record(tmp_path):
    raw = _records(PRETRAINING)
    first = 12 + int.from_bytes(raw[:8], "little") + 4  # where record 1 starts
    second = first + 12 + int.from_bytes(raw[first:first + 8], "little") + 4
    cases = {
        "data": (raw[:first + 20] + bytes([raw[first + 20] ^ 1]) + raw[first + 21:],
                 "bad data CRC at byte %d" % first),
        "length": (raw[:first + 8] + bytes([raw[first + 8] ^ 1]) + raw[first + 9:],
                   "bad length CRC at byte %d" % first),
        "truncated": (raw[:second - 3], "truncated record at byte %d" % first),
        "header": (raw[:second + 5], "truncated record header at byte %d" % second),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(numpy_reader.RecordError, match=message):
            list(numpy_reader.read_records(str(path)))
    assert len(list(numpy_reader.read_records(str(tmp_path / "data"), check_crc=False))) > 2


def test_edge_values_of_an_example():
    """An empty int64 list, negative and 2**40 ids, a float, a bytes list (skipped): one record
    alone and in a block parse the same."""
    record = tf.train.Example(features=tf.train.Features(feature={
        "empty": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
        "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[-1, 2 ** 40, 0])),
        "weight": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5])),
        "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x"]))})
    ).SerializeToString()
    for row in [numpy_reader.parse_example(record)] + numpy_reader.parse_examples([record] * 3):
        assert sorted(row) == ["empty", "ids", "weight"]
        assert row["empty"].dtype == np.int64 and row["empty"].size == 0
        np.testing.assert_array_equal(row["ids"], [-1, 2 ** 40, 0])
        np.testing.assert_array_equal(row["weight"], np.array([1.5], np.float32))
