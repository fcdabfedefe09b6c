"""Flags shared by the tools, defined once, and the strategy/precision they ask for.

Every training or inference tool defines them with::

    from bert_cli import flags as cli_flags
    cli_flags.define_distribution_flags(flag_values)  # --strategy --use_tpu --tpu_name --tpu_zone
                                                      # --gcp_project --master --num_tpu_cores
                                                      # --num_gpus --all_reduce_alg
    cli_flags.define_precision_flags(flag_values)     # --mixed_precision=bf16|fp16 --use_xla
                                                      # --xla_optimizer --xla_kernels
    cli_flags.define_checkpoint_flags(flag_values)    # --save_checkpoints_steps
                                                      # --iterations_per_loop --keep_checkpoint_max

checks the values every tool shares (batch sizes, learning rate, epochs, warmup, sequence length,
step counts: NaN and out-of-range values fail with a ``FlagError`` naming the flag and value)
with ``check_values(fv)`` in its validate step, and builds them at the start of its run, before
any other TensorFlow op (multi-worker and TPU
set-up must come first): ``strategy_from_flags(fv)``, ``precision_from_flags(fv)``. Defining a
flag imports no TensorFlow (``modeling.training.distribution`` is imported when a strategy is
built), so ``--help`` is fast.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from absl import flags

from bert_common.errors import InputError

FlagValues = flags.FlagValues

# Kept equal to modeling.training.distribution.STRATEGIES / MIXED_PRECISIONS (tested): this
# module must not import TensorFlow to list them.
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
MIXED_PRECISIONS = ("bf16", "fp16")


class FlagError(InputError):
    """A bad flag value or combination; the message names the flag."""


def define(flag_values: FlagValues, kind: str, name: str, default: Any, help_text: str,
           **kwargs) -> None:
    """``flags.DEFINE_<kind>(name, default, help_text)`` into ``flag_values``; a flag defined
    already (a second tool in the same process) is left as it is."""
    if name in flag_values:
        return
    if kind == "enum":
        flags.DEFINE_enum(name, default, kwargs.pop("enum_values"), help_text,
                          flag_values=flag_values, **kwargs)
        return
    getattr(flags, "DEFINE_" + kind)(name, default, help_text, flag_values=flag_values, **kwargs)


def definer(flag_values: FlagValues) -> Callable[..., None]:
    """``define`` bound to ``flag_values``: ``define("integer", "max_seq_length", 128, "...")``."""
    return functools.partial(define, flag_values)


def define_distribution_flags(flag_values: FlagValues = flags.FLAGS) -> None:
    """The strategy flags, the original's TPU flags included (same names and help)."""
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


def define_precision_flags(flag_values: FlagValues = flags.FLAGS) -> None:
    """``--mixed_precision`` (bf16|fp16, unset = float32), ``--use_xla`` and the fast path of
    one replica: ``--xla_optimizer``, ``--xla_kernels`` (every training tool)."""
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
    ``--iterations_per_loop``, plus ``--keep_checkpoint_max``."""
    define(flag_values, "integer", "save_checkpoints_steps", 1000, "How often to save the model "
           "checkpoint.")
    define(flag_values, "integer", "iterations_per_loop", 1000, "How many steps to make in "
           "each estimator call (here: steps per host loop, cut short so that progress shows "
           "at least every 30 s).")
    define(flag_values, "integer", "keep_checkpoint_max", 5, "How many checkpoints to keep "
           "(the newest).")


def check_checkpoint_flags(flag_values: FlagValues) -> None:
    """``FlagError`` naming the first of the training loop's flags that is not positive."""
    for name in ("save_checkpoints_steps", "iterations_per_loop", "keep_checkpoint_max"):
        if flag_values[name].value <= 0:
            raise FlagError("--%s=%d must be positive" % (name, flag_values[name].value))


# The value checks every tool shares (``check_values``), by flag name; a tool checks the ones
# it defines. Integers that count something (>= 1):
_POSITIVE_INTEGERS = ("train_batch_size", "eval_batch_size", "predict_batch_size", "batch_size",
                      "save_checkpoints_steps", "iterations_per_loop", "keep_checkpoint_max",
                      "max_eval_steps", "num_accumulation_steps", "max_predictions_per_seq",
                      "dupe_factor", "num_workers", "doc_stride", "n_best_size",
                      "max_answer_length")
_NON_NEGATIVE_INTEGERS = ("num_warmup_steps", "max_query_length", "lstm_units",
                          "num_tpu_cores", "num_gpus", "num_cpu_devices")
