"""What only TensorFlow gives the optimizer.

``modeling.training.optimizers``' classes are written once for every Keras backend; on
TensorFlow (``modeling.training.backends.current("optimizer")``) their
``_backend_apply_gradients`` is ``apply_gradients`` here, which adds what the other backends do
not have (the optimizers' module doc says what each does):

* the cross-replica sum of a ``tf.distribute`` strategy, before clipping
  (``"mean_then_clip"``) or after it (``"clip_then_sum"``, the original's TPU semantics);
* ``tf.IndexedSlices`` gradients (a ``tf.gather``'s), clipped by a norm that counts each
  occurrence of a repeated id, as the original, then densified;
* loss scaling (float16): gradients divided back, the update skipped on a non-finite norm, the
  dynamic scale halved or doubled;
* the fused in-place CPU update (``modeling.kernels.cpu_ops``), where ``cpu_kernel_applies``.

``MATH`` is TensorFlow's ops under the names ``update_rules`` uses, so that a rule on TensorFlow
builds the graph it always built.

Example::

    from modeling.training.backends.tensorflow import optimizer as tf_hooks
    tf_hooks.MATH.sqrt(4.0)   # a tf.Tensor
"""

from __future__ import annotations

import functools
import types
from typing import Callable, Union

import keras
import tensorflow as tf

from modeling.kernels import cpu_ops
from modeling.training import update_rules

_LOSS_SCALE_GROWTH_STEPS = 2000

# TensorFlow's ops under the names the rules use (``update_rules``: one rule, every backend).
MATH = types.SimpleNamespace(square=tf.square, sqrt=tf.sqrt, power=tf.pow, cast=tf.cast,
                             minimum=tf.minimum, norm=tf.norm, where=tf.where)


def check_optimizer(gradient_reduction: str, loss_scale: Union[None, str, float]) -> None:
    """Nothing to refuse: TensorFlow has every optimizer setting.

    Args:
        gradient_reduction: the optimizer's ``gradient_reduction``.
        loss_scale: its ``loss_scale``.
    """
    del gradient_reduction, loss_scale


def _clip_scale(global_norm: tf.Tensor, clip_norm: float) -> tf.Tensor:
    """The factor ``tf.clip_by_global_norm`` multiplies every gradient by (``update_rules``)."""
    return update_rules.clip_factor(global_norm, clip_norm, MATH)


def _scale_gradient(grad, factor):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * factor, grad.indices, grad.dense_shape)
    return grad * factor


@tf.autograph.experimental.do_not_convert
def apply_gradients(optimizer, grads, trainable_variables, keras_apply: Callable) -> None:
    """``optimizer``'s update of ``trainable_variables`` by ``grads`` on TensorFlow (module
    doc), in place of Keras' path; the norm before clipping and its finiteness go to the
    thread's ``optimizer.step_stats.last`` (``clip_and_apply`` returns them).

    Args:
        optimizer: a ``modeling.training.optimizers`` optimizer, built.
        grads: the gradients (tensors or ``tf.IndexedSlices``).
        trainable_variables: their variables.
        keras_apply: Keras' own path (unused here: this replaces it).
    """
    del keras_apply
    context = tf.distribute.get_replica_context()
    cross_replica = context is not None and context.num_replicas_in_sync > 1
    grads = list(grads)
    if cross_replica and optimizer.gradient_reduction == "mean_then_clip":
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    if optimizer.loss_scale is not None:
        inverse = 1.0 / optimizer.loss_scale.value
        grads = [_scale_gradient(g, inverse) for g in grads]
    global_norm = tf.linalg.global_norm(grads)  # [] (IndexedSlices: per occurrence)
    if (not cross_replica and getattr(optimizer.step_stats, "cpu_kernel", False)
            and optimizer.cpu_kernel_applies(trainable_variables)):
        # Clipping factor and update in one in-place kernel per variable (cpu_ops).
        grad_scale = (_clip_scale(global_norm, optimizer.clip_norm)
                      if optimizer.clip_norm is not None else tf.constant(1.0))
        learning_rate = tf.cast(optimizer.learning_rate, tf.float32)
        one = tf.constant(1.0)
        for grad, var in zip(grads, trainable_variables):
            if isinstance(grad, tf.IndexedSlices):
                # Clipped per occurrence, then repeated rows summed: as the op-by-op path.
                grad, scale = tf.convert_to_tensor(_scale_gradient(grad, grad_scale)), one
            else:
                scale = grad_scale
            optimizer.apply_kernel(var, grad, learning_rate, optimizer.variable_index(var),
                                   scale)
        optimizer.step_stats.last = {"global_norm": global_norm,
                                 "grads_finite": tf.math.is_finite(global_norm)}
        return
    if optimizer.clip_norm is not None:
        grads, _ = tf.clip_by_global_norm(grads, optimizer.clip_norm, use_norm=global_norm)
    finite = tf.math.is_finite(global_norm)  # any inf/nan gradient makes the norm so
    if cross_replica and optimizer.gradient_reduction == "clip_then_sum":
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        if optimizer.loss_scale is not None:  # every replica must skip together
            bad = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                     tf.cast(tf.logical_not(finite), tf.float32))
            finite = tf.equal(bad, 0.0)
    grads = [tf.convert_to_tensor(g) for g in grads]  # dense: repeated rows summed
    learning_rate = optimizer.learning_rate
    variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
    indices = [optimizer.variable_index(v) for v in trainable_variables]
    strategy = tf.distribute.get_strategy()
    tf.__internal__.distribute.interim.maybe_merge_call(
        functools.partial(_distributed_update, optimizer), strategy,
        list(zip(grads, variables, indices)), learning_rate, finite)
    optimizer.step_stats.last = {"global_norm": global_norm, "grads_finite": finite}


