"""The SQuAD TFRecord layout: feature names and how to parse them, defined once.

Every record written by ``data.squad.features.FeatureWriter`` is a ``tf.train.Example``
of int64 lists:

* ``unique_ids``  [1]  the feature's unique id (from 1000000000);
* ``input_ids``   [S]  WordPiece ids of ``[CLS] query [SEP] doc-window [SEP]``, 0-padded;
* ``input_mask``  [S]  1 for real tokens, 0 for padding;
* ``segment_ids`` [S]  0 for ``[CLS]``/query/first ``[SEP]`` and padding, 1 for the window and last ``[SEP]``;

and, in training mode only:

* ``start_positions`` / ``end_positions`` [1]  answer token positions in the
  sequence (0/0 when the answer is outside the window or the question is
  impossible);
* ``is_impossible`` [1]  1 for a v2.0 question without an answer.

The original's input pipeline reads the first four (plus the two positions in
training) and casts every int64 to int32; ``is_impossible`` is written but not
read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (annotations only: TensorFlow is imported where it is used)
    from data.records import tf_example

UNIQUE_IDS = "unique_ids"
INPUT_IDS = "input_ids"
INPUT_MASK = "input_mask"
SEGMENT_IDS = "segment_ids"
START_POSITIONS = "start_positions"
END_POSITIONS = "end_positions"
IS_IMPOSSIBLE = "is_impossible"

# The sequence-valued features, in the order the original writes them.
SEQUENCE_FEATURES = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS)
# Written in every mode / only in training mode.
EVAL_FEATURES = (UNIQUE_IDS,) + SEQUENCE_FEATURES
TRAIN_ONLY_FEATURES = (START_POSITIONS, END_POSITIONS, IS_IMPOSSIBLE)


def record_spec(seq_length: int, is_training: bool,
                with_is_impossible: bool = False) -> "tf_example.RecordSpec":
    """What a SQuAD record holds, decoded (``data.records.tf_example``: read with or without
    TensorFlow): ``unique_ids`` [], the sequence features [S]; training adds the two positions []
    (and ``is_impossible`` if asked), as the original ``input_fn_builder`` does.

    Args:
        seq_length: S.
        is_training: add ``start_positions``/``end_positions``.
        with_is_impossible: also add ``is_impossible`` (training only).

    Returns:
        Feature name -> ``data.records.tf_example.FixedLen``.
    """
    from data.records import tf_example

    spec = {UNIQUE_IDS: tf_example.FixedLen(())}
    for name in SEQUENCE_FEATURES:
        spec[name] = tf_example.FixedLen((seq_length,))
    if is_training:
        spec[START_POSITIONS] = tf_example.FixedLen(())
        spec[END_POSITIONS] = tf_example.FixedLen(())
        if with_is_impossible:
            spec[IS_IMPOSSIBLE] = tf_example.FixedLen(())
    return spec
