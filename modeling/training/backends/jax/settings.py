"""The settings of TensorFlow's path only, refused on JAX with one line: the one table
(``check_settings``), for every tool (pre-training and fine-tuning alike): a ``tf.distribute``
strategy or TPU, ``--num_cpu_devices``, gradient accumulation, float16 loss scaling,
per-replica clipping, a SavedModel export.

Example::

    from modeling.training.backends.jax import settings
    settings.check_settings(flag_values)   # FlagError naming the first such flag
"""

from __future__ import annotations

from typing import Any, List, Tuple

from bert_common.errors import FlagError

_ON_TENSORFLOW = "%s: %s with KERAS_BACKEND=jax (it runs on TensorFlow)"


def _tensorflow_only(settings: Any) -> List[Tuple[bool, str]]:
    """The table: (is the setting given, the line that refuses it), in the order checked. A
    setting a tool does not have reads as its default."""
    def get(name, default=None):
        return getattr(settings, name, default)

    strategy = get("strategy", "default")
    precision = get("mixed_precision")
    return [
        (get("use_tpu", False) or strategy != "default", _ON_TENSORFLOW % (
            "--strategy=%s" % strategy if strategy != "default" else "--use_tpu",
            "tf.distribute strategies are not used (the local devices train data-parallel)")),
        (bool(get("num_cpu_devices", 0)), _ON_TENSORFLOW % (
            "--num_cpu_devices",
            "not used; give JAX XLA_FLAGS=--xla_force_host_platform_device_count=N")),
        (get("num_accumulation_steps", 1) != 1, _ON_TENSORFLOW % (
            "--num_accumulation_steps", "gradient accumulation is not implemented")),
        (precision == "fp16", _ON_TENSORFLOW % (
            "--mixed_precision=fp16", "loss scaling is not implemented; use bf16")),
        (get("gradient_reduction", "auto") == "clip_then_sum", _ON_TENSORFLOW % (
            "--gradient_reduction=clip_then_sum", "per-replica clipping is not implemented")),
        (precision not in (None, "", "fp32", "bf16", "fp16"),
         "--mixed_precision=%s: fp32 or bf16 on JAX (or unset)" % precision),
        (bool(get("export_dir")),
         "--export_dir: the SavedModel is written by TensorFlow; with KERAS_BACKEND=jax train "
         "here, then export without it from --init_checkpoint=<output_dir>/export/"
         "bert_model.ckpt (docs/jax.md)"),
    ]


def check_settings(settings: Any) -> None:
    """Stops a tool whose settings need TensorFlow's path (a ``tf.distribute`` strategy,
    gradient accumulation, float16 loss scaling, per-replica clipping, a SavedModel export).

    Args:
        settings: the run's settings (a tool's flag values), read by attribute.

    Raises:
        FlagError: the first such setting, named in one line.
    """
    for given, line in _tensorflow_only(settings):
        if given:
            raise FlagError(line)
