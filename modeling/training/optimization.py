"""The original BERT optimizer as a Keras 3 optimizer: clip by global norm 1.0, AdamWeightDecay.

``create_optimizer(init_lr, num_train_steps, num_warmup_steps)`` returns an ``AdamWeightDecay``
whose ``apply_gradients(zip(grads, variables))`` performs exactly the original train step's
update (google-research/bert ``optimization.create_optimizer``):

1. ``tf.clip_by_global_norm(grads, 1.0)`` on the raw gradients. A ``tf.IndexedSlices`` gradient
   (from ``tf.gather``) is measured by its values, i.e. each occurrence of a repeated id counts
   separately, as the original. The slices are densified (repeated rows summed) after clipping.
2. For every variable (``m``, ``v`` slots start at 0; no bias correction)::

       m <- 0.9 m + 0.1 g
       v <- 0.999 v + 0.001 g^2
       update = m / (sqrt(v) + 1e-6)  [+ 0.01 * param unless excluded]
       param <- param - lr * update

   Weight decay is skipped when ``re.search`` finds "LayerNorm", "layer_norm" or "bias" anywhere
   in the variable's name (``variable.path`` for Keras variables): ``uses_weight_decay``.
3. ``lr`` comes from ``modeling.training.lr_schedules.BertSchedule``: by default the update made when the
   iteration counter is t uses schedule(t + 1), as the original does in practice (#1050);
   ``one_step_ahead=False`` gives the corrected schedule(t). ``float(optimizer.learning_rate)``
   read before ``apply_gradients`` is the rate that update will use.

**Replicas.** ``apply_gradients`` may be called in a replica context (``strategy.run``) with
per-replica gradients of a loss already divided by the number of replicas:

* ``gradient_reduction="mean_then_clip"`` (default): the gradients are summed across replicas
  first (giving the gradient of the global-batch mean), then clipped: identical to one replica
  at the same global batch.
* ``gradient_reduction="clip_then_sum"``: what the original does on TPU (``CrossShardOptimizer``
  after ``clip_by_global_norm``): each replica clips its own gradients, then they are summed.
  Pass the per-replica loss *undivided* to get the original's TPU numbers.

**Loss scaling** (``loss_scale="dynamic"`` or a number; for float16): ``scale_loss(loss)``
multiplies the loss; gradients are divided back before clipping; with non-finite gradients the
update is skipped (variables and slots unchanged, the iteration counter still advances) and the
dynamic scale halves; it doubles after 2000 finite steps.

``Lamb`` (``create_optimizer(..., optimizer="lamb")``) shares steps 1 and 3 and uses the LAMB
update (You et al. 2019): bias-corrected Adam direction plus decoupled weight decay, scaled per
variable by the trust ratio ||param|| / ||update|| (1 when either is 0 or the variable is
excluded from weight decay).

``clip_and_apply(grads, variables)`` is ``apply_gradients`` returning ``{"global_norm",
"grads_finite"}`` (the norm before clipping, after the cross-replica sum in mean_then_clip mode)
for logging; ``clip_and_apply(..., cpu_kernel=True)`` runs the clipping and the update as one
in-place CPU kernel per variable where ``cpu_kernel_applies`` (the trainer's
``Execution.optimizer_kernel``).
"""

from __future__ import annotations

import threading
import types
from typing import Dict, Iterable, Optional, Sequence, Union

import keras
import tensorflow as tf

from modeling.kernels import cpu_ops
from modeling.training import update_rules
from modeling.training.update_rules import (WEIGHT_DECAY_EXCLUSIONS, uses_weight_decay,
                                            variable_name)
# The factory has one definition for every backend; importable from here as before.
from modeling.training.optimizers import OPTIMIZERS, create_optimizer  # noqa: F401,E402

GRADIENT_REDUCTIONS = ("mean_then_clip", "clip_then_sum")

_INITIAL_LOSS_SCALE = 2.0 ** 15
_LOSS_SCALE_GROWTH_STEPS = 2000


