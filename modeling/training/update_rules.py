"""The original optimizer's rules, written once for every backend (no TensorFlow import here).

The optimizers (``modeling.training.optimizers``, one class set for every Keras backend) call
these functions with the backend's array namespace (``math``: TensorFlow's ops on TensorFlow,
``keras.ops`` elsewhere, each giving ``square``, ``sqrt``, ``power``, ``cast``, ``minimum``,
``norm``, ``where``), so the arithmetic, its order and so its float rounding are the same:

* ``uses_weight_decay``: the original ``_do_use_weight_decay`` (regex exclusions on the name);
* ``clip_factor``: what ``tf.clip_by_global_norm`` multiplies every gradient by;
* ``adam_weight_decay``: the original ``AdamWeightDecayOptimizer`` step (no bias correction, eps
  outside the sqrt, decoupled weight decay added to the update);
* ``lamb``: LAMB (You et al. 2019) behind the same clipping and schedule.

Example::

    from keras import ops
    from modeling.training import update_rules
    param, m, v = update_rules.adam_weight_decay(param, grad, m, v, lr, decay=True, math=ops)
"""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence, Tuple

WEIGHT_DECAY_EXCLUSIONS: Tuple[str, ...] = ("LayerNorm", "layer_norm", "bias")


def variable_name(variable) -> str:
    """The name the exclusion rules read: ``variable.path`` (Keras) or ``name`` minus ``:0``.

    Args:
        variable: a Keras or TensorFlow variable.

    Returns:
        The name, a str.
    """
    path = getattr(variable, "path", None)
    if isinstance(path, str) and path:
        return path
    name = str(variable.name)
    match = re.match(r"^(.*):\d+$", name)
    return match.group(1) if match else name


def uses_weight_decay(name: str, weight_decay_rate: float = 0.01,
                      exclude_from_weight_decay: Optional[Sequence[str]] = WEIGHT_DECAY_EXCLUSIONS
                      ) -> bool:
    """The original ``_do_use_weight_decay``: False when the rate is 0 or any exclusion pattern
    is found (``re.search``) anywhere in ``name``.

    Args:
        name: the variable's name (``variable_name``).
        weight_decay_rate: the rate; 0 means no decay for any variable.
        exclude_from_weight_decay: regular expressions of the names without decay.

    Returns:
        Whether the variable is decayed.
    """
    if not weight_decay_rate:
        return False
    for pattern in exclude_from_weight_decay or ():
        if re.search(pattern, name) is not None:
            return False
    return True


def clip_factor(global_norm: Any, clip_norm: float, math: Any) -> Any:
    """The factor ``tf.clip_by_global_norm`` multiplies every gradient by, computed as it does:
    ``clip_norm * min(1 / norm, 1 / clip_norm)``, NaN when the norm is not finite.

    Args:
        global_norm: float32 [], the norm of all gradients together.
        clip_norm: the norm clipped to (1.0).
        math: the array namespace (``cast``, ``minimum``).

    Returns:
        float32 [].
    """
    one = math.cast(1.0, global_norm.dtype)
    scale_for_finite = clip_norm * math.minimum(1.0 / global_norm, one / clip_norm)
    return scale_for_finite + (global_norm - global_norm)


def adam_weight_decay(param: Any, grad: Any, m: Any, v: Any, lr: Any, decay: bool,
                      math: Any, beta_1: float = 0.9, beta_2: float = 0.999,
                      epsilon: float = 1e-6, weight_decay_rate: float = 0.01
                      ) -> Tuple[Any, Any, Any]:
    """One step of the original ``AdamWeightDecayOptimizer`` on one variable::

        m <- beta_1 m + (1 - beta_1) g;  v <- beta_2 v + (1 - beta_2) g^2
        update = m / (sqrt(v) + eps) [+ rate * param when decayed];  param <- param - lr * update

    Args:
        param: the variable's value (any shape).
        grad: its (clipped, dense) gradient, same shape.
        m: the first-moment slot.
        v: the second-moment slot.
        lr: the learning rate, in ``param``'s dtype.
        decay: whether weight decay applies (``uses_weight_decay``).
        math: the array namespace (``square``, ``sqrt``).
        beta_1: the first-moment decay.
        beta_2: the second-moment decay.
        epsilon: added to sqrt(v).
        weight_decay_rate: the decoupled weight decay.

    Returns:
        ``(next_param, next_m, next_v)``.
    """
    next_m = beta_1 * m + (1.0 - beta_1) * grad
    next_v = beta_2 * v + (1.0 - beta_2) * math.square(grad)
    update = next_m / (math.sqrt(next_v) + epsilon)
    if decay:
        update += weight_decay_rate * param
    return param - lr * update, next_m, next_v


def lamb(param: Any, grad: Any, m: Any, v: Any, lr: Any, step: Any, decay: bool, math: Any,
         beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
         weight_decay_rate: float = 0.01) -> Tuple[Any, Any, Any]:
    """One LAMB step on one variable: the bias-corrected Adam direction plus decoupled decay,
    scaled by the trust ratio ||param|| / ||update|| (1 when either is 0 or without decay).

    Args:
        param: the variable's value.
        grad: its (clipped, dense) gradient.
        m: the first-moment slot.
        v: the second-moment slot.
        lr: the learning rate, in ``param``'s dtype.
        step: t, the 1-based update count, in ``param``'s dtype.
        decay: whether weight decay (and the trust ratio) applies.
        math: the array namespace (``square``, ``sqrt``, ``power``, ``cast``, ``norm``, ``where``).
        beta_1: the first-moment decay.
        beta_2: the second-moment decay.
        epsilon: added to sqrt(v_hat).
        weight_decay_rate: the decoupled weight decay.

    Returns:
        ``(next_param, next_m, next_v)``.
    """
    next_m = beta_1 * m + (1.0 - beta_1) * grad
    next_v = beta_2 * v + (1.0 - beta_2) * math.square(grad)
    m_hat = next_m / (1.0 - math.power(math.cast(beta_1, param.dtype), step))
    v_hat = next_v / (1.0 - math.power(math.cast(beta_2, param.dtype), step))
    update = m_hat / (math.sqrt(v_hat) + epsilon)
    if decay:
        update += weight_decay_rate * param
        w_norm = math.norm(param)
        u_norm = math.norm(update)
        ratio = math.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
        return param - lr * ratio * update, next_m, next_v
    return param - lr * update, next_m, next_v
