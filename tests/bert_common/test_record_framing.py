"""bert_common/record_framing.py: TFRecord frames and CRC-32C computed with numpy, checked
against the known CRC-32C check value and TensorFlow's own reader and writer; and
``bert_common.atomic.AtomicTFRecordWriters``, which frames its records with it, writing files
byte-identical to ``tf.io.TFRecordWriter``'s."""

import numpy as np
import pytest
import tensorflow as tf

from bert_common import atomic, record_framing

# Payloads of varied sizes: empty, one byte, around the 8-byte header, a few hundred bytes
# and one long record (much wider than the others: the right-aligned rows are mostly zeros).
_RNG = np.random.default_rng(5)
PAYLOADS = [b"", b"x", b"\x00" * 7, bytes(range(8)), b"\xff" * 9, b"abc",
            _RNG.integers(0, 256, 300, dtype=np.uint8).tobytes(), b"",
            _RNG.integers(0, 256, 20_000, dtype=np.uint8).tobytes(), b"tail"]


def test_crc32c_check_value():
    assert record_framing.crc32c(b"123456789") == 0xE3069283
    assert record_framing.crc32c(b"") == 0
    assert record_framing.crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4
    assert record_framing.crc32c(bytes([0xFF] * 32)) == 0x62A8AB43
    # continuing a CRC over a split input gives the CRC of the whole
    assert record_framing.crc32c(b"6789", record_framing.crc32c(b"12345")) == 0xE3069283


def test_mask_crc_int_and_array_agree():
    crcs = [0, 1, 0xE3069283, 0xFFFFFFFF, 0x80000000]
    masked = record_framing.mask_crc(np.array(crcs, np.uint32))
    assert masked.dtype == np.uint32
    assert masked.tolist() == [record_framing.mask_crc(c) for c in crcs]
    assert record_framing.mask_crc(0) == 0xA282EAD8
    crc = record_framing.crc32c(b"hello")  # TFRecord's mask: rotate right by 15, add a constant
    assert record_framing.mask_crc(crc) == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) % 2 ** 32


def test_rows_crc32c_equals_crc32c_per_row():
    """Right-aligned rows (zeros before the data) give each row's data CRC."""
    datas = [b"", b"1", b"123456789", b"\x00\x00ab", bytes(range(40))]
    width = max(len(d) for d in datas)
    rows = np.zeros((len(datas), width), np.uint8)
    for r, d in enumerate(datas):
        if d:
            rows[r, width - len(d):] = np.frombuffer(d, np.uint8)
    crcs = record_framing.rows_crc32c(rows, [len(d) for d in datas])
    assert crcs.tolist() == [record_framing.crc32c(d) for d in datas]
    assert crcs[2] == 0xE3069283


def test_frame_record_layout():
    framed = record_framing.frame_record(b"123456789")
    assert len(framed) == 8 + 4 + 9 + 4
    assert framed[:8] == (9).to_bytes(8, "little")
    assert framed[12:21] == b"123456789"
    assert framed[21:] == record_framing.mask_crc(0xE3069283).to_bytes(4, "little")


@pytest.mark.parametrize("payloads", [PAYLOADS, [b""], [b"only"], PAYLOADS[::-1]])
def test_frame_records_equals_concatenated_frame_record(payloads):
    expected = b"".join(record_framing.frame_record(p) for p in payloads)
    assert record_framing.frame_records(payloads) == expected


def test_frame_records_of_nothing_is_empty():
    assert record_framing.frame_records([]) == b""


def test_tensorflow_reads_frame_records_back(tmp_path):
    path = tmp_path / "framed.tfrecord"
    path.write_bytes(record_framing.frame_records(PAYLOADS))
    read = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    assert read == PAYLOADS


def test_frame_records_equals_tensorflows_writer(tmp_path):
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for p in PAYLOADS:
            writer.write(p)
    with open(path, "rb") as f:
        assert record_framing.frame_records(PAYLOADS) == f.read()


@pytest.mark.parametrize("flush_bytes", [1, 50, 1 << 20])
def test_atomic_writers_equal_tensorflows_round_robin(tmp_path, monkeypatch, flush_bytes):
    """Records written over 2 files (flushed every few records, or only at close) give the
    same bytes as tf.io.TFRecordWriter writing the same records round-robin."""
    monkeypatch.setattr(atomic.AtomicTFRecordWriters, "FLUSH_BYTES", flush_bytes)
    records = [b"r%d-" % i * (i % 7) for i in range(23)] + PAYLOADS
    ours = [str(tmp_path / "ours-0.tfrecord"), str(tmp_path / "ours-1.tfrecord")]
    with atomic.AtomicTFRecordWriters(ours) as writer:
        for r in records:
            writer.write(r)
    assert writer.num_written == len(records)
    theirs = [str(tmp_path / "tf-0.tfrecord"), str(tmp_path / "tf-1.tfrecord")]
    tf_writers = [tf.io.TFRecordWriter(p) for p in theirs]
    for i, r in enumerate(records):
        tf_writers[i % 2].write(r)
    for w in tf_writers:
        w.close()
    for mine, reference in zip(ours, theirs):
        with open(mine, "rb") as a, open(reference, "rb") as b:
            assert a.read() == b.read()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ours-0.tfrecord", "ours-1.tfrecord", "tf-0.tfrecord", "tf-1.tfrecord"]  # no temps


def test_atomic_writers_flush_while_writing(tmp_path, monkeypatch):
    """With a small FLUSH_BYTES the records reach the temporary before close()."""
    monkeypatch.setattr(atomic.AtomicTFRecordWriters, "FLUSH_BYTES", 10)
    path = tmp_path / "out.tfrecord"
    writer = atomic.AtomicTFRecordWriters([str(path)])
    writer.write(b"0123456789ab")  # >= FLUSH_BYTES: framed and written at once
    writer._files[0].flush()
    (temp,) = [p for p in tmp_path.iterdir()]
    assert temp.read_bytes() == record_framing.frame_record(b"0123456789ab")
    writer.write(b"abc")  # pending
    writer.close()
    assert path.read_bytes() == (record_framing.frame_record(b"0123456789ab")
                                 + record_framing.frame_record(b"abc"))


def test_long_records_keep_the_tables_small(monkeypatch):
    """A record longer than LONG_RECORD is checked byte at a time: the vectorised tables (1 KB
    per byte of the widest record) and a group's matrix stay bounded; the CRCs are the same."""
    monkeypatch.setattr(record_framing, "LONG_RECORD", 64)
    monkeypatch.setattr(record_framing, "GROUP_BYTES", 256)
    monkeypatch.setattr(record_framing, "_CRC", record_framing._CrcTables())  # fresh tables
    payloads = [b"a" * 10, b"b" * 500, b"", b"c" * 64, b"d" * 65] + [b"e" * 30] * 20
    got = record_framing.crc32c_many(payloads)
    assert got.tolist() == [record_framing.crc32c(p) for p in payloads]
    assert record_framing._CRC.contrib.shape[0] <= 66  # not the 500-byte record's 501 rows
    assert record_framing.frame_records(payloads) == b"".join(
        record_framing.frame_record(p) for p in payloads)
