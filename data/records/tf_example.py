"""The fine-tuning records (GLUE, SWAG, NER, SQuAD features) as ``tf.train.Example`` bytes and
back, with or without TensorFlow.

* ``encode_example(int64s, floats)``: a serialized ``Example`` written by hand (protobuf wire
  format, this module's pieces: ``varint``, ``entry_header``, ...), so the feature writers
  need no TensorFlow;
  the writer is ``bert_common.atomic.AtomicTFRecordWriters``.
* ``FixedLen`` / a record spec (name -> ``FixedLen``): what a task's records hold, defined once
  per task. ``tf_parse_spec`` and ``decode_tf`` read it with TensorFlow (``tf.data``),
  ``decode_numpy`` without (``data.records.numpy_reader``' parsed dicts); both give int32 for int64
  lists (the models take int32), float32 for float lists, in the spec's shape.

Example::

    spec = {"input_ids": FixedLen((4,)), "label_ids": FixedLen(())}
    record = encode_example({"input_ids": [101, 7, 102, 0], "label_ids": [1]})
    decode_numpy(numpy_reader.parse_example(record), spec, "x.tf_record", 0)
    # {"input_ids": array([101, 7, 102, 0], int32), "label_ids": array(1, int32)}
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Dict, List, Mapping, Optional, Sequence, TYPE_CHECKING, Tuple

import numpy as np

from bert_common.errors import InputError

if TYPE_CHECKING:  # (annotations only: TensorFlow is imported where it is used)
    import tensorflow as tf


# ------------------------------------------------------------------------------------------
# Protobuf pieces (the pre-training records' encoder uses them too).
# ------------------------------------------------------------------------------------------


def varint(n: int) -> bytes:
    """Canonical protobuf varint of a non-negative int.

    Args:
        n: the value (>= 0).

    Returns:
        The varint's bytes.
    """
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes of each non-negative value's varint (int64 input, uint8 output).

    Args:
        values: int64 values (>= 0), any shape.

    Returns:
        uint8 lengths, same shape.
    """
    v = values.astype(np.uint64, copy=False)
    n = np.ones(v.shape, np.uint8)
    for bits in (7, 14, 21, 28, 35, 42, 49, 56, 63):
        n += v >= np.uint64(1 << bits)
    return n


def varint_lanes(values: np.ndarray, lanes: int) -> Tuple[np.ndarray, np.ndarray]:
    """Varint bytes of ``values`` [..., n] as uint8 [..., n * lanes] plus a keep-mask of the
    same shape (True for the bytes that exist); ``lanes`` >= the longest varint.

    Args:
        values: int values [..., n] (>= 0).
        lanes: the bytes per value.

    Returns:
        ``(bytes, keep)``, each [..., n * lanes].
    """
    v = values.astype(np.uint64, copy=False)
    lengths = varint_lengths(v)
    out = np.empty(v.shape + (lanes,), np.uint8)
    for k in range(lanes):
        byte = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        byte |= np.where(lengths > k + 1, np.uint8(0x80), np.uint8(0))
        out[..., k] = byte
    keep = np.arange(lanes, dtype=np.uint8) < lengths[..., None]
    shape = v.shape[:-1] + (v.shape[-1] * lanes,)
    return out.reshape(shape), keep.reshape(shape)


def entry_header(name: str, is_float: bool, payload_len: int) -> bytes:
    """The bytes of one ``Features.feature`` map entry before its packed payload.

    Args:
        name: the feature name.
        is_float: a ``float_list`` feature (else ``int64_list``).
        payload_len: the packed payload's length in bytes.

    Returns:
        The header bytes.
    """
    key = name.encode("ascii")
    packed = (b"\x0a" + varint(payload_len)) if payload_len else b""
    list_len = len(packed) + payload_len
    feature = (b"\x12" if is_float else b"\x1a") + varint(list_len) + packed
    value_len = len(feature) + payload_len
    entry = b"\x0a" + varint(len(key)) + key + b"\x12" + varint(value_len) + feature
    entry_len = len(entry) + payload_len
    return b"\x0a" + varint(entry_len) + entry


@dataclasses.dataclass(frozen=True)
class FixedLen:
    """A feature of fixed size: stored as a flat list of ``size`` values, decoded to ``shape``.

    Attributes:
        shape: the decoded shape (``()``: a scalar, stored as one value).
        is_float: a float list (else int64).
    """

    shape: Tuple[int, ...]
    is_float: bool = False

    @property
    def size(self) -> int:
        """Values stored."""
        return int(math.prod(self.shape))


RecordSpec = Mapping[str, FixedLen]


