"""data/squad/dataset.py: the tf.data pipeline over the golden SQuAD TFRecords."""

import json
import os

import tensorflow as tf

from data.squad import dataset as squad_input
from data.squad import schema as squad_schema
from tests import paths

SHORT = os.path.join(paths.GOLDEN, "squad", "v1.1_short")


def _golden(mode):
    with open(os.path.join(SHORT, "%s_features.jsonl" % mode), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_eval_dataset_reads_every_record_in_order_as_int32():
    golden = _golden("eval")
    batches = list(squad_input.make_dataset(os.path.join(SHORT, "eval_features.tfrecord"), 96,
                                            is_training=False, batch_size=64, drop_remainder=False))
    assert [int(b[squad_schema.INPUT_IDS].shape[0]) for b in batches] == [64, 64, 64, 64, 1]
    assert set(batches[0]) == set(squad_schema.EVAL_FEATURES) | {"example_index"}
    assert all(t.dtype == tf.int32 for t in batches[0].values())
    unique_ids = [int(u) for b in batches for u in b[squad_schema.UNIQUE_IDS]]
    assert unique_ids == [g["unique_id"] for g in golden]
    assert batches[-1][squad_schema.SEGMENT_IDS][0].numpy().tolist() == golden[-1]["segment_ids"]


def test_train_dataset_repeats_shuffles_and_has_positions():
    golden = {g["unique_id"]: g for g in _golden("train")}
    dataset = squad_input.make_dataset(os.path.join(SHORT, "train_features.tfrecord"), 96,
                                       is_training=True, batch_size=100, drop_remainder=True, seed=1)
    batches = list(dataset.take(4))  # 400 > 257 records: the file repeats
    assert all(int(b[squad_schema.INPUT_IDS].shape[0]) == 100 for b in batches)
    ids = [int(u) for u in batches[0][squad_schema.UNIQUE_IDS]]
    assert ids != sorted(ids)  # shuffled
    for b in batches:
        for u, s, e in zip(b[squad_schema.UNIQUE_IDS], b[squad_schema.START_POSITIONS],
                           b[squad_schema.END_POSITIONS]):
            g = golden[int(u)]
            assert (int(s), int(e)) == (g["start_position"], g["end_position"])


def _records(path, seq_length, is_training, batch_size, length_aware, **kwargs):
    return [{k: v.numpy() for k, v in b.items()} for b in squad_input.make_dataset(
        path, seq_length, is_training=is_training, batch_size=batch_size,
        drop_remainder=is_training, length_aware=length_aware, **kwargs).take(40)]


def test_length_aware_training_batches_are_the_padded_batches_cut_to_their_longest():
    path = os.path.join(SHORT, "train_features.tfrecord")
    # 192 of the 257 windows are full (96), the rest 65-80 long: batches of 2 include some
    # without a full window.
    padded = _records(path, 96, True, 2, False, seed=3)
    cut = _records(path, 96, True, 2, True, seed=3)
    widths = set()
    for p, c in zip(padded, cut):
        assert c["unique_ids"].tolist() == p["unique_ids"].tolist()  # the same batches
        longest = int(p["input_mask"].sum(1).max())
        width = c["input_ids"].shape[1]
        widths.add(width)
        assert width == min(96, -(-longest // 8) * 8)
        for name in squad_schema.SEQUENCE_FEATURES:
            assert (c[name] == p[name][:, :width]).all()
            assert not p[name][:, width:].any()  # only padding was cut
        for name in (squad_schema.START_POSITIONS, squad_schema.END_POSITIONS):
            assert (c[name] == p[name]).all() and (c[name] < width).all()
    assert min(widths) < 96  # the slice has short windows: something was cut


def test_length_aware_eval_reads_every_record_once_grouped_by_length():
    path = os.path.join(SHORT, "eval_features.tfrecord")
    golden = {g["unique_id"]: g for g in _golden("eval")}
    batches = list(squad_input.make_dataset(path, 96, is_training=False, batch_size=8,
                                            drop_remainder=False, length_aware=True))
    seen = []
    for b in batches:
        lengths = b["input_mask"].numpy().sum(1)
        assert b["input_ids"].shape[1] == min(96, -(-int(lengths.max()) // 8) * 8)
        for u, ids, n in zip(b["unique_ids"].numpy(), b["input_ids"].numpy(), lengths):
            assert ids[:n].tolist() == golden[int(u)]["input_ids"][:n]
            seen.append(int(u))
    assert sorted(seen) == sorted(golden)
    assert seen != [g for g in golden]  # grouped by length, not in file order
