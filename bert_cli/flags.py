"""Flags shared by the tools, defined once, and the strategy/precision they ask for.

Every training or inference tool defines them with::

    from bert_cli import flags as cli_flags
    cli_flags.define_distribution_flags(flag_values)  # --strategy --use_tpu --tpu_name --tpu_zone
                                                      # --gcp_project --master --num_tpu_cores
                                                      # --num_gpus --all_reduce_alg
                                                      # --coordinator_address --num_processes
                                                      # --process_id --initialization_timeout
    cli_flags.define_precision_flags(flag_values)     # --mixed_precision=bf16|fp16 --use_xla
                                                      # --xla_optimizer --xla_kernels
    cli_flags.define_checkpoint_flags(flag_values)    # --save_checkpoints_steps
                                                      # --iterations_per_loop --keep_checkpoint_max

checks the values every tool shares (batch sizes, learning rate, epochs, warmup, sequence length,
step counts: NaN and out-of-range values fail with a ``FlagError`` naming the flag and value)
with ``bert_common.checks.check_values(fv)``, and builds them at the start of its run, before
any other TensorFlow op (multi-worker and TPU set-up must come first), with
``modeling.training.strategies.strategy_from_settings(fv)`` and ``set_precision``. Defining a
flag imports no TensorFlow, so ``--help`` is fast.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from absl import flags

from bert_common.errors import FlagError

FlagValues = flags.FlagValues

# Kept equal to modeling.training.strategies.STRATEGIES / MIXED_PRECISIONS (tested): this
# module must not import TensorFlow to list them.
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
MIXED_PRECISIONS = ("bf16", "fp16")


def define(flag_values: FlagValues, kind: str, name: str, default: Any, help_text: str,
           **kwargs) -> None:
    """``flags.DEFINE_<kind>(name, default, help_text)`` into ``flag_values``; a flag defined
    already (a second tool in the same process) is left as it is.

    Args:
        flag_values: the ``FlagValues`` to define it in.
        kind: the ``DEFINE_`` suffix (``"integer"``, ``"string"``, ``"enum"`` ...).
        name: the flag's name.
        default: its default.
        help_text: its help.
        **kwargs: passed to ``DEFINE_<kind>`` (``enum_values`` for an enum).
    """
    if name in flag_values:
        return
    if kind == "enum":
        flags.DEFINE_enum(name, default, kwargs.pop("enum_values"), help_text,
                          flag_values=flag_values, **kwargs)
        return
    getattr(flags, "DEFINE_" + kind)(name, default, help_text, flag_values=flag_values, **kwargs)


def definer(flag_values: FlagValues) -> Callable[..., None]:
    """``define`` bound to ``flag_values``: ``define("integer", "max_seq_length", 128, "...")``.

    Args:
        flag_values: the ``FlagValues`` to define flags in.

    Returns:
        The bound ``define``.
    """
    return functools.partial(define, flag_values)


def define_distribution_flags(flag_values: FlagValues = flags.FLAGS) -> None:
    """The strategy flags, the original's TPU flags included (same names and help).

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define(flag_values, "enum", "strategy", "default", "tf.distribute strategy.",
           enum_values=list(STRATEGIES))
    define(flag_values, "bool", "use_tpu", False, "Whether to use TPU (= --strategy=tpu).")
    define(flag_values, "string", "tpu_name", None, "The Cloud TPU to use for training. This "
           "should be either the name used when creating the Cloud TPU, or a "
           "grpc://ip.address.of.tpu:8470 url.")
    define(flag_values, "string", "tpu_zone", None, "[Optional] GCE zone where the Cloud TPU "
           "is located in. If not specified, we will attempt to automatically detect the GCE "
           "project from metadata.")
    define(flag_values, "string", "gcp_project", None, "[Optional] Project name for the "
           "Cloud TPU-enabled project. If not specified, we will attempt to automatically "
           "detect the GCE project from metadata.")
    define(flag_values, "string", "master", None, "[Optional] TensorFlow master URL.")
    define(flag_values, "integer", "num_tpu_cores", 0, "Only used if `use_tpu` is True. "
           "Total number of TPU cores to use. 0 (default) = the cores the TPU has (any "
           "slice); a non-zero value must equal them.")
    define(flag_values, "integer", "num_gpus", 0, "--strategy=mirrored: number of local GPUs "
           "(0 = all).")
    define(flag_values, "enum", "all_reduce_alg", "auto", "--strategy=multi_worker: "
           "collective implementation.", enum_values=["auto", "ring", "nccl"])
    # KERAS_BACKEND=jax: several processes (modeling/training/backends/jax/cluster.py), named
    # as jax.distributed.initialize's arguments
    define(flag_values, "string", "coordinator_address", None, "KERAS_BACKEND=jax, several "
           "processes: HOST:PORT of process 0, where it serves the coordinator (the same for "
           "every process). Unset: the cluster JAX detects (SLURM, Cloud TPU), else one "
           "process.")
    define(flag_values, "integer", "num_processes", None, "KERAS_BACKEND=jax: the processes "
           "of the run (with --coordinator_address).")
    define(flag_values, "integer", "process_id", None, "KERAS_BACKEND=jax: this process's "
           "index, 0 to --num_processes - 1 (with --coordinator_address).")
    define(flag_values, "integer", "initialization_timeout", 300, "KERAS_BACKEND=jax, several "
           "processes: seconds to wait for all of them to join.")