# TensorFlow's ops under the names the rules use (``update_rules``: one rule, every backend).
_TF_MATH = types.SimpleNamespace(square=tf.square, sqrt=tf.sqrt, power=tf.pow, cast=tf.cast,
                                 minimum=tf.minimum, norm=tf.norm, where=tf.where)


def _clip_scale(global_norm: tf.Tensor, clip_norm: float) -> tf.Tensor:
    """The factor ``tf.clip_by_global_norm`` multiplies every gradient by (``update_rules``)."""
    return update_rules.clip_factor(global_norm, clip_norm, _TF_MATH)


def _scale_gradient(grad, factor):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * factor, grad.indices, grad.dense_shape)
    return grad * factor


class _ClippedOptimizer(keras.optimizers.Optimizer):
    """Shared machinery: cross-replica reduction, loss scaling, global-norm clipping, decay flags.

    Subclasses implement ``_build_slots(variables)`` and ``_update(var, grad, lr, index)``
    (per-device, in an update context; must return nothing and only assign).
    """

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01,
                 exclude_from_weight_decay: Optional[Sequence[str]] = WEIGHT_DECAY_EXCLUSIONS,
                 clip_norm: Optional[float] = 1.0, gradient_reduction: str = "mean_then_clip",
                 loss_scale: Union[None, str, float] = None, name: str = "optimizer",
                 **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if gradient_reduction not in GRADIENT_REDUCTIONS:
            raise ValueError("gradient_reduction must be one of %s, got %r"
                             % (", ".join(GRADIENT_REDUCTIONS), gradient_reduction))
        if loss_scale is not None and loss_scale != "dynamic" and not float(loss_scale) > 0:
            raise ValueError("loss_scale must be None, 'dynamic' or > 0, got %r" % (loss_scale,))
        self.weight_decay_rate = float(weight_decay_rate)
        self.exclude_patterns = tuple(exclude_from_weight_decay or ())
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.gradient_reduction = gradient_reduction
        self.loss_scale_mode = loss_scale
        self._decay_flags = []
        self._stats = threading.local()  # per replica thread (MirroredStrategy runs threads)
        self._loss_scale_var = None
        self._good_steps = None

    # ------------------------------------------------------------------------------------ build
    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._decay_flags = [uses_weight_decay(variable_name(v), self.weight_decay_rate,
                                               self.exclude_patterns) for v in variables]
        self._build_slots(variables)
        if self.loss_scale_mode is not None:
            initial = (_INITIAL_LOSS_SCALE if self.loss_scale_mode == "dynamic"
                       else float(self.loss_scale_mode))
            self._loss_scale_var = self.add_variable(
                (), initializer=keras.initializers.Constant(initial), dtype="float32",
                aggregation="only_first_replica", name="loss_scale")
            self._good_steps = self.add_variable((), initializer="zeros", dtype="int64",
                                                 aggregation="only_first_replica",
                                                 name="loss_scale_good_steps")

    def _build_slots(self, variables):
        raise NotImplementedError

    def decays(self, variable) -> bool:
        """Whether weight decay applies to ``variable`` (the optimizer must be built).

        Args:
            variable: one of the variables the optimizer was built with.

        Returns:
            A bool.
        """
        return self._decay_flags[self._get_variable_index(variable)]

    # ------------------------------------------------------------------------------ loss scale
    @property
    def loss_scale(self):
        """The current loss scale (a float32 variable), or None without loss scaling."""
        return self._loss_scale_var

    def scale_loss(self, loss):
        """``loss * loss_scale`` (identity without loss scaling).

        Args:
            loss: the scalar loss.

        Returns:
            The scaled loss, in ``loss``'s dtype.

        Raises:
            ValueError: loss scaling on, but the optimizer is not built yet.
        """
        if self._loss_scale_var is None:
            if self.loss_scale_mode is None:
                return loss
            raise ValueError("build the optimizer before scale_loss (optimizer.build(vars))")
        return loss * tf.cast(self._loss_scale_var.value, loss.dtype)

    # ------------------------------------------------------------------------------ apply path
    def clip_and_apply(self, grads: Iterable, variables: Iterable,
                       cpu_kernel: bool = False) -> Dict[str, tf.Tensor]:
        """``apply_gradients`` that returns ``{"global_norm", "grads_finite"}`` (see module).

        Args:
          grads: the gradients of ``variables`` (tensors or ``tf.IndexedSlices``).
          variables: the variables to update.
          cpu_kernel: clip and update with one in-place CPU kernel per variable where
            ``cpu_kernel_applies`` (and not across replicas); otherwise, and by default,
            TensorFlow's ops. Read when the update is traced.

        Returns:
          ``{"global_norm": the norm before clipping, "grads_finite": whether it is finite}``.
        """
        self._stats.last = {}
        # Handed to ``_backend_apply_gradients`` through Keras' ``apply`` in this thread's
        # state (the replica's thread under a MirroredStrategy, like the stats).
        self._stats.cpu_kernel = bool(cpu_kernel)
        try:
            self.apply(list(grads), list(variables))
        finally:
            self._stats.cpu_kernel = False
        stats, self._stats.last = self._stats.last, {}
        return stats

    @tf.autograph.experimental.do_not_convert
    def _backend_apply_gradients(self, grads, trainable_variables):
        context = tf.distribute.get_replica_context()
        cross_replica = context is not None and context.num_replicas_in_sync > 1
        grads = list(grads)
        if cross_replica and self.gradient_reduction == "mean_then_clip":
            grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        if self._loss_scale_var is not None:
            inverse = 1.0 / self._loss_scale_var.value
            grads = [_scale_gradient(g, inverse) for g in grads]
        global_norm = tf.linalg.global_norm(grads)  # [] (IndexedSlices: per occurrence)
        if (not cross_replica and getattr(self._stats, "cpu_kernel", False)
                and self.cpu_kernel_applies(trainable_variables)):
            # Clipping factor and update in one in-place kernel per variable (cpu_ops).
            grad_scale = (_clip_scale(global_norm, self.clip_norm) if self.clip_norm is not None
                          else tf.constant(1.0))
            learning_rate = tf.cast(self.learning_rate, tf.float32)
            one = tf.constant(1.0)
            for grad, var in zip(grads, trainable_variables):
                if isinstance(grad, tf.IndexedSlices):
                    # Clipped per occurrence, then repeated rows summed: as the op-by-op path.
                    grad, scale = tf.convert_to_tensor(_scale_gradient(grad, grad_scale)), one
                else:
                    scale = grad_scale
                self._cpu_kernel_update(var, grad, learning_rate, self._get_variable_index(var),
                                        scale)
            self._stats.last = {"global_norm": global_norm,
                                "grads_finite": tf.math.is_finite(global_norm)}
            return
        if self.clip_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm, use_norm=global_norm)
        finite = tf.math.is_finite(global_norm)  # any inf/nan gradient makes the norm so
        if cross_replica and self.gradient_reduction == "clip_then_sum":
            grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            if self._loss_scale_var is not None:  # every replica must skip together
                bad = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                         tf.cast(tf.logical_not(finite), tf.float32))
                finite = tf.equal(bad, 0.0)
        grads = [tf.convert_to_tensor(g) for g in grads]  # dense: repeated rows summed
        learning_rate = self.learning_rate
        variables = [v.value if isinstance(v, keras.Variable) else v
                     for v in trainable_variables]
        indices = [self._get_variable_index(v) for v in trainable_variables]
        strategy = tf.distribute.get_strategy()
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_update, strategy, list(zip(grads, variables, indices)),
            learning_rate, finite)
        self._stats.last = {"global_norm": global_norm, "grads_finite": finite}

    @tf.autograph.experimental.do_not_convert
    def _distributed_update(self, distribution, grads_vars_indices, learning_rate, finite):
        skip_nonfinite = self._loss_scale_var is not None

        @tf.autograph.experimental.do_not_convert
        def update_one(var, grad, lr, ok, index):
            if skip_nonfinite:
                def apply_update():
                    self._update(var, grad, lr, index)

                tf.cond(ok, apply_update, lambda: None)
            else:
                self._update(var, grad, lr, index)

        for grad, var, index in grads_vars_indices:
            distribution.extended.update(var, update_one,
                                         args=(grad, learning_rate, finite, index), group=False)
        if self.loss_scale_mode == "dynamic":
            distribution.extended.update(self._loss_scale_var.value, self._update_loss_scale,
                                         args=(finite,), group=False)

    @tf.autograph.experimental.do_not_convert
    def _update_loss_scale(self, scale_var, finite):
        good = self._good_steps

        def on_finite():
            grown = good.value + 1
            grow = grown >= _LOSS_SCALE_GROWTH_STEPS
            scale_var.assign(tf.where(grow, scale_var * 2.0, scale_var))
            good.assign(tf.where(grow, tf.zeros_like(grown), grown))

        def on_overflow():
            scale_var.assign(tf.maximum(scale_var * 0.5, 1.0))
            good.assign(tf.zeros_like(good.value))

        tf.cond(finite, on_finite, on_overflow)

    supports_cpu_kernel = False  # True where the class implements ``_cpu_kernel_update``

    def cpu_kernel_applies(self, variables) -> bool:
        """Whether ``clip_and_apply(..., cpu_kernel=True)`` of ``variables`` runs as
        ``cpu_ops`` kernels: an optimizer that has one, no loss scaling, no distribution
        strategy in scope, float32 variables, the kernel library built.

        Args:
            variables: the variables to be updated.

        Returns:
            A bool.
        """
        return (self.supports_cpu_kernel and self.loss_scale_mode is None
                and not tf.distribute.has_strategy()
                and all(v.dtype == tf.float32 for v in variables)
                and cpu_ops.usable(tf.float32))

    def _cpu_kernel_update(self, var, grad, lr, index, grad_scale):
        raise NotImplementedError

    def update_step(self, gradient, variable, learning_rate):
        """Keras' per-variable hook (no clipping, no reduction): the bare update."""
        self._update(variable, tf.convert_to_tensor(gradient), learning_rate,
                     self._get_variable_index(variable))

    def _update(self, var, grad, lr, index):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config.update(weight_decay_rate=self.weight_decay_rate,
                      exclude_from_weight_decay=list(self.exclude_patterns),
                      clip_norm=self.clip_norm, gradient_reduction=self.gradient_reduction,
                      loss_scale=self.loss_scale_mode)
        return config


