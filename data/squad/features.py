"""SQuAD v1.1 / v2.0 examples and features, as Google's ``run_squad.py`` builds them.

Public names are the original's:

* ``SquadExample`` / ``read_squad_examples``: one example per question;
  ``doc_tokens`` are the paragraph split on ' ', '\\t', '\\r', '\\n' and
  U+202F only; in training mode the answer's character offsets are mapped to
  word indexes (``start_position``/``end_position``); questions whose answer
  text cannot be found in those words are skipped with a warning. In eval mode
  positions stay ``None`` and ``is_impossible`` is False even for v2.0
  questions without an answer (the original reads answers only in training).
* ``InputFeatures`` / ``convert_examples_to_features``: one feature per
  sliding window of the WordPiece-tokenized paragraph; ``[CLS] query [SEP]
  window [SEP]``, zero-padded to ``max_seq_length``.
* ``FeatureWriter``: the features as TFRecords (layout in ``data/squad/schema.py``).
* ``RawResult`` / ``write_predictions`` / ``get_final_text``: in
  ``data/squad/postprocess.py`` (``from data import squad`` has them all).

Bad input raises ``SquadFormatError`` (a ``ValueError``) whose one-line
message names the file and the question or article.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging

from bert_common import atomic, files
from data.tokenization import special_tokens
from bert_common.errors import InputError
from bert_common.progress import Progress
from data.glue import features as cf
from data.records import tf_example
from data.squad import schema as squad_schema
from data.tokenization.wordpiece import whitespace_tokenize

FIRST_UNIQUE_ID = 1000000000

# The only characters run_squad treats as whitespace when building doc_tokens.
_DOC_WHITESPACE = frozenset(" \t\r\n\u202f")


class SquadFormatError(InputError):
    """A SQuAD JSON file that cannot be read; the message names the file and the place."""


# --------------------------------------------------------------------------
# Examples.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class SquadExample:
    """One question on one paragraph.

    ``doc_tokens`` is the paragraph split on the SQuAD whitespace set;
    ``start_position``/``end_position`` are inclusive word indexes into it
    (training mode; -1/-1 for an impossible question; None in eval mode).

    Args:
        qas_id: the question's id.
        question_text: the question.
        doc_tokens: the paragraph's words.
        orig_answer_text: the answer text (training), or None.
        start_position: the answer's first word index, or None.
        end_position: the answer's last word index (inclusive), or None.
        is_impossible: the question has no answer (SQuAD 2.0).
    """

    qas_id: str
    question_text: str
    doc_tokens: List[str]
    orig_answer_text: Optional[str] = None
    start_position: Optional[int] = None
    end_position: Optional[int] = None
    is_impossible: bool = False

    def __repr__(self) -> str:
        s = "qas_id: %s, question_text: %s, doc_tokens: [%s]" % (
            self.qas_id, self.question_text, " ".join(self.doc_tokens))
        if self.start_position:
            s += ", start_position: %d, end_position: %d, is_impossible: %r" % (
                self.start_position, self.end_position, self.is_impossible)
        return s

    __str__ = __repr__


def split_doc_tokens(paragraph_text: str):
    """Splits a context into words on the SQuAD whitespace set.

    Returns ``(doc_tokens, char_to_word_offset)`` where
    ``char_to_word_offset[i]`` is the index of the word holding character
    ``i`` (for a whitespace character: the word before it, -1 before the first).

    Args:
        paragraph_text: the context.

    Returns:
        ``(doc_tokens, char_to_word_offset)`` as above.
    """
    doc_tokens: List[str] = []
    char_to_word_offset: List[int] = []
    prev_is_whitespace = True
    for c in paragraph_text:
        if c in _DOC_WHITESPACE:
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                doc_tokens.append(c)
            else:
                doc_tokens[-1] += c
            prev_is_whitespace = False
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


def _load_squad_data(input_file: str) -> list:
    """The ``data`` list of a SQuAD JSON file, or a one-line SquadFormatError."""
    text = files.read_utf8(input_file, SquadFormatError, strip_bom=False, require_text=True)
    try:
        root = json.loads(text)
    except json.JSONDecodeError as e:
        raise SquadFormatError("%s:%d: not valid JSON (%s)"
                               % (input_file, e.lineno, e.msg)) from None
    if not isinstance(root, dict) or "data" not in root:
        raise SquadFormatError("%s: not a SQuAD file: no top-level 'data' list" % input_file)
    if not isinstance(root["data"], list):
        raise SquadFormatError("%s: 'data' is not a list" % input_file)
    return root["data"]


def _require(obj, key: str, kind, input_file: str, where: str):
    """``obj[key]`` checked to be a ``kind``; a SquadFormatError naming ``where`` otherwise."""
    if not isinstance(obj, dict) or key not in obj:
        raise SquadFormatError("%s: %s has no '%s'" % (input_file, where, key))
    value = obj[key]
    if not isinstance(value, kind):
        raise SquadFormatError("%s: %s: '%s' is a %s, expected %s" % (
            input_file, where, key, type(value).__name__,
            kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)))
    return value


def _check_answer_offsets(answer: dict, context_len: int, input_file: str, where: str,
                          need_end: bool):
    """Validates one answer's ``answer_start`` (and its end) against the context."""
    text = _require(answer, "text", str, input_file, where)
    start = _require(answer, "answer_start", int, input_file, where)
    if isinstance(start, bool) or start < 0 or start >= context_len:
        raise SquadFormatError("%s: %s: answer_start %r falls outside its context (%d characters)"
                               % (input_file, where, start, context_len))
    if need_end and (not text or start + len(text) > context_len):
        raise SquadFormatError("%s: %s: answer %r at %d runs past the end of its context (%d characters)"
                               % (input_file, where, text, start, context_len))
    return text, start


