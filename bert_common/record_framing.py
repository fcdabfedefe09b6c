"""TFRecord framing with numpy, without TensorFlow: CRC-32C (Castagnoli) and the frame of a
record, one at a time or a batch at once. The one definition of the framing: the pre-training
record encoder (``data.pretraining.records``), the task record writer
(``bert_common.atomic.AtomicTFRecordWriters``) and the numpy reader (``data.records.numpy_reader``)
use it.

A frame is ``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``
(little endian; ``masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8``).

``rows_crc32c`` computes the CRCs of many records at once: the records are laid out
right-aligned in one 2-D byte array, which makes every byte's distance to its record's end a
function of its column; CRC-32C being linear over GF(2), each record's CRC is then one table
gather per byte and an XOR-reduction per row (``_CrcTables``).

Example::

    from bert_common import record_framing
    framed = record_framing.frame_records([b"abc", b"defg"])   # two TFRecord frames
    framed == record_framing.frame_record(b"abc") + record_framing.frame_record(b"defg")
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_POLY = 0x82F63B78  # CRC-32C, reflected
_MASK_DELTA = 0xA282EAD8


def _make_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _make_table()
_TABLE_LIST = _TABLE.tolist()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C of ``data`` (byte at a time; for small inputs and tests).

    Args:
        data: the bytes.
        crc: the CRC so far (to continue).

    Returns:
        The CRC-32C.
    """
    reg = crc ^ 0xFFFFFFFF
    table = _TABLE_LIST
    for byte in data:
        reg = table[(reg ^ byte) & 0xFF] ^ (reg >> 8)
    return reg ^ 0xFFFFFFFF


def mask_crc(crc):
    """TFRecord's masked CRC (works on ints and uint32 arrays).

    Args:
        crc: a CRC-32C (int or uint32 array).

    Returns:
        The masked CRC, of the same kind.
    """
    if isinstance(crc, np.ndarray):
        crc = crc.astype(np.uint32)
        return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One TFRecord frame around ``data`` (slow path, for tests and single records).

    Args:
        data: the payload.

    Returns:
        The framed record (length, its CRC, data, its CRC).
    """
    header = len(data).to_bytes(8, "little")
    return (header + mask_crc(crc32c(header)).to_bytes(4, "little") + data
            + mask_crc(crc32c(data)).to_bytes(4, "little"))


def _shift_register(reg: np.ndarray) -> np.ndarray:
    """One zero byte through the CRC register: ``T[reg & 0xff] ^ (reg >> 8)`` (linear)."""
    return _TABLE[reg & np.uint32(0xFF)] ^ (reg >> np.uint32(8))


class _CrcTables:
    """``contrib[d, b]``: register contribution of byte ``b`` followed by ``d`` more bytes;
    ``init[n]``: what the initial all-ones register becomes after ``n`` bytes."""

    def __init__(self):
        self.contrib = _TABLE[None, :].copy()
        self.init = np.array([0xFFFFFFFF], np.uint32)

    def ensure(self, n: int) -> None:
        if len(self.contrib) < n:
            rows = [self.contrib]
            last = self.contrib[-1]
            for _ in range(n - len(self.contrib)):
                last = _shift_register(last)
                rows.append(last[None, :])
            self.contrib = np.concatenate(rows)
        if len(self.init) < n + 1:
            values = self.init.tolist()
            reg = values[-1]
            table = _TABLE_LIST
            while len(values) < n + 1:
                reg = table[reg & 0xFF] ^ (reg >> 8)
                values.append(reg)
            self.init = np.array(values, np.uint32)

    def rows_contrib(self, buf: np.ndarray, after: int = 0) -> np.ndarray:
        """XOR of the contributions of every byte of each row, the last column being followed
        by ``after`` more bytes (zero bytes contribute nothing). buf: uint8 [B, W]."""
        b, w = buf.shape
        self.ensure(w + after + 1)
        col_base = ((w - 1 + after - np.arange(w, dtype=np.int32)) * 256)
        flat = self.contrib.reshape(-1)
        acc = np.zeros(b, np.uint32)
        step = max(1, (1 << 16) // max(w, 1))  # rows per chunk: temporaries stay in cache
        for lo in range(0, b, step):
            idx = buf[lo:lo + step].astype(np.int32)
            idx += col_base
            acc[lo:lo + step] = np.bitwise_xor.reduce(flat[idx], axis=1)
        return acc

    def rows_crc(self, buf: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """CRC-32C of each row's last ``lengths[r]`` bytes; bytes before them must be zero.

        buf: uint8 [B, W]; lengths: int [B] (<= W). Returns uint32 [B].
        """
        self.ensure(buf.shape[1] + 1)
        acc = self.rows_contrib(buf)
        return acc ^ self.init[lengths] ^ np.uint32(0xFFFFFFFF)


_CRC = _CrcTables()


def rows_crc32c(buf: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC-32C of each row's right-aligned data (see ``_CrcTables.rows_crc``).

    Args:
        buf: uint8 [R, W] rows, data right-aligned (zeros before it).
        lengths: [R] data lengths.

    Returns:
        uint32 [R] CRCs.
    """
    return _CRC.rows_crc(np.ascontiguousarray(buf, np.uint8), np.asarray(lengths, np.int64))