@keras.saving.register_keras_serializable(package="bert_tf2")
class AdamWeightDecay(_ClippedOptimizer):
    """The original ``AdamWeightDecayOptimizer`` (no bias correction, eps outside the sqrt,
    decoupled decay) behind global-norm clipping. Slots: ``adam_m``, ``adam_v``.

    Args:
        learning_rate: a float or a schedule (``BertSchedule``).
        weight_decay_rate: decoupled weight decay (0.01).
        beta_1: the first-moment decay (0.9).
        beta_2: the second-moment decay (0.999).
        epsilon: added to sqrt(v) (1e-6).
        name: the optimizer name.
        **kwargs: ``exclude_from_weight_decay``, ``clip_norm``, ``gradient_reduction``,
            ``loss_scale`` (see ``create_optimizer``) and Keras optimizer arguments.
    """

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6,
                 name: str = "AdamWeightDecayOptimizer", **kwargs):
        super().__init__(learning_rate, weight_decay_rate=weight_decay_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def _build_slots(self, variables):
        self._m = [self.add_variable_from_reference(v, "adam_m") for v in variables]
        self._v = [self.add_variable_from_reference(v, "adam_v") for v in variables]

    @tf.autograph.experimental.do_not_convert
    def _update(self, var, grad, lr, index):
        m, v = self._m[index], self._v[index]
        next_param, next_m, next_v = update_rules.adam_weight_decay(
            var, grad, m.value, v.value, tf.cast(lr, var.dtype), self._decay_flags[index],
            _TF_MATH, self.beta_1, self.beta_2, self.epsilon, self.weight_decay_rate)
        var.assign(next_param)
        m.value.assign(next_m)
        v.value.assign(next_v)

    supports_cpu_kernel = True

    def _cpu_kernel_update(self, var, grad, lr, index, grad_scale):
        """``_update`` on ``grad * grad_scale`` as one in-place kernel (bit-identical)."""
        cpu_ops.adam_weight_decay_apply(
            var, self._m[index], self._v[index], grad, lr, grad_scale, self.beta_1, self.beta_2,
            self.epsilon, self.weight_decay_rate, self._decay_flags[index])

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon)
        return config


