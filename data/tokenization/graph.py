"""In-graph BERT tokenization: raw UTF-8 strings -> WordPiece ids, inside TensorFlow.

``BertGraphTokenizer(vocab_file, do_lower_case)`` reproduces
``data.tokenization.wordpiece.FullTokenizer`` with TensorFlow and tensorflow-text ops
only, so it runs inside ``tf.data`` pipelines and inside SavedModels whose
signatures take raw text (load them after ``import tensorflow_text``).

How each rule of the original is reproduced:

* **Decoding**: ``tf.strings.unicode_decode(errors="replace")`` turns every
  invalid UTF-8 subsequence into U+FFFD, which cleaning then drops; this equals
  Python's ``bytes.decode("utf-8", "ignore")`` (checked by property tests).
* **Character classes** (drop / whitespace / CJK / punctuation / Mn / canonical
  combining class / cased / case-ignorable) come from a per-code-point table
  built *from the faithful Python predicates and ``unicodedata``* of the
  running interpreter (so both paths share one Unicode version), stored as a
  compressed two-level table (``page -> block``) and looked up with two
  gathers. No ICU property or case folding is used.
* **Lower-casing** (``do_lower_case`` only): Python's ``str.lower()`` is
  context-free except for the final sigma, so each code point maps to the
  precomputed ``NFD(c.lower())`` (a short code-point sequence: e.g. U+0130
  -> ``i`` + U+0307, Hangul syllables -> jamo); U+03A3 becomes U+03C2 where
  CPython's ``Final_Sigma`` context holds (a cased letter before it, skipping
  case-ignorables, and none after it, within the whitespace-delimited word).
* **NFD canonical reordering** is applied to the concatenated per-code-point
  decompositions (a stable sort by combining class inside each combining run,
  only run when a batch holds a non-Mn combining mark), then every Mn
  character is dropped.
* **Splitting**: whitespace (``Zs``, tab/newline/CR and the other code points
  ``str.split`` splits on) separates words; every CJK ideograph and every
  punctuation character (tested *after* lower-casing/NFD, as the original
  does) is its own token.
* **WordPiece**: ``tf_text.FastWordpieceTokenizer`` (greedy longest match
  first, ``##`` suffixes, whole word -> ``[UNK]`` when a piece is missing);
  the 200-*character* limit is applied before it (tensorflow-text only knows a
  byte limit, set here high enough never to trigger).

Where tensorflow-text cannot match, and what happens then:

* ``FastWordpieceTokenizer`` numbers tokens by their position in the list it
  is given; a vocab file with duplicate lines (``load_vocab`` keeps the
  *last* line of a duplicate), or one it rejects, therefore falls back, with
  a logged warning, to ``WordpieceTokenizer`` over a hash table holding
  exactly ``load_vocab``'s ids (``wordpiece_kind`` says which one is in use:
  ``"fast"`` or ``"table"``).
* tensorflow-text's limit is in bytes; the original's is in characters, so
  the character limit is applied here and the byte limit set out of reach.
* Everything else is computed from Python's own Unicode data, so the tables
  follow the Unicode version of the Python that builds them (3.11:
  ``unicodedata`` 14.0.0, the golden files' version); a SavedModel keeps the
  tables it was exported with (``unicode_version`` variable). If a future
  Unicode version broke an assumption of the graph (a lower-case mapping
  that yields a separator, a CJK ideograph that maps to several code
  points), building the tables raises instead of tokenizing differently.
"""

from __future__ import annotations

import functools
import logging
import unicodedata
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from data.tokenization import special_tokens
from data.tokenization import wordpiece as tokenization

logger = logging.getLogger(__name__)

MAX_CODE_POINT = 0x10FFFF
_NUM_CODE_POINTS = MAX_CODE_POINT + 1
_BLOCK_BITS = 7
_BLOCK = 1 << _BLOCK_BITS

# Flag bits of the per-code-point table (bits 0-7); bits 8-15 hold the
# canonical combining class, bits 16-30 the index of the lower-case mapping.
DROP = 1          # removed by cleaning (NUL, U+FFFD, Cc/Cf except \t \n \r)
SPACE = 2         # separates words (Zs, \t \n \r, U+2028/U+2029, ...)
CJK = 4           # CJK ideograph: its own token
PUNCT = 8         # punctuation: its own token
MN = 16           # non-spacing mark: dropped after NFD when lower-casing
CASED = 32        # cased and not case-ignorable (Final_Sigma context)
CASE_IGNORABLE = 64
_CCC_SHIFT = 8
_MAP_SHIFT = 16

