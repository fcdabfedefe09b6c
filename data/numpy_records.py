"""TFRecords of ``tf.train.Example`` read with numpy, without TensorFlow (the JAX path).

Reads what ``create_pretraining_data.py`` and the task feature writers write: each record a
serialized ``Example`` of int64 and float lists. The framing
(``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``) is checked
record by record with ``data.pretraining.records``' CRC-32C (the one definition of the wire
format); the protobuf is decoded by hand: ``Example.features`` (field 1) holds map entries
(field 1; key = 1, value = 2); ``Feature.float_list`` is field 2 and ``int64_list`` field 3, their
values packed or not. ``bytes_list`` features are skipped.

``batches(paths, batch_size, names)`` yields dicts of stacked arrays in file order, as the
TensorFlow input does with ``--deterministic`` (no shuffle). Lists of one length per feature
(the fixed-length features of these files) stack into [B, L]; int64 becomes int32, as the
TensorFlow input casts.

Example::

    from data import numpy_records
    for batch in numpy_records.batches(["out.tfrecord"], 8, ["input_ids", "input_mask"]):
        batch["input_ids"].shape                   # (8, 128), int32
"""

from __future__ import annotations

import struct
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from bert_common import files
from bert_common.errors import InputError
from data.pretraining.records import crc32c, mask_crc


class RecordError(InputError):  # a ValueError too
    """A damaged record; the message names the file and the record's offset."""


def read_records(path: str, check_crc: bool = True) -> Iterator[bytes]:
    """The records of one TFRecord file, in order.

    Args:
        path: a local or ``gs://`` path.
        check_crc: verify both CRCs of every record.

    Raises:
        RecordError: a truncated or damaged record.
    """
    with files.open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise RecordError("%s: truncated record header at byte %d" % (path, offset))
            length, length_crc = struct.unpack("<QI", header)
            if check_crc and mask_crc(crc32c(header[:8])) != length_crc:
                raise RecordError("%s: bad length CRC at byte %d" % (path, offset))
            body = f.read(length + 4)
            if len(body) < length + 4:
                raise RecordError("%s: truncated record at byte %d" % (path, offset))
            data = body[:length]
            if check_crc and mask_crc(crc32c(data)) != struct.unpack("<I", body[length:])[0]:
                raise RecordError("%s: bad data CRC at byte %d" % (path, offset))
            offset += 12 + length + 4
            yield data


def _varint(buf: bytes, pos: int):
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _packed_varints(buf: bytes) -> np.ndarray:
    """Every varint of a packed field at once: int64 [n] (two's complement for negatives)."""
    raw = np.frombuffer(buf, np.uint8)
    if raw.size == 0:
        return np.zeros(0, np.int64)
    ends = np.flatnonzero(raw < 0x80)
    starts = np.concatenate([[0], ends[:-1] + 1])
    group = np.repeat(np.arange(ends.size), ends - starts + 1)
    shift = (np.arange(raw.size) - starts[group]).astype(np.uint64) * np.uint64(7)
    values = (raw.astype(np.uint64) & np.uint64(0x7F)) << shift
    return np.bitwise_or.reduceat(values, starts).view(np.int64)


def _fields(buf: bytes) -> Iterator[tuple]:
    """(field number, wire type, value) of a message: bytes for LEN, int for the others."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported protobuf wire type %d" % wire)
        yield field, wire, value


def _feature_values(feature: bytes) -> Optional[np.ndarray]:
    for kind, _, payload in _fields(feature):
        if kind == 2:  # float_list
            chunks = [np.frombuffer(v, "<f4")  # packed (LEN) or one fixed32: the same bytes
                      for field, wire, v in _fields(payload) if field == 1]
            return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        if kind == 3:  # int64_list
            chunks = [_packed_varints(v) if wire == 2 else
                      np.array([v], np.uint64).view(np.int64)
                      for field, wire, v in _fields(payload) if field == 1]
            return np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    return None  # bytes_list or empty


def parse_example(record: bytes) -> Dict[str, np.ndarray]:
    """The int64 (int64 [n]) and float (float32 [n]) features of one serialized Example.

    Args:
        record: the record's bytes.
    """
    out = {}
    for field, _, features in _fields(record):
        if field != 1:
            continue
        for entry_field, _, entry in _fields(features):
            if entry_field != 1:
                continue
            key, value = None, None
            for part, _, payload in _fields(entry):
                if part == 1:
                    key = payload.decode("utf-8")
                elif part == 2:
                    value = _feature_values(payload)
            if key is not None and value is not None:
                out[key] = value
    return out


def batches(paths: Sequence[str], batch_size: int, names: Iterable[str],
            drop_remainder: bool = True, skip: int = 0) -> Iterator[Dict[str, np.ndarray]]:
    """Batches of the named features, in file order (files in the order given).

    Args:
        paths: TFRecord files.
        batch_size: B.
        names: the features to keep (each must be in every record).
        drop_remainder: drop a last batch smaller than B.
        skip: records to skip first (a resumed run's position).

    Yields:
        ``{name: [B, L]}``: int32 for int64 lists, float32 for float lists.

    Raises:
        RecordError: a damaged record or a missing feature.
    """
    names = list(names)
    pending: List[Dict[str, np.ndarray]] = []
    seen = 0
    for path in paths:
        for index, record in enumerate(read_records(path)):
            seen += 1
            if seen <= skip:
                continue
            features = parse_example(record)
            missing = [n for n in names if n not in features]
            if missing:
                raise RecordError("%s: record %d has no feature %s"
                                  % (path, index, ", ".join(missing)))
            pending.append({n: features[n] for n in names})
            if len(pending) == batch_size:
                yield stack_rows(pending)
                pending = []
    if pending and not drop_remainder:
        yield stack_rows(pending)


def stack_rows(rows: List[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    """Feature rows -> ``{name: [B, L]}``; int64 becomes int32, as the TensorFlow input casts.

    Args:
        rows: one dict of 1-D arrays per record, the same names in each.
    """
    out = {}
    for name in rows[0]:
        values = np.stack([row[name] for row in rows])
        out[name] = values.astype(np.int32) if values.dtype == np.int64 else values
    return out