@keras.saving.register_keras_serializable(package="bert_tf2")
class AdamWeightDecayOptimizer(AdamWeightDecay):
    """The original ``optimization.AdamWeightDecayOptimizer``, its constructor as it is: no
    weight decay and no exclusions unless given, and no clipping inside (the original clips in
    ``create_optimizer``, with ``tf.clip_by_global_norm``, before ``apply_gradients``). The
    update is ``AdamWeightDecay``'s (no bias correction, eps outside the sqrt, decoupled decay
    skipped for names that match an exclusion pattern).

    Args:
        learning_rate: a float or a schedule.
        weight_decay_rate: decoupled weight decay (the original's default: 0.0).
        beta_1: the first-moment decay (0.9).
        beta_2: the second-moment decay (0.999).
        epsilon: added to sqrt(v) (1e-6).
        exclude_from_weight_decay: regular expressions of the variable names without decay
            (``re.search``), e.g. ``["LayerNorm", "layer_norm", "bias"]`` as
            ``create_optimizer`` passes them.
        name: the optimizer name.
        **kwargs: ``clip_norm`` (default None here), ``gradient_reduction``, ``loss_scale``
            and Keras optimizer arguments.

    Example::

        optimizer = AdamWeightDecayOptimizer(1e-3, weight_decay_rate=0.01,
                                             exclude_from_weight_decay=["LayerNorm", "bias"])
    """

    def __init__(self, learning_rate, weight_decay_rate: float = 0.0, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay: Optional[Sequence[str]] = None,
                 name: str = "AdamWeightDecayOptimizer", **kwargs):
        kwargs.setdefault("clip_norm", None)
        super().__init__(learning_rate, weight_decay_rate=weight_decay_rate, beta_1=beta_1,
                         beta_2=beta_2, epsilon=epsilon, name=name,
                         exclude_from_weight_decay=exclude_from_weight_decay, **kwargs)