_CAPITAL_SIGMA = 0x3A3
_FINAL_SIGMA = 0x3C2


# --------------------------------------------------------------------------
# Tables, built from the faithful predicates of data/tokenization/wordpiece.py.
# --------------------------------------------------------------------------


def _sigma_class(char: str) -> int:
    """CASED / CASE_IGNORABLE / 0, as CPython's ``str.lower`` sees ``char``.

    The properties are read off ``str.lower`` itself: ``char + "Σ"`` lowers
    to a final sigma iff ``char`` is cased and not case-ignorable, and
    ``"A" + char + "Σ"`` does iff ``char`` is case-ignorable or cased.
    """
    if (char + "\u03a3").lower()[-1] == "\u03c2":
        return CASED
    if ("A" + char + "\u03a3").lower()[-1] == "\u03c2":
        return CASE_IGNORABLE
    return 0


def _code_point_flags(cp: int) -> int:
    """The flag bits of one code point (see the module constants)."""
    if 0xD800 <= cp <= 0xDFFF:  # surrogates never come out of UTF-8 decoding
        return 0
    char = chr(cp)
    if cp == 0 or cp == 0xFFFD or tokenization._is_control(char):
        return DROP
    flags = 0
    if tokenization._is_whitespace(char) or char.isspace():
        flags |= SPACE
    if tokenization._is_chinese_char(cp):
        flags |= CJK
    if tokenization._is_punctuation(char):
        flags |= PUNCT
    category = unicodedata.category(char)
    if category == "Mn":
        flags |= MN
    if category not in ("Cn", "Co"):
        flags |= _sigma_class(char)
    return flags


def _lower_nfd(char: str) -> str:
    """``NFD(char.lower())``, marks kept (they are dropped after reordering)."""
    return unicodedata.normalize("NFD", char.lower())


@functools.lru_cache(maxsize=1)
def _code_point_values() -> np.ndarray:
    """int64 [0x110000]: ``flags | ccc << 8`` of every code point (both casing modes)."""
    values = np.zeros(_NUM_CODE_POINTS, dtype=np.int64)
    for lo, hi in tokenization._CJK_RANGES:  # by number, assigned or not, as the original
        values[lo:hi + 1] = CJK
    for cp in range(_NUM_CODE_POINTS):
        if 0xD800 <= cp <= 0xDFFF:
            continue  # surrogates never come out of UTF-8 decoding
        char = chr(cp)
        if unicodedata.category(char) in ("Cn", "Co"):
            continue  # unassigned / private use: word characters (or CJK, above)
        values[cp] = _code_point_flags(cp) | unicodedata.combining(char) << _CCC_SHIFT
    return values


