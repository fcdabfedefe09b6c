"""The original ``create_optimizer``, one definition for every Keras backend.

``create_optimizer(init_lr, num_train_steps, num_warmup_steps)`` checks its arguments, builds
the schedule (``BertSchedule``) and returns the optimizer class of the running backend:
``modeling.training.optimization`` (TensorFlow: replicas, loss scaling, CPU kernels) or
``modeling.training.keras_optimization`` (JAX). ``modeling.create_optimizer`` and
``modeling.training.optimization.create_optimizer`` are this function.
"""

from __future__ import annotations

from typing import Optional, Union

import keras
import numpy as np

from modeling import backend
from modeling.training.lr_schedules import BertSchedule

OPTIMIZERS = ("adamw", "lamb")


def create_optimizer(init_lr: float, num_train_steps: int, num_warmup_steps: int, *tf1_args,
                     optimizer: str = "adamw", one_step_ahead: bool = True,
                     gradient_reduction: str = "mean_then_clip",
                     loss_scale: Union[None, str, float] = None,
                     weight_decay_rate: float = 0.01, clip_norm: Optional[float] = 1.0,
                     use_tpu: bool = False) -> keras.optimizers.Optimizer:
    """The original ``create_optimizer`` as a Keras optimizer for the backend Keras runs on
    (``modeling.training.optimization`` on TensorFlow, ``keras_optimization`` elsewhere; both
    apply ``update_rules``).

    ``use_tpu=True`` is shorthand for ``gradient_reduction="clip_then_sum"`` (the original's TPU
    semantics); ``optimizer`` is "adamw" (the original) or "lamb". The arguments after
    ``num_warmup_steps`` are keyword-only.

    The original's TF1 call ``create_optimizer(loss, init_lr, num_train_steps,
    num_warmup_steps, use_tpu)`` returned a ``train_op``; this one takes no loss and returns the
    optimizer, whose ``apply_gradients`` is that train op. Called the TF1 way it raises a
    ``TypeError`` that says so.

    Args:
        init_lr: the peak learning rate (after warmup).
        num_train_steps: steps of the linear decay to 0.
        num_warmup_steps: steps of the linear warmup from 0.
        optimizer: "adamw" (``AdamWeightDecay``) or "lamb" (``Lamb``).
        one_step_ahead: the update at iteration t uses schedule(t + 1), as the original.
        gradient_reduction: "mean_then_clip" or "clip_then_sum" across replicas (module doc).
        loss_scale: None, "dynamic" or a fixed scale (float16 training).
        weight_decay_rate: decoupled weight decay (0.01; 0 turns it off).
        clip_norm: the global gradient norm clipped to (1.0); None: no clipping.
        use_tpu: shorthand for ``gradient_reduction="clip_then_sum"``.

    Returns:
        The ``AdamWeightDecay`` or ``Lamb`` optimizer, schedule included.

    Raises:
        TypeError: the original's TF1 call (a loss first).
        ValueError: an unknown ``optimizer``, ``gradient_reduction`` or ``loss_scale``.

    With a model, the variables are ``model.trainable_variables``.

    Example::

        import tensorflow as tf
        from modeling import create_optimizer

        optimizer = create_optimizer(2e-5, num_train_steps=1000, num_warmup_steps=100)
        kernel = tf.Variable([[1.0, -2.0], [3.0, 0.5]])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(kernel))
        grads = tape.gradient(loss, [kernel])
        optimizer.apply_gradients(zip(grads, [kernel]))  # clip to norm 1.0, AdamWeightDecay
        int(optimizer.iterations)                                        # == 1
    """
    if tf1_args or not isinstance(init_lr, (int, float, np.floating, np.integer)):
        raise TypeError(
            "create_optimizer(init_lr, num_train_steps, num_warmup_steps, *, use_tpu=...) takes "
            "no loss in TF2: it returns a Keras optimizer; compute the loss's gradients with "
            "tf.GradientTape and call optimizer.apply_gradients (the original's TF1 call was "
            "create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu)); got "
            "init_lr=%r with %d extra positional argument(s)"
            % (type(init_lr).__name__ if not isinstance(init_lr, (int, float)) else init_lr,
               len(tf1_args)))
    if optimizer not in OPTIMIZERS:
        raise ValueError("optimizer must be one of %s, got %r" % (", ".join(OPTIMIZERS),
                                                                  optimizer))
    if use_tpu:
        gradient_reduction = "clip_then_sum"
    schedule = BertSchedule(init_lr, num_train_steps, num_warmup_steps,
                            one_step_ahead=one_step_ahead)
    if backend.TENSORFLOW:
        from modeling.training import optimization as classes
    else:
        from modeling.training import keras_optimization as classes
    cls = classes.AdamWeightDecay if optimizer == "adamw" else classes.Lamb
    return cls(schedule, weight_decay_rate=weight_decay_rate, clip_norm=clip_norm,
               gradient_reduction=gradient_reduction, loss_scale=loss_scale)
