"""Which fused kernels a model's layers use: a ``Kernels`` value the layers carry while traced.

``Kernels(training=True)``: layers called with ``training=True`` compute the same model with
faster kernels that round differently from TensorFlow's op-by-op graph (within float rounding):

* ``BertDense`` with the tanh GELU: fused GELU kernels (XLA's on float32, the C++ CPU kernel on
  bfloat16) and a hand-written gradient (``modeling/kernels/gelu_dense.py``);
* ``modeling.layers.dropout.Dropout`` and ``BertLayerNorm`` on float32 or bfloat16: one-pass CPU
  kernels (``modeling/kernels/cpu_ops.py``), when the kernel library could be built;
* ``SelfAttention``'s scale + bias + softmax + dropout (float32 or bfloat16, a [B, 1, 1, T] bias):
  one CPU kernel each way, drawing its layer's dropout mask as the dropout kernel would.

(``AdamWeightDecay``'s clipping + update as one in-place CPU kernel per variable is the
optimizer's own argument, ``clip_and_apply(..., cpu_kernel=True)``.)

``Kernels(inference=True)``: layers called without ``training`` (False or None) use the one
kernel that applies to a forward pass without dropout: ``BertLayerNorm``'s one-pass CPU kernel
(on float32 or bfloat16 activations, any ``gamma``/``beta`` dtype; its rows are independent, so
the result does not depend on the thread count).

``with use_kernels(model, kernels):`` gives ``model`` and every layer in it that value while
the block runs; the layers read it (``kernels_of(self)``) when a step is traced, so the block
wraps the tracing, and the value is the model's, not the thread's: the replica threads of a
MirroredStrategy see it. Outside any block a layer is op by op (``OP_BY_OP``).

Who decides: the trainer (``backends.tensorflow.execution.decide``: ``TrainerConfig.fused_kernels``,
``run_pretraining --xla_kernels``) for one local replica that computes on a CPU
(``strategies.cpu_kernels_apply``: the C++ kernels are registered for the CPU only, so on a GPU
they would pin dropout/LayerNorm to the host or fail placement, and the update would read GPU
variables from a CPU op), never in ``--deterministic`` runs. The XLA GELU kernel would compile
for a GPU too, but it shares the one ``training`` choice with the CPU kernels and its gain was
measured on CPUs only (on a GPU, ``--use_xla`` compiles the whole step), so on GPUs and TPUs the
whole choice stays off. ``backends.tensorflow.predict.Predictor`` and ``evaluation.evaluate`` choose
``inference`` for their steps where ``strategies.prediction_kernels_apply`` holds (one
replica on a CPU); exported SavedModels are traced outside any block and keep TensorFlow's ops
(a serving binary has no kernel library).

The one setting that stays per thread is a tool's permission: inside
``fused_inference_kernels(False)`` (the tools' ``--noxla_kernels`` and ``--deterministic``,
``bert_cli.runner``, around a whole run) ``inference_kernels_allowed()`` is False, and
``Predictor``/``evaluate`` choose no kernels. It is read when they decide (in the tool's own
thread), never while a step is traced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Iterator

_ATTRIBUTE = "_bert_fused_kernels"  # where a layer carries its Kernels value
_state = threading.local()


@dataclasses.dataclass(frozen=True)
class Kernels:
    """Which fused kernels a model's layers use (see the module docstring).

    Attributes:
      training: calls with ``training=True`` use the fused training kernels.
      inference: calls without ``training`` use the fused LayerNorm forward.
    """

    training: bool = False
    inference: bool = False


OP_BY_OP = Kernels()


def _layers(layer) -> list:
    if hasattr(layer, "_flatten_layers"):
        return list(layer._flatten_layers(include_self=True, recursive=True))
    return [layer]


@contextlib.contextmanager
def use_kernels(layer, kernels: Kernels) -> Iterator[None]:
    """Within this block, ``layer`` and its sublayers carry ``kernels`` (restored after).

    Args:
      layer: a Keras layer or model.
      kernels: the kernels its calls traced inside the block use.
    """
    layers = _layers(layer)
    previous = [layer.__dict__.get(_ATTRIBUTE) for layer in layers]
    for each in layers:
        setattr(each, _ATTRIBUTE, kernels)
    try:
        yield
    finally:
        for each, value in zip(layers, previous):
            if value is None:
                delattr(each, _ATTRIBUTE)
            else:
                setattr(each, _ATTRIBUTE, value)


def kernels_of(layer) -> Kernels:
    """The kernels ``layer`` uses now (``OP_BY_OP`` outside any ``use_kernels`` block).

    Args:
      layer: a Keras layer.

    Returns:
      Its ``Kernels`` value.
    """
    return getattr(layer, _ATTRIBUTE, OP_BY_OP)


@contextlib.contextmanager
def fused_inference_kernels(allowed: bool = True) -> Iterator[None]:
    """Within this block (this thread), ``Predictor`` and ``evaluate`` may (True) or may not
    (False) choose the fused inference kernels.

    Args:
      allowed: whether they may.
    """
    previous = getattr(_state, "inference", None)  # None: no block has set it
    _state.inference = bool(allowed)
    try:
        yield
    finally:
        _state.inference = previous


def inference_kernels_allowed() -> bool:
    """False inside ``fused_inference_kernels(False)`` (this thread; a tool's
    ``--noxla_kernels``), else True: what ``Predictor`` and ``evaluate`` ask before they choose
    the kernels for their own steps.

    Returns:
      Whether the fused inference kernels may be chosen.
    """
    return getattr(_state, "inference", None) is not False