def read_squad_examples(input_file: str, is_training: bool,
                        version_2_with_negative: bool = False) -> List[SquadExample]:
    """Reads a SQuAD JSON file (official layout) into ``SquadExample``s, in file order.

    Training mode requires exactly one answer per answerable question and
    drops (with a warning) questions whose answer text is not found in the
    words at its offsets. With ``version_2_with_negative`` the ``is_impossible``
    flag is read in training mode (missing means False); impossible questions
    get positions -1/-1 and answer text "".

    Args:
        input_file: the SQuAD JSON file (local or ``gs://``).
        is_training: read answers and positions.
        version_2_with_negative: SQuAD 2.0 (``is_impossible``).

    Returns:
        The examples.

    Raises:
        SquadFormatError: a file that is not SQuAD JSON, or a bad answer (file and place named).
    """
    input_data = _load_squad_data(input_file)
    examples: List[SquadExample] = []
    for a_i, entry in enumerate(input_data):
        art = "article %d" % a_i
        for p_i, paragraph in enumerate(_require(entry, "paragraphs", list, input_file, art)):
            par = "%s paragraph %d" % (art, p_i)
            paragraph_text = _require(paragraph, "context", str, input_file, par)
            doc_tokens, char_to_word_offset = split_doc_tokens(paragraph_text)
            for q_i, qa in enumerate(_require(paragraph, "qas", list, input_file, par)):
                where = "%s question %d" % (par, q_i)
                qas_id = _require(qa, "id", (str, int), input_file, where)
                where = "question %r (%s)" % (qas_id, where)
                question_text = _require(qa, "question", str, input_file, where)
                answers = qa.get("answers", []) if isinstance(qa, dict) else []
                if not isinstance(answers, list):
                    raise SquadFormatError("%s: %s: 'answers' is not a list" % (input_file, where))
                for answer in answers:
                    _check_answer_offsets(answer, len(paragraph_text), input_file, where,
                                          need_end=is_training)
                start_position = None
                end_position = None
                orig_answer_text = None
                is_impossible = False
                if is_training:
                    if version_2_with_negative:
                        is_impossible = bool(qa.get("is_impossible", False))
                    if len(answers) != 1 and not is_impossible:
                        raise SquadFormatError(
                            "%s: %s: for training, each question should have exactly 1 answer "
                            "(it has %d)" % (input_file, where, len(answers)))
                    if not is_impossible:
                        orig_answer_text = answers[0]["text"]
                        answer_offset = answers[0]["answer_start"]
                        start_position = char_to_word_offset[answer_offset]
                        end_position = char_to_word_offset[answer_offset + len(orig_answer_text) - 1]
                        # Keep only answers whose text is recoverable from the words
                        # (odd Unicode can defeat this): the original skips the rest.
                        actual_text = " ".join(doc_tokens[start_position:end_position + 1])
                        cleaned_answer_text = " ".join(whitespace_tokenize(orig_answer_text))
                        if actual_text.find(cleaned_answer_text) == -1:
                            logging.warning("Could not find answer: '%s' vs. '%s'",
                                            actual_text, cleaned_answer_text)
                            continue
                    else:
                        start_position = -1
                        end_position = -1
                        orig_answer_text = ""
                examples.append(SquadExample(
                    qas_id=qas_id,
                    question_text=question_text,
                    doc_tokens=doc_tokens,
                    orig_answer_text=orig_answer_text,
                    start_position=start_position,
                    end_position=end_position,
                    is_impossible=is_impossible))
    return examples