_SMALL = 1 << 17  # varints of 0 <= v < _SMALL come from a table (every BERT vocabulary's ids)
_VARINTS: Optional[List[bytes]] = None


def _small_varints() -> List[bytes]:
    global _VARINTS
    if _VARINTS is None:
        _VARINTS = [varint(v) for v in range(_SMALL)]
    return _VARINTS


def _int64_payload(values) -> bytes:
    """Packed varints of int64 values (negative ones as 10-byte two's complement)."""
    if isinstance(values, np.ndarray):
        values = values.reshape(-1).tolist()
    elif not isinstance(values, (list, tuple)):
        values = list(values)
    if not values:
        return b""
    low, high = min(values), max(values)
    if low >= 0 and high < 0x80:
        return bytes(values)
    if low >= 0 and high < _SMALL:
        return b"".join(map(_small_varints().__getitem__, values))
    u = np.asarray(values, np.int64).view(np.uint64)
    raw, keep = varint_lanes(u, int(varint_lengths(u).max()))
    return raw[keep].tobytes()


_entry_header = functools.lru_cache(maxsize=4096)(entry_header)


def encode_example(int64s: Mapping[str, Sequence[int]],
                   floats: Optional[Mapping[str, Sequence[float]]] = None) -> bytes:
    """A serialized ``tf.train.Example`` of int64 and float list features.

    The bytes parse as ``tf.train.Example(features=tf.train.Features(feature={name:
    tf.train.Feature(int64_list=tf.train.Int64List(value=values)), ...}))`` does (features in
    the order given, lists packed).

    Args:
        int64s: feature name -> ints.
        floats: feature name -> numbers (float32).

    Returns:
        The serialized ``Example``.
    """
    parts = []
    for name, values in int64s.items():
        payload = _int64_payload(values)
        parts.append(_entry_header(name, False, len(payload)) + payload)
    for name, values in (floats or {}).items():
        payload = np.asarray(values, "<f4").reshape(-1).tobytes()
        parts.append(_entry_header(name, True, len(payload)) + payload)
    features = b"".join(parts)
    return b"\x0a" + varint(len(features)) + features


def tf_parse_spec(spec: RecordSpec) -> Dict[str, "tf.io.FixedLenFeature"]:
    """The ``tf.io.parse_single_example`` spec of ``spec`` (flat lists; scalars ``[]``).

    Args:
        spec: the record spec.

    Returns:
        Feature name -> ``tf.io.FixedLenFeature``.
    """
    import tensorflow as tf

    return {name: tf.io.FixedLenFeature([] if not f.shape else [f.size],
                                        tf.float32 if f.is_float else tf.int64)
            for name, f in spec.items()}


def decode_tf(record, spec: RecordSpec) -> Dict[str, "tf.Tensor"]:
    """A serialized record -> tensors in the spec's shapes, int32 (int64 lists) or float32.

    Args:
        record: a serialized ``tf.train.Example`` (scalar string tensor).
        spec: the record spec.

    Returns:
        Feature name -> tensor.
    """
    import tensorflow as tf

    parsed = tf.io.parse_single_example(record, tf_parse_spec(spec))
    out = {}
    for name, f in spec.items():
        value = parsed[name]
        if value.dtype == tf.int64:
            value = tf.cast(value, tf.int32)  # tf.Example has only int64; the model takes int32
        if len(f.shape) > 1:
            value = tf.reshape(value, f.shape)
        out[name] = value
    return out


def decode_numpy(example: Mapping[str, np.ndarray], spec: RecordSpec, path: str,
                 index: int) -> Dict[str, np.ndarray]:
    """``decode_tf`` without TensorFlow, on ``data.records.numpy_reader.parse_example``'s dict.

    Args:
        example: feature name -> int64 or float32 [n].
        spec: the record spec.
        path: the file, for the message.
        index: the record's number, for the message.

    Returns:
        Feature name -> int32 or float32 array in the spec's shape.

    Raises:
        InputError: a feature missing, of another length or kind, naming the file and record.
    """
    out = {}
    for name, f in spec.items():
        value = example.get(name)
        if value is None:
            raise InputError("%s: record %d has no feature %s" % (path, index, name))
        if value.size != f.size or (value.dtype.kind == "f") != f.is_float:
            raise InputError("%s: record %d: feature %s has %d %s values, expected %d %s"
                             % (path, index, name, value.size,
                                "float" if value.dtype.kind == "f" else "int64", f.size,
                                "float" if f.is_float else "int64"))
        out[name] = value.astype(np.float32 if f.is_float else np.int32).reshape(f.shape)
    return out