class CharTables:
    """Per-code-point tables for one casing mode, as numpy arrays.

    Args:
      do_lower_case: the casing mode (lower-case and strip accents).

    Attributes:
      page_index: int32 [0x110000 >> 7]: block number of each 128-code-point page.
      blocks: int32 [num_blocks * 128]: packed value of each code point:
        flags | ccc << 8 | mapping_index << 16 (mapping index 0 = identity).
      map_offsets: int32 [num_mappings + 1]: start of mapping i in ``map_values``.
      map_values: int32 [total]: the code points of every mapping.
      unicode_version: ``unicodedata.unidata_version`` the tables were built with.

    Raises:
      RuntimeError: this Unicode version breaks a rule the graph relies on
        (a mapping yields a separator or a dropped character; a CJK ideograph
        maps to several code points).
    """

    def __init__(self, do_lower_case: bool):
        packed = _code_point_values().copy()
        offsets: List[int] = [0, 0]  # mapping 0 (identity) is empty
        values: List[int] = []
        if do_lower_case:
            # Separators and dropped characters never reach lower(); unassigned
            # and private-use code points (value 0 or CJK only) map to themselves.
            candidates = np.nonzero((packed & (DROP | SPACE)) == 0)[0]
            for cp in candidates.tolist():
                char = chr(cp)
                if 0xD800 <= cp <= 0xDFFF or unicodedata.category(char) in ("Cn", "Co"):
                    continue
                mapped = _lower_nfd(char)
                if mapped == char:
                    continue
                for out in mapped:
                    if out.isspace() or _code_point_flags(ord(out)) & DROP:
                        raise RuntimeError("lower/NFD of U+%04X yields separator U+%04X"
                                           % (cp, ord(out)))
                if packed[cp] & CJK and len(mapped) != 1:
                    raise RuntimeError("CJK U+%04X maps to %d code points" % (cp, len(mapped)))
                values.extend(ord(c) for c in mapped)
                offsets.append(len(values))
                packed[cp] |= (len(offsets) - 2) << _MAP_SHIFT
        if len(offsets) - 1 >= 1 << (31 - _MAP_SHIFT):
            raise RuntimeError("too many lower-case mappings for the packed table")
        pages = packed.reshape(-1, _BLOCK)
        unique, page_index = np.unique(pages, axis=0, return_inverse=True)
        self.page_index = page_index.reshape(-1).astype(np.int32)
        self.blocks = unique.reshape(-1).astype(np.int32)
        self.map_offsets = np.asarray(offsets, dtype=np.int32)
        self.map_values = np.asarray(values, dtype=np.int32)
        self.unicode_version = unicodedata.unidata_version
        self.do_lower_case = do_lower_case

    def lookup(self, cps: np.ndarray) -> np.ndarray:
        """Packed values of code points (numpy, for tests).

        Args:
          cps: int code points, any shape.

        Returns:
          int32 packed values, same shape.
        """
        cps = np.asarray(cps, dtype=np.int64)
        return self.blocks[self.page_index[cps >> _BLOCK_BITS] * _BLOCK + (cps & (_BLOCK - 1))]


@functools.lru_cache(maxsize=2)
def char_tables(do_lower_case: bool) -> CharTables:
    """The (cached) tables of one casing mode for the running interpreter.

    Args:
      do_lower_case: the casing mode.

    Returns:
      The ``CharTables``.
    """
    return CharTables(do_lower_case)


# Straight-line TensorFlow code: AutoGraph has nothing to convert, so skipping
# it keeps tracing (tf.function, tf.data, SavedModel export) fast.
_plain_ops = tf.autograph.experimental.do_not_convert


# --------------------------------------------------------------------------
# Ragged helpers.
# --------------------------------------------------------------------------


def _row_starts(row_ids: tf.Tensor) -> tf.Tensor:
    """bool [N]: whether element i is the first of its row (row_ids sorted)."""
    previous = tf.concat([[-1], row_ids[:-1]], axis=0)  # [N]
    return tf.not_equal(row_ids, previous)


def _shift_right(flags: tf.Tensor) -> tf.Tensor:
    """bool [N]: ``flags[i - 1]`` (False at i = 0)."""
    return tf.concat([[False], flags[:-1]], axis=0)


