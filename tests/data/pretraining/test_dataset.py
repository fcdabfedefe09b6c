"""data/pretraining/dataset.py (and data/pretraining/schema.py) on the golden TFRecords."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from data.pretraining import dataset as pd
from data.pretraining import corpus_shards
from data.pretraining import schema as pretraining_schema
from tests import paths

PRE = os.path.join(paths.GOLDEN, "pretraining_data")
WWM_FALSE = os.path.join(PRE, "seq128_seed12345_dupe5_wwmfalse.tfrecord")
WWM_TRUE = os.path.join(PRE, "seq128_seed12345_dupe5_wwmtrue.tfrecord")
TRAJ = os.path.join(paths.GOLDEN, "pretraining_trajectory", "seq64_seed12345_dupe1.tfrecord")


def _jsonl(tfrecord):
    with open(tfrecord[: -len(".tfrecord")] + ".jsonl") as f:
        return [json.loads(line) for line in f]


def test_schema_matches_golden_records():
    record = _jsonl(WWM_FALSE)[0]
    lengths = pretraining_schema.feature_lengths(128, 20)
    assert set(pretraining_schema.FEATURE_NAMES) == set(lengths)
    for name, n in lengths.items():
        assert len(record[name]) == n, name
    spec = pretraining_schema.feature_spec(128, 20)
    assert spec["masked_lm_weights"].dtype == tf.float32
    assert spec["input_ids"].dtype == tf.int64 and spec["input_ids"].shape == [128]


def test_deterministic_batches_are_file_order_and_wrap():
    records = _jsonl(WWM_FALSE)  # 60 records
    ds = pd.pretraining_dataset([WWM_FALSE], 128, 20, 8, is_training=True, deterministic=True)
    batches = list(ds.take(8).as_numpy_iterator())
    for name, value in batches[0].items():
        expected_dtype = np.float32 if name == "masked_lm_weights" else np.int32
        assert value.dtype == expected_dtype and value.shape[0] == 8, name
    order = [i % 60 for i in range(64)]  # batch 7 wraps: records 56..59, 0..3
    for name in pretraining_schema.FEATURE_NAMES:
        got = np.concatenate([b[name] for b in batches])
        want = np.array([records[i][name] for i in order], got.dtype)
        np.testing.assert_array_equal(got, want, err_msg=name)
    # Eval mode reads the same way.
    eval_first = next(iter(pd.pretraining_dataset([WWM_FALSE], 128, 20, 8, is_training=False)))
    np.testing.assert_array_equal(eval_first["input_ids"], batches[0]["input_ids"])


def test_training_mode_shuffles_reproducibly_with_a_seed():
    files = [WWM_FALSE, WWM_TRUE]

    def ids(seed, n=15):
        ds = pd.pretraining_dataset(files, 128, 20, 8, is_training=True, seed=seed)
        return np.concatenate([b["input_ids"] for b in ds.take(n).as_numpy_iterator()])

    a, b, c = ids(1), ids(1), ids(2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Records of both files, all real records, not in file order.
    known = {tuple(r["input_ids"]) for r in _jsonl(WWM_FALSE) + _jsonl(WWM_TRUE)}
    seen = {tuple(row) for row in a}
    assert seen <= known and len(seen) > 60
    first_file = [tuple(r["input_ids"]) for r in _jsonl(WWM_FALSE)]
    assert [tuple(row) for row in a[:8]] != first_file[:8]


def _rows(files, devices, count, deterministic, n=6, batch=8):
    ds = pd.device_rows_dataset(files, 128, 20, batch, devices, count,
                                deterministic=deterministic, seed=3)
    return [b for b in ds.take(n).as_numpy_iterator()]


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_global_batch_does_not_depend_on_how_devices_are_spread(deterministic):
    """device_rows_dataset: 2 processes x 2 devices hold, side by side, the batches of one
    process with the 4 devices; with --deterministic those are pretraining_dataset's."""
    files = [WWM_FALSE, WWM_TRUE]
    whole = _rows(files, [0, 1, 2, 3], 4, deterministic)
    halves = [_rows(files, [0, 1], 4, deterministic), _rows(files, [2, 3], 4, deterministic)]
    for step, batch in enumerate(whole):
        assert batch["input_ids"].shape == (8, 128)
        for name, value in batch.items():
            np.testing.assert_array_equal(
                value, np.concatenate([halves[0][step][name], halves[1][step][name]]), name)
    if deterministic:
        stream = pd.pretraining_dataset(files, 128, 20, 8, is_training=True, deterministic=True)
        for ours, theirs in zip(whole, stream.take(6).as_numpy_iterator()):
            np.testing.assert_array_equal(ours["input_ids"], theirs["input_ids"])
    else:  # one device: the one pipeline of a single-device run
        single = pd.pretraining_dataset(files, 128, 20, 8, is_training=True, seed=3)
        for ours, theirs in zip(_rows(files, [0], 1, False), single.take(6).as_numpy_iterator()):
            np.testing.assert_array_equal(ours["input_ids"], theirs["input_ids"])


