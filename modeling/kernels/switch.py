"""The switches for the fused kernels: read when a training or a prediction step is traced.

Inside ``with fused_training_kernels():`` layers called with ``training=True`` compute the same
model with faster kernels that round differently from TensorFlow's op-by-op graph (within float
rounding):

* ``BertDense`` with the tanh GELU: fused GELU kernels (XLA's on float32, the C++ CPU kernel on
  bfloat16) and a hand-written gradient (``modeling/kernels/gelu_dense.py``);
* ``modeling.layers.dropout.Dropout`` and ``BertLayerNorm`` on float32 or bfloat16: one-pass CPU
  kernels (``modeling/kernels/cpu_ops.py``), when the kernel library could be built;
* ``SelfAttention``'s scale + bias + softmax + dropout (float32 or bfloat16, a [B, 1, 1, T] bias):
  one CPU kernel each way, drawing its layer's dropout mask as the dropout kernel would;
* ``AdamWeightDecay`` (float32 variables, one replica, no loss scaling): the clipping and the
  update as one in-place CPU kernel per variable (bit-identical to the op-by-op update).

The trainer enables it (``TrainerConfig.fused_kernels``, ``run_pretraining --xla_kernels``) for
one local replica that computes on a CPU (``distribution.cpu_kernels_apply``: the C++ kernels are
registered for the CPU only, so on a GPU they would pin dropout/LayerNorm to the host or fail
placement, and the update would read GPU variables from a CPU op) and never in
``--deterministic`` runs. The XLA GELU kernel would compile for a GPU too, but it shares this one
switch with the CPU kernels and its gain was measured on CPUs only (on a GPU, ``--use_xla``
compiles the whole step), so on GPUs and TPUs the whole switch stays off. The switch is per
thread.

Inside ``with fused_inference_kernels():`` layers called without ``training`` (False or None)
use the one kernel that applies to a forward pass without dropout: ``BertLayerNorm``'s one-pass
CPU kernel (on float32 or bfloat16 activations, any ``gamma``/``beta`` dtype; its rows are
independent, so the result does not depend on the thread count). ``finetuning.Predictor`` and
``trainer.evaluate`` enable it for their steps where ``distribution.prediction_kernels_apply``
holds (one replica on a CPU, unless an enclosing ``fused_inference_kernels(False)`` says no: the
tools' ``--noxla_kernels`` and ``--deterministic``, ``bert_cli.runner``); exported SavedModels
are traced outside it and keep TensorFlow's ops (a serving binary has no kernel library).
"""

from __future__ import annotations

import contextlib
import threading

_state = threading.local()


@contextlib.contextmanager
def _set(name: str, enabled: bool):
    previous = getattr(_state, name, None)  # None: no context has set it
    setattr(_state, name, bool(enabled))
    try:
        yield
    finally:
        setattr(_state, name, previous)


def fused_training_kernels(enabled: bool = True):
    """Within this context, steps traced with ``training=True`` use the fused kernels."""
    return _set("training", enabled)


def fused_inference_kernels(enabled: bool = True):
    """Within this context, steps traced without ``training`` (False or None) use the fused
    LayerNorm."""
    return _set("inference", enabled)


def training_kernels_enabled() -> bool:
    """Whether the innermost ``fused_training_kernels`` context (this thread) enables them."""
    return bool(getattr(_state, "training", False))


def inference_kernels_enabled() -> bool:
    """Whether the innermost ``fused_inference_kernels`` context (this thread) enables them."""
    return bool(getattr(_state, "inference", False))


def inference_kernels_allowed() -> bool:
    """False inside ``fused_inference_kernels(False)`` (this thread; a tool's
    ``--noxla_kernels``), else True: what ``Predictor`` and ``evaluate`` ask before they enable
    the kernels for their own steps."""
    return getattr(_state, "inference", None) is not False
