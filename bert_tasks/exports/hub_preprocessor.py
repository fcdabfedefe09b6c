"""The BERT preprocessor as a TF Hub-style SavedModel: raw text -> encoder inputs, in graph.

``export_preprocessor(export_dir, vocab_file, do_lower_case, seq_length=128)`` writes a
SavedModel with the interface of TF Hub's BERT preprocessors (``bert_en_uncased_preprocess``):
its restored object ``preprocessor = tf.saved_model.load(export_dir)`` (after
``import tensorflow_text``: the SavedModel uses its ops) offers

* ``preprocessor(text)``: string [B] -> dict of int32 [B, seq_length] ``input_word_ids``,
  ``input_mask``, ``input_type_ids``: ``[CLS] text [SEP]``, cut and padded to the
  ``seq_length`` given at export;
* ``preprocessor.tokenize(text)``: string [B] -> int32 ragged [B, (words), (wordpieces)]: the
  ids of ``FullTokenizer`` (``data.tokenization.graph.BertGraphTokenizer``), grouped by
  ``BasicTokenizer`` word; ``preprocessor.tokenize.get_special_tokens_dict()`` gives
  ``vocab_size``, ``start_of_sequence_id`` ([CLS]), ``end_of_segment_id`` ([SEP]),
  ``padding_id`` and ``mask_id`` ([MASK], where the vocab has it) as int32 scalars;
* ``preprocessor.bert_pack_inputs(segments, seq_length=None)``: ``segments`` a list of 1, 2
  or 3 int32 ragged tensors [B, (words), (wordpieces)] (``tokenize``'s output) or [B, (P)];
  ``seq_length`` a Python int or int32 scalar tensor (any value >= the number of special
  tokens; None: the export's). Returns the same dict at that length;
* ``vocab_file`` (a ``tf.saved_model.Asset``, the vocab copied into ``assets/``) and
  ``do_lower_case`` (a bool ``tf.Variable``);
* signatures ``serving_default`` (``text`` string [B] -> the three ids at the export
  ``seq_length``) and ``text_pair`` (``text_a``, ``text_b`` string [B] -> the same).

Packing. One or two segments are packed exactly as run_classifier's features
(``data.glue.features``: a single text keeps its first ``seq_length - 2`` ids; a pair is cut to
``seq_length - 3`` by the original's ``_truncate_seq_pair``, in closed form in
``graph.pack_inputs``). For two segments this equals TF Hub's round-robin trimmer, except that
a row whose second segment is empty is packed as a single text (``[CLS] a [SEP]``, as the
original's ``if tokens_b:``) where TF Hub writes ``[CLS] a [SEP] [SEP]`` (``a`` cut to
``seq_length - 3``, the last ``[SEP]`` of type 1). ``keep_empty_segments=True`` (the export's
choice, ``convert_checkpoint.py --hub_keep_empty_segments``) packs as TF Hub for every segment
count: every segment, empty or not, ends with its ``[SEP]`` (``pack_segments``). Three
segments are trimmed round robin and packed as TF Hub does with TensorFlow Text (segment ids
0, 1, 2; ``round_robin_lengths`` and ``_pack_closed_segments``, in dense ops).
"""

from __future__ import annotations

import itertools
import numbers
from typing import Dict, List, Sequence, Union

import tensorflow as tf

from bert_common.errors import InputError
from bert_tasks.exports import saved_model
from data.tokenization import graph as graph_tokenization
from data.tokenization import special_tokens
from data.tokenization import wordpiece

#: The names of the packed outputs (TF Hub's) -> ``graph.pack_inputs``' names.
OUTPUT_NAMES = {"input_word_ids": "input_ids", "input_mask": "input_mask",
                "input_type_ids": "segment_ids"}
MAX_SEGMENTS = 3
SIGNATURES = ("serving_default", "text_pair")

_TEXT = tf.TensorSpec([None], tf.string)