@_plain_ops
def truncated_pair_lengths(len_a: tf.Tensor, len_b: tf.Tensor,
                           max_length: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Lengths left by the original's ``_truncate_seq_pair`` (closed form).

    The original pops one token at a time from the end of the longer sequence
    (``b`` on ties) until ``len_a + len_b <= max_length``. Equivalently, with
    ``L = max_length``: nothing changes if the pair fits; else if ``b`` has at
    most ``L // 2`` tokens only ``a`` is cut (to ``L - len_b``); else if ``a``
    has at most ``ceil(L / 2)`` only ``b`` is cut; else ``a`` keeps
    ``ceil(L / 2)`` and ``b`` ``L // 2``.

    Args:
      len_a, len_b: int [B] lengths. max_length: int scalar >= 0.
    Returns:
      (new_len_a, new_len_b): int [B].
    """
    half_down = max_length // 2
    half_up = max_length - half_down
    fits = len_a + len_b <= max_length
    cut_a_only = len_b <= half_down
    cut_b_only = len_a <= half_up
    new_a = tf.where(fits | cut_b_only, len_a, tf.where(cut_a_only, max_length - len_b, half_up))
    new_b = tf.where(fits | cut_a_only, len_b, tf.where(cut_b_only, max_length - len_a, half_down))
    return new_a, new_b


def _row_values(ids: tf.RaggedTensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """(values + one trailing 0, row starts) of int ids [B, (N)], as int32: [N + 1], [B]."""
    values = tf.concat([tf.cast(ids.values, tf.int32), [0]], axis=0)  # [N + 1]
    return values, tf.cast(ids.row_starts(), tf.int32)


def _row_lengths(ids: tf.RaggedTensor) -> tf.Tensor:
    """int32 [B] row lengths of ragged ids [B, (N)]."""
    return tf.cast(ids.row_lengths(), tf.int32)


@_plain_ops
def pack_segments(ids_a: tf.RaggedTensor, ids_b: Optional[tf.RaggedTensor], len_a: tf.Tensor,
                  len_b: Optional[tf.Tensor], width: Optional[int], cls_id: int, sep_id: int,
                  always_close_b: bool = False) -> Dict[str, tf.Tensor]:
    """The ``[CLS] a [SEP] (b [SEP])`` layout of already-truncated segments: the one place that
    lays out ids, mask and segment ids in graph (``pack_inputs`` and the SQuAD serving
    features, which truncate by different rules, both call it).

    Row r keeps the first ``len_a[r]`` ids of ``ids_a[r]`` and the first ``len_b[r]`` of
    ``ids_b[r]`` (the caller's truncation rule decides these lengths). ``b [SEP]`` (segment 1)
    follows only where ``len_b[r] > 0``, as the original's ``if tokens_b:``, unless
    ``always_close_b`` (run_squad's layout: the closing ``[SEP]`` even after an empty doc).
    Built with dense ops over the output positions (no ragged concat), so it traces small
    and runs in eager mode, ``tf.function`` and ``tf.data``.

    Args:
      ids_a: int [B, (Na)] ragged ids (ragged rank 1). ids_b: int [B, (Nb)] or None.
      len_a, len_b: int [B], ``0 <= len <= `` the row's length; ``len_b`` unused without
        ``ids_b``. The packed row must fit ``width``.
      width: the output length S; None: the longest packed row of the batch (at least 1).
      cls_id, sep_id: ids of ``[CLS]`` and ``[SEP]``.
      always_close_b: append ``[SEP]`` (segment 1) after b in every row, even where
        ``len_b`` is 0 (``[CLS] a [SEP] [SEP]``).
    Returns:
      dict of int32 [B, S]: ``input_ids`` (0-padded), ``input_mask`` (1 on real tokens),
      ``segment_ids`` (0 for ``[CLS] a [SEP]``, 1 for ``b [SEP]``, 0 on padding).
    """
    values_a, starts_a = _row_values(ids_a)
    la = tf.cast(len_a, tf.int32)[:, tf.newaxis]  # [B, 1]
    length = la + 2  # [B, 1] real tokens
    if ids_b is not None:
        values_b, starts_b = _row_values(ids_b)
        lb = tf.cast(len_b, tf.int32)[:, tf.newaxis]  # [B, 1]
        close_b = tf.ones_like(lb, tf.bool) if always_close_b else lb > 0  # [B, 1]
        length += tf.where(close_b, lb + 1, 0)
    if width is None:
        width = tf.maximum(tf.reduce_max(length), 1)
    pos = tf.range(width)[tf.newaxis, :]  # [1, S]
    in_a = (pos >= 1) & (pos <= la)  # [B, S]
    last_a = tf.size(values_a) - 1  # index of the trailing 0
    from_a = tf.gather(values_a, tf.clip_by_value(starts_a[:, tf.newaxis] + pos - 1, 0, last_a))
    input_ids = tf.where(in_a, from_a, 0)  # [B, S]
    input_ids = tf.where(tf.equal(pos, 0), cls_id, input_ids)
    is_sep = tf.equal(pos, la + 1)
    segment_ids = tf.zeros_like(input_ids)
    if ids_b is not None:
        in_b = (pos >= la + 2) & (pos <= la + 1 + lb)
        last_b = tf.size(values_b) - 1
        from_b = tf.gather(values_b,
                           tf.clip_by_value(starts_b[:, tf.newaxis] + pos - la - 2, 0, last_b))
        input_ids = tf.where(in_b, from_b, input_ids)
        second_sep = close_b & tf.equal(pos, la + lb + 2)
        is_sep |= second_sep
        segment_ids = tf.cast(in_b | second_sep, tf.int32)
    input_ids = tf.where(is_sep, sep_id, input_ids)
    return {
        "input_ids": input_ids,  # [B, S] int32
        "input_mask": tf.cast(pos < length, tf.int32),  # [B, S]
        "segment_ids": segment_ids,  # [B, S]
    }


@_plain_ops
def pack_inputs(ids_a: tf.RaggedTensor, ids_b: Optional[tf.RaggedTensor], max_seq_length: int,
                cls_id: int, sep_id: int, *,
                trim_to_longest: bool = False) -> Dict[str, tf.Tensor]:
    """Packs ``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` into model inputs: THE in-graph
    packer (``BertGraphTokenizer.tokenize_and_pack`` and the classifier's serving signatures).

    Truncation is the original's: a single sequence keeps its first
    ``max_seq_length - 2`` ids; a pair is cut by ``truncated_pair_lengths``
    to ``max_seq_length - 3`` ids in all (from the end of the longer, ``b`` on ties).

    Row by row this is ``data.glue.features.pair_tokens`` (the original's
    ``convert_single_example``): a row whose b is empty is a single sentence (the original's
    ``if tokens_b:``), so the ids equal the host-side features for every input.

    Args:
      ids_a: int [B, (Na)] ragged token ids (ragged rank 1).
      ids_b: int [B, (Nb)] or None.
      max_seq_length: the output length S (>= 2, >= 3 with ``ids_b``): a Python int, or an
        int scalar tensor (a value known only when the graph runs is checked by an assertion
        op).
      cls_id, sep_id: ids of ``[CLS]`` and ``[SEP]``.
      trim_to_longest: cut the output to the longest packed row of the batch (L <= S, at
        least 1) instead of S; the kept positions are unchanged.
    Returns:
      dict of int32 [B, S] (or [B, L]): ``input_ids`` (0-padded), ``input_mask`` (1 on real
      tokens), ``segment_ids`` (0 for ``[CLS] a [SEP]``, 1 for ``b [SEP]``, 0 on padding).

    Raises:
      ValueError: a static ``max_seq_length`` too short for the special tokens.
    """
    specials = 3 if ids_b is not None else 2
    if tf.is_tensor(max_seq_length):
        max_seq_length = tf.cast(max_seq_length, tf.int32)
    static_length = tf.get_static_value(max_seq_length)
    if static_length is not None:
        if static_length < specials:
            raise ValueError("max_seq_length=%d is too short for %d special tokens"
                             % (static_length, specials))
    else:
        tf.debugging.assert_greater_equal(
            max_seq_length, specials,
            message="max_seq_length is too short for %d special tokens" % specials)
    len_a = _row_lengths(ids_a)  # [B]
    len_b = None
    if ids_b is None:
        len_a = tf.minimum(len_a, max_seq_length - 2)
    else:
        len_b = _row_lengths(ids_b)  # [B]
        pair_a, pair_b = truncated_pair_lengths(
            len_a, len_b, tf.convert_to_tensor(max_seq_length - 3, tf.int32))
        has_b = len_b > 0
        len_a = tf.where(has_b, pair_a, tf.minimum(len_a, max_seq_length - 2))
        len_b = tf.where(has_b, pair_b, 0)
    return pack_segments(ids_a, ids_b, len_a, len_b, None if trim_to_longest else max_seq_length,
                         cls_id, sep_id)


# --------------------------------------------------------------------------
# The tokenizer.
# --------------------------------------------------------------------------


class BertGraphTokenizer(tf.Module):
    """``FullTokenizer`` as TensorFlow ops: strings [B] -> ragged ids [B, (T)].

    Args:
      vocab_file: WordPiece vocabulary (one token per line), read with
        ``tokenization.load_vocab`` (same checks and errors).
      do_lower_case: as ``FullTokenizer``.
      max_input_chars_per_word: words longer than this (in code points, after
        normalization) become ``[UNK]``.

    The tables are built once per process and casing mode (about 2 s).
    Methods are safe inside ``tf.function``/``tf.data`` and survive
    ``tf.saved_model.save``; loading needs ``import tensorflow_text``.
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True,
                 max_input_chars_per_word: int = 200, name: Optional[str] = None):
        super().__init__(name=name)
        self.vocab_file = vocab_file
        self.do_lower_case = bool(do_lower_case)
        self.max_input_chars_per_word = int(max_input_chars_per_word)
        # Not kept as an attribute: tf.Module would track (and walk) the 30k-entry dict.
        vocab = tokenization.load_vocab(vocab_file)
        self.vocab_size = max(vocab.values()) + 1
        self.cls_id = vocab.get(special_tokens.CLS, -1)
        self.sep_id = vocab.get(special_tokens.SEP, -1)
        self.unk_id = vocab[special_tokens.UNK]

        tables = char_tables(self.do_lower_case)
        # Saved with the module: the Unicode version the baked-in tables follow.
        self.unicode_version = tf.Variable(tables.unicode_version, trainable=False,
                                           name="unicode_version")
        self._page_index = tf.constant(tables.page_index)  # [0x110000 / 128]
        self._blocks = tf.constant(tables.blocks)  # [num_blocks * 128]
        self._map_offsets = tf.constant(tables.map_offsets)  # [num_mappings + 1]
        self._map_values = tf.constant(tables.map_values)  # [total]
        self._wordpiece, self.wordpiece_kind = self._make_wordpiece(vocab)

    # -- construction -------------------------------------------------------

    def _make_wordpiece(self, vocab: Dict[str, int]):
        """FastWordpieceTokenizer when ids are line positions, else the table-based one."""
        tokens = list(vocab)
        max_bytes = 4 * self.max_input_chars_per_word + 4  # never binds: chars are checked first
        if [vocab[t] for t in tokens] == list(range(len(tokens))):
            try:
                return tf_text.FastWordpieceTokenizer(
                    vocab=tokens, suffix_indicator="##", max_bytes_per_word=max_bytes,
                    token_out_type=tf.int64, unknown_token=special_tokens.UNK,
                    no_pretokenization=True), "fast"
            except (tf.errors.OpError, ValueError, RuntimeError) as e:
                reason = "FastWordpieceTokenizer rejected it (%s)" % str(e).splitlines()[0]
        else:
            reason = "ids are not line positions (duplicate lines)"
        logger.warning("vocab %s: %s; using the hash-table WordpieceTokenizer",
                       self.vocab_file, reason)
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(tokens), tf.constant([vocab[t] for t in tokens], tf.int64)),
            default_value=-1)
        return tf_text.WordpieceTokenizer(
            table, suffix_indicator="##", max_bytes_per_word=max_bytes,
            token_out_type=tf.int64, unknown_token=special_tokens.UNK), "table"

    def get_config(self) -> Dict:
        return {"vocab_file": self.vocab_file, "do_lower_case": self.do_lower_case,
                "max_input_chars_per_word": self.max_input_chars_per_word}

    # -- per-code-point lookups --------------------------------------------

    def _lookup(self, cps: tf.Tensor) -> tf.Tensor:
        """Packed table values of code points: int32 [N] -> int32 [N]."""
        page = tf.gather(self._page_index, tf.bitwise.right_shift(cps, _BLOCK_BITS))  # [N]
        return tf.gather(self._blocks, page * _BLOCK + tf.bitwise.bitwise_and(cps, _BLOCK - 1))

    @staticmethod
    def _has(values: tf.Tensor, flag: int) -> tf.Tensor:
        """bool [N]: whether each packed value has ``flag``."""
        return tf.not_equal(tf.bitwise.bitwise_and(values, flag), 0)

    # -- pipeline stages ----------------------------------------------------

    def _final_sigmas(self, cps, values, row_ids, separator):
        """bool [N]: U+03A3 positions in CPython's Final_Sigma context.

        A capital sigma lowers to U+03C2 when the nearest non-case-ignorable
        character before it in its word is cased, and the nearest one after
        it (if any) is not. Words are delimited by separators (whitespace,
        CJK) and string ends.
        """
        n = tf.size(cps)
        word_start = _row_starts(row_ids) | separator | _shift_right(separator)  # [N]
        word_ids = tf.cumsum(tf.cast(word_start, tf.int32))  # [N]
        anchor = ~self._has(values, CASE_IGNORABLE)  # [N] chars the context looks at
        anchor_pos = tf.boolean_mask(tf.range(n), anchor)  # [M] increasing
        rank = tf.cumsum(tf.cast(anchor, tf.int32), exclusive=True)  # [N] anchors before i
        num_anchors = tf.size(anchor_pos)
        is_sigma = tf.equal(cps, _CAPITAL_SIGMA)
        cased = self._has(values, CASED)

        def neighbour(index):
            """(exists in the same word, is cased) for anchor number ``index`` [N]."""
            valid = (index >= 0) & (index < num_anchors)
            pos = tf.gather(anchor_pos, tf.clip_by_value(index, 0, tf.maximum(num_anchors - 1, 0)))
            pos = tf.where(valid, pos, 0)
            same_word = valid & tf.equal(tf.gather(word_ids, pos), word_ids)
            return same_word, same_word & tf.gather(cased, pos)

        _, before_cased = neighbour(rank - 1)
        _, after_cased = neighbour(rank + 1)  # a sigma is an anchor: rank is its own index
        return is_sigma & before_cased & ~after_cased

    def _lower_and_strip(self, cps, values, row_ids, src_flags):
        """Maps each code point to ``NFD(lower(c))``, reorders marks, drops Mn.

        Args: flat int32 [N] code points / packed values / row ids / source flags.
        Returns: (cps, row_ids, src_flags, values) of the output characters [M].
        """
        separator = self._has(src_flags, SPACE | CJK)
        is_sigma = tf.equal(cps, _CAPITAL_SIGMA)  # [N]
        final = tf.cond(tf.reduce_any(is_sigma),
                        lambda: self._final_sigmas(cps, values, row_ids, separator),
                        lambda: tf.zeros_like(is_sigma))  # [N]
        cps = tf.where(final, _FINAL_SIGMA, cps)
        mapping = tf.where(final, 0, tf.bitwise.right_shift(values, _MAP_SHIFT))  # [N]
        starts = tf.gather(self._map_offsets, mapping)  # [N]
        lengths = tf.where(mapping > 0, tf.gather(self._map_offsets, mapping + 1) - starts, 1)

        def substitute():
            """Every mapping is one code point: replace in place."""
            return tf.where(mapping > 0, tf.gather(self._map_values, starts), cps), row_ids, src_flags

        def expand():
            """Some code points map to several: repeat sources, then fill in."""
            source = tf.repeat(tf.range(tf.size(cps)), lengths)  # [M] input index of each output
            within = tf.range(tf.size(source)) - tf.gather(tf.cumsum(lengths, exclusive=True), source)
            mapped = tf.gather(mapping, source) > 0
            index = tf.where(mapped, tf.gather(starts, source) + within, 0)  # into map_values
            out = tf.where(mapped, tf.gather(self._map_values, index), tf.gather(cps, source))  # [M]
            return out, tf.gather(row_ids, source), tf.gather(src_flags, source)

        out, row_ids, src_flags = tf.cond(tf.reduce_all(tf.equal(lengths, 1)), substitute, expand)
        out_values = self._lookup(out)
        ccc = tf.bitwise.bitwise_and(tf.bitwise.right_shift(out_values, _CCC_SHIFT), 0xFF)
        is_mn = self._has(out_values, MN)

        def reorder():
            """Stable sort by combining class inside each combining run (NFD reordering)."""
            run_start = tf.equal(ccc, 0) | _row_starts(row_ids)
            run = tf.cumsum(tf.cast(run_start, tf.int64))
            order = tf.argsort(run * 256 + tf.cast(ccc, tf.int64), stable=True)
            return [tf.gather(t, order) for t in (out, row_ids, src_flags, out_values, is_mn)]

        needs_reorder = tf.reduce_any((ccc > 0) & ~is_mn)
        out, row_ids, src_flags, out_values, is_mn = tf.cond(
            needs_reorder, reorder, lambda: [out, row_ids, src_flags, out_values, is_mn])
        keep = ~is_mn
        return (tf.boolean_mask(out, keep), tf.boolean_mask(row_ids, keep),
                tf.boolean_mask(src_flags, keep), tf.boolean_mask(out_values, keep))

    def _basic_tokens(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Basic tokens as ragged code points: string [B] -> int32 [B, (T), (C)]."""
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        decoded = tf.strings.unicode_decode(strings, "UTF-8", errors="replace",
                                            replacement_char=0xFFFD)  # [B, (N)]
        batch = decoded.nrows(out_type=tf.int32)
        cps = decoded.flat_values  # [N]
        row_ids = tf.cast(decoded.value_rowids(), tf.int32)  # [N]
        values = self._lookup(cps)
        keep = ~self._has(values, DROP)
        cps = tf.boolean_mask(cps, keep)
        row_ids = tf.boolean_mask(row_ids, keep)
        values = tf.boolean_mask(values, keep)
        src_flags = values
        if self.do_lower_case:
            cps, row_ids, src_flags, values = self._lower_and_strip(cps, values, row_ids, src_flags)
        separator = self._has(src_flags, SPACE)
        single = self._has(src_flags, CJK) | (self._has(values, PUNCT) & ~separator)
        starts = ~separator & (_row_starts(row_ids) | _shift_right(separator | single) | single)
        keep = ~separator
        chars = tf.boolean_mask(cps, keep)  # [C]
        starts = tf.boolean_mask(starts, keep)
        row_ids = tf.boolean_mask(row_ids, keep)
        token_ids = tf.cumsum(tf.cast(starts, tf.int32)) - 1  # [C]
        token_rows = tf.boolean_mask(row_ids, starts)  # [T]
        tokens = tf.RaggedTensor.from_value_rowids(
            chars, token_ids, nrows=tf.size(token_rows), validate=False)  # [T, (C)]
        tokens = tf.RaggedTensor.from_value_rowids(tokens, token_rows, nrows=batch,
                                                   validate=False)  # [B, (T), (C)]
        return tokens.with_row_splits_dtype(tf.int64)

    # -- public API ---------------------------------------------------------

    @_plain_ops
    def basic_tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """``BasicTokenizer.tokenize`` in-graph: string [B] -> string [B, (T)] (UTF-8).

        Args:
          strings: string [B] texts.

        Returns:
          string [B, (T)] basic tokens.
        """
        tokens = self._basic_tokens(strings)
        return tokens.with_values(tf.strings.unicode_encode(tokens.values, "UTF-8"))

    @_plain_ops
    def tokenize_words(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """WordPiece ids word by word: string [B] -> int64 [B, (T), (P)].

        The words are ``BasicTokenizer``'s tokens (``basic_tokenize``), each split into its
        pieces (a word too long, or with a piece missing from the vocab, is one ``[UNK]``);
        ``tokenize`` is this with the word level merged away (TF Hub's preprocessors'
        ``tokenize`` output).

        Args:
          strings: string [B] texts.

        Returns:
          int64 [B, (T), (P)] WordPiece ids.
        """
        tokens = self._basic_tokens(strings)  # [B, (T), (C)]
        words = tf.strings.unicode_encode(tokens.values, "UTF-8")  # [T]
        too_long = tokens.values.row_lengths() > self.max_input_chars_per_word
        # "[UNK]" is a vocab entry, so WordPiece maps the substituted word to its id.
        words = tf.where(too_long, special_tokens.UNK, words)
        pieces = self._wordpiece.tokenize(words)  # [T, (P)]
        return tokens.with_values(pieces)  # [B, (T), (P)]

    @_plain_ops
    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """``FullTokenizer`` ids in-graph: string [B] -> int64 [B, (P)] WordPiece ids.

        Args:
          strings: string [B] texts.

        Returns:
          int64 [B, (P)] WordPiece ids.
        """
        return self.tokenize_words(strings).merge_dims(1, 2)  # [B, (P)]

    @_plain_ops
    def tokenize_and_pack(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None,
                          max_seq_length: int = 128, *,
                          trim_to_longest: bool = False) -> Dict[str, tf.Tensor]:
        """Tokenizes raw strings [B] (and pairs) into int32 [B, S] model inputs.

        The packing is ``pack_inputs`` (same keyword options); a and b are tokenized in one
        call (rows are independent), then split.

        Args:
          text_a: string [B] first texts.
          text_b: string [B] second texts, or None.
          max_seq_length: S.
          trim_to_longest: cut S to the longest row (as ``pack_inputs``).

        Returns:
          dict of int32 [B, S]: ``input_ids``, ``input_mask``, ``segment_ids``.

        Raises:
          VocabError: the vocab lacks ``[CLS]`` or ``[SEP]``.
        """
        if self.cls_id < 0 or self.sep_id < 0:
            raise tokenization.VocabError("vocab file %s lacks %s or %s" % (
                self.vocab_file, special_tokens.CLS, special_tokens.SEP))
        options = {"trim_to_longest": trim_to_longest}
        if text_b is None:
            return pack_inputs(self.tokenize(text_a), None, max_seq_length,
                               self.cls_id, self.sep_id, **options)
        text_a = tf.convert_to_tensor(text_a, tf.string)  # [B]
        both = self.tokenize(tf.concat([text_a, tf.convert_to_tensor(text_b, tf.string)], 0))
        batch = tf.shape(text_a)[0]
        return pack_inputs(both[:batch], both[batch:], max_seq_length, self.cls_id, self.sep_id,
                           **options)
