"""Dense layer computed as one 2-D ``matmul`` + ``bias_add`` (+ activation), the original's shape.

``BertDense`` is a ``keras.layers.Dense`` (same ``kernel`` [in, units] and ``bias`` [units]
variables, same names, so checkpoints map unchanged) whose ``call`` flattens the leading axes,
computes ``act(bias_add(x2d @ kernel, bias))`` [N, units] and restores them: [..., in] ->
[..., units]. The original computes its dense layers on [B*S, H] matrices the same way; keeping
the three ops adjacent in 2-D lets TensorFlow's graph optimizer fuse them into one oneDNN kernel
on CPU (``_MklNativeFusedMatMul`` with BiasAdd and Gelu, or a following residual Add), which matters most in bfloat16,
where unfused elementwise passes cost as much as the matmuls. Under XLA the ops fuse anyway.

Training with a tanh-GELU activation under ``switch.Kernels(training=True)`` takes
``gelu_dense.gelu_dense_train`` instead (fused GELU kernels and a hand-written gradient; the
training graph cannot use the inference fusion, which drops the pre-activation the gradient
needs).
"""

from __future__ import annotations

import keras
from keras import ops

from modeling import backend
from modeling.layers import activations
from modeling.kernels import switch


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertDense(keras.layers.Dense):
    """[..., in] -> act(x @ kernel + bias) [..., units], as one 2-D matmul + bias_add."""

    def call(self, inputs, training=None):
        """Args:
            inputs: [..., in].
            training: a training step (the fused GELU kernel may apply).

        Returns:
            [..., units].
        """
        in_dim = self.kernel.shape[0]
        x = ops.reshape(inputs, (-1, in_dim)) if len(inputs.shape) != 2 else inputs  # [N, in]
        if (training and self.use_bias and self.activation is activations.gelu
                and switch.kernels_of(self).training):  # TensorFlow only (switch)
            from modeling.kernels import gelu_dense
            y = gelu_dense.gelu_dense_train(x, backend.read(self.kernel),
                                            backend.read(self.bias))  # [N, units]
        else:
            y = backend.matmul(x, self.kernel)  # [N, units]
            if self.use_bias:
                y = backend.bias_add(y, self.bias)  # [N, units]
            if self.activation is not None:
                y = self.activation(y)
        if len(inputs.shape) == 2:
            return y
        return ops.reshape(y, backend.with_last_axis(backend.shape(inputs), self.units))
