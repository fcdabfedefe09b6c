"""NER windows: sentences -> [S] model inputs with the first sub-token of each word labelled.

The BERT paper's recipe (section 5.3): each word is split into WordPiece sub-tokens and only
its **first** sub-token is classified (later ones are neither predicted nor scored); the input
holds the maximal document context around the sentence.

One window per target span (``convert_document``)::

    [CLS] <left context> <target words> <right context> [SEP] <padding>

* the target is a sentence; its words' first sub-tokens carry ``label_ids`` and
  ``label_weights`` 1.0 (everything else: label 0, weight 0);
* context (``document_context=True``): the sub-tokens of the same document just before and
  after the target, as many as fit in ``max_seq_length - 2``, split evenly (a side that runs
  out gives its room to the other); cut at sub-tokens, not words (context is never predicted).
  ``document_context=False``: no context, one sentence per sequence;
* a sentence longer than the window (``max_seq_length - 2`` sub-tokens) is split into target
  spans of whole words of at most half the window each, and every span gets a window of its
  own with context around it (its sentence's other words count as context): every word gets
  exactly one prediction, from the window where it is a target. With
  ``split_long_sentences=False`` such a sentence is an error instead. A word of more sub-tokens
  than the window is always an error; a word WordPiece turns into nothing (e.g. a lone
  control character) is given one ``[UNK]``, so that it is predicted too.

Every sequence is one segment (``segment_ids`` 0), as a single-sentence classifier input.

Records (``write_tf_records``): ``input_ids``, ``input_mask``, ``segment_ids``, ``label_ids``
int64 [S], ``label_weights`` float [S]; read with ``record_spec``: int32 / float32 [S].
Which window predicts which word stays in Python (``NerWindow.sentence``, ``.words``,
``.positions``), rebuilt by the same conversion when predicting.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from data.glue import features as cf
from data.ner.conll import NerDataError, Sentence, documents
from data.records import tf_example
from data.tokenization import special_tokens

LABEL_WEIGHTS = "label_weights"
SEQUENCE_FEATURES = (cf.INPUT_IDS, cf.INPUT_MASK, cf.SEGMENT_IDS, cf.LABEL_IDS, LABEL_WEIGHTS)


@dataclasses.dataclass
class NerWindow:
    """One model input. ``sentence``: index of the target sentence; ``words`` [T]: indexes (in
    that sentence) of the words it predicts; ``positions`` [T]: their first sub-tokens'
    positions in the sequence. The lists below are [max_seq_length].

    Args:
        sentence: the target sentence's index.
        words: [T] the predicted words' indexes in that sentence.
        positions: [T] their first sub-tokens' sequence positions.
        input_ids: [max_seq_length] token ids.
        input_mask: [max_seq_length], 1 on real tokens.
        segment_ids: [max_seq_length] segment ids.
        label_ids: [max_seq_length] tag ids.
        label_weights: [max_seq_length], 1.0 where a word's tag is predicted.
    """

    sentence: int
    words: List[int]
    positions: List[int]
    input_ids: List[int]
    input_mask: List[int]
    segment_ids: List[int]
    label_ids: List[int]
    label_weights: List[float]


class WordPieces:
    """Word -> WordPiece ids, cached (a corpus repeats its words).

    Args:
        tokenizer: a ``FullTokenizer`` / ``FastFullTokenizer``.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.unk_id = tokenizer.convert_tokens_to_ids([special_tokens.UNK])[0]
        self.cls_id, self.sep_id = tokenizer.convert_tokens_to_ids([special_tokens.CLS,
                                                                     special_tokens.SEP])
        self._cache: Dict[str, List[int]] = {}

    def __call__(self, word: str) -> List[int]:
        ids = self._cache.get(word)
        if ids is None:
            ids = self.tokenizer.convert_tokens_to_ids(self.tokenizer.tokenize(word))
            ids = ids or [self.unk_id]  # never drop a word: it must get a prediction
            self._cache[word] = ids
        return ids