@keras.saving.register_keras_serializable(package="bert_tf2")
class Lamb(_ClippedOptimizer):
    """LAMB behind the same clipping and schedule (see module). Slots: ``lamb_m``, ``lamb_v``.

    Args:
        learning_rate: a float or a schedule (``BertSchedule``).
        weight_decay_rate: decoupled weight decay (0.01).
        beta_1: the first-moment decay (0.9).
        beta_2: the second-moment decay (0.999).
        epsilon: added to sqrt(v_hat) (1e-6).
        name: the optimizer name.
        **kwargs: as ``AdamWeightDecay``.
    """

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6, name: str = "Lamb", **kwargs):
        super().__init__(learning_rate, weight_decay_rate=weight_decay_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def _build_slots(self, variables):
        self._m = [self.add_variable_from_reference(v, "lamb_m") for v in variables]
        self._v = [self.add_variable_from_reference(v, "lamb_v") for v in variables]

    @tf.autograph.experimental.do_not_convert
    def _update(self, var, grad, lr, index):
        m, v = self._m[index], self._v[index]
        next_param, next_m, next_v = update_rules.lamb(
            var, grad, m.value, v.value, tf.cast(lr, var.dtype),
            tf.cast(self._iterations.value + 1, var.dtype), self._decay_flags[index], _TF_MATH,
            self.beta_1, self.beta_2, self.epsilon, self.weight_decay_rate)
        var.assign(next_param)
        m.value.assign(next_m)
        v.value.assign(next_v)

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon)
        return config
