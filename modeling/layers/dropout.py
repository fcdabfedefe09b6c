"""Dropout: ``keras.layers.Dropout`` with a one-pass CPU kernel for fused training steps.

Same layer, same name ("dropout"), same seed generator as Keras' (a drop-in: checkpoints and
configs unchanged). Called with ``training=True`` inside
``training_kernels.fused_training_kernels()`` on float32 or bfloat16 inputs, with the CPU kernel
library available (``modeling/kernels/cpu_ops.py``) and no ``noise_shape``, it draws its mask with
``cpu_ops.dropout`` (Philox keyed by the layer's next seed; one pass forward, one backward)
instead of TensorFlow's four ops each way. Otherwise it is ``keras.layers.Dropout``.
Either way the masks are drawn from the generator's state alone, which Keras does not expose to
``tf.train.Checkpoint``: the trainer saves it (``modeling.training.trainer.RngState``), so that
a resumed run draws the masks an uninterrupted one would have drawn.
"""

from __future__ import annotations

import keras

from modeling.kernels import cpu_ops
from modeling.kernels import switch as training_kernels


@keras.saving.register_keras_serializable(package="bert_tf2")
class Dropout(keras.layers.Dropout):
    """[...] -> [...]: x / (1 - rate) where kept, 0 where dropped (only with ``training=True``)."""

    def fused_kernel_applies(self, dtype) -> bool:
        """Whether a training call on ``dtype`` inputs takes the CPU kernel (here, now)."""
        return (0.0 < self.rate < 1.0 and self.noise_shape is None
                and training_kernels.training_kernels_enabled() and cpu_ops.usable(dtype))

    def call(self, inputs, training=False):
        if training and self.fused_kernel_applies(inputs.dtype):
            return cpu_ops.dropout(inputs, self.rate, self.seed_generator.next())
        return super().call(inputs, training=training)