def _pieces(segment: Union[tf.RaggedTensor, tf.Tensor]) -> tf.RaggedTensor:
    """int32 ragged [B, (P)] from [B, (words), (pieces)] or [B, (P)] ids."""
    if not isinstance(segment, tf.RaggedTensor):
        segment = tf.RaggedTensor.from_tensor(segment)
    if segment.ragged_rank > 1:
        segment = segment.merge_dims(1, -1)
    return tf.cast(segment, tf.int32)


def round_robin_lengths(lengths: Sequence[tf.Tensor], budget) -> List[tf.Tensor]:
    """TensorFlow Text's ``RoundRobinTrimmer`` (TF Hub's trimming) in closed form: the number
    of ids each segment keeps.

    The trimmer gives one id to each segment in turn (an exhausted one is skipped) until
    ``budget`` ids are taken. So every segment keeps ``min(length, k)`` ids, ``k`` the most
    complete rounds that fit, and the ``r`` ids left over go one each to the first ``r``
    segments longer than ``k``. ``sum_i min(l_i, k)`` is the least over subsets ``S`` of
    ``sum_S l_i + (n - |S|) k``, so ``k = max_S floor((budget - sum_S l_i) / (n - |S|))`` over
    the subsets leaving a segment out (all of them fit: ``k`` is at least the longest).

    Args:
        lengths: 1-3 int32 [B] segment lengths.
        budget: int32 scalar >= 0, the ids kept in all.

    Returns:
        int32 [B] kept lengths, one per segment.
    """
    count = len(lengths)
    rounds = None  # [B]: k
    for subset in itertools.product((False, True), repeat=count):
        if all(subset):
            continue
        taken = sum((length for length, full in zip(lengths, subset) if full),
                    tf.zeros_like(lengths[0]))
        candidate = (budget - taken) // (count - sum(subset))
        rounds = candidate if rounds is None else tf.maximum(rounds, candidate)
    kept = [tf.minimum(length, rounds) for length in lengths]
    left = budget - tf.add_n(kept)  # [B]: 0 <= left < the segments longer than k
    longer_before = tf.zeros_like(left)  # [B]: segments longer than k before segment i
    for i, length in enumerate(lengths):
        longer = length > rounds
        kept[i] += tf.cast(longer & (longer_before < left), tf.int32)
        longer_before += tf.cast(longer, tf.int32)
    return kept


def _pack_closed_segments(pieces: Sequence[tf.RaggedTensor], seq_length, cls_id: int,
                          sep_id: int) -> Dict[str, tf.Tensor]:
    """TF Hub's packing: ``RoundRobinTrimmer`` to ``seq_length - (segments + 1)`` ids, then
    TensorFlow Text's ``combine_segments`` and ``pad_model_inputs``: ``[CLS] s0 [SEP] s1 [SEP]
    ...``, segment i and its ``[SEP]`` of type i (``[CLS]`` 0), every segment closed by its
    ``[SEP]`` even where empty, 0-padded.

    Built with dense ops over the output positions, as ``graph.pack_segments`` (TensorFlow
    Text's ragged trimming and concatenation trace many times slower, once per traced
    signature of ``bert_pack_inputs``).

    Args:
        pieces: 1-3 int32 ragged [B, (P)] ids.
        seq_length: the packed length S (a Python int or int32 scalar tensor).
        cls_id: the ``[CLS]`` id.
        sep_id: the ``[SEP]`` id.

    Returns:
        ``{"input_word_ids", "input_mask", "input_type_ids"}``, int32 [B, S] each.
    """
    specials = len(pieces) + 1
    length = tf.cast(seq_length, tf.int32)
    tf.debugging.assert_greater_equal(
        length, specials, message="seq_length is too short for %d special tokens" % specials)
    kept = round_robin_lengths([tf.cast(p.row_lengths(), tf.int32) for p in pieces],
                               length - specials)  # [B] each
    width = seq_length if isinstance(seq_length, numbers.Integral) else length
    pos = tf.range(width)[tf.newaxis, :]  # [1, S]
    word_ids = tf.where(tf.equal(pos, 0), cls_id, 0)  # [1, S], broadcast below
    type_ids = tf.zeros_like(word_ids)
    start = tf.ones_like(kept[0])[:, tf.newaxis]  # [B, 1]: where segment i starts
    for i, (segment, count) in enumerate(zip(pieces, kept)):
        values = tf.concat([segment.values, [0]], axis=0)  # [N + 1]: a trailing 0
        starts = tf.cast(segment.row_starts(), tf.int32)[:, tf.newaxis]  # [B, 1]
        end = start + count[:, tf.newaxis]  # [B, 1]: the segment's [SEP]
        inside = (pos >= start) & (pos < end)  # [B, S]
        taken = tf.gather(values, tf.clip_by_value(starts + pos - start, 0,
                                                   tf.size(values) - 1))  # [B, S]
        word_ids = tf.where(inside, taken, word_ids)
        is_sep = tf.equal(pos, end)
        word_ids = tf.where(is_sep, sep_id, word_ids)
        type_ids = tf.where(inside | is_sep, i, type_ids)
        start = end + 1
    return {"input_word_ids": word_ids, "input_mask": tf.cast(pos < start, tf.int32),
            "input_type_ids": type_ids}


