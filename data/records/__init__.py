"""TFRecord files of ``tf.train.Example``, with or without TensorFlow: ``tf_example.py`` (an
``Example`` encoded by hand, its protobuf wire pieces, and a task's record spec read with
TensorFlow or numpy), ``numpy_reader.py`` (TFRecord files read and checked with numpy: records,
parsed examples, batches). The framing's CRC-32C is ``bert_common.record_framing``'s, which the
atomic writer shares."""
