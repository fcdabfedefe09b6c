"""The original BERT learning-rate schedule: linear warmup, then linear (power 1) decay to 0.

``schedule(s)`` (float32, computed op for op as the original ``create_optimizer``)::

    decayed(s) = init_lr * (1 - min(s, N) * (1/N))      # tf.train.polynomial_decay, power 1
    warmup(s)  = (init_lr * (1/W)) * s
    schedule(s) = (1 - w) * decayed(s) + w * warmup(s)   # w = 1.0 if s < W else 0.0 (W > 0)

with N = ``num_train_steps`` and W = ``num_warmup_steps`` (no warmup term when W = 0); every
value is float32, rounded as the original graph rounds it (see ``bert_schedule_value``).

**One step ahead (google-research/bert #1050).** In the original the global step is incremented
in the same ``tf.group`` as the update with no control dependency, and the learning-rate tensor
reads the variable lazily: in practice the update made at global step t uses ``schedule(t + 1)``
(the first update uses ``init_lr / W``, the update at step N-1 uses 0). ``BertSchedule`` maps
the optimizer's iteration counter t to the rate *used* by that update: ``schedule(t + 1)`` by
default (``one_step_ahead=True``, faithful), ``schedule(t)`` with ``one_step_ahead=False`` (the
corrected schedule: the first update uses 0).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops
from modeling import backend



def _reciprocal32(n: int) -> np.float32:
    return np.float32(1.0) / np.float32(n)


def bert_schedule_value(step, init_lr: float, num_train_steps: int,
                        num_warmup_steps: int):
    """schedule(step) as a float32 scalar tensor (``step``: int scalar tensor or Python int).

    Rounded as the original graph computes it: TensorFlow's graph optimizer turns the divisions
    by the constant step counts into multiplications by float32 reciprocals and folds
    ``init_lr * (s * (1/W))`` into ``(init_lr * (1/W)) * s``; checked bit for bit against the
    original graph (tf.compat.v1 session) on 25 random (init_lr, N, W) and the golden files.
    Written in ``keras.ops``: the same arithmetic on every backend.

    Args:
        step: the step.
        init_lr: the peak learning rate.
        num_train_steps: N, the step where the rate reaches 0.
        num_warmup_steps: W, linear warmup steps (0: none).
    """
    step = ops.convert_to_tensor(step)
    lr = ops.convert_to_tensor(init_lr, "float32")
    step_f = ops.cast(step, "float32")
    # Polynomial decay, power 1, end 0.
    p = ops.minimum(step_f, float(num_train_steps)) * _reciprocal32(num_train_steps)
    # Never below the end rate 0: XLA contracts lr * (1 - p) into a fused multiply-add, which
    # at p = N * (1/N) leaves -1e-11 instead of 0 (the original's graph rounds to 0 here).
    decayed = ops.maximum(lr * (1.0 - p), 0.0)
    if not num_warmup_steps:
        return decayed
    warmup_lr = (lr * _reciprocal32(num_warmup_steps)) * step_f
    is_warmup = ops.cast(ops.cast(step, backend.STEP_DTYPE) < num_warmup_steps, "float32")
    return (1.0 - is_warmup) * decayed + is_warmup * warmup_lr


@keras.saving.register_keras_serializable(package="bert_tf2")
class BertSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Iteration t (updates done so far) -> learning rate used by the next update (see module).

    Args:
        init_lr: the peak learning rate.
        num_train_steps: N, the step where the rate reaches 0.
        num_warmup_steps: W, linear warmup steps.
        one_step_ahead: iteration t uses schedule(t + 1), as the original does in practice.

    Raises:
        ValueError: N <= 0 or W < 0.
    """

    def __init__(self, init_lr: float, num_train_steps: int, num_warmup_steps: int,
                 one_step_ahead: bool = True):
        if num_train_steps <= 0:
            raise ValueError("num_train_steps must be > 0, got %r" % (num_train_steps,))
        if num_warmup_steps < 0:
            raise ValueError("num_warmup_steps must be >= 0, got %r" % (num_warmup_steps,))
        self.init_lr = float(init_lr)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.one_step_ahead = bool(one_step_ahead)

    def __call__(self, step):
        step = ops.cast(step, backend.STEP_DTYPE)
        if self.one_step_ahead:
            step = step + 1
        return bert_schedule_value(step, self.init_lr, self.num_train_steps,
                                   self.num_warmup_steps)

    def get_config(self):
        return {"init_lr": self.init_lr, "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps,
                "one_step_ahead": self.one_step_ahead}
