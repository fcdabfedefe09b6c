"""Training: the original's optimizer and schedule, ``tf.distribute`` strategies and precision,
the resumable trainer and its objectives."""