# --------------------------------------------------------------------------
# Features.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class InputFeatures:
    """One window of one example, ready for the model.

    ``tokens``/``input_ids``/``input_mask``/``segment_ids`` have the layout of
    ``data/squad/schema.py`` (the three id lists padded to max_seq_length,
    ``tokens`` unpadded); ``token_to_orig_map`` and ``token_is_max_context``
    are keyed by sequence position (window tokens only) and give the
    ``doc_tokens`` word index and whether this window is the token's
    max-context window. ``start_position``/``end_position`` are sequence
    positions in training mode (0/0 out of span or impossible), None in eval.

    Args:
        unique_id: the window's id (the records' ``unique_ids``).
        example_index: the index of its example.
        doc_span_index: the window's index within its example.
        tokens: the window's tokens, unpadded.
        token_to_orig_map: sequence position -> ``doc_tokens`` word index.
        token_is_max_context: sequence position -> whether this is its max-context window.
        input_ids: [max_seq_length] token ids.
        input_mask: [max_seq_length], 1 on real tokens.
        segment_ids: [max_seq_length], 0 for the question, 1 for the paragraph.
        start_position: the answer's start position (training), or None.
        end_position: the answer's end position (training), or None.
        is_impossible: the question has no answer (training), or None.
    """

    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: List[str]
    token_to_orig_map: Dict[int, int]
    token_is_max_context: Dict[int, bool]
    input_ids: List[int]
    input_mask: List[int]
    segment_ids: List[int]
    start_position: Optional[int] = None
    end_position: Optional[int] = None
    is_impossible: Optional[bool] = None


DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def _doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> List[DocSpan]:
    """Sliding windows of at most ``max_tokens_for_doc`` tokens.

    Each window starts ``min(length, doc_stride)`` after the previous one; the
    last one ends at the last token. No tokens, no windows.
    """
    doc_spans = []
    start_offset = 0
    while start_offset < num_tokens:
        length = min(num_tokens - start_offset, max_tokens_for_doc)
        doc_spans.append(DocSpan(start=start_offset, length=length))
        if start_offset + length == num_tokens:
            break
        start_offset += min(length, doc_stride)
    return doc_spans


def _improve_answer_span(doc_tokens: Sequence[str], input_start: int, input_end: int,
                         tokenizer, orig_answer_text: str):
    """Narrows a word-level answer span to the sub-tokens that spell the answer.

    The annotation is by characters, projected onto whole words (e.g. the
    answer "1895" inside the word "(1895-1943)."); after WordPiece the answer
    may be a shorter token run. Returns the first (leftmost start, then longest)
    ``(start, end)`` inside the input span whose tokens joined by spaces equal
    the tokenized answer, else the input span unchanged.
    """
    tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
    for new_start in range(input_start, input_end + 1):
        for new_end in range(input_end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start:new_end + 1]) == tok_answer_text:
                return new_start, new_end
    return input_start, input_end


def _max_context_score(doc_span: DocSpan, position: int) -> Optional[float]:
    """The max-context score of ``position`` in ``doc_span``; None when outside it.

    min(left context, right context) + 0.01 * window length: the window that
    sees the token with the most context on its poorer side wins, longer
    windows breaking ties.
    """
    end = doc_span.start + doc_span.length - 1
    if position < doc_span.start or position > end:
        return None
    return min(position - doc_span.start, end - position) + 0.01 * doc_span.length


def _check_is_max_context(doc_spans: Sequence[DocSpan], cur_span_index: int, position: int) -> bool:
    """Whether window ``cur_span_index`` is the max-context window of token ``position``.

    The best window is the first one with the strictly highest
    ``_max_context_score``.
    """
    best_score = None
    best_span_index = None
    for span_index, doc_span in enumerate(doc_spans):
        score = _max_context_score(doc_span, position)
        if score is None:
            continue
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return cur_span_index == best_span_index


def _max_context_windows(doc_spans: Sequence[DocSpan], num_tokens: int) -> List[int]:
    """For every doc token, the index of its max-context window (``_check_is_max_context``'s rule).

    Windows are visited in order, so only those overlapping a token are
    scored: linear in tokens x overlapping windows rather than all windows.
    """
    if len(doc_spans) == 1:  # one window holds every token
        return [0] * num_tokens
    best = [-1] * num_tokens
    best_score: List[Optional[float]] = [None] * num_tokens
    for span_index, doc_span in enumerate(doc_spans):
        for position in range(doc_span.start, doc_span.start + doc_span.length):
            score = _max_context_score(doc_span, position)
            if best_score[position] is None or score > best_score[position]:
                best_score[position] = score
                best[position] = span_index
    return best