def pack_segments(segments: Sequence[tf.RaggedTensor], seq_length, cls_id: int,
                  sep_id: int, keep_empty_segments: bool = False) -> Dict[str, tf.Tensor]:
    """TF Hub's ``bert_pack_inputs``: 1-3 segments of ids -> dict of int32 [B, seq_length].

    1 or 2 segments: ``graph.pack_inputs`` (run_classifier's features: a row whose second
    segment is empty is a single text); 3, or any count with ``keep_empty_segments``:
    round-robin trimming to ``seq_length - (segments + 1)`` ids and TensorFlow Text's
    packing, exactly as TF Hub (each segment, empty or not, followed by ``[SEP]``;
    ``_pack_closed_segments``).

    Args:
        segments: 1-3 ragged id tensors [B, (words), (wordpieces)] or [B, (ids)].
        seq_length: the packed length.
        cls_id: the ``[CLS]`` id.
        sep_id: the ``[SEP]`` id.
        keep_empty_segments: keep an empty segment's ``[SEP]`` (TF Hub's packing).

    Returns:
        ``{"input_word_ids", "input_mask", "input_type_ids"}``, int32 [B, seq_length] each.

    Raises:
        ValueError: no segments or more than 3.
    """
    pieces = [_pieces(s) for s in segments]
    if not 1 <= len(pieces) <= MAX_SEGMENTS:
        raise ValueError("bert_pack_inputs takes 1 to %d segments, got %d"
                         % (MAX_SEGMENTS, len(pieces)))
    if len(pieces) <= 2 and not keep_empty_segments:
        packed = graph_tokenization.pack_inputs(pieces[0], pieces[1] if len(pieces) == 2 else None,
                                                seq_length, cls_id, sep_id)
        return {hub: packed[ours] for hub, ours in OUTPUT_NAMES.items()}
    return _pack_closed_segments(pieces, seq_length, cls_id, sep_id)


