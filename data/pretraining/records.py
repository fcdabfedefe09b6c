"""Pre-training records as TFRecord bytes, built with numpy, without importing TensorFlow.

A record is a serialized ``tf.train.Example`` holding the features of
``data.pretraining.schema`` (int64 lists and one float list), framed as TFRecord:
``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``
(little endian; ``masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8``; CRC-32C, Castagnoli).

``RecordEncoder.encode`` turns a batch of feature arrays into framed records at once:

* protobuf wire format by hand (``data.records.tf_example``'s pieces): ``Example.features`` (field
  1) holds one map entry (field 1: key = 1, value = 2) per feature; ``Feature.int64_list`` is field
  3 and ``float_list`` field 2; both lists are packed (field 1). Varints are canonical (minimal).
  The map entries are in a fixed order of this module's choosing (parsers do not care; the
  original's order varies from run to run), so compare *parsed* records, never bytes;
* the records of a batch are laid out right-aligned in one 2-D byte array, which makes every
  byte's distance to its record's end a function of its column; CRC-32C being linear over
  GF(2), each record's CRC is then one table gather per byte and an XOR-reduction per row
  (``bert_common.record_framing``'s ``_CrcTables``).

Only ``data/pretraining/instances.py`` and ``data/pretraining/instances_fast.py`` write pre-training records, both
through here, so the wire format has one definition.
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bert_common import atomic, files
from bert_common.record_framing import _CRC, mask_crc, rows_crc32c
from data.pretraining import schema as pretraining_schema
from data.records.tf_example import entry_header, varint_lanes, varint_lengths

_FLOAT_ONE = np.frombuffer(np.float32(1.0).astype("<f4").tobytes(), np.uint8)


class RecordEncoder:
    """Framed TFRecord ``tf.train.Example`` records for batches of pre-training instances.

    The record layout is fixed by the instance structure: ``input_mask`` is ``seq_len`` ones,
    ``segment_ids`` are ones on ``[seg_start, seq_len)``, ``masked_lm_weights`` are
    ``num_masked`` 1.0s, so those features (and ``next_sentence_labels`` and, for
    ``max_seq_length <= 128``, ``masked_lm_positions``) have the same byte length in every
    record: they go last, at the same columns of every row, and their CRC contributions come
    from prefix-XOR tables. ``input_ids`` and ``masked_lm_ids`` (varints of any size) go first.

    Args:
        max_seq_length: S.
        max_predictions_per_seq: P.
    """

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int):
        s, p = max_seq_length, max_predictions_per_seq
        self.max_seq_length, self.max_predictions = s, p
        self._headers: Dict[Tuple[str, int], bytes] = {}
        self.variable = ["input_ids", "masked_lm_ids"]
        fixed = [("input_mask", s), ("segment_ids", s)]
        if s <= 128:
            fixed.append(("masked_lm_positions", p))
        else:
            self.variable.append("masked_lm_positions")
        fixed += [("masked_lm_weights", 4 * p), ("next_sentence_labels", 1)]
        parts, self._at = [], {}
        for name, nbytes in fixed:
            header = self._header(name, nbytes)
            offset = sum(len(x) for x in parts) + len(header)
            self._at[name] = offset  # payload offset within the tail
            parts += [header, bytes(nbytes)]
        self.tail = np.frombuffer(b"".join(parts), np.uint8)
        ft = len(self.tail)
        _CRC.ensure(ft + 1)
        c = _CRC.contrib
        dist = lambda at: ft - 1 - at  # distance of a tail byte to the record end
        const = np.bitwise_xor.reduce(c[dist(np.arange(ft)), self.tail]) if ft else 0
        self._tail_const = np.uint32(const)
        prefix = lambda v: np.concatenate([[0], np.bitwise_xor.accumulate(v)]).astype(np.uint32)
        self._mask_px = prefix(c[dist(self._at["input_mask"] + np.arange(s)), 1])
        self._seg_px = prefix(c[dist(self._at["segment_ids"] + np.arange(s)), 1])
        w0 = self._at["masked_lm_weights"] + 4 * np.arange(p)
        one = np.zeros(p, np.uint32)
        for k in range(4):
            one ^= c[dist(w0 + k), _FLOAT_ONE[k]]
        self._weight_px = prefix(one)
        self._label_c = c[dist(self._at["next_sentence_labels"])]
        if "masked_lm_positions" in self._at:
            self._pos_c = c[dist(self._at["masked_lm_positions"] + np.arange(p))]  # [p, 256]
        small = np.arange(1 << 16, dtype=np.int64)
        self._lut_len = varint_lengths(small)
        lanes, _ = varint_lanes(small[:, None], 3)
        self._lut_bytes = np.zeros((1 << 16, 4), np.uint8)
        self._lut_bytes[:, :3] = lanes
        self._lut_word = self._lut_bytes.view("<u4").reshape(-1)  # the 3 bytes, little end
        keep4 = np.arange(4)[None, :] < self._lut_len[:, None]
        self._lut_keep = np.ascontiguousarray(keep4).view("<u4").reshape(-1)  # 4 packed bools

    def _header(self, name: str, payload_len: int) -> bytes:
        key = (name, payload_len)
        h = self._headers.get(key)
        if h is None:
            h = self._headers[key] = entry_header(name, pretraining_schema.is_float(name),
                                                  payload_len)
        return h

    def encode(self, input_ids: np.ndarray, seq_len: np.ndarray, seg_start: np.ndarray,
               positions: np.ndarray, masked_ids: np.ndarray, num_masked: np.ndarray,
               labels: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Framed records of B instances.

        input_ids int [B, S] (zero-padded); seq_len, seg_start, num_masked, labels int [B];
        positions, masked_ids int [B, P] (zero-padded). Returns ``(buffer, starts, ends)``:
        record ``r`` is ``buffer[starts[r]:ends[r]]`` (buffer: uint8, rows with padding).

        Args:
            input_ids: int [B, S] token ids.
            seq_len: int [B] sequence lengths.
            seg_start: int [B] starts of segment B.
            positions: int [B, P] masked positions.
            masked_ids: int [B, P] their original ids.
            num_masked: int [B] numbers of predictions.
            labels: int [B] next-sentence labels.

        Returns:
            ``(buffer, starts, ends)`` as above.

        Raises:
            ValueError: a negative id or position.
        """
        b = len(input_ids)
        if b == 0:
            return np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64)
        s, p = self.max_seq_length, self.max_predictions
        seq_len = np.asarray(seq_len, np.int64)
        seg_start = np.asarray(seg_start, np.int64)
        num_masked = np.asarray(num_masked, np.int64)
        labels = np.asarray(labels, np.int64)
        variable = {"input_ids": input_ids, "masked_lm_ids": masked_ids,
                    "masked_lm_positions": positions}

        # Head lanes: [0x0A][varint F][entry header][value varints]... with keep-masks, the
        # varints of values < 2**16 from a 4-byte table (blocks 4-aligned for the gather).
        blocks = []
        head_len = np.zeros(b, np.int64)
        width = 6
        for name in self.variable:
            values = np.asarray(variable[name])
            if values.size and values.min() < 0:
                raise ValueError("feature %s has negative values" % name)
            small = values.size == 0 or values.max() < 1 << 16
            lengths = self._lut_len.take(values) if small else varint_lengths(values)
            payload_len = lengths.sum(axis=1, dtype=np.int64)
            uniq, inverse = np.unique(payload_len, return_inverse=True)
            headers = [self._header(name, int(x)) for x in uniq]
            hw = max(len(h) for h in headers)
            table = np.zeros((len(uniq), hw), np.uint8)
            table_keep = np.zeros((len(uniq), hw), bool)
            for i, h in enumerate(headers):
                table[i, :len(h)] = np.frombuffer(h, np.uint8)
                table_keep[i, :len(h)] = True
            head_len += np.array([len(h) for h in headers], np.int64)[inverse] + payload_len
            lane = 4 if small else int(lengths.max())
            start = -(-(width + hw) // 4) * 4
            blocks.append((width, table[inverse], table_keep[inverse], start, values, lengths,
                           small, lane))
            width = start + lane * values.shape[1]
        width = -(-width // 4) * 4
        lanes = np.zeros((b, width), np.uint8)
        keep = np.zeros((b, width), bool)
        ft = len(self.tail)
        features_len = head_len + ft  # the Features message
        lanes[:, 0] = 0x0A
        keep[:, 0] = True
        f_bytes, f_keep = varint_lanes(features_len[:, None], 5)
        lanes[:, 1:6] = f_bytes
        keep[:, 1:6] = f_keep
        for hs, hdr, hkeep, vs, values, lengths, small, lane in blocks:
            lanes[:, hs:hs + hdr.shape[1]] = hdr
            keep[:, hs:hs + hdr.shape[1]] = hkeep
            n = values.shape[1]
            if small:  # table lookups, then one contiguous copy each
                lanes[:, vs:vs + 4 * n] = self._lut_word.take(values).view(np.uint8).reshape(
                    b, 4 * n)
                keep[:, vs:vs + 4 * n] = self._lut_keep.take(values).view(bool).reshape(b, 4 * n)
            else:
                vb, vk = varint_lanes(values, lane)
                lanes[:, vs:vs + lane * n] = vb
                keep[:, vs:vs + lane * n] = vk
        head_stream = lanes[keep]
        data_len = 1 + varint_lengths(features_len).astype(np.int64) + features_len
        var_len = data_len - ft

        # Right-aligned rows: [0.. | len8 | crc4 | head | tail | crc4].
        vmax = int(var_len.max())
        width = vmax + ft + 16
        out = np.zeros((b, width), np.uint8)
        t0 = width - 4 - ft  # first tail column
        out[:, t0:width - 4] = self.tail
        cols = np.arange(s)
        at = self._at
        np.less(cols, seq_len[:, None], out=out[:, t0 + at["input_mask"]:][:, :s],
                casting="unsafe")
        seg = out[:, t0 + at["segment_ids"]:][:, :s]
        np.greater_equal(cols, seg_start[:, None], out=seg, casting="unsafe")
        seg &= out[:, t0 + at["input_mask"]:][:, :s]
        if "masked_lm_positions" in at:
            out[:, t0 + at["masked_lm_positions"]:][:, :p] = positions
        weights = out[:, t0 + at["masked_lm_weights"]:][:, :4 * p].reshape(b, p, 4)
        weights[...] = np.where((np.arange(p) < num_masked[:, None])[..., None], _FLOAT_ONE, 0)
        out[:, t0 + at["next_sentence_labels"]] = labels
        h0 = t0 - vmax
        head = out[:, h0:t0]
        head[np.arange(vmax, dtype=np.int32)[None, :]
             >= (vmax - var_len).astype(np.int32)[:, None]] = head_stream

        # CRC-32C of the data: head bytes by table, tail from its structure.
        reg = _CRC.rows_contrib(head, ft)
        reg ^= self._tail_const ^ self._mask_px[seq_len]
        reg ^= self._seg_px[np.maximum(seq_len, seg_start)] ^ self._seg_px[seg_start]
        reg ^= self._weight_px[num_masked] ^ self._label_c[labels]
        if "masked_lm_positions" in at:
            reg ^= np.bitwise_xor.reduce(self._pos_c[np.arange(p), positions], axis=1)
        _CRC.ensure(int(data_len.max()) + 1)
        data_crc = mask_crc(reg ^ _CRC.init[data_len] ^ np.uint32(0xFFFFFFFF))
        out[:, width - 4:] = data_crc.astype("<u4").view(np.uint8).reshape(b, 4)
        len_bytes = data_len.astype("<u8").view(np.uint8).reshape(b, 8)
        len_crc = mask_crc(rows_crc32c(len_bytes, np.full(b, 8))).astype("<u4")
        frame = np.concatenate([len_bytes, len_crc.view(np.uint8).reshape(b, 4)], axis=1)
        rows = np.arange(b)[:, None]
        out[rows, (t0 - var_len - 12)[:, None] + np.arange(12)] = frame
        ends = (np.arange(1, b + 1, dtype=np.int64)) * width
        return out.reshape(-1), ends - (data_len + 16), ends

    def encode_features(self, features: Mapping[str, np.ndarray]) -> Tuple[bytes, np.ndarray]:
        """``encode`` from the 7 padded feature arrays (as ``instance_features`` makes them);
        ValueError when the masks/weights are not the runs the original writes.

        Args:
            features: feature name -> [B, n] array.

        Returns:
            ``encode``'s ``(buffer, starts, ends)``.

        Raises:
            ValueError: as above.
        """
        f = {name: np.asarray(features[name]) for name in pretraining_schema.FEATURE_NAMES}
        b = len(f["input_ids"])
        mask = f["input_mask"].reshape(b, -1)
        seq_len = mask.sum(axis=1)
        cols = np.arange(mask.shape[1])
        seg = f["segment_ids"].reshape(b, -1)
        seg_start = np.where(seg.any(axis=1), seg.argmax(axis=1), seq_len)
        weights = f["masked_lm_weights"].reshape(b, -1)
        num_masked = (weights != 0).sum(axis=1)
        pcols = np.arange(weights.shape[1])
        if not (np.array_equal(mask, cols < seq_len[:, None])
                and np.array_equal(seg, (cols >= seg_start[:, None]) & (cols < seq_len[:, None]))
                and np.array_equal(weights, (pcols < num_masked[:, None]).astype(weights.dtype))):
            raise ValueError("features are not pre-training instances (input_mask, segment_ids "
                             "or masked_lm_weights have an unexpected shape)")
        return self.encode(f["input_ids"].reshape(b, -1), seq_len, seg_start,
                           f["masked_lm_positions"].reshape(b, -1),
                           f["masked_lm_ids"].reshape(b, -1), num_masked,
                           f["next_sentence_labels"].reshape(b))


def feature_batch(dicts: Sequence[Mapping[str, Sequence]]) -> Dict[str, np.ndarray]:
    """A list of per-record feature dicts -> name -> [B, n] arrays.

    Args:
        dicts: per-record feature dicts.

    Returns:
        Feature name -> [B, n] array (int64 or float32).
    """
    out = {}
    for name in pretraining_schema.FEATURE_NAMES:
        dtype = np.float32 if pretraining_schema.is_float(name) else np.int64
        out[name] = np.array([d[name] for d in dicts], dtype=dtype)
    return out


class FramedRecords:
    """Framed records kept in memory in batches (as ``RecordEncoder.encode`` returns them),
    addressed by their global index."""

    def __init__(self):
        self._buffers: List[np.ndarray] = []
        self._starts: List[np.ndarray] = []
        self._ends: List[np.ndarray] = []
        self._first: List[int] = [0]

    def __len__(self) -> int:
        return self._first[-1]

    def add(self, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        """Adds a batch of framed records (``RecordEncoder.encode``'s result).

        Args:
            buffer: uint8 record rows.
            starts: [R] start offsets of the records in ``buffer``.
            ends: [R] end offsets.
        """
        if len(starts):
            self._buffers.append(buffer)
            self._starts.append(np.asarray(starts, np.int64))
            self._ends.append(np.asarray(ends, np.int64))
            self._first.append(self._first[-1] + len(starts))

    def record(self, index: int) -> bytes:
        """The framed bytes of record ``index`` (creation order).

        Args:
            index: the record's global index.

        Returns:
            Its framed bytes.
        """
        batch = int(np.searchsorted(self._first[1:], index, side="right"))
        local = index - self._first[batch]
        return self._buffers[batch][self._starts[batch][local]:self._ends[batch][local]].tobytes()

    def write(self, output_files: Sequence[str], order: Optional[Sequence[int]] = None,
              chunk: int = 4096) -> int:
        """Writes the records (in ``order``, default as added) round-robin over
        ``output_files``, atomically. Returns the number written.

        Args:
            output_files: the TFRecord files.
            order: record indexes in writing order, or None.
            chunk: records per write call and file.

        Returns:
            The number of records written.
        """
        n = len(self)
        order = np.arange(n) if order is None else np.asarray(order, np.int64)
        if n:
            batch_of = np.searchsorted(np.array(self._first[1:]), order, side="right")
            starts = np.concatenate(self._starts)[order]
            ends = np.concatenate(self._ends)[order]
        views = [memoryview(buf) for buf in self._buffers]
        # All the files appear together, or none (a failure leaves the previous ones).
        with atomic.atomic_paths(list(output_files)) as temps, \
                contextlib.ExitStack() as stack:
            outs = [stack.enter_context(files.open(t, "wb")) for t in temps]
            nf = len(outs)
            for f_index, f in enumerate(outs):
                for lo in range(f_index, n, chunk * nf):
                    sl = slice(lo, min(n, lo + chunk * nf), nf)
                    f.write(b"".join([views[x][y:z] for x, y, z in zip(
                        batch_of[sl].tolist(), starts[sl].tolist(), ends[sl].tolist())]))
        return n


def write_feature_dicts(dicts: Iterable[Mapping[str, Sequence]], max_seq_length: int,
                        max_predictions_per_seq: int, output_files: Sequence[str],
                        batch_size: int = 4096) -> int:
    """Encodes per-record feature dicts and writes them in order, round-robin, atomically.

    Args:
        dicts: per-record feature dicts, in order.
        max_seq_length: S.
        max_predictions_per_seq: P.
        output_files: the TFRecord files.
        batch_size: records encoded at once.

    Returns:
        The number of records written.

    Raises:
        ValueError: a feature of the wrong length, or not a pre-training instance.
    """
    lengths = pretraining_schema.feature_lengths(max_seq_length, max_predictions_per_seq)
    encoder = RecordEncoder(max_seq_length, max_predictions_per_seq)
    store = FramedRecords()
    pending: List[Mapping[str, Sequence]] = []

    def flush():
        if pending:
            for d in pending:
                for name, n in lengths.items():
                    if len(d[name]) != n:
                        raise ValueError("feature %s has %d values, expected %d"
                                         % (name, len(d[name]), n))
            store.add(*encoder.encode_features(feature_batch(pending)))
            pending.clear()

    for d in dicts:
        pending.append(d)
        if len(pending) >= batch_size:
            flush()
    flush()
    return store.write(output_files)