@tf.autograph.experimental.do_not_convert
def _distributed_update(optimizer, distribution, grads_vars_indices, learning_rate, finite):
    skip_nonfinite = optimizer.loss_scale is not None

    @tf.autograph.experimental.do_not_convert
    def update_one(var, grad, lr, ok, index):
        if skip_nonfinite:
            def apply_update():
                optimizer.apply_rule(var, grad, lr, index)

            tf.cond(ok, apply_update, lambda: None)
        else:
            optimizer.apply_rule(var, grad, lr, index)

    for grad, var, index in grads_vars_indices:
        distribution.extended.update(var, update_one, args=(grad, learning_rate, finite, index),
                                     group=False)
    if optimizer.loss_scale_mode == "dynamic":
        distribution.extended.update(optimizer.loss_scale.value,
                                     functools.partial(_update_loss_scale,
                                                       optimizer.loss_scale_good_steps),
                                     args=(finite,), group=False)


@tf.autograph.experimental.do_not_convert
def _update_loss_scale(good, scale_var, finite):
    def on_finite():
        grown = good.value + 1
        grow = grown >= _LOSS_SCALE_GROWTH_STEPS
        scale_var.assign(tf.where(grow, scale_var * 2.0, scale_var))
        good.assign(tf.where(grow, tf.zeros_like(grown), grown))

    def on_overflow():
        scale_var.assign(tf.maximum(scale_var * 0.5, 1.0))
        good.assign(tf.zeros_like(good.value))

    tf.cond(finite, on_finite, on_overflow)


def cpu_kernel_applies(variables) -> bool:
    """Whether the in-place CPU kernels can update ``variables``: no distribution strategy in
    scope, float32 variables, the kernel library built.

    Args:
        variables: the variables to be updated.

    Returns:
        A bool.
    """
    return (not tf.distribute.has_strategy() and all(v.dtype == tf.float32 for v in variables)
            and cpu_ops.usable(tf.float32))


def adam_weight_decay_kernel(optimizer, var, grad, lr, index, grad_scale) -> None:
    """``AdamWeightDecay``'s update of ``var`` (index ``index``) by ``grad * grad_scale``, as
    one in-place CPU kernel (bit-identical to the op-by-op rule).

    Args:
        optimizer: the ``AdamWeightDecay``, built.
        var: the variable.
        grad: its dense gradient.
        lr: the float32 rate.
        index: the variable's index in the optimizer.
        grad_scale: the clipping factor.
    """
    m, v, decays = optimizer.slots(index)
    cpu_ops.adam_weight_decay_apply(var, m, v, grad, lr, grad_scale, optimizer.beta_1,
                                    optimizer.beta_2, optimizer.epsilon,
                                    optimizer.weight_decay_rate, decays)