class HubTokenize(tf.Module):
    """``preprocessor.tokenize``: string [B] -> int32 ragged [B, (words), (wordpieces)].

    Args:
        tokenizer: the graph WordPiece tokenizer.
        special_ids: the special token name -> id map (``get_special_tokens_dict``).
    """

    def __init__(self, tokenizer: graph_tokenization.BertGraphTokenizer,
                 special_ids: Dict[str, int]):
        super().__init__(name="tokenize")
        self._tokenizer = tokenizer
        self._special_ids = dict(special_ids)

    def ids(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Args:
            text: string [B].

        Returns:
            int32 ragged [B, (words), (wordpieces)].
        """
        return tf.cast(self._tokenizer.tokenize_words(text), tf.int32)

    @tf.function(input_signature=[_TEXT], autograph=False)
    def __call__(self, text):
        return self.ids(text)

    @tf.function(input_signature=[], autograph=False)
    def get_special_tokens_dict(self):
        """The special ids as int32 scalars (TF Hub's ``tokenize.get_special_tokens_dict``)."""
        return {k: tf.constant(v, tf.int32) for k, v in self._special_ids.items()}


class HubBertPackInputs(tf.Module):
    """``preprocessor.bert_pack_inputs(segments, seq_length=None)`` (see ``pack_segments``).

    Args:
        cls_id: the ``[CLS]`` id.
        sep_id: the ``[SEP]`` id.
        default_seq_length: the packed length when a call gives none.
        keep_empty_segments: see ``pack_segments``.
    """

    def __init__(self, cls_id: int, sep_id: int, default_seq_length: int,
                 keep_empty_segments: bool = False):
        super().__init__(name="bert_pack_inputs")
        self._cls_id = int(cls_id)
        self._sep_id = int(sep_id)
        self._default_seq_length = int(default_seq_length)
        self._keep_empty_segments = bool(keep_empty_segments)

    def pack(self, segments, seq_length=None) -> Dict[str, tf.Tensor]:
        """Args:
            segments: 1-3 ragged id tensors.
            seq_length: the packed length; None: ``default_seq_length``.

        Returns:
            dict of int32 [B, seq_length] (see ``pack_segments``).
        """
        if seq_length is None:
            seq_length = self._default_seq_length
        return pack_segments(list(segments), seq_length, self._cls_id, self._sep_id,
                             self._keep_empty_segments)

    @tf.function(autograph=False)
    def __call__(self, segments, seq_length=None):
        return self.pack(segments, seq_length)

    def trace(self) -> None:
        """Traces 1-3 segments of ragged rank 1 and 2, with ``seq_length`` an int32 scalar
        tensor (any value after loading) or left out (the export's), as ``tf.saved_model.save``
        would (``saved_model.tracing_as_saved``: the save reuses them, each traced once)."""
        # Named as the save names it (the spec's name is part of the cache key).
        length = tf.TensorSpec([], tf.int32, name="seq_length")
        with saved_model.tracing_as_saved():
            for ragged_rank in (1, 2):
                spec = tf.RaggedTensorSpec([None] * (ragged_rank + 1), tf.int32,
                                           ragged_rank=ragged_rank)
                for count in range(1, MAX_SEGMENTS + 1):
                    self.__call__.get_concrete_function([spec] * count)
                    self.__call__.get_concrete_function([spec] * count, seq_length=length)


class HubPreprocessor(tf.Module):
    """The preprocessor's root object (see the module docstring).

    Args:
      vocab_file: the WordPiece vocabulary (``load_vocab``'s checks and ``VocabError``).
      do_lower_case: as ``FullTokenizer``.
      seq_length: the output length of ``preprocessor(text)``, the signatures and
        ``bert_pack_inputs`` without ``seq_length`` (>= 3).
      keep_empty_segments: pack as TF Hub's ``bert_pack_inputs`` also where a segment is
        empty (``[CLS] a [SEP] [SEP]``); default: run_classifier's features (``[CLS] a
        [SEP]``). See the module docstring.
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True, seq_length: int = 128,
                 keep_empty_segments: bool = False):
        super().__init__(name="bert_preprocessor")
        if (isinstance(seq_length, bool) or not isinstance(seq_length, numbers.Integral)
                or seq_length < 3):
            raise InputError("seq_length must be an integer >= 3 (room for [CLS] a [SEP] b "
                             "[SEP]), got %r" % (seq_length,))
        tokenizer = graph_tokenization.BertGraphTokenizer(vocab_file, do_lower_case=do_lower_case)
        if tokenizer.cls_id < 0 or tokenizer.sep_id < 0:
            raise wordpiece.VocabError("vocab file %s lacks %s or %s" % (
                vocab_file, special_tokens.CLS, special_tokens.SEP))
        vocab = wordpiece.load_vocab(vocab_file)
        special_ids = {"vocab_size": tokenizer.vocab_size,
                       "start_of_sequence_id": tokenizer.cls_id,
                       "end_of_segment_id": tokenizer.sep_id,
                       "padding_id": 0}  # what the packer pads with
        if special_tokens.MASK in vocab:
            special_ids["mask_id"] = vocab[special_tokens.MASK]
        self.seq_length = int(seq_length)
        self.tokenize = HubTokenize(tokenizer, special_ids)
        self.bert_pack_inputs = HubBertPackInputs(tokenizer.cls_id, tokenizer.sep_id,
                                                  self.seq_length, keep_empty_segments)
        self.vocab_file = tf.saved_model.Asset(vocab_file)
        self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False,
                                         name="do_lower_case")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")],
                 autograph=False)
    def __call__(self, text):
        """string [B] -> dict of int32 [B, seq_length]: ``[CLS] text [SEP]``."""
        # Calls of the traced functions (``trace``), not their bodies traced again.
        return self.bert_pack_inputs([self.tokenize(text)])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text_a"),
                                  tf.TensorSpec([None], tf.string, name="text_b")],
                 autograph=False)
    def text_pair(self, text_a, text_b):
        """string [B] pairs -> dict of int32 [B, seq_length]: ``[CLS] a [SEP] b [SEP]`` (a
        row with an empty ``text_b`` is a single text, as run_classifier).

        Args:
            text_a: string [B].
            text_b: string [B].

        Returns:
            ``{"input_word_ids", "input_mask", "input_type_ids"}``.
        """
        both = self.tokenize(tf.concat([text_a, text_b], axis=0))  # [2B, (W), (P)]
        batch = tf.shape(text_a)[0]
        return self.bert_pack_inputs([both[:batch], both[batch:]])

    def trace(self) -> Dict[str, object]:
        """Traces ``bert_pack_inputs``; returns the signatures.

        The functions with an input signature are left to ``tf.saved_model.save``, which
        traces them itself; they call ``tokenize`` and ``bert_pack_inputs`` (whose concrete
        functions are traced here, in the save's context: each is traced once).
        """
        self.bert_pack_inputs.trace()
        return {"serving_default": self.__call__, "text_pair": self.text_pair}


def export_preprocessor(export_dir: str, vocab_file: str, do_lower_case: bool = True,
                        seq_length: int = 128,
                        keep_empty_segments: bool = False) -> HubPreprocessor:
    """Writes the preprocessor SavedModel (module docstring) for ``vocab_file``.

    Written under a temporary name beside ``export_dir``, then renamed into place (an existing
    SavedModel ``export_dir`` is replaced; anything else there is refused with ``InputError``;
    its parent folder is created: ``saved_model.save_saved_model``). Load it with
    ``import tensorflow_text`` done first. Raises ``VocabError`` (an ``InputError``) for a
    missing or unusable vocab, ``InputError`` for a bad ``seq_length``.

    Args:
        export_dir: the SavedModel folder.
        vocab_file: the WordPiece vocab.
        do_lower_case: the tokenizer's casing.
        seq_length: the default packed length.
        keep_empty_segments: see ``pack_segments``.

    Returns:
        The ``HubPreprocessor`` saved.

    Raises:
        VocabError: a missing or unusable vocab.
        InputError: a bad ``seq_length`` or ``export_dir``.
    """
    module = HubPreprocessor(vocab_file, do_lower_case, seq_length, keep_empty_segments)
    saved_model.save_saved_model(module, export_dir, module.trace)
    return module

