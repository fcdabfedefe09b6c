"""TFRecords of ``tf.train.Example`` read with numpy, without TensorFlow (the JAX path).

Reads what ``create_pretraining_data.py`` and the task feature writers write: each record a
serialized ``Example`` of int64 and float lists. The framing
(``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``) is checked
record by record with ``bert_common.record_framing``'s CRC-32C (the one definition of the
framing); the protobuf is decoded by hand: ``Example.features`` (field 1) holds map entries
(field 1; key = 1, value = 2); ``Feature.float_list`` is field 2 and ``int64_list`` field 3, their
values packed or not. ``bytes_list`` features are skipped.

Files are read in blocks: the CRCs of ``BLOCK_RECORDS`` records are checked at once, and the
packed int64 lists of a block are decoded in one vectorised pass (``parse_examples``,
``examples``); memory stays flat.

``batches(paths, batch_size, names)`` yields dicts of stacked arrays in file order, as the
TensorFlow input does with ``--deterministic`` (no shuffle). Lists of one length per feature
(the fixed-length features of these files) stack into [B, L]; int64 becomes int32, as the
TensorFlow input casts.

Example::

    from data.records import numpy_reader
    for batch in numpy_reader.batches(["out.tfrecord"], 8, ["input_ids", "input_mask"]):
        batch["input_ids"].shape                   # (8, 128), int32
"""

from __future__ import annotations

import os
import struct
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from bert_common import files
from bert_common.errors import InputError
from bert_common.record_framing import crc32c, crc32c_many, mask_crc, rows_crc32c


class RecordError(InputError):  # a ValueError too
    """A damaged record; the message names the file and the record's offset."""


BLOCK_RECORDS = 256  # records whose CRCs are checked together (vectorised)
BLOCK_BYTES = 1 << 22  # bytes read from the file at a time


def read_records(path: str, check_crc: bool = True) -> Iterator[bytes]:
    """The records of one TFRecord file, in order.

    The file is read in blocks of ``BLOCK_BYTES``; the CRCs of ``BLOCK_RECORDS`` records are
    checked at once (``bert_common.record_framing.crc32c_many``), before any of them is
    yielded.

    Args:
        path: a local or ``gs://`` path.
        check_crc: verify both CRCs of every record.

    Raises:
        RecordError: a truncated or damaged record.
    """
    pending: List[tuple] = []  # (offset, header, data, data crc)
    widest = 0  # the longest record in ``pending``
    with files.open(path, "rb") as f:
        buffer, start, offset = b"", 0, 0  # buffer[start:] is the file from ``offset`` on
        eof = False
        while True:
            if len(buffer) - start < 12 and not eof:
                chunk = f.read(BLOCK_BYTES)
                eof = not chunk
                buffer, start = buffer[start:] + chunk, 0
            if len(buffer) - start == 0 and eof:
                break
            if len(buffer) - start < 12:
                raise RecordError("%s: truncated record header at byte %d" % (path, offset))
            header = buffer[start:start + 12]
            length = struct.unpack_from("<Q", header)[0]
            end = start + 12 + length + 4
            if len(buffer) < end and not eof:  # the record runs past the block: read on
                buffer, end, start = buffer[start:], end - start, 0
                while len(buffer) < end and not eof:
                    chunk = f.read(max(BLOCK_BYTES, end - len(buffer)))
                    eof = not chunk
                    buffer += chunk
            if len(buffer) < end:
                if check_crc and _bad_length_crc([header]):
                    raise RecordError("%s: bad length CRC at byte %d" % (path, offset))
                raise RecordError("%s: truncated record at byte %d" % (path, offset))
            pending.append((offset, header, buffer[start + 12:end - 4],
                            struct.unpack_from("<I", buffer, end - 4)[0]))
            offset += end - start
            start = end
            widest = max(widest, length)
            # A block ends at BLOCK_RECORDS records or when it may hold BLOCK_BYTES (bounded
            # memory however long the records; crc32c_many bounds its own matrices).
            if len(pending) >= BLOCK_RECORDS or len(pending) * widest >= BLOCK_BYTES:
                yield from _checked(path, pending, check_crc)
                pending, widest = [], 0
    yield from _checked(path, pending, check_crc)


def _bad_length_crc(headers: List[bytes]) -> np.ndarray:
    """Per header, whether its length CRC is wrong."""
    raw = np.frombuffer(b"".join(h[:8] for h in headers), np.uint8).reshape(-1, 8)
    want = np.frombuffer(b"".join(h[8:12] for h in headers), "<u4")
    return mask_crc(rows_crc32c(raw, np.full(len(headers), 8))) != want


