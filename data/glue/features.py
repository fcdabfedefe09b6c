"""Classifier examples -> fixed-length features and TFRecords, as the original run_classifier.

``convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer)``:

* ``tokens_a = tokenize(text_a)``; ``tokens_b = tokenize(text_b)`` when ``text_b`` is non-empty;
* a pair (``tokens_b`` non-empty) is cut to ``max_seq_length - 3`` tokens by ``_truncate_seq_pair``
  (pop from the end of the longer list, from b on ties); a single to ``max_seq_length - 2``;
* ``[CLS] a [SEP]`` with segment 0, then ``b [SEP]`` with segment 1; ids, mask (1 = real) and
  segments zero-padded to ``max_seq_length``;
* ``label_id = label_list.index(label)`` (the float label itself for regression, when
  ``label_list`` is empty); a label outside the list raises ``LabelError`` naming the example's
  file and line;
* a ``PaddingInputExample`` gives all-zero features with ``label_id`` 0 and
  ``is_real_example`` False.

TFRecord features (the names are defined once, in ``FEATURE_NAMES``): ``input_ids``,
``input_mask``, ``segment_ids`` int64 [max_seq_length], ``label_ids`` int64 [1] (float [1] for
regression) and ``is_real_example`` int64 [1], written without TensorFlow
(``features_to_record``). ``record_spec`` says what they hold
(``data.records.tf_example.tf_parse_spec``: its ``tf.io`` parse spec).

``_truncate_seq_pair`` is THE pair-truncation rule of the project: other modules import it.
"""

from __future__ import annotations

import os
from typing import Iterable, List, Optional, Sequence, Tuple, Union

from absl import logging

from data.tokenization import special_tokens
from data.glue.processors import ClassifierDataError, InputExample, InputFeatures, PaddingInputExample
from bert_common.errors import InputError
from bert_common.atomic import AtomicTFRecordWriters
from bert_common.progress import Progress
from data.records import tf_example

INPUT_IDS = "input_ids"
INPUT_MASK = "input_mask"
SEGMENT_IDS = "segment_ids"
LABEL_IDS = "label_ids"
IS_REAL_EXAMPLE = "is_real_example"
#: The record layout, in the original's order.
FEATURE_NAMES = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS, LABEL_IDS, IS_REAL_EXAMPLE)
#: The model-input features (what ``modeling.encoder.BertModel`` takes).
MODEL_INPUT_NAMES = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS)
# The input pipelines' (data.glue.dataset's tf.data one, data.glue.numpy_dataset's numpy one):
# an eval/predict batch's record numbers (the pipelines sort by length; results are put back in
# file order by them), and the window of batches sorted together (memory: a window of records,
# e.g. 64 x 32 x 3 x 128 int32 = 3 MB).
EXAMPLE_INDEX = "example_index"
SORT_WINDOW_BATCHES = 64


