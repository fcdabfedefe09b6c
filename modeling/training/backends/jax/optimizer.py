"""The optimizer on JAX, and on any other Keras backend but TensorFlow: Keras' own update path.

``modeling.training.optimizers``' classes clip in Keras' ``_clip_gradients`` hook and update in
``update_step``, in ``keras.ops`` (``MATH``). The gradient is the global batch's (one program over
``keras.distribution.DataParallel``'s devices), dense, and unscaled, so the settings that only
TensorFlow's replicas and float16 need are refused (``check_optimizer``).

Example::

    from modeling.training.backends.jax import optimizer
    optimizer.check_optimizer("mean_then_clip", None)   # fine; "clip_then_sum" raises
"""

from __future__ import annotations

from typing import Callable, Union

import keras
from keras import ops


MATH = ops

def check_optimizer(gradient_reduction: str, loss_scale: Union[None, str, float]) -> None:
    """Refuses what this backend's update cannot do.

    Args:
        gradient_reduction: the optimizer's ``gradient_reduction``.
        loss_scale: its ``loss_scale``.

    Raises:
        ValueError: per-replica clipping or loss scaling.
    """
    if gradient_reduction != "mean_then_clip":
        raise ValueError("gradient_reduction=%r: on the %s backend the gradient of the global "
                         "batch is clipped once ('mean_then_clip'); per-replica clipping needs "
                         "the TensorFlow backend" % (gradient_reduction, keras.backend.backend()))
    if loss_scale is not None:
        raise ValueError("loss_scale=%r: loss scaling (float16) needs the TensorFlow backend; "
                         "use bfloat16 (mixed_bfloat16) on %s"
                         % (loss_scale, keras.backend.backend()))


def apply_gradients(optimizer, grads, trainable_variables, keras_apply: Callable) -> None:
    """Keras' update path (``_clip_gradients``, then ``update_step`` per variable).

    Args:
        optimizer: the optimizer (unused: Keras' path calls its hooks).
        grads: the gradients.
        trainable_variables: their variables.
        keras_apply: Keras' ``_backend_apply_gradients`` of the optimizer.
    """
    del optimizer
    keras_apply(grads, trainable_variables)


def cpu_kernel_applies(variables) -> bool:
    """False: the fused CPU update is a TensorFlow op.

    Args:
        variables: the variables to be updated.

    Returns:
        False.
    """
    del variables
    return False
