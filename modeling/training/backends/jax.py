"""JAX, and any other Keras backend but TensorFlow: the settings of TensorFlow's path only,
refused with one line (``check_settings``: the one table, every tool); the optimizer on Keras'
own update path.

``modeling.training.optimizers``' classes clip in Keras' ``_clip_gradients`` hook and update in
``update_step``, in ``keras.ops`` (``MATH``). The gradient is the global batch's (one program over
``keras.distribution.DataParallel``'s devices), dense, and unscaled, so the settings that only
TensorFlow's replicas and float16 need are refused (``check_optimizer``).

Example::

    from modeling.training.backends import jax as jax_backend
    jax_backend.check_optimizer("mean_then_clip", None)   # fine; "clip_then_sum" raises
"""

from __future__ import annotations

from typing import Any, Callable, List, Tuple, Union

import keras
from keras import ops

from bert_common.errors import FlagError

MATH = ops

_ON_TENSORFLOW = "%s: %s with KERAS_BACKEND=jax (it runs on TensorFlow)"


def _tensorflow_only(settings: Any) -> List[Tuple[bool, str]]:
    """The table: (is the setting given, the line that refuses it), in the order checked. A
    setting a tool does not have reads as its default."""
    def get(name, default=None):
        return getattr(settings, name, default)

    strategy = get("strategy", "default")
    precision = get("mixed_precision")
    return [
        (get("use_tpu", False) or strategy != "default", _ON_TENSORFLOW % (
            "--strategy=%s" % strategy if strategy != "default" else "--use_tpu",
            "tf.distribute strategies are not used (the local devices train data-parallel)")),
        (bool(get("num_cpu_devices", 0)), _ON_TENSORFLOW % (
            "--num_cpu_devices",
            "not used; give JAX XLA_FLAGS=--xla_force_host_platform_device_count=N")),
        (get("num_accumulation_steps", 1) != 1, _ON_TENSORFLOW % (
            "--num_accumulation_steps", "gradient accumulation is not implemented")),
        (precision == "fp16", _ON_TENSORFLOW % (
            "--mixed_precision=fp16", "loss scaling is not implemented; use bf16")),
        (get("gradient_reduction", "auto") == "clip_then_sum", _ON_TENSORFLOW % (
            "--gradient_reduction=clip_then_sum", "per-replica clipping is not implemented")),
        (precision not in (None, "", "fp32", "bf16", "fp16"),
         "--mixed_precision=%s: fp32 or bf16 on JAX (or unset)" % precision),
        (bool(get("export_dir")),
         "--export_dir: the SavedModel is written by TensorFlow; with KERAS_BACKEND=jax train "
         "here, then export without it from --init_checkpoint=<output_dir>/export/"
         "bert_model.ckpt (docs/jax.md)"),
    ]


def check_settings(settings: Any) -> None:
    """Stops a tool whose settings need TensorFlow's path (a ``tf.distribute`` strategy,
    gradient accumulation, float16 loss scaling, per-replica clipping, a SavedModel export).

    Args:
        settings: the run's settings (a tool's flag values), read by attribute.

    Raises:
        FlagError: the first such setting, named in one line.
    """
    for given, line in _tensorflow_only(settings):
        if given:
            raise FlagError(line)


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