def define_precision_flags(flag_values: FlagValues = flags.FLAGS) -> None:
    """``--mixed_precision`` (bf16|fp16, unset = float32), ``--use_xla`` and the fast path of
    one replica: ``--xla_optimizer``, ``--xla_kernels`` (every training tool).

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define(flag_values, "enum", "mixed_precision", None, "Mixed precision: bf16 or fp16 "
           "(dynamic loss scaling). Unset = float32.", enum_values=list(MIXED_PRECISIONS))
    define(flag_values, "bool", "use_xla", False, "Compile the train step with XLA "
           "(jit_compile).")
    define(flag_values, "bool", "xla_optimizer", True, "One replica: compile the clipping + "
           "update with XLA (one memory pass per variable; rounding within ~1e-6 relative of "
           "the original), unless --xla_kernels runs it as a CPU kernel (AdamWeightDecay, fp32 "
           "variables, no loss scaling). Off with run_pretraining's --deterministic.")
    define(flag_values, "bool", "xla_kernels", True, "One replica on a CPU: fused training "
           "kernels: the GELU of the intermediate layers as fused kernels (XLA; a CPU kernel "
           "on bf16) with a hand-written gradient (modeling/kernels/gelu_dense.py); dropout, "
           "LayerNorm and the AdamWeightDecay clipping + update as one-pass CPU kernels "
           "compiled on first use (modeling/kernels/cpu_ops.py); LayerNorm's kernel also in "
           "prediction and evaluation. Values within float rounding of the op-by-op graph, "
           "other dropout masks. Off with run_pretraining's --deterministic.")


def define_checkpoint_flags(flag_values: FlagValues = flags.FLAGS) -> None:
    """The training loop's flags, the original's names: ``--save_checkpoints_steps``,
    ``--iterations_per_loop``, plus ``--keep_checkpoint_max``.

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define(flag_values, "integer", "save_checkpoints_steps", 1000, "How often to save the model "
           "checkpoint.")
    define(flag_values, "integer", "iterations_per_loop", 1000, "How many steps to make in "
           "each estimator call (here: steps per host loop, cut short so that progress shows "
           "at least every 30 s).")
    define(flag_values, "integer", "keep_checkpoint_max", 5, "How many checkpoints to keep "
           "(the newest).")


def require(flag_values: FlagValues, names: Sequence[str]) -> None:
    """``FlagError`` naming the first of ``names`` that is unset.

    Args:
        flag_values: the parsed flag values.
        names: the required flags' names.

    Raises:
        FlagError: one is unset.
    """
    for name in names:
        if flag_values[name].value in (None, ""):
            raise FlagError("--%s is required" % name)
