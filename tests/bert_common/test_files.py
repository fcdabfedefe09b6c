import os

import pytest
import tensorflow as tf

from bert_common import files as io_utils


def test_atomic_open_leaves_nothing_on_error(tmp_path):
    path = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with io_utils.atomic_open(str(path)) as f:
            f.write("half")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_atomic_open_writes(tmp_path):
    path = tmp_path / "out.txt"
    with io_utils.atomic_open(str(path)) as f:
        f.write("done")
    assert path.read_text() == "done"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_tfrecord_writers_round_robin(tmp_path):
    paths = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    with io_utils.AtomicTFRecordWriters(paths) as w:
        for i in range(5):
            ex = tf.train.Example(features=tf.train.Features(feature={"x": io_utils.int64_feature([i])}))
            w.write(ex.SerializeToString())
    counts = [sum(1 for _ in tf.data.TFRecordDataset(p)) for p in paths]
    assert counts == [3, 2]


def test_tfrecord_writers_abort_on_error(tmp_path):
    paths = [str(tmp_path / "a.tfrecord")]
    with pytest.raises(ValueError):
        with io_utils.AtomicTFRecordWriters(paths) as w:
            w.write(b"x")
            raise ValueError("bad")
    assert os.listdir(tmp_path) == []


def test_unwritable_folder_is_named(tmp_path):
    with pytest.raises(OSError, match="does not exist"):
        io_utils.AtomicTFRecordWriters([str(tmp_path / "missing" / "x.tfrecord")])