def test_shuffled_devices_read_their_own_files_or_records():
    """Shuffled: with as many files as devices each device's pipeline reads its own file;
    with fewer, the devices read disjoint records of the same stream."""
    known = [{tuple(r["input_ids"]) for r in _jsonl(path)} for path in (WWM_FALSE, WWM_TRUE)]
    for device in (0, 1):
        rows = {tuple(row) for b in _rows([WWM_FALSE, WWM_TRUE], [device], 2, False, n=7)
                for row in b["input_ids"]}
        assert rows <= known[device] and len(rows) > 10, device
    # one file, two devices: the records of its even places, and of its odd places
    seen = [{tuple(row) for b in _rows([WWM_FALSE], [device], 2, False, n=7)
             for row in b["input_ids"]} for device in (0, 1)]
    assert len(seen[0]) > 10 and len(seen[1]) > 10 and not seen[0] & seen[1]
    assert seen[0] | seen[1] <= known[0]


def test_devices_must_be_consecutive_and_split_the_batch():
    for devices, count, batch in (([0, 2], 4, 8), ([], 2, 8), ([0], 3, 8)):
        with pytest.raises(ValueError):
            pd.device_rows_dataset([WWM_FALSE], 128, 20, batch, devices, count,
                                   deterministic=True)


def test_input_files_globs_and_commas(tmp_path):
    pattern = os.path.join(PRE, "seq128_*.tfrecord")
    assert corpus_shards.input_files(pattern) == [WWM_FALSE, WWM_TRUE]
    assert corpus_shards.input_files(TRAJ + "," + WWM_TRUE) == [TRAJ, WWM_TRUE]
    with pytest.raises(pd.PretrainingDataError, match="no file matched"):
        corpus_shards.input_files(str(tmp_path / "*.tfrecord"))


def test_check_input_files_names_file_and_flag(tmp_path):
    pd.check_input_files([WWM_FALSE, WWM_TRUE], 128, 20)
    with pytest.raises(pd.PretrainingDataError,
                       match=r"seq64.*input_ids has 64 values per record but "
                             r"--max_seq_length=128"):
        pd.check_input_files([TRAJ], 128, 10)
    with pytest.raises(pd.PretrainingDataError, match="--max_predictions_per_seq=10"):
        pd.check_input_files([WWM_FALSE], 128, 10)
    garbage = tmp_path / "garbage.tfrecord"
    garbage.write_bytes(b"this is not a tfrecord file at all")
    with pytest.raises(pd.PretrainingDataError, match="garbage.tfrecord"):
        pd.check_input_files([str(garbage)], 128, 20)
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    with pytest.raises(pd.PretrainingDataError, match="no records"):
        pd.check_input_files([str(empty)], 128, 20)
    other = tmp_path / "other.tfrecord"
    with tf.io.TFRecordWriter(str(other)) as writer:
        example = tf.train.Example(features=tf.train.Features(feature={
            "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * 128))}))
        writer.write(example.SerializeToString())
    with pytest.raises(pd.PretrainingDataError, match="no feature 'input_mask'"):
        pd.check_input_files([str(other)], 128, 20)


def test_record_features_are_the_pretraining_model_inputs():
    from modeling.training import objectives

    assert set(pretraining_schema.FEATURE_NAMES) == set(objectives.MODEL_INPUT_NAMES)
    assert len(objectives.MODEL_INPUT_NAMES) == len(pretraining_schema.FEATURE_NAMES) == 7