_DocTokenization = collections.namedtuple(
    "_DocTokenization", ["words", "tokens", "ids", "tok_to_orig_index", "orig_to_tok_index"])


def _tokenize_doc(doc_tokens: List[str], tokenizer) -> _DocTokenization:
    """WordPiece tokens of a paragraph, each word tokenized on its own, with the index maps.

    ``tok_to_orig_index[t]``: word of token t; ``orig_to_tok_index[w]``: first
    token of word w (the next word's first token when w has no tokens).
    """
    tok_to_orig_index: List[int] = []
    orig_to_tok_index: List[int] = []
    all_doc_tokens: List[str] = []
    for i, token in enumerate(doc_tokens):
        orig_to_tok_index.append(len(all_doc_tokens))
        sub_tokens = tokenizer.tokenize(token)
        tok_to_orig_index.extend([i] * len(sub_tokens))
        all_doc_tokens.extend(sub_tokens)
    return _DocTokenization(list(doc_tokens), all_doc_tokens,
                            tokenizer.convert_tokens_to_ids(all_doc_tokens),
                            tok_to_orig_index, orig_to_tok_index)


def check_lengths(max_seq_length: int, max_query_length: int, doc_stride: int) -> None:
    """Raises ``InputError`` (a ValueError) unless the window lengths leave room for the
    document.

    Args:
        max_seq_length: S.
        max_query_length: the query's token budget.
        doc_stride: the step between windows.

    Raises:
        InputError: ``max_seq_length`` too short for the query, or ``doc_stride`` not positive.
    """
    if max_seq_length <= max_query_length + 3:
        raise InputError("The max_seq_length (%d) must be greater than max_query_length (%d) + 3"
                         % (max_seq_length, max_query_length))
    if doc_stride <= 0:
        raise InputError("doc_stride (%d) must be positive" % doc_stride)


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer, max_seq_length: int,
                                 doc_stride: int, max_query_length: int, is_training: bool,
                                 output_fn: Callable[[InputFeatures], None],
                                 show_progress: bool = False) -> int:
    """Turns examples into windowed ``InputFeatures``, passing each to ``output_fn``.

    ``tokenizer``: a ``FullTokenizer`` or ``FastFullTokenizer`` (``tokenize``
    and ``convert_tokens_to_ids``). The query is truncated to
    ``max_query_length`` tokens; each doc word is tokenized on its own; the
    windows hold ``max_seq_length - len(query) - 3`` tokens and advance by
    ``min(length, doc_stride)``. Unique ids run from 1000000000 in output
    order. Returns the number of features produced.

    Args:
        examples: the examples.
        tokenizer: the tokenizer.
        max_seq_length: S.
        doc_stride: the step between windows.
        max_query_length: the query's token budget.
        is_training: set window start/end positions.
        output_fn: called with each ``InputFeatures``, in order.
        show_progress: log the progress (examples, rate, ETA).

    Returns:
        The number of features produced.
    """
    check_lengths(max_seq_length, max_query_length, doc_stride)
    cls_id, sep_id = tokenizer.convert_tokens_to_ids([special_tokens.CLS, special_tokens.SEP])
    unique_id = FIRST_UNIQUE_ID
    progress = Progress("convert_examples_to_features", len(examples), unit="examples",
                        every_s=5.0, enabled=show_progress)

    doc = None  # tokenization of the current paragraph, shared by its questions
    windows: Dict[int, tuple] = {}  # max_tokens_for_doc -> (doc_spans, max-context window per token)
    for example_index, example in enumerate(examples):
        query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
        query_ids = tokenizer.convert_tokens_to_ids(query_tokens)

        # Consecutive questions on one paragraph share its tokenization.
        if doc is None or example.doc_tokens != doc.words:
            doc = _tokenize_doc(example.doc_tokens, tokenizer)
            windows = {}
        all_doc_tokens = doc.tokens
        all_doc_ids = doc.ids
        tok_to_orig_index = doc.tok_to_orig_index
        orig_to_tok_index = doc.orig_to_tok_index

        tok_start_position = None
        tok_end_position = None
        if is_training and example.is_impossible:
            tok_start_position = -1
            tok_end_position = -1
        if is_training and not example.is_impossible:
            tok_start_position = orig_to_tok_index[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
            else:
                tok_end_position = len(all_doc_tokens) - 1
            tok_start_position, tok_end_position = _improve_answer_span(
                all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
                example.orig_answer_text)

        # Room for the document after [CLS] query [SEP] ... [SEP].
        max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
        if max_tokens_for_doc not in windows:
            spans = _doc_spans(len(all_doc_tokens), max_tokens_for_doc, doc_stride)
            windows[max_tokens_for_doc] = (spans, _max_context_windows(spans, len(all_doc_tokens)))
        doc_spans, max_context_window = windows[max_tokens_for_doc]
        doc_offset = len(query_tokens) + 2  # position of the first window token

        for doc_span_index, doc_span in enumerate(doc_spans):
            span_end = doc_span.start + doc_span.length  # exclusive
            tokens = ([special_tokens.CLS] + query_tokens + [special_tokens.SEP]
                      + all_doc_tokens[doc_span.start:span_end] + [special_tokens.SEP])
            input_ids = [cls_id] + query_ids + [sep_id] + all_doc_ids[doc_span.start:span_end] + [sep_id]
            segment_ids = [0] * doc_offset + [1] * (doc_span.length + 1)
            positions = range(doc_offset, doc_offset + doc_span.length)
            token_to_orig_map = dict(zip(positions, tok_to_orig_index[doc_span.start:span_end]))
            token_is_max_context = dict(zip(positions, [
                w == doc_span_index for w in max_context_window[doc_span.start:span_end]]))

            input_ids, input_mask, segment_ids = cf.pad_features(input_ids, segment_ids,
                                                                 max_seq_length)  # [S] each

            start_position = None
            end_position = None
            if is_training and not example.is_impossible:
                # A window that does not hold the whole answer predicts [CLS].
                if tok_start_position >= doc_span.start and tok_end_position < span_end:
                    start_position = tok_start_position - doc_span.start + doc_offset
                    end_position = tok_end_position - doc_span.start + doc_offset
                else:
                    start_position = 0
                    end_position = 0
            if is_training and example.is_impossible:
                start_position = 0
                end_position = 0

            output_fn(InputFeatures(
                unique_id=unique_id,
                example_index=example_index,
                doc_span_index=doc_span_index,
                tokens=tokens,
                token_to_orig_map=token_to_orig_map,
                token_is_max_context=token_is_max_context,
                input_ids=input_ids,
                input_mask=input_mask,
                segment_ids=segment_ids,
                start_position=start_position,
                end_position=end_position,
                is_impossible=example.is_impossible))
            unique_id += 1
        progress.update(example_index + 1)
    progress.finish()  # the final line, also for zero examples
    return unique_id - FIRST_UNIQUE_ID


# --------------------------------------------------------------------------
# TFRecords.
# --------------------------------------------------------------------------


class FeatureWriter(atomic.AtomicWriter):
    """Writes ``InputFeatures`` as ``tf.train.Example`` records (``data/squad/schema.py``).

    The file appears under ``filename`` only when ``close()`` succeeds (via
    ``atomic.AtomicTFRecordWriters``); use as a context manager to have it
    removed on an exception.

    Args:
        filename: the TFRecord file (local or ``gs://``).
        is_training: write positions (training) or ``unique_ids`` only.
    """

    def __init__(self, filename: str, is_training: bool):
        self.filename = filename
        self.is_training = is_training
        self.num_features = 0
        self._writer = atomic.AtomicTFRecordWriters([filename])

    def process_feature(self, feature: InputFeatures) -> None:
        """Serializes and writes one feature.

        Args:
            feature: the window's ``InputFeatures``.
        """
        self.num_features += 1
        features = {
            squad_schema.UNIQUE_IDS: [feature.unique_id],
            squad_schema.INPUT_IDS: feature.input_ids,
            squad_schema.INPUT_MASK: feature.input_mask,
            squad_schema.SEGMENT_IDS: feature.segment_ids,
        }
        if self.is_training:
            features[squad_schema.START_POSITIONS] = [feature.start_position]
            features[squad_schema.END_POSITIONS] = [feature.end_position]
            features[squad_schema.IS_IMPOSSIBLE] = [1 if feature.is_impossible else 0]
        self._writer.write(tf_example.encode_example(features))

    def close(self) -> None:
        """Finishes the file (renames it into place)."""
        self._writer.close()

    def abort(self) -> None:
        """Removes the partial file."""
        self._writer.abort()
