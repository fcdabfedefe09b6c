"""How the trainer's step runs: XLA, the fused kernels, the fused optimizer, decided once.

``decide(strategy, optimizer, variables, use_xla=..., fused_kernels=..., fuse_optimizer=...)``
turns what a run asks for (``TrainerConfig``) into what this strategy, device and optimizer
allow: an ``Execution``, a frozen value the trainer builds its loop from (nothing is read later
from a global or a thread). The rules:

* ``use_xla``: the replica step (forward, backward, clipping, update; the micro-batch loop
  too, its slices of static shape) is compiled with XLA on one replica (``xla_step``); with
  several replicas only forward/backward is (``xla_gradients``); not on CPU with several
  replicas: XLA's CPU collectives are not supported there, so XLA is turned off with a warning.
  On a TPU neither: the TPU compiles the whole step anyway.
* ``fuse_optimizer`` (one local replica without XLA): only the clipping and the optimizer
  update are XLA-compiled (``fused_optimizer``), the forward/backward keep TensorFlow's kernels
  (oneDNN on CPU): the update reads and writes each variable once instead of once per
  elementwise op (docs/benchmarks.md has the measured times). XLA rounds differently
  (global-norm reduction order, fused arithmetic): parameters stay within 1e-6 relative of the
  original's, an Adam slot may differ by ~1e-6 relative, so it is off by default
  (run_pretraining turns it on unless ``--deterministic``) and the op-by-op update reproduces
  the original's rounding.
* ``fused_kernels`` (same condition, and the step on a CPU: ``strategies.cpu_kernels_apply``;
  the C++ kernels are CPU-only, and the XLA GELU kernel shares the choice): the layers trace
  with ``switch.Kernels(training=True)`` (``modeling/kernels/switch.py``: fused GELU with a
  hand-written gradient, one-pass dropout and LayerNorm CPU kernels), and where the optimizer
  has a CPU kernel for these variables (``cpu_kernel_applies``, checked in the strategy's
  scope as the update will be traced) the clipping + update run as one in-place CPU kernel per
  variable (``optimizer_kernel``) instead of the XLA-fused update. Values within float rounding
  of TensorFlow's op-by-op graph (the update itself is bit-identical) and other dropout masks,
  so also off by default and in ``--deterministic`` runs.
* Where XLA cannot compile for the CPU (tensorflow-tpu's wheel has no XLA:CPU backend:
  ``strategies.xla_cpu_unavailable``), a CPU step runs op by op: the fused kernels (the
  float32 GELU kernel is XLA's) and the fused optimizer are left out, and ``use_xla`` stops
  with a ``FlagError`` naming the cause.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import tensorflow as tf
from absl import logging

from bert_common.errors import FlagError
from modeling.kernels import switch
from modeling.training import strategies


@dataclasses.dataclass(frozen=True)
class Execution:
    """How the training step runs (see the module docstring; all False: op by op).

    Attributes:
      xla_step: the whole replica step is one XLA computation (one replica, not a TPU).
      xla_gradients: only forward/backward is XLA-compiled (several replicas, not a TPU).
      fused_kernels: the layers trace with the fused training kernels.
      fused_optimizer: clipping + update are one XLA-compiled function.
      optimizer_kernel: clipping + update run as the optimizer's in-place CPU kernels.
    """

    xla_step: bool = False
    xla_gradients: bool = False
    fused_kernels: bool = False
    fused_optimizer: bool = False
    optimizer_kernel: bool = False

    @property
    def use_xla(self) -> bool:
        """Whether any of the step is XLA-compiled by the loop (``xla_step`` or
        ``xla_gradients``)."""
        return self.xla_step or self.xla_gradients

    @property
    def kernels(self) -> switch.Kernels:
        """The layers' kernels while the step is traced."""
        return switch.Kernels(training=self.fused_kernels)


def check_use_xla(strategy: tf.distribute.Strategy, use_xla: bool) -> Optional[str]:
    """Why XLA cannot compile ``strategy``'s CPU step in this TensorFlow build (None: it can,
    or the step is not on a CPU); a tool calls it as soon as its strategy is built, so that
    ``--use_xla`` fails before anything is written.

    Args:
      strategy: the run's distribution strategy.
      use_xla: whether the run asks for XLA.

    Returns:
      The reason (``strategies.xla_cpu_unavailable``), or None.

    Raises:
      FlagError: ``use_xla`` where XLA cannot compile the step, naming the cause.
    """
    if strategies.is_tpu(strategy) or not all(
            strategies.is_cpu_device(d) for d in strategies.step_devices(strategy)):
        return None
    reason = strategies.xla_cpu_unavailable()
    if reason and use_xla:
        raise FlagError("--use_xla: XLA cannot compile for the CPU in this TensorFlow build "
                        "(%s); run without --use_xla" % reason)
    return reason


def decide(strategy: tf.distribute.Strategy, optimizer, variables: Sequence[tf.Variable], *,
           use_xla: bool = False, fused_kernels: bool = False,
           fuse_optimizer: bool = False) -> Execution:
    """What of ``use_xla``, ``fused_kernels`` and ``fuse_optimizer`` applies (module docstring).

    Args:
      strategy: the trainer's distribution strategy.
      optimizer: the trainer's optimizer (``cpu_kernel_applies``, where it has one).
      variables: the trainable variables the step updates.
      use_xla: compile the step (or forward/backward) with XLA.
      fused_kernels: the fused CPU/GELU kernels, and the optimizer's CPU kernel.
      fuse_optimizer: compile the clipping + update with XLA.

    Returns:
      The ``Execution`` the loop is built from.
    """
    replicas = strategy.num_replicas_in_sync
    tpu = strategies.is_tpu(strategy)
    no_xla = check_use_xla(strategy, use_xla)
    if no_xla and (fused_kernels or fuse_optimizer):  # defaults: the op-by-op step instead
        logging.info("XLA cannot compile for the CPU in this TensorFlow build (%s): the step "
                     "runs op by op (no fused kernels, no fused optimizer)", no_xla)
        fused_kernels = fuse_optimizer = False
    if (use_xla and replicas > 1 and not tpu
            and not tf.config.list_logical_devices("GPU")):
        logging.warning("--use_xla ignored: XLA with %d replicas on CPU is not supported",
                        replicas)
        use_xla = False
    one_local_replica = replicas == 1 and not tpu
    # The kernels (cpu_ops) are CPU-only: not where the step's replica or variables are on a
    # GPU/TPU; the XLA GELU kernel shares the choice, so it is off there too.
    kernels = (fused_kernels and not use_xla and one_local_replica
               and strategies.cpu_kernels_apply(strategy, variables))
    with strategy.scope():  # as the update is traced (cpu_kernel_applies asks for a strategy)
        optimizer_kernel = (kernels and hasattr(optimizer, "cpu_kernel_applies")
                            and bool(optimizer.cpu_kernel_applies(variables)))
    return Execution(
        xla_step=use_xla and not tpu and replicas == 1,
        xla_gradients=use_xla and not tpu and replicas > 1,
        fused_kernels=bool(kernels),
        fused_optimizer=(fuse_optimizer and not use_xla and one_local_replica
                         and not optimizer_kernel),
        optimizer_kernel=optimizer_kernel)
