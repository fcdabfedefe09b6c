"""SWAG (multiple choice, 4 endings): files -> ``SwagExample`` -> [4, S] features and TFRecords.

Readers (the layout is chosen by the file name: ``.jsonl``/``.json`` lines, else CSV):

* the original swagaf CSV (``train.csv``/``val.csv``/``test.csv``): header
  ``,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0..ending3,label`` with an empty
  first column name and quoted fields holding commas (``csv`` with its default quoting).
  ``test.csv`` has no ``label`` column: labels are None there.
* JSON lines with the keys ``sent1``, ``sent2``, ``ending0``..``ending3`` and ``label`` (optional).

Features, as the BERT paper §4.4 recipe (and the pytorch-pretrained-BERT ``run_swag`` example):
for each of the 4 endings, ``[CLS] context [SEP] ending [SEP]`` where context = ``sent1`` and
ending = ``sent2 + " " + endingN``; the pair is cut to ``max_seq_length - 3`` tokens by
``data.glue.features._truncate_seq_pair`` (one rule for the project); segments 0 for
``[CLS] context [SEP]``, 1 for ``ending [SEP]``; zero-padded. ``label`` is the right ending's
index (0 when unknown, as a dummy).

TFRecord features reuse the classifier's names (``data.glue.features``): ``input_ids``,
``input_mask``, ``segment_ids`` int64 [4 * S] (choice-major), ``label_ids`` int64 [1],
``is_real_example`` int64 [1]; read with ``record_spec`` they are [4, S].
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Dict, List, Optional

from bert_common import files
from data.glue import features as cf
from data.glue.processors import ClassifierDataError
from data.records import tf_example

NUM_CHOICES = 4
ENDING_KEYS = tuple("ending%d" % i for i in range(NUM_CHOICES))
REQUIRED_KEYS = ("sent1", "sent2") + ENDING_KEYS


class SwagDataError(ClassifierDataError):
    """Unusable SWAG input; the one-line message names the file and line."""


@dataclasses.dataclass
class SwagExample:
    """One SWAG question: ``context_sentence`` (sent1), ``start_ending`` (sent2), the 4
    ``endings`` and ``label`` (index of the right ending; None when unlabelled).

    Args:
        swag_id: the example's id (``swag-<n>``).
        context_sentence: sent1.
        start_ending: sent2, the start shared by every ending.
        endings: the 4 candidate endings.
        label: the right ending's index, or None.
        origin: ``path:line`` of the example, for messages.
    """

    swag_id: str
    context_sentence: str
    start_ending: str
    endings: List[str]
    label: Optional[int] = None
    origin: Optional[str] = None


@dataclasses.dataclass
class SwagFeatures:
    """int lists [NUM_CHOICES][max_seq_length] and the label (0 when unknown).

    Args:
        example_id: the example's ``swag_id``.
        input_ids: [4][max_seq_length] token ids.
        input_mask: [4][max_seq_length], 1 on real tokens.
        segment_ids: [4][max_seq_length] segment ids.
        label: the right ending's index (0 when unknown).
        is_real_example: False for padding examples.
    """

    example_id: str
    input_ids: List[List[int]]
    input_mask: List[List[int]]
    segment_ids: List[List[int]]
    label: int
    is_real_example: bool = True


def _parse_label(value, origin: str) -> Optional[int]:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    try:
        label = int(value)
    except (TypeError, ValueError):
        raise SwagDataError("%s: label %r is not an integer" % (origin, value)) from None
    if not 0 <= label < NUM_CHOICES:
        raise SwagDataError("%s: label %d is outside 0..%d" % (origin, label, NUM_CHOICES - 1))
    return label


def _example(record: Dict, swag_id: str, origin: str) -> SwagExample:
    missing = [k for k in REQUIRED_KEYS if record.get(k) is None]
    if missing:
        raise SwagDataError("%s: missing field%s %s" % (origin, "s" if len(missing) > 1 else "",
                                                        ", ".join(missing)))
    return SwagExample(swag_id=swag_id, context_sentence=str(record["sent1"]),
                       start_ending=str(record["sent2"]),
                       endings=[str(record[k]) for k in ENDING_KEYS],
                       label=_parse_label(record.get("label"), origin), origin=origin)


def read_swag_csv(path: str) -> List[SwagExample]:
    """The original swagaf CSV layout (see the module docstring).

    Args:
        path: the CSV file (local or URL).

    Returns:
        The examples, in file order.

    Raises:
        SwagDataError: an unreadable file, header, row or field, naming the file and line.
    """
    text = files.read_utf8(path, SwagDataError, require_text=True)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except csv.Error as e:
        raise SwagDataError("%s:1: not a readable CSV (%s)" % (path, e)) from None
    missing = [k for k in REQUIRED_KEYS if k not in header]
    if missing:
        raise SwagDataError("%s:1: header lacks the column%s %s" % (
            path, "s" if len(missing) > 1 else "", ", ".join(missing)))
    examples = []
    try:
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            origin = "%s:%d" % (path, line)
            if len(row) != len(header):
                raise SwagDataError("%s: %d columns, the header has %d"
                                    % (origin, len(row), len(header)))
            record = dict(zip(header, row))
            swag_id = record.get("") or record.get("video-id") or str(len(examples))
            examples.append(_example(record, "swag-%s" % swag_id, origin))
    except csv.Error as e:
        raise SwagDataError("%s:%d: not a readable CSV (%s)" % (path, reader.line_num, e)) \
            from None
    return examples


def read_swag_jsonl(path: str) -> List[SwagExample]:
    """JSON lines (keys ``sent1``, ``sent2``, ``ending0..3``, optional ``label``).

    Args:
        path: the JSON-lines file (local or URL).

    Returns:
        The examples, in file order.

    Raises:
        SwagDataError: an unreadable file, line or field, naming the file and line.
    """
    examples = []
    text = files.read_utf8(path, SwagDataError, require_text=True)
    for line_index, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        origin = "%s:%d" % (path, line_index + 1)
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise SwagDataError("%s: not valid JSON (%s)" % (origin, e.msg)) from None
        if not isinstance(record, dict):
            raise SwagDataError("%s: expected a JSON object" % origin)
        examples.append(_example(record, "swag-%d" % len(examples), origin))
    return examples


def read_swag_examples(path: str) -> List[SwagExample]:
    """Reads either layout (``.jsonl``/``.json`` -> JSON lines, else CSV); errors if empty.

    Args:
        path: a ``.jsonl``/``.json`` or CSV file.

    Returns:
        The examples, in file order.

    Raises:
        SwagDataError: the file cannot be read or holds no example.
    """
    if path.endswith((".jsonl", ".json")):
        examples = read_swag_jsonl(path)
    else:
        examples = read_swag_csv(path)
    if not examples:
        raise SwagDataError("%s: no examples" % path)
    return examples


def convert_example(example: SwagExample, max_seq_length: int, tokenizer) -> SwagFeatures:
    """One example -> ``SwagFeatures`` (see the module docstring for the layout).

    Args:
        example: the example.
        max_seq_length: S, per choice.
        tokenizer: a ``FullTokenizer`` / ``FastFullTokenizer``.

    Returns:
        Its ``SwagFeatures``.
    """
    context_tokens = tokenizer.tokenize(example.context_sentence)
    input_ids, input_mask, segment_ids = [], [], []
    for ending in example.endings:
        ending_tokens = tokenizer.tokenize(example.start_ending + " " + ending)
        tokens, segments, _ = cf.pair_tokens(context_tokens, ending_tokens, max_seq_length)
        ids, mask, segments = cf.pad_features(tokenizer.convert_tokens_to_ids(tokens), segments,
                                              max_seq_length)
        input_ids.append(ids)
        input_mask.append(mask)
        segment_ids.append(segments)
    return SwagFeatures(example.swag_id, input_ids, input_mask, segment_ids,
                        example.label if example.label is not None else 0)


def features_to_record(features: SwagFeatures) -> bytes:
    """A serialized ``tf.train.Example`` of ``features`` (ids flattened to [4 * S]; no
    TensorFlow needed).

    Args:
        features: one example's features.

    Returns:
        The record's bytes.
    """
    def flat(rows):
        return [v for row in rows for v in row]

    return tf_example.encode_example({
        cf.INPUT_IDS: flat(features.input_ids),
        cf.INPUT_MASK: flat(features.input_mask),
        cf.SEGMENT_IDS: flat(features.segment_ids),
        cf.LABEL_IDS: [features.label],
        cf.IS_REAL_EXAMPLE: [int(features.is_real_example)],
    })


def write_tf_records(examples: List[SwagExample], max_seq_length: int, tokenizer,
                     output_file: str) -> int:
    """One record per example, in order; the file appears only when all converted. Progress
    goes to the log as for the classifier's records.

    Args:
        examples: the examples.
        max_seq_length: S, per choice.
        tokenizer: a ``FullTokenizer`` / ``FastFullTokenizer``.
        output_file: the TFRecord file.

    Returns:
        The number of records written.
    """
    records = (features_to_record(convert_example(example, max_seq_length, tokenizer))
               for example in examples)
    return cf.write_records(records, len(examples), output_file)


def record_spec(max_seq_length: int) -> tf_example.RecordSpec:
    """What the records above hold, decoded: ids/mask/segments [4, S] (stored flat, [4 * S]),
    ``label_ids`` and ``is_real_example`` scalars (``data.records.tf_example``).

    Args:
        max_seq_length: S, per choice.

    Returns:
        Feature name -> ``data.records.tf_example.FixedLen``.
    """
    spec = {name: tf_example.FixedLen((NUM_CHOICES, max_seq_length))
            for name in cf.MODEL_INPUT_NAMES}
    spec[cf.LABEL_IDS] = tf_example.FixedLen(())
    spec[cf.IS_REAL_EXAMPLE] = tf_example.FixedLen(())
    return spec
