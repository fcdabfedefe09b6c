"""data/pretraining/records.py: CRC-32C, TFRecord framing, the vectorized tf.train.Example
encoder (checked against TensorFlow's own parser and record reader) and atomic writing."""

import os

import numpy as np
import pytest

from bert_common import record_framing
from data.pretraining import records as R
from data.pretraining import schema as pretraining_schema
from data.records import numpy_reader


def _random_batch(rng, b, s, p, vocab=30522):
    seq_len = rng.integers(5, s + 1, b)
    seg_start = np.array([rng.integers(2, n - 2) if n > 4 else 3 for n in seq_len])
    ids = rng.integers(0, vocab, (b, s))
    ids[np.arange(s)[None, :] >= seq_len[:, None]] = 0
    k = rng.integers(1, p + 1, b)
    positions = rng.integers(1, s, (b, p))
    masked = rng.integers(0, vocab, (b, p))
    dead = np.arange(p)[None, :] >= k[:, None]
    positions[dead] = 0
    masked[dead] = 0
    labels = rng.integers(0, 2, b)
    return ids, seq_len, seg_start, positions, masked, k, labels


def _expected(ids, seq_len, seg_start, positions, masked, k, labels, r):
    s, p = ids.shape[1], positions.shape[1]
    cols = np.arange(s)
    return {
        "input_ids": ids[r].tolist(),
        "input_mask": (cols < seq_len[r]).astype(int).tolist(),
        "segment_ids": ((cols >= seg_start[r]) & (cols < seq_len[r])).astype(int).tolist(),
        "masked_lm_positions": positions[r].tolist(),
        "masked_lm_ids": masked[r].tolist(),
        "masked_lm_weights": (np.arange(p) < k[r]).astype(float).tolist(),
        "next_sentence_labels": [int(labels[r])],
    }


@pytest.mark.parametrize("s, p, vocab", [(128, 20, 30522), (300, 45, 30522), (8, 3, 200000),
                                         (5, 1, 50)])
def test_encoder_records_decode_to_the_features(s, p, vocab):
    rng = np.random.default_rng(s)
    batch = _random_batch(rng, 64, s, p, vocab)
    encoder = R.RecordEncoder(s, p)
    buf, starts, ends = encoder.encode(*batch)
    assert buf.dtype == np.uint8 and (ends <= len(buf)).all() and (starts[1:] >= ends[:-1]).all()
    for r in range(64):
        framed = buf[starts[r]:ends[r]].tobytes()
        n = int.from_bytes(framed[:8], "little")
        data = framed[12:12 + n]
        assert record_framing.frame_record(data) == framed
        assert numpy_reader.decode_example(data) == _expected(*batch, r)


def test_tensorflow_reads_and_parses_the_records(tmp_path):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    s, p = 128, 20
    batch = _random_batch(rng, 50, s, p)
    store = R.FramedRecords()
    store.add(*R.RecordEncoder(s, p).encode(*batch))
    path = str(tmp_path / "x.tfrecord")
    store.write([path])
    buf = open(path, "rb").read()
    serialized = list(tf.data.TFRecordDataset(path).batch(64))[0]
    parsed = tf.io.parse_example(serialized, pretraining_schema.feature_spec(s, p))
    assert parsed["input_ids"].shape == (50, s)
    for r in range(50):
        want = _expected(*batch, r)
        for name in pretraining_schema.FEATURE_NAMES:
            np.testing.assert_array_equal(parsed[name][r].numpy(), np.array(want[name]),
                                          err_msg=name)
    from data.pretraining import dataset as pretraining_dataset  # (imports TensorFlow)

    # The input pipeline's first batch of one record: int64 features cast to int32.
    one = next(iter(pretraining_dataset.pretraining_dataset([path], s, p, 1, is_training=False)))
    assert one["input_ids"].dtype == tf.int32 and one["masked_lm_weights"].dtype == tf.float32
    np.testing.assert_array_equal(one["input_ids"][0].numpy(), batch[0][0])
    # TensorFlow checks the CRCs: a flipped byte is a DataLossError.
    corrupt = bytearray(buf)
    corrupt[40] ^= 1
    with open(path, "wb") as f:
        f.write(bytes(corrupt))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(path))


def test_encode_features_rejects_non_instance_layouts():
    encoder = R.RecordEncoder(6, 2)
    good = {"input_ids": [[101, 5, 102, 6, 102, 0]], "input_mask": [[1, 1, 1, 1, 1, 0]],
            "segment_ids": [[0, 0, 0, 1, 1, 0]], "masked_lm_positions": [[1, 0]],
            "masked_lm_ids": [[5, 0]], "masked_lm_weights": [[1.0, 0.0]],
            "next_sentence_labels": [[0]]}
    buf, starts, ends = encoder.encode_features(good)
    framed = buf[starts[0]:ends[0]].tobytes()
    assert numpy_reader.decode_example(framed[12:-4]) == {k: v[0] for k, v in good.items()}
    bad = dict(good, input_mask=[[1, 0, 1, 1, 1, 0]])
    with pytest.raises(ValueError, match="input_mask"):
        encoder.encode_features(bad)


def test_write_is_round_robin_in_the_given_order_and_atomic(tmp_path):
    rng = np.random.default_rng(1)
    encoder = R.RecordEncoder(16, 4)
    store = R.FramedRecords()
    batches = [_random_batch(rng, n, 16, 4) for n in (5, 7)]
    for batch in batches:
        store.add(*encoder.encode(*batch))
    assert len(store) == 12
    want = [_expected(*batches[0], r) for r in range(5)] + \
        [_expected(*batches[1], r) for r in range(7)]
    order = list(np.random.default_rng(2).permutation(12))
    outs = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    assert store.write(outs, order) == 12
    got_a = [numpy_reader.decode_example(x) for x in list(numpy_reader.read_records(outs[0]))]
    got_b = [numpy_reader.decode_example(x) for x in list(numpy_reader.read_records(outs[1]))]
    assert got_a == [want[i] for i in order[0::2]]
    assert got_b == [want[i] for i in order[1::2]]
    assert sorted(os.listdir(tmp_path)) == ["a.tfrecord", "b.tfrecord"]
    with pytest.raises(OSError):
        store.write([str(tmp_path / "missing" / "c.tfrecord")])
    assert sorted(os.listdir(tmp_path)) == ["a.tfrecord", "b.tfrecord"]


def test_read_records_detects_corruption(tmp_path):
    path = tmp_path / "x.tfrecord"
    path.write_bytes(record_framing.frame_record(b"abc") + record_framing.frame_record(b"defg"))
    assert list(numpy_reader.read_records(str(path))) == [b"abc", b"defg"]
    data = bytearray(path.read_bytes())
    data[13] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bad data CRC"):
        list(numpy_reader.read_records(str(path)))
