"""The original BERT optimizer as a Keras 3 optimizer, one class set for every Keras backend.

``create_optimizer(init_lr, num_train_steps, num_warmup_steps)`` returns an ``AdamWeightDecay``
whose ``apply_gradients(zip(grads, variables))`` performs exactly the original train step's
update (google-research/bert ``optimization.create_optimizer``):

1. ``tf.clip_by_global_norm(grads, 1.0)`` on the raw gradients (``update_rules.clip_factor``,
   its factor). On TensorFlow a ``tf.IndexedSlices`` gradient (from ``tf.gather``) is measured
   by its values, i.e. each occurrence of a repeated id counts separately, as the original; the
   slices are densified (repeated rows summed) after clipping. On JAX the gradient of a gather
   is dense; ``clipping_norm`` lets the JAX step clip by the original's norm instead
   (``backends.jax.steps``: the looked-up table's rows counted per occurrence).
2. For every variable (``m``, ``v`` slots start at 0; no bias correction)::

       m <- 0.9 m + 0.1 g
       v <- 0.999 v + 0.001 g^2
       update = m / (sqrt(v) + 1e-6)  [+ 0.01 * param unless excluded]
       param <- param - lr * update

   Weight decay is skipped when ``re.search`` finds "LayerNorm", "layer_norm" or "bias" anywhere
   in the variable's name (``variable.path`` for Keras variables): ``uses_weight_decay``.
3. ``lr`` comes from ``modeling.training.schedules.BertSchedule``: by default the update made
   when the iteration counter is t uses schedule(t + 1), as the original does in practice
   (#1050); ``one_step_ahead=False`` gives the corrected schedule(t).
   ``float(optimizer.learning_rate)`` read before ``apply_gradients`` is the rate that update
   will use.

``Lamb`` (``create_optimizer(..., optimizer="lamb")``) shares steps 1 and 3 and uses the LAMB
update (You et al. 2019): bias-corrected Adam direction plus decoupled weight decay, scaled per
variable by the trust ratio ||param|| / ||update|| (1 when either is 0 or the variable is
excluded from weight decay).

The rules are ``update_rules``'s, called with the array namespace of the backend (TensorFlow's
ops on TensorFlow, ``keras.ops`` elsewhere), so both backends compute the same arithmetic in the
same order. What only TensorFlow has lives in its module of ``modeling.training.backends``,
which these classes call on that backend:

* **Replicas.** ``apply_gradients`` may be called in a replica context (``strategy.run``) with
  per-replica gradients of a loss already divided by the number of replicas.
  ``gradient_reduction="mean_then_clip"`` (default): the gradients are summed across replicas
  first (the gradient of the global-batch mean), then clipped: identical to one replica at the
  same global batch. ``"clip_then_sum"``: what the original does on TPU
  (``CrossShardOptimizer`` after ``clip_by_global_norm``): each replica clips its own
  gradients, then they are summed; pass the per-replica loss *undivided* to get the original's
  TPU numbers. On JAX (``keras.distribution.DataParallel``) the gradient is the global batch's,
  clipped once: ``"mean_then_clip"`` only.
* **Loss scaling** (``loss_scale="dynamic"`` or a number; for float16): ``scale_loss(loss)``
  multiplies the loss; gradients are divided back before clipping; with non-finite gradients
  the update is skipped (variables and slots unchanged, the iteration counter still advances)
  and the dynamic scale halves; it doubles after 2000 finite steps. bfloat16
  (``mixed_bfloat16``) needs none, and JAX has none.
* ``clip_and_apply(grads, variables)`` is ``apply_gradients`` returning ``{"global_norm",
  "grads_finite"}`` (the norm before clipping, after the cross-replica sum in mean_then_clip
  mode) for logging; ``clip_and_apply(..., cpu_kernel=True)`` runs the clipping and the update
  as one in-place CPU kernel per variable where ``cpu_kernel_applies`` (the trainer's
  ``Execution.optimizer_kernel``).

``modeling.create_optimizer`` and ``modeling.optimization`` (the original's module name) give
this module's names.

Example::

    import keras
    import modeling

    optimizer = modeling.create_optimizer(2e-5, num_train_steps=1000, num_warmup_steps=100)
    kernel = keras.Variable([[1.0, -2.0], [3.0, 0.5]])
    optimizer.apply([keras.ops.ones((2, 2))], [kernel])   # clip to norm 1, AdamWeightDecay
    int(optimizer.iterations)                               # == 1
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, Iterable, Optional, Sequence, Union

import keras
import numpy as np
from keras import ops

from modeling.training import backends, update_rules
from modeling.training.schedules import BertSchedule
from modeling.training.update_rules import (WEIGHT_DECAY_EXCLUSIONS, uses_weight_decay,
                                            variable_name)

# The running backend's side of the update (``backends``: TensorFlow's replicas, IndexedSlices,
# loss scaling and CPU kernels; elsewhere Keras' own path).
_BACKEND = backends.current("optimizer")

OPTIMIZERS = ("adamw", "lamb")
GRADIENT_REDUCTIONS = ("mean_then_clip", "clip_then_sum")

_INITIAL_LOSS_SCALE = 2.0 ** 15


def global_norm(grads: Sequence[Any]) -> Any:
    """sqrt(sum of every gradient's squared entries), float32 [] (None entries skipped), in
    ``keras.ops`` (dense gradients: the JAX step's).

    Args:
        grads: the gradients.

    Returns:
        The norm, a float32 scalar.
    """
    squares = [ops.sum(ops.square(ops.cast(g, "float32"))) for g in grads if g is not None]
    return ops.sqrt(sum(squares[1:], squares[0]))


class _ClippedOptimizer(keras.optimizers.Optimizer):
    """Global-norm clipping, per-variable decay flags and the two moment slots around an
    ``update_rules`` rule (both rules are Adam-family: ``beta_1``, ``beta_2``, ``epsilon``);
    on TensorFlow, its hooks for replicas, loss scaling and the CPU kernels (module doc).

    Subclasses set ``_PREFIX`` (the slots' names: ``<prefix>_m``, ``<prefix>_v``) and implement
    ``_rule(param, grad, m, v, lr, decay, math)``.
    """

    _PREFIX = ""

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay: Optional[Sequence[str]] = WEIGHT_DECAY_EXCLUSIONS,
                 clip_norm: Optional[float] = 1.0, gradient_reduction: str = "mean_then_clip",
                 loss_scale: Union[None, str, float] = None, name: str = "optimizer",
                 **kwargs):
        if gradient_reduction not in GRADIENT_REDUCTIONS:
            raise ValueError("gradient_reduction must be one of %s, got %r"
                             % (", ".join(GRADIENT_REDUCTIONS), gradient_reduction))
        if loss_scale is not None and loss_scale != "dynamic" and not float(loss_scale) > 0:
            raise ValueError("loss_scale must be None, 'dynamic' or > 0, got %r" % (loss_scale,))
        _BACKEND.check_optimizer(gradient_reduction, loss_scale)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.weight_decay_rate = float(weight_decay_rate)
        self.exclude_patterns = tuple(exclude_from_weight_decay or ())
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.gradient_reduction = gradient_reduction
        self.loss_scale_mode = loss_scale
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self._decay_flags = []
        # What a backend's apply path reads and leaves, per replica thread (MirroredStrategy
        # runs threads): ``cpu_kernel`` (clip_and_apply's choice), ``last`` (the norm and its
        # finiteness).
        self.step_stats = threading.local()
        self._clipping_norm = None
        self._loss_scale_var = None
        self._good_steps = None

    # ------------------------------------------------------------------------------------ build
    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._decay_flags = [uses_weight_decay(variable_name(v), self.weight_decay_rate,
                                               self.exclude_patterns) for v in variables]
        self._m = [self.add_variable_from_reference(v, self._PREFIX + "_m") for v in variables]
        self._v = [self.add_variable_from_reference(v, self._PREFIX + "_v") for v in variables]
        if self.loss_scale_mode is not None:
            initial = (_INITIAL_LOSS_SCALE if self.loss_scale_mode == "dynamic"
                       else float(self.loss_scale_mode))
            self._loss_scale_var = self.add_variable(
                (), initializer=keras.initializers.Constant(initial), dtype="float32",
                aggregation="only_first_replica", name="loss_scale")
            self._good_steps = self.add_variable((), initializer="zeros", dtype="int64",
                                                 aggregation="only_first_replica",
                                                 name="loss_scale_good_steps")

    def decays(self, variable) -> bool:
        """Whether weight decay applies to ``variable`` (the optimizer must be built).

        Args:
            variable: one of the variables the optimizer was built with.

        Returns:
            A bool.
        """
        return self._decay_flags[self.variable_index(variable)]

    def variable_index(self, variable) -> int:
        """``variable``'s place among the variables the optimizer was built with (its slots').

        Args:
            variable: one of them.
        """
        return self._get_variable_index(variable)

    def slots(self, index: int):
        """``(m, v, decays)`` of the variable at ``index``: its two moment slots and whether
        weight decay applies to it (an in-place kernel updates them itself).

        Args:
            index: ``variable_index``'s.
        """
        return self._m[index], self._v[index], self._decay_flags[index]

    # ------------------------------------------------------------------------------ loss scale
    @property
    def loss_scale(self):
        """The current loss scale (a float32 variable), or None without loss scaling."""
        return self._loss_scale_var

    @property
    def loss_scale_good_steps(self):
        """The finite steps since the dynamic loss scale last changed (an int64 variable), or
        None."""
        return self._good_steps

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
        return loss * ops.cast(self._loss_scale_var.value, loss.dtype)

    # ------------------------------------------------------------------------------ apply path
    def clip_and_apply(self, grads: Iterable, variables: Iterable,
                       cpu_kernel: bool = False) -> Dict[str, Any]:
        """``apply_gradients`` that returns ``{"global_norm", "grads_finite"}`` (see module).

        Args:
          grads: the gradients of ``variables`` (tensors or ``tf.IndexedSlices``).
          variables: the variables to update.
          cpu_kernel: clip and update with one in-place CPU kernel per variable where
            ``cpu_kernel_applies`` (and not across replicas); otherwise, and by default, the
            backend's ops. Read when the update is traced.

        Returns:
          ``{"global_norm": the norm before clipping, "grads_finite": whether it is finite}``
          on TensorFlow; empty on another backend, whose step computes the norm itself
          (``backends.jax.steps.make_train_step``).
        """
        self.step_stats.last = {}
        # Handed to the update through Keras' ``apply`` in this thread's state (the replica's
        # thread under a MirroredStrategy, like the stats).
        self.step_stats.cpu_kernel = bool(cpu_kernel)
        try:
            self.apply(list(grads), list(variables))
        finally:
            self.step_stats.cpu_kernel = False
        stats, self.step_stats.last = getattr(self.step_stats, "last", {}), {}
        return stats

    def _backend_apply_gradients(self, grads, trainable_variables):
        _BACKEND.apply_gradients(self, grads, trainable_variables,
                                 super()._backend_apply_gradients)

    def clipping_norm(self, norm):
        """While tracing an update: clip by ``norm`` instead of the gradients' own global norm
        (``backends.jax.steps``: the original's norm, a looked-up table's gradient counted per
        occurrence). A context manager.

        Args:
            norm: the traced scalar norm.

        Returns:
            The context manager.
        """

        @contextlib.contextmanager
        def scope():
            self._clipping_norm = norm
            try:
                yield
            finally:
                self._clipping_norm = None

        return scope()

    def _clip_gradients(self, grads):
        """Keras' hook before the per-variable updates (the path of every backend but
        TensorFlow, whose hooks clip)."""
        if self.clip_norm is None:
            return grads
        norm = global_norm(grads) if self._clipping_norm is None else self._clipping_norm
        factor = update_rules.clip_factor(norm, self.clip_norm, ops)
        return [None if g is None else g * ops.cast(factor, g.dtype) for g in grads]

    supports_cpu_kernel = False  # True where the class has an in-place CPU kernel

    def cpu_kernel_applies(self, variables) -> bool:
        """Whether ``clip_and_apply(..., cpu_kernel=True)`` of ``variables`` runs as
        ``cpu_ops`` kernels: TensorFlow, an optimizer that has one, no loss scaling, no
        distribution strategy in scope, float32 variables, the kernel library built.

        Args:
            variables: the variables to be updated.

        Returns:
            A bool.
        """
        return (self.supports_cpu_kernel and self.loss_scale_mode is None
                and _BACKEND.cpu_kernel_applies(variables))

    def update_step(self, gradient, variable, learning_rate):
        """Keras' per-variable hook (after ``_clip_gradients``; no reduction): the rule."""
        self.apply_rule(variable, gradient, learning_rate, self.variable_index(variable))

    def apply_rule(self, var, grad, lr, index: int) -> None:
        """The rule on one variable and its slots, assigned in place (per device on
        TensorFlow, in an update context: only assigns).

        Args:
            var: the variable.
            grad: its dense gradient, clipped.
            lr: the learning rate.
            index: ``variable_index(var)``.
        """
        math = _BACKEND.MATH
        param = var.value if isinstance(var, keras.Variable) else var
        m, v = self._m[index], self._v[index]
        next_param, next_m, next_v = self._rule(
            param, math.cast(grad, param.dtype), m.value, v.value, math.cast(lr, param.dtype),
            self._decay_flags[index], math)
        self.assign(var, next_param)
        self.assign(m, next_m)
        self.assign(v, next_v)

    def _rule(self, param, grad, m, v, lr, decay, math):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config.update(weight_decay_rate=self.weight_decay_rate,
                      exclude_from_weight_decay=list(self.exclude_patterns),
                      clip_norm=self.clip_norm, gradient_reduction=self.gradient_reduction,
                      loss_scale=self.loss_scale_mode, beta_1=self.beta_1,
                      beta_2=self.beta_2, epsilon=self.epsilon)
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

    _PREFIX = "adam"
    supports_cpu_kernel = True

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6,
                 name: str = "AdamWeightDecayOptimizer", **kwargs):
        super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2, epsilon, name=name,
                         **kwargs)

    def _rule(self, param, grad, m, v, lr, decay, math):
        return update_rules.adam_weight_decay(param, grad, m, v, lr, decay, math, self.beta_1,
                                              self.beta_2, self.epsilon, self.weight_decay_rate)

    def apply_kernel(self, var, grad, lr, index: int, grad_scale) -> None:
        """``apply_rule`` on ``grad * grad_scale`` as one in-place CPU kernel
        (bit-identical; where ``cpu_kernel_applies``).

        Args:
            var: the variable.
            grad: its dense gradient, before clipping.
            lr: the float32 learning rate.
            index: ``variable_index(var)``.
            grad_scale: the clipping factor.
        """
        _BACKEND.adam_weight_decay_kernel(self, var, grad, lr, index, grad_scale)


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

    _PREFIX = "lamb"

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6, name: str = "Lamb", **kwargs):
        super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2, epsilon, name=name,
                         **kwargs)

    def _rule(self, param, grad, m, v, lr, decay, math):
        step = math.cast(self._iterations.value + 1, param.dtype)
        return update_rules.lamb(param, grad, m, v, lr, step, decay, math, self.beta_1,
                                 self.beta_2, self.epsilon, self.weight_decay_rate)


def create_optimizer(init_lr: float, num_train_steps: int, num_warmup_steps: int, *tf1_args,
                     optimizer: str = "adamw", one_step_ahead: bool = True,
                     gradient_reduction: str = "mean_then_clip",
                     loss_scale: Union[None, str, float] = None,
                     weight_decay_rate: float = 0.01, clip_norm: Optional[float] = 1.0,
                     use_tpu: bool = False) -> keras.optimizers.Optimizer:
    """The original ``create_optimizer`` as a Keras optimizer (``AdamWeightDecay`` or ``Lamb``,
    on whichever backend Keras runs).

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
    cls = AdamWeightDecay if optimizer == "adamw" else Lamb
    return cls(schedule, weight_decay_rate=weight_decay_rate, clip_norm=clip_norm,
               gradient_reduction=gradient_reduction, loss_scale=loss_scale)
