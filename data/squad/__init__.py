"""SQuAD v1.1 / v2.0: examples, windows, post-processing, official scoring and input.

* ``features``: ``read_squad_examples`` and ``convert_examples_to_features`` (doc-stride windows,
  the max-context rule), ``FeatureWriter`` (TFRecords);
* ``postprocess``: ``RawResult``, n-best spans, ``write_predictions`` (``predictions.json``,
  ``nbest_predictions.json``, ``null_odds.json``);
* ``evaluate``: the official v1.1 / v2.0 scores (``python -m data.squad_eval``);
* ``schema`` (record layout), ``dataset`` (``tf.data`` input); the raw-text serving SavedModel
  is an export: ``bert_tasks.exports.squad``.

The original run_squad.py's public names are importable from here::

    from data import squad
    examples = squad.read_squad_examples("dev-v1.1.json", is_training=False)
"""

from data.squad.features import (FeatureWriter, InputFeatures, SquadExample, SquadFormatError,
                                 check_lengths, convert_examples_to_features,
                                 read_squad_examples)
from data.squad.postprocess import RawResult, get_final_text, write_predictions

__all__ = ["FeatureWriter", "InputFeatures", "RawResult", "SquadExample", "SquadFormatError",
           "check_lengths", "convert_examples_to_features", "get_final_text",
           "read_squad_examples", "write_predictions"]
