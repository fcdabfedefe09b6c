"""The pre-training TFRecord schema: feature names, dtypes and lengths (one definition).

Each record is a ``tf.train.Example`` with the 7 features the original create_pretraining_data
writes: ``input_ids``, ``input_mask``, ``segment_ids`` (int64 [max_seq_length]),
``masked_lm_positions``, ``masked_lm_ids`` (int64 [max_predictions_per_seq]),
``masked_lm_weights`` (float [max_predictions_per_seq]) and ``next_sentence_labels`` (int64 [1]).
Readers cast the int64 features to int32 (as the original ``_decode_record``).

Writers (``data/pretraining/instances.py``) and readers (``data/pretraining/dataset.py``) both take the
names, order, kinds and lengths from here. TensorFlow is only imported by the reader helpers.
"""

from __future__ import annotations

from typing import Dict, Tuple

SEQUENCE_FEATURES: Tuple[str, ...] = ("input_ids", "input_mask", "segment_ids")
PREDICTION_FEATURES: Tuple[str, ...] = ("masked_lm_positions", "masked_lm_ids",
                                        "masked_lm_weights")
FLOAT_FEATURES: Tuple[str, ...] = ("masked_lm_weights",)
LABEL_FEATURE = "next_sentence_labels"
# The order the original writes them in (a collections.OrderedDict).
FEATURE_NAMES: Tuple[str, ...] = SEQUENCE_FEATURES + PREDICTION_FEATURES + (LABEL_FEATURE,)


def feature_lengths(max_seq_length: int, max_predictions_per_seq: int) -> Dict[str, int]:
    """Feature name -> number of values per record.

    Args:
        max_seq_length: S.
        max_predictions_per_seq: P.

    Returns:
        Feature name -> S, P or 1.
    """
    lengths = {name: max_seq_length for name in SEQUENCE_FEATURES}
    lengths.update({name: max_predictions_per_seq for name in PREDICTION_FEATURES})
    lengths[LABEL_FEATURE] = 1
    return lengths


def is_float(name: str) -> bool:
    """True for the float features (stored as ``float_list``), False for int64 ones.

    Args:
        name: a feature name.

    Returns:
        Whether it is a float feature.
    """
    return name in FLOAT_FEATURES


def feature_spec(max_seq_length: int, max_predictions_per_seq: int) -> Dict[str, object]:
    """``tf.io.parse_(single_)example`` spec: name -> ``FixedLenFeature([n], int64 | float32)``.

    Args:
        max_seq_length: S.
        max_predictions_per_seq: P.

    Returns:
        Feature name -> ``tf.io.FixedLenFeature``.
    """
    import tensorflow as tf

    return {name: tf.io.FixedLenFeature([n], tf.float32 if is_float(name) else tf.int64)
            for name, n in feature_lengths(max_seq_length, max_predictions_per_seq).items()}
