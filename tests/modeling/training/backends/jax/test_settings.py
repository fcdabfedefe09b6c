"""modeling/training/backends/jax/settings.py: the one table of TensorFlow-only settings (every
tool's refusal on JAX, one line naming the flag). Runs on any backend (plain Python)."""

import pytest

from bert_common.errors import FlagError
from modeling.training.backends.jax.settings import check_settings


class _Settings:
    """A tool's flag values at their defaults (pre-training's and fine-tuning's)."""

    strategy, use_tpu, num_cpu_devices = "default", False, 0
    num_accumulation_steps, mixed_precision, gradient_reduction = 1, None, "auto"
    export_dir = None


@pytest.mark.parametrize("name, value, line", [
    ("strategy", "mirrored", "--strategy=mirrored: tf.distribute strategies are not used"),
    ("use_tpu", True, "--use_tpu: tf.distribute strategies are not used"),
    ("num_cpu_devices", 2, "--num_cpu_devices: not used; give JAX XLA_FLAGS="),
    ("num_accumulation_steps", 2, "--num_accumulation_steps: gradient accumulation is not"),
    ("mixed_precision", "fp16", "--mixed_precision=fp16: loss scaling is not implemented"),
    ("gradient_reduction", "clip_then_sum", "--gradient_reduction=clip_then_sum: per-replica"),
    ("mixed_precision", "fp8", "--mixed_precision=fp8: fp32 or bf16 on JAX (or unset)"),
    ("export_dir", "models", "--export_dir: the SavedModel is written by TensorFlow"),
])
def test_each_tensorflow_only_setting_is_refused_in_one_line(name, value, line):
    settings = type("Given", (_Settings,), {name: value})
    with pytest.raises(FlagError) as raised:
        check_settings(settings)
    message = str(raised.value)
    assert message.startswith(line) and "\n" not in message, message


@pytest.mark.parametrize("precision", [None, "", "fp32", "bf16"])
def test_the_defaults_and_what_jax_runs_pass(precision):
    check_settings(type("Given", (_Settings,), {"mixed_precision": precision}))


def test_a_tool_without_a_flag_reads_its_default():
    check_settings(type("Bare", (), {}))  # no attribute at all: nothing refused
