"""The original BERT optimizer on any Keras 3 backend (JAX; TensorFlow has its own, below).

``modeling.create_optimizer(init_lr, num_train_steps, num_warmup_steps)``
(``modeling.training.optimizers``) returns this module's ``AdamWeightDecay`` (or ``Lamb``) on a
backend other than TensorFlow; it does the original train step's update with ``keras.ops`` only:

1. clip by global norm 1.0 (``update_rules.clip_factor``, the factor of
   ``tf.clip_by_global_norm``), in ``_clip_gradients``, Keras' hook before the update;
2. the update rule of ``update_rules`` (AdamWeightDecay without bias correction, weight decay
   skipped for names matching "LayerNorm", "layer_norm" or "bias"; or LAMB);
3. the rate from ``BertSchedule`` (warmup, then linear decay; iteration t uses schedule(t + 1)).

The rules are the ones the TensorFlow optimizers (``modeling.training.optimization``) call, so
both backends compute the same arithmetic in the same order. ``modeling.optimization`` gives
this module's classes when Keras runs on another backend than TensorFlow.

What the TensorFlow path has and this one does not (the constructor says so when asked):

* ``gradient_reduction="clip_then_sum"`` (the original's per-TPU-core clipping): with
  ``keras.distribution.DataParallel`` the gradient is the global batch's, clipped once
  (``"mean_then_clip"``, the TensorFlow default);
* ``loss_scale`` (float16 training): bfloat16 (``mixed_bfloat16``) needs none;
* sparse gradients: JAX's gradient of a gather is dense, so a repeated token id counts once in
  the global norm (its rows summed), where TensorFlow's IndexedSlices count each occurrence.

Example::

    import keras
    import modeling

    optimizer = modeling.create_optimizer(2e-5, num_train_steps=1000, num_warmup_steps=100)
    kernel = keras.Variable([[1.0, -2.0], [3.0, 0.5]])
    optimizer.apply([keras.ops.ones((2, 2))], [kernel])   # clip to norm 1, AdamWeightDecay
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

import keras
from keras import ops

from modeling.training import update_rules
from modeling.training.update_rules import WEIGHT_DECAY_EXCLUSIONS, uses_weight_decay

def global_norm(grads: Sequence[Any]) -> Any:
    """sqrt(sum of every gradient's squared entries), float32 [] (None entries skipped).

    Args:
        grads: the gradients.
    """
    squares = [ops.sum(ops.square(ops.cast(g, "float32"))) for g in grads if g is not None]
    return ops.sqrt(sum(squares[1:], squares[0]))


class _ClippedOptimizer(keras.optimizers.Optimizer):
    """Global-norm clipping, per-variable decay flags and the two moment slots around an
    ``update_rules`` rule (both rules are Adam-family: ``beta_1``, ``beta_2``, ``epsilon``).

    Subclasses set ``_PREFIX`` (the slots' name) and implement
    ``_rule(param, grad, m, v, lr, decay)``.
    """

    _SLOTS = ("m", "v")

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay: Optional[Sequence[str]] = WEIGHT_DECAY_EXCLUSIONS,
                 clip_norm: Optional[float] = 1.0, gradient_reduction: str = "mean_then_clip",
                 loss_scale: Union[None, str, float] = None, name: str = "optimizer",
                 **kwargs):
        if gradient_reduction != "mean_then_clip":
            raise ValueError("gradient_reduction=%r: on the %s backend the gradient of the "
                             "global batch is clipped once ('mean_then_clip'); per-replica "
                             "clipping needs the TensorFlow backend"
                             % (gradient_reduction, keras.backend.backend()))
        if loss_scale is not None:
            raise ValueError("loss_scale=%r: loss scaling (float16) needs the TensorFlow "
                             "backend; use bfloat16 (mixed_bfloat16) on %s"
                             % (loss_scale, keras.backend.backend()))
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.weight_decay_rate = float(weight_decay_rate)
        self.exclude_patterns = tuple(exclude_from_weight_decay or ())
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.gradient_reduction = gradient_reduction
        self.loss_scale_mode = None
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self._decay_flags: List[bool] = []

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._decay_flags = [uses_weight_decay(update_rules.variable_name(v),
                                               self.weight_decay_rate, self.exclude_patterns)
                             for v in variables]
        self._rule_slots = [[self.add_variable_from_reference(v, "%s_%s" % (self._PREFIX, slot))
                        for v in variables] for slot in self._SLOTS]

    def decays(self, variable) -> bool:
        """Whether weight decay applies to ``variable`` (the optimizer must be built).

        Args:
            variable: one of the variables the optimizer was built with.
        """
        return self._decay_flags[self._get_variable_index(variable)]

    def clipping_norm(self, norm):
        """While tracing an update: clip by ``norm`` instead of the gradients' own global norm
        (``jax_training``: the original's norm, a looked-up table's gradient counted per
        occurrence). A context manager.

        Args:
            norm: the traced scalar norm.
        """
        import contextlib

        @contextlib.contextmanager
        def scope():
            self._clipping_norm = norm
            try:
                yield
            finally:
                self._clipping_norm = None

        return scope()

    def _clip_gradients(self, grads):
        if self.clip_norm is None:
            return grads
        norm = getattr(self, "_clipping_norm", None)
        norm = global_norm(grads) if norm is None else norm
        factor = update_rules.clip_factor(norm, self.clip_norm, ops)
        return [None if g is None else g * ops.cast(factor, g.dtype) for g in grads]

    def update_step(self, gradient, variable, learning_rate):
        """The rule on one variable (Keras' per-variable hook, after ``_clip_gradients``)."""
        index = self._get_variable_index(variable)
        m, v = self._rule_slots[0][index], self._rule_slots[1][index]
        lr = ops.cast(learning_rate, variable.dtype)
        next_param, next_m, next_v = self._rule(variable.value, ops.cast(gradient, variable.dtype),
                                                m.value, v.value, lr, self._decay_flags[index])
        self.assign(variable, next_param)
        self.assign(m, next_m)
        self.assign(v, next_v)

    def _rule(self, param, grad, m, v, lr, decay):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config.update(weight_decay_rate=self.weight_decay_rate,
                      exclude_from_weight_decay=list(self.exclude_patterns),
                      clip_norm=self.clip_norm, gradient_reduction=self.gradient_reduction,
                      beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon)
        return config


class AdamWeightDecay(_ClippedOptimizer):
    """The original ``AdamWeightDecayOptimizer`` behind global-norm clipping (see module).
    Slots: ``adam_m``, ``adam_v``.

    Args:
        learning_rate: a float or a schedule (``BertSchedule``).
        weight_decay_rate: decoupled weight decay (0.01).
        beta_1: the first-moment decay (0.9).
        beta_2: the second-moment decay (0.999).
        epsilon: added to sqrt(v) (1e-6).
        name: the optimizer name.
        **kwargs: ``exclude_from_weight_decay``, ``clip_norm`` and Keras optimizer arguments.
    """

    _PREFIX = "adam"

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6,
                 name: str = "AdamWeightDecayOptimizer", **kwargs):
        super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2, epsilon, name=name,
                         **kwargs)

    def _rule(self, param, grad, m, v, lr, decay):
        return update_rules.adam_weight_decay(param, grad, m, v, lr, decay, ops, self.beta_1,
                                              self.beta_2, self.epsilon, self.weight_decay_rate)


class AdamWeightDecayOptimizer(AdamWeightDecay):
    """The original class's constructor: no decay, no exclusions and no clipping unless given
    (see ``modeling.training.optimization.AdamWeightDecayOptimizer``).

    Args:
        learning_rate: a float or a schedule.
        weight_decay_rate: decoupled weight decay (0.0).
        beta_1: the first-moment decay (0.9).
        beta_2: the second-moment decay (0.999).
        epsilon: added to sqrt(v) (1e-6).
        exclude_from_weight_decay: regular expressions of the names without decay.
        name: the optimizer name.
        **kwargs: ``clip_norm`` (default None here) and Keras optimizer arguments.
    """

    def __init__(self, learning_rate, weight_decay_rate: float = 0.0, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay: Optional[Sequence[str]] = None,
                 name: str = "AdamWeightDecayOptimizer", **kwargs):
        kwargs.setdefault("clip_norm", None)
        super().__init__(learning_rate, weight_decay_rate=weight_decay_rate, beta_1=beta_1,
                         beta_2=beta_2, epsilon=epsilon, name=name,
                         exclude_from_weight_decay=exclude_from_weight_decay, **kwargs)


class Lamb(_ClippedOptimizer):
    """LAMB behind the same clipping and schedule. Slots: ``lamb_m``, ``lamb_v``.

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

    def _rule(self, param, grad, m, v, lr, decay):
        step = ops.cast(self.iterations + 1, param.dtype)
        return update_rules.lamb(param, grad, m, v, lr, step, decay, ops, self.beta_1,
                                 self.beta_2, self.epsilon, self.weight_decay_rate)
