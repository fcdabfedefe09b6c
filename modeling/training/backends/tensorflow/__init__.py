"""What only TensorFlow gives a training job: ``optimizer.py`` (the optimizer's cross-replica
sums, ``tf.IndexedSlices`` clipping, loss scaling, the fused CPU update), ``steps.py``
(``Trainer``: host loops of the compiled step under any ``tf.distribute`` strategy, the
``model.ckpt-N`` store with Google's names), ``execution.py`` (how the step runs: XLA, the
fused kernels, the fused optimizer, decided once), ``predict.py`` (the traced forward: a task's
predictions, ``extract_features.py``'s layers, a prediction's strategy)."""
