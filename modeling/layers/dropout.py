"""Dropout: ``keras.layers.Dropout`` with a one-pass CPU kernel for fused training steps.

Same layer, same name ("dropout"), same seed generator as Keras' (a drop-in: checkpoints and
configs unchanged). Called with ``training=True`` under ``switch.Kernels(training=True)``
(``switch.use_kernels``) on float32 or bfloat16 inputs, with the CPU kernel library available
(``modeling/kernels/cpu_ops.py``) and no ``noise_shape``, it draws its mask with
``cpu_ops.dropout`` (Philox keyed by the layer's next seed; one pass forward, one backward)
instead of TensorFlow's four ops each way. Otherwise it is ``keras.layers.Dropout``.
Either way the masks are drawn from the generator's state alone, which Keras does not expose to
``tf.train.Checkpoint``: the trainer saves it (``backends.tensorflow.steps.RngState``), so that
a resumed run draws the masks an uninterrupted one would have drawn.

Several replicas in sync (Mirrored, MultiWorker, TPU): each replica draws its own masks, from
the one seed stream. The rule (``next_seed``): the generator advances once per call on every
replica alike, and replica ``r`` (``replica_id_in_sync_group``) draws from
``tf.random.experimental.stateless_fold_in(seed, r)``. Without it every replica drew the same
seed and so dropped the same units of different examples, a correlation that neither one
replica nor the original (one TPU program per core, each with its own random stream) has. One
replica keeps Keras' own draw, bit for bit.

On a backend other than TensorFlow the layer is ``keras.layers.Dropout``: the kernels' switch
stays off there, and there is no ``tf.distribute`` replica context
(``modeling.backend.replica_in_sync`` is None).
"""

from __future__ import annotations

import keras

from modeling import backend
from modeling.kernels import switch


@keras.saving.register_keras_serializable(package="bert_tf2")
class Dropout(keras.layers.Dropout):
    """[...] -> [...]: x / (1 - rate) where kept, 0 where dropped (only with ``training=True``)."""

    def fused_kernel_applies(self, dtype) -> bool:
        """Whether a training call on ``dtype`` inputs takes the CPU kernel (here, now).

        Args:
            dtype: the inputs' dtype.
        """
        if not (0.0 < self.rate < 1.0 and self.noise_shape is None
                and switch.kernels_of(self).training):
            return False
        from modeling.kernels import cpu_ops
        return cpu_ops.usable(dtype)

    def next_seed(self):
        """The seed [2] of this call's mask: the generator's next, folded with the replica's
        index when several replicas are in sync (see the module docstring)."""
        import tensorflow as tf

        seed = self.seed_generator.next()
        replica = backend.replica_in_sync()
        if replica is not None:
            seed = tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), replica)
        return seed

    def call(self, inputs, training=False):
        """Args:
            inputs: any shape.
            training: drop (else the identity).

        Returns:
            inputs' shape and dtype.
        """
        if training and self.fused_kernel_applies(inputs.dtype):
            from modeling.kernels import cpu_ops
            return cpu_ops.dropout(inputs, self.rate, self.next_seed())
        if training and 0.0 < self.rate < 1.0 and backend.replica_in_sync() is not None:
            import tensorflow as tf  # replicas in sync: a tf.distribute strategy

            shape = tf.shape(inputs) if self.noise_shape is None else [
                tf.shape(inputs)[i] if d is None else d for i, d in enumerate(self.noise_shape)]
            return tf.nn.experimental.stateless_dropout(inputs, rate=self.rate,
                                                        noise_shape=shape,
                                                        seed=self.next_seed())
        return super().call(inputs, training=training)