# Floats: name -> (low, low included, high, high included); high None = unbounded. NaN and
# infinity never pass.
_FLOAT_RANGES = {
    "learning_rate": (0.0, False, None, False),
    "num_train_epochs": (0.0, False, None, False),
    "warmup_proportion": (0.0, True, 1.0, True),
    "masked_lm_prob": (0.0, False, 1.0, True),
    "short_seq_prob": (0.0, True, 1.0, True),
}
# Floats any number (infinity too) can be, but not NaN.
_NOT_NAN = ("null_score_diff_threshold",)
# [CLS] a [SEP]: the shortest sequence a tool can build (create_pretraining_data: 5).
MIN_SEQ_LENGTH = 3
_SHORTEST_SEQUENCES = {3: "[CLS] a [SEP]", 5: "[CLS] A [SEP] B [SEP]"}


def _interval(low, low_in, high, high_in) -> str:
    if high is None:
        return "a positive number" if (low == 0 and not low_in) else "a number >= %g" % low
    return "a number in %s%g, %g%s" % ("[" if low_in else "(", low, high,
                                       "]" if high_in else ")")


def check_values(flag_values: FlagValues, min_seq_length: int = MIN_SEQ_LENGTH) -> None:
    """``FlagError`` naming the first flag whose value cannot work, before any work is done.

    The one place for the checks the training and inference tools share; each tool calls it
    from its validate step (the fine-tuning tools through ``bert_cli.finetuning.init_run``)
    and checks only the flags it defines: batch sizes and step counts >= 1;
    ``--learning_rate`` and ``--num_train_epochs`` positive and finite (NaN and infinity never
    pass); ``--warmup_proportion`` in [0, 1]; ``--max_seq_length`` >= ``min_seq_length``;
    ``--num_train_steps`` >= 1 with ``--do_train``; create_pretraining_data's
    ``--masked_lm_prob`` in (0, 1], ``--short_seq_prob`` in [0, 1], ``--dupe_factor`` >= 1.
    """
    import math

    def defined(name):
        return name in flag_values and flag_values[name].value is not None

    for name in _POSITIVE_INTEGERS:
        if defined(name) and flag_values[name].value < 1:
            raise FlagError("--%s=%d must be at least 1" % (name, flag_values[name].value))
    for name in _NON_NEGATIVE_INTEGERS:
        if defined(name) and flag_values[name].value < 0:
            raise FlagError("--%s=%d must not be negative" % (name, flag_values[name].value))
    for name, (low, low_in, high, high_in) in _FLOAT_RANGES.items():
        if not defined(name):
            continue
        value = float(flag_values[name].value)
        ok = (math.isfinite(value) and (value > low or (low_in and value == low))
              and (high is None or value < high or (high_in and value == high)))
        if not ok:
            raise FlagError("--%s=%g must be %s" % (name, value,
                                                    _interval(low, low_in, high, high_in)))
    for name in _NOT_NAN:
        if defined(name) and math.isnan(flag_values[name].value):
            raise FlagError("--%s=nan must be a number" % name)
    if defined("max_seq_length") and flag_values.max_seq_length < min_seq_length:
        raise FlagError("--max_seq_length=%d is too small: at least %d is needed (%s)"
                        % (flag_values.max_seq_length, min_seq_length,
                           _SHORTEST_SEQUENCES.get(min_seq_length, "the special tokens")))
    training = not defined("do_train") or bool(flag_values.do_train)
    if training and defined("num_train_steps") and flag_values.num_train_steps < 1:
        raise FlagError("--num_train_steps=%d must be at least 1 with --do_train"
                        % flag_values.num_train_steps)


def wants_tpu(flag_values: FlagValues) -> bool:
    """``--use_tpu`` or ``--strategy=tpu``."""
    return bool(getattr(flag_values, "use_tpu", False)) or flag_values.strategy == "tpu"


def strategy_from_flags(flag_values: FlagValues = flags.FLAGS):
    """The ``tf.distribute.Strategy`` the distribution flags ask for."""
    from modeling.training import distribution

    name = "tpu" if wants_tpu(flag_values) else flag_values.strategy
    return distribution.make_strategy(
        name, tpu_name=flag_values.tpu_name, tpu_zone=flag_values.tpu_zone,
        gcp_project=flag_values.gcp_project, master=flag_values.master,
        num_tpu_cores=flag_values.num_tpu_cores, num_gpus=getattr(flag_values, "num_gpus", 0),
        all_reduce_alg=getattr(flag_values, "all_reduce_alg", "auto"))


def precision_from_flags(flag_values: FlagValues = flags.FLAGS):
    """Sets the Keras dtype policy of ``--mixed_precision``; returns the ``Precision``."""
    from modeling.training import distribution

    return distribution.set_precision(flag_values.mixed_precision)


def require(flag_values: FlagValues, names: Sequence[str]) -> None:
    """``FlagError`` naming the first of ``names`` that is unset."""
    for name in names:
        if flag_values[name].value in (None, ""):
            raise FlagError("--%s is required" % name)