def _target_spans(sentence: Sentence, starts: List[int], end: int, budget: int,
                  split_long_sentences: bool) -> List[Tuple[int, int]]:
    """Word spans [a, b) of one sentence, each at most ``budget`` sub-tokens (see module).

    ``starts`` [W]: each word's first sub-token offset in the document; ``end``: the offset
    after the sentence's last sub-token.
    """
    bounds = starts + [end]
    length = end - starts[0]
    if length <= budget:
        return [(0, len(starts))]
    for w in range(len(starts)):
        if bounds[w + 1] - bounds[w] > budget:
            raise NerDataError("%s:%d: the word %r is %d sub-tokens, more than the window holds "
                               "(--max_seq_length - 2 = %d)"
                               % (sentence.path, sentence.line_numbers[w], sentence.words[w][:40],
                                  bounds[w + 1] - bounds[w], budget))
    if not split_long_sentences:
        raise NerDataError("%s: a sentence of %d words is %d sub-tokens, longer than the window "
                           "(--max_seq_length - 2 = %d); raise --max_seq_length or let it be "
                           "split (--split_long_sentences)" % (sentence.origin,
                                                               len(starts), length, budget))
    half = max(1, budget // 2)
    spans, a = [], 0
    while a < len(starts):
        b = a + 1
        while b < len(starts) and bounds[b + 1] - bounds[a] <= half:
            b += 1
        spans.append((a, b))
        a = b
    return spans


def convert_document(sentences: Sequence[Sentence], indexes: Sequence[int],
                     label_map: Optional[Dict[str, int]], max_seq_length: int,
                     pieces: WordPieces, document_context: bool = True,
                     split_long_sentences: bool = True) -> List[NerWindow]:
    """The windows of one document (``sentences[i]`` for i in ``indexes``, in order); see the
    module docstring. ``label_map``: IOB2 tag -> id (None, or unlabelled sentences: labels 0).

    Args:
        sentences: the file's sentences.
        indexes: the document's sentence indexes.
        label_map: IOB2 tag -> id, or None.
        max_seq_length: S.
        pieces: the cached ``WordPieces``.
        document_context: fill each window with the document's sub-tokens around the target.
        split_long_sentences: split a sentence longer than a window (else it is an error).

    Returns:
        The document's ``NerWindow`` s.

    Raises:
        ValueError: ``max_seq_length`` below 3.
    """
    if max_seq_length < 3:
        raise ValueError("max_seq_length must be at least 3, got %d" % max_seq_length)
    budget = max_seq_length - 2
    flat: List[int] = []  # the document's sub-token ids
    starts: List[List[int]] = []  # per sentence, per word: its first sub-token in ``flat``
    bounds: List[Tuple[int, int]] = []  # per sentence: [start, end) in ``flat``
    for index in indexes:
        sentence = sentences[index]
        begin = len(flat)
        word_starts = []
        for word in sentence.words:
            word_starts.append(len(flat))
            flat.extend(pieces(word))
        starts.append(word_starts)
        bounds.append((begin, len(flat)))

    windows = []
    for k, index in enumerate(indexes):
        sentence = sentences[index]
        tags = sentence.iob2_tags if label_map is not None else None
        scope = (0, len(flat)) if document_context else bounds[k]
        for a, b in _target_spans(sentence, starts[k], bounds[k][1], budget,
                                  split_long_sentences):
            t0 = starts[k][a]
            t1 = starts[k][b] if b < len(starts[k]) else bounds[k][1]
            room = budget - (t1 - t0)
            left_avail, right_avail = t0 - scope[0], scope[1] - t1
            left = min(left_avail, room // 2)
            right = min(right_avail, room - left)
            left = min(left_avail, room - right)
            ids = [pieces.cls_id] + flat[t0 - left:t1 + right] + [pieces.sep_id]
            positions = [1 + left + starts[k][w] - t0 for w in range(a, b)]
            label_ids = [0] * max_seq_length
            label_weights = [0.0] * max_seq_length
            for w, position in zip(range(a, b), positions):
                label_ids[position] = label_map[tags[w]] if tags is not None else 0
                label_weights[position] = 1.0
            input_ids, input_mask, segment_ids = cf.pad_features(ids, [0] * len(ids),
                                                                 max_seq_length)
            windows.append(NerWindow(
                sentence=index, words=list(range(a, b)), positions=positions,
                input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids,
                label_ids=label_ids, label_weights=label_weights))
    return windows


def convert_sentences(sentences: Sequence[Sentence], label_list: Optional[Sequence[str]],
                      max_seq_length: int, tokenizer, document_context: bool = True,
                      split_long_sentences: bool = True) -> List[NerWindow]:
    """Every window of ``sentences`` (documents in file order, see ``convert_document``).
    ``label_list``: the IOB2 tags in label-id order (None: unlabelled, labels 0).

    Args:
        sentences: the file's sentences.
        label_list: the tags, or None.
        max_seq_length: S.
        tokenizer: the tokenizer.
        document_context: as ``convert_document``.
        split_long_sentences: as ``convert_document``.

    Returns:
        The ``NerWindow`` s.
    """
    label_map = ({label: i for i, label in enumerate(label_list)}
                 if label_list is not None and sentences and sentences[0].tags is not None
                 else None)
    pieces = WordPieces(tokenizer)
    windows: List[NerWindow] = []
    for indexes in documents(sentences):
        windows.extend(convert_document(sentences, indexes, label_map, max_seq_length, pieces,
                                        document_context, split_long_sentences))
    return windows


def window_to_record(window: NerWindow) -> bytes:
    """A window as a serialized ``tf.train.Example`` (int64 ids/mask/segments/labels, float
    weights; no TensorFlow needed).

    Args:
        window: the ``NerWindow``.

    Returns:
        The record's bytes.
    """
    return tf_example.encode_example({
        cf.INPUT_IDS: window.input_ids,
        cf.INPUT_MASK: window.input_mask,
        cf.SEGMENT_IDS: window.segment_ids,
        cf.LABEL_IDS: window.label_ids,
    }, {LABEL_WEIGHTS: window.label_weights})


def write_tf_records(windows: Sequence[NerWindow], output_file: str) -> int:
    """One record per window, in order; the file appears only when complete.

    Args:
        windows: the windows.
        output_file: the TFRecord file (local or ``gs://``).

    Returns:
        The number of records.
    """
    return cf.write_records(map(window_to_record, windows), len(windows), output_file)


def record_spec(max_seq_length: int) -> tf_example.RecordSpec:
    """What the records above hold, decoded: int ids/mask/segments/labels [S], float weights
    [S] (``data.records.tf_example``).

    Args:
        max_seq_length: S.

    Returns:
        Feature name -> ``data.records.tf_example.FixedLen``.
    """
    return {name: tf_example.FixedLen((max_seq_length,), is_float=name == LABEL_WEIGHTS)
            for name in SEQUENCE_FEATURES}
