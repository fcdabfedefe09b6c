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
    assert set(batches[0]) == set(squad_schema.EVAL_FEATURES)
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