# Records longer than this are checked byte at a time (``crc32c``): the vectorised tables grow
# by 1 KB per byte of the widest record, and a batch's matrix by its widest record per row.
LONG_RECORD = 1 << 14
GROUP_BYTES = 1 << 22  # a vectorised group's [records, widest] matrix stays under this


def crc32c_many(payloads: Sequence[bytes]) -> np.ndarray:
    """CRC-32C of each payload: grouped by length into matrices of at most ``GROUP_BYTES``
    (``rows_crc32c``), those longer than ``LONG_RECORD`` one at a time.

    Args:
        payloads: the byte strings.

    Returns:
        uint32 [len(payloads)] CRCs.
    """
    n = len(payloads)
    out = np.zeros(n, np.uint32)
    if not n:
        return out
    lengths = np.fromiter((len(p) for p in payloads), np.int64, n)
    order = np.argsort(lengths, kind="stable")
    start = 0
    while start < n:
        width = int(lengths[order[start]])
        if width > LONG_RECORD:
            for i in order[start:].tolist():
                out[i] = crc32c(payloads[i])
            break
        stop = start + 1  # the group: sorted lengths, so its last one is its widest
        while stop < n and lengths[order[stop]] <= LONG_RECORD and (
                (stop - start + 1) * max(int(lengths[order[stop]]), 1) <= GROUP_BYTES):
            stop += 1
        group = order[start:stop]
        widest = max(int(lengths[group[-1]]), 1)
        rows = np.zeros((len(group), widest), np.uint8)
        for row, i in enumerate(group.tolist()):  # right-aligned, zeros before
            if lengths[i]:
                rows[row, widest - lengths[i]:] = np.frombuffer(payloads[i], np.uint8)
        out[group] = rows_crc32c(rows, lengths[group])
        start = stop
    return out


def frame_records(payloads: Sequence[bytes]) -> bytes:
    """The TFRecord frames of ``payloads``, concatenated (CRCs computed together).

    Args:
        payloads: the records' bytes.

    Returns:
        The framed bytes, in order.
    """
    n = len(payloads)
    if not n:
        return b""
    lengths = np.fromiter((len(p) for p in payloads), np.int64, n)
    headers = lengths.astype("<u8").view(np.uint8).reshape(n, 8)
    header_crcs = mask_crc(rows_crc32c(headers, np.full(n, 8))).astype("<u4")
    data_crcs = mask_crc(crc32c_many(payloads)).astype("<u4")
    out = []
    for i, payload in enumerate(payloads):
        out.append(headers[i].tobytes())
        out.append(header_crcs[i].tobytes())
        out.append(payload)
        out.append(data_crcs[i].tobytes())
    return b"".join(out)
