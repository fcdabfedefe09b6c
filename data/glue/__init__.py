"""Sentence(-pair) classification data: GLUE, XNLI and your own TSV.

* ``processors``: the original's ``DataProcessor`` family, one per ``--task_name``;
* ``features``: examples -> fixed-length features and TFRecords, as the original;
* ``dataset``: ``tf.data`` over those records, with length-aware batching (also used by SWAG);
* ``metrics``: every GLUE metric.

The classifier's serving SavedModel (raw text in) is an export: ``bert_tasks.exports.classifier``.
"""