class LabelError(ClassifierDataError, KeyError):
    """An example's label is not in the label list; names the example's file and line."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0] if self.args else ""


def _truncate_seq_pair(tokens_a: List, tokens_b: List, max_length: int) -> None:
    """Truncates a sequence pair in place to at most ``max_length`` items in total.

    One token at a time from the end of the longer list (from ``tokens_b`` when equally long),
    so the shorter sequence keeps as much as it can.
    """
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_length:
            break
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def pair_tokens(tokens_a: List[str], tokens_b: Optional[List[str]], max_seq_length: int):
    """(tokens, segment_ids) of ``[CLS] a [SEP] (b [SEP])`` after the original's truncation.

    ``tokens_a``/``tokens_b`` are not modified. ``tokens_b`` None or empty means a single text.
    Returns also whether anything was cut, as a third item.

    Args:
        tokens_a: WordPiece tokens of text a.
        tokens_b: those of text b, or None.
        max_seq_length: the length to fit, [CLS]/[SEP] included.

    Returns:
        ``(tokens, segment_ids, truncated)``.
    """
    tokens_a = list(tokens_a)
    tokens_b = list(tokens_b) if tokens_b else None
    before = len(tokens_a) + (len(tokens_b) if tokens_b else 0)
    if tokens_b:
        # Account for [CLS], [SEP], [SEP] with "- 3".
        _truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    elif len(tokens_a) > max_seq_length - 2:
        # Account for [CLS] and [SEP] with "- 2".
        tokens_a = tokens_a[:max_seq_length - 2]
    truncated = len(tokens_a) + (len(tokens_b) if tokens_b else 0) < before
    tokens = [special_tokens.CLS] + tokens_a + [special_tokens.SEP]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += tokens_b + [special_tokens.SEP]
        segment_ids += [1] * (len(tokens_b) + 1)
    return tokens, segment_ids, truncated


def pad_features(input_ids: List[int], segment_ids: List[int],
                 max_seq_length: int) -> Tuple[List[int], List[int], List[int]]:
    """``(input_ids, input_mask, segment_ids)`` of a sequence, zero-padded to ``max_seq_length``
    (the mask: 1 for the real tokens, 0 for the padding); the lists given are not modified.

    Args:
        input_ids: the token ids, at most ``max_seq_length``.
        segment_ids: their segment ids, as many.
        max_seq_length: S.

    Returns:
        ``(input_ids, input_mask, segment_ids)``, each [S].
    """
    padding = [0] * (max_seq_length - len(input_ids))
    return input_ids + padding, [1] * len(input_ids) + padding, segment_ids + padding


def label_to_id(example: InputExample, label_list: Sequence[str]) -> Union[int, float]:
    """The example's class index in ``label_list`` (its float value when the list is empty).

    Args:
        example: the ``InputExample``.
        label_list: the task's labels (empty for regression).

    Returns:
        The int index, or the float label for regression.

    Raises:
        LabelError: a label not in the list, or a regression label that is not a number.
    """
    if not label_list:
        try:
            return float(example.label)
        except (TypeError, ValueError):
            raise LabelError("%s: regression label %r is not a number"
                             % (example.origin or "example %s" % example.guid,
                                example.label)) from None
    try:
        return list(label_list).index(example.label)
    except ValueError:
        raise LabelError("%s: label %r is not in the label list %s"
                         % (example.origin or "example %s" % example.guid, example.label,
                            list(label_list))) from None


def padding_features(max_seq_length: int, regression: bool = False) -> InputFeatures:
    """The all-zero features of a ``PaddingInputExample``.

    Args:
        max_seq_length: S.
        regression: a float label.

    Returns:
        ``InputFeatures`` with ``is_real_example=False``.
    """
    zeros = [0] * max_seq_length
    return InputFeatures(input_ids=list(zeros), input_mask=list(zeros), segment_ids=list(zeros),
                         label_id=0.0 if regression else 0, is_real_example=False)


def convert_single_example(ex_index: int, example, label_list: Sequence[str],
                           max_seq_length: int, tokenizer) -> InputFeatures:
    """Converts one ``InputExample`` (or ``PaddingInputExample``) into ``InputFeatures``.

    Args:
        ex_index: the example's position (the first 5 are logged, as the original).
        example: the example.
        label_list: the task's labels.
        max_seq_length: S; the pair is truncated to fit.
        tokenizer: a ``FullTokenizer`` / ``FastFullTokenizer``.

    Returns:
        The ``InputFeatures``, lists of length S.

    Raises:
        LabelError: as ``label_to_id``.
    """
    if isinstance(example, PaddingInputExample):
        return padding_features(max_seq_length, regression=not label_list)
    features, _, _ = _convert(example, label_list, max_seq_length, tokenizer)
    if ex_index < 5:
        logging.info("*** Example ***")
        logging.info("guid: %s", example.guid)
        logging.info("input_ids: %s", " ".join(str(x) for x in features.input_ids))
        logging.info("input_mask: %s", " ".join(str(x) for x in features.input_mask))
        logging.info("segment_ids: %s", " ".join(str(x) for x in features.segment_ids))
        logging.info("label: %s (id = %s)", example.label, features.label_id)
    return features


def _convert(example: InputExample, label_list: Sequence[str], max_seq_length: int, tokenizer):
    """(features, tokens, truncated) of one real example."""
    if max_seq_length < 3:
        raise InputError("max_seq_length must be at least 3, got %d" % max_seq_length)
    label_id = label_to_id(example, label_list)
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
    tokens, segment_ids, truncated = pair_tokens(tokens_a, tokens_b, max_seq_length)
    input_ids, input_mask, segment_ids = pad_features(tokenizer.convert_tokens_to_ids(tokens),
                                                      segment_ids, max_seq_length)
    features = InputFeatures(input_ids=input_ids, input_mask=input_mask,
                             segment_ids=segment_ids, label_id=label_id, is_real_example=True)
    return features, tokens, truncated


def convert_example_with_tokens(example, label_list: Sequence[str], max_seq_length: int,
                                tokenizer):
    """(features, tokens, truncated) of one example: the tokens before padding and whether
    truncation shortened it (``[]``/False for a ``PaddingInputExample``).

    Args:
        example: the example.
        label_list: the task's labels.
        max_seq_length: S.
        tokenizer: the tokenizer.

    Returns:
        ``(features, tokens, truncated)``: the ``InputFeatures``, the unpadded tokens and
        whether truncation shortened the example.
    """
    if isinstance(example, PaddingInputExample):
        return padding_features(max_seq_length, regression=not label_list), [], False
    return _convert(example, label_list, max_seq_length, tokenizer)


def convert_examples_to_features(examples: Iterable, label_list: Sequence[str],
                                 max_seq_length: int, tokenizer) -> List[InputFeatures]:
    """``convert_single_example`` over a list of examples.

    Args:
        examples: the examples.
        label_list: the task's labels.
        max_seq_length: S.
        tokenizer: the tokenizer.

    Returns:
        One ``InputFeatures`` per example, in order.
    """
    return [convert_single_example(i, ex, label_list, max_seq_length, tokenizer)
            for i, ex in enumerate(examples)]


def features_to_record(features: InputFeatures) -> bytes:
    """``InputFeatures`` -> a serialized ``tf.train.Example`` with the ``FEATURE_NAMES``
    features (``data.records.tf_example.encode_example``: no TensorFlow needed).

    Args:
        features: the ``InputFeatures``.

    Returns:
        The record's bytes (int64 lists; ``label_ids`` float for regression).
    """
    ints = {INPUT_IDS: features.input_ids, INPUT_MASK: features.input_mask,
            SEGMENT_IDS: features.segment_ids,
            IS_REAL_EXAMPLE: [int(features.is_real_example)]}
    label = {LABEL_IDS: [features.label_id]}
    if isinstance(features.label_id, float):  # regression
        return tf_example.encode_example(ints, label)
    return tf_example.encode_example({**ints, **label})


def file_based_convert_examples_to_features(examples: Sequence, label_list: Sequence[str],
                                            max_seq_length: int, tokenizer,
                                            output_file: str) -> int:
    """Converts ``examples`` to a TFRecord file, one record per example in order.

    The file appears only when every example converted (written to a temporary name, then
    renamed). Progress (examples, rate, ETA) goes to the log every 10000 examples and at the
    end. Returns the number of records.

    Args:
        examples: the examples, in the order to write.
        label_list: the task's labels.
        max_seq_length: S.
        tokenizer: the tokenizer.
        output_file: the TFRecord file (local or ``gs://``).

    Returns:
        The number of records written.
    """
    records = (features_to_record(convert_single_example(ex_index, example, label_list,
                                                         max_seq_length, tokenizer))
               for ex_index, example in enumerate(examples))
    return write_records(records, len(examples), output_file)


def write_records(records: Iterable[bytes], total: int, output_file: str) -> int:
    """Writes ``records`` to the TFRecord file ``output_file`` with ``writing_progress``: the
    file appears only when every record was written (``AtomicTFRecordWriters``).

    Args:
        records: the serialized records, in order (made as they are written).
        total: their number (for the progress).
        output_file: the TFRecord file (local or ``gs://``).

    Returns:
        The number of records written.
    """
    progress = writing_progress(output_file, total)
    with AtomicTFRecordWriters([output_file]) as writer:
        for i, record in enumerate(records):
            writer.write(record)
            progress.update(i + 1)
        progress.finish()
        return writer.num_written


def writing_progress(output_file: str, total: int) -> Progress:
    """The log progress of writing ``total`` examples to ``output_file``: a line every 10000
    examples (log lines should not depend on the machine's speed) and one at the end.

    Args:
        output_file: the file written (named in the log).
        total: the number of examples.

    Returns:
        A ``bert_common.progress.Progress``.
    """
    return Progress("writing %s" % os.path.basename(output_file), total, unit="examples",
                    every_n=10000, log=True)


def record_spec(max_seq_length: int, regression: bool = False) -> tf_example.RecordSpec:
    """What the records written above hold, decoded: ids/mask/segments [S], ``label_ids`` and
    ``is_real_example`` scalars (``data.records.tf_example``: read with or without TensorFlow).

    Args:
        max_seq_length: S.
        regression: ``label_ids`` is a float.

    Returns:
        Feature name -> ``data.records.tf_example.FixedLen``.
    """
    return {
        INPUT_IDS: tf_example.FixedLen((max_seq_length,)),
        INPUT_MASK: tf_example.FixedLen((max_seq_length,)),
        SEGMENT_IDS: tf_example.FixedLen((max_seq_length,)),
        LABEL_IDS: tf_example.FixedLen((), is_float=regression),
        IS_REAL_EXAMPLE: tf_example.FixedLen(()),
    }