def _checked(path: str, pending: List[tuple], check_crc: bool) -> Iterator[bytes]:
    """The records' data, after checking both CRCs of every one (vectorised)."""
    if not pending:
        return
    if check_crc:
        bad = _bad_length_crc([p[1] for p in pending])
        if bad.any():
            raise RecordError("%s: bad length CRC at byte %d"
                              % (path, pending[int(np.argmax(bad))][0]))
        want = np.array([p[3] for p in pending], np.uint32)
        bad = mask_crc(crc32c_many([p[2] for p in pending])) != want
        if bad.any():
            raise RecordError("%s: bad data CRC at byte %d"
                              % (path, pending[int(np.argmax(bad))][0]))
    for _, _, data, _ in pending:
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
    return parse_examples([record])[0]


def parse_examples(records: Sequence[bytes]) -> List[Dict[str, np.ndarray]]:
    """``parse_example`` of each record; the packed int64 lists of all of them are decoded in
    one vectorised pass (a record's few lists would each pay numpy's per-call cost).

    Args:
        records: serialized Examples.

    Returns:
        One dict per record.
    """
    out: List[Dict[str, np.ndarray]] = []
    packed: List[tuple] = []  # (row, key, payload)
    for record in records:
        row: Dict[str, np.ndarray] = {}
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
                        value = payload
                if key is None or value is None:
                    continue
                lists = [(kind, payload) for kind, _, payload in _fields(value)]
                if len(lists) == 1 and lists[0][0] == 3:  # int64_list: packed, as written
                    chunks = [(wire, chunk) for f, wire, chunk in _fields(lists[0][1])
                              if f == 1]
                    if chunks and all(wire == 2 for wire, _ in chunks):
                        packed.extend((row, key, chunk) for _, chunk in chunks)
                        continue
                decoded = _feature_values(value)
                if decoded is not None:
                    row[key] = decoded
        out.append(row)
    if packed:
        joined = b"".join(p[2] for p in packed)
        values = _packed_varints(joined)
        ends = np.cumsum([len(p[2]) for p in packed])
        counted = np.concatenate([[0], np.cumsum(np.frombuffer(joined, np.uint8) < 0x80)])
        parts = np.split(values, counted[ends][:-1])
        for (row, key, _), part in zip(packed, parts):
            row[key] = np.concatenate([row[key], part]) if key in row else part
    return out


def examples(path: str, check_crc: bool = True) -> Iterator[Dict[str, np.ndarray]]:
    """The parsed records of one file, in order (``read_records`` then ``parse_examples``, a
    block at a time).

    Args:
        path: a local or ``gs://`` path.
        check_crc: verify both CRCs of every record.

    Raises:
        RecordError: a truncated or damaged record.
    """
    block: List[bytes] = []
    for record in read_records(path, check_crc):
        block.append(record)
        if len(block) >= BLOCK_RECORDS:
            yield from parse_examples(block)
            block = []
    yield from parse_examples(block)


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
        for index, features in enumerate(examples(path)):
            seen += 1
            if seen <= skip:
                continue
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


def read_first_record(path: str) -> Optional[bytes]:
    """The payload of ``path``'s first record (None for an empty file), CRCs checked, with
    two small reads (a check of thousands of files, on an object store too). ValueError
    ("truncated record at 0" / "corrupted record at 0", TensorFlow's words) otherwise.

    Args:
        path: a TFRecord file (local or URL).

    Returns:
        The first payload, or None.

    Raises:
        ValueError: a truncated or corrupted first record.
    """
    with files.open(path, "rb") as f:
        header = f.read(12)
        if not header:
            return None
        if len(header) < 12:
            raise ValueError("truncated record at 0")
        if int.from_bytes(header[8:], "little") != mask_crc(crc32c(header[:8])):
            raise ValueError("corrupted record at 0")
        length = int.from_bytes(header[:8], "little")
        body = f.read(length + 4)
    if len(body) < length + 4:
        raise ValueError("truncated record at 0")
    if int.from_bytes(body[length:], "little") != mask_crc(crc32c(body[:length])):
        raise ValueError("corrupted record at 0")
    return body[:length]


def count_records(path: str) -> Optional[int]:
    """Records in a local TFRecord file, from its length headers alone (None on an object
    store, where each seek is a request).

    Args:
        path: a TFRecord file.

    Returns:
        The number of records, or None for a URL.
    """
    if files.is_url(path):
        return None
    count = 0
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        position = 0
        while position < size:
            header = f.read(8)
            if len(header) < 8:
                break
            position += 16 + int.from_bytes(header, "little")
            f.seek(position)
            count += 1
    return count


def decode_example(data: bytes) -> Dict[str, list]:
    """A serialized ``tf.train.Example`` of int64/float lists -> name -> list of values
    (plain protobuf decoding, without TensorFlow; for tests and tools).

    Args:
        data: the serialized ``tf.train.Example``.

    Returns:
        Feature name -> list of ints or floats.
    """
    return {name: values.tolist() for name, values in parse_example(data).items()}
