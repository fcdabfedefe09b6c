"""Pre-training data: corpus -> instances (NSP pairs, MLM masks) -> TFRecords -> ``tf.data``.

* ``instances``: the original's generator (``create_training_instances``,
  ``write_instance_to_example_files``), rule for rule;
* ``fast``: the same records for the same seed, fast (``corpus``, ``rng`` and ``records`` are its
  parts: the token stream, the replayed random draws, the record encoder);
* ``shards``: ``--num_workers`` processes over a corpus split at document boundaries;
* ``schema``: the record's features, one definition; ``dataset``: the ``tf.data`` input of
  run_pretraining.
"""
