"""strategies.cpu_kernels_apply / prediction_kernels_apply: the CPU-only kernels are used where
the step runs on a CPU, never on GPU/TPU devices (faked here: this machine has no accelerator)."""

import types

import numpy as np
import pytest
import tensorflow as tf

from modeling.training import strategies
from tests.modeling.tiny_pretraining import pretraining_batches, tiny_pretraining_trainer

GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def _fake_strategy(*devices):
    return types.SimpleNamespace(extended=types.SimpleNamespace(worker_devices=tuple(devices)))


@pytest.mark.parametrize("name,expected", [
    (CPU, True), ("/cpu:0", True), ("CPU:0", True),
    (GPU, False), ("/gpu:1", False), ("/device:TPU:3", False), ("/job:worker/task:0", False),
    ("", False), ("not a device", False)])
def test_is_cpu_device(name, expected):
    assert strategies.is_cpu_device(name) is expected


def test_cpu_kernels_apply_by_strategy_devices_and_variables():
    assert strategies.cpu_kernels_apply(tf.distribute.get_strategy())  # no GPU here
    assert strategies.cpu_kernels_apply(tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert strategies.cpu_kernels_apply(_fake_strategy(CPU))
    assert not strategies.cpu_kernels_apply(_fake_strategy(GPU))
    assert not strategies.cpu_kernels_apply(_fake_strategy(CPU, GPU))
    assert not strategies.cpu_kernels_apply(_fake_strategy("/device:TPU:0"))
    assert not strategies.cpu_kernels_apply(_fake_strategy())
    on_gpu = types.SimpleNamespace(device=GPU)
    unplaced = types.SimpleNamespace(device="")
    assert not strategies.cpu_kernels_apply(_fake_strategy(CPU), [on_gpu])
    assert strategies.cpu_kernels_apply(_fake_strategy(CPU), [unplaced, tf.Variable(1.0)])


def test_prediction_kernels_need_one_cpu_replica_and_no_off_switch():
    from modeling.kernels import switch

    assert strategies.prediction_kernels_apply(tf.distribute.get_strategy())
    with switch.fused_inference_kernels(False):  # a tool's --noxla_kernels
        assert not strategies.prediction_kernels_apply(tf.distribute.get_strategy())
        with switch.fused_inference_kernels(True):  # the innermost context decides
            assert strategies.prediction_kernels_apply(tf.distribute.get_strategy())
    two = types.SimpleNamespace(num_replicas_in_sync=2, extended=types.SimpleNamespace(
        worker_devices=(CPU, CPU)))
    assert not strategies.prediction_kernels_apply(two)
    gpu = types.SimpleNamespace(num_replicas_in_sync=1, extended=types.SimpleNamespace(
        worker_devices=(GPU,)))
    assert not strategies.prediction_kernels_apply(gpu)


def test_default_strategy_with_a_gpu_is_not_cpu(monkeypatch):
    real = tf.config.list_logical_devices
    monkeypatch.setattr(tf.config, "list_logical_devices",
                        lambda kind=None: [types.SimpleNamespace(name=GPU)] if kind == "GPU"
                        else real(kind))
    assert strategies.step_devices(tf.distribute.get_strategy()) == (GPU,)
    assert not strategies.cpu_kernels_apply(tf.distribute.get_strategy())


def test_trainer_enables_kernels_on_cpu_only(tmp_path, monkeypatch):
    """A trainer with the default strategy on this CPU enables the kernels (and trains); one
    whose step devices are GPUs leaves them off."""
    trainer = tiny_pretraining_trainer(str(tmp_path / "cpu"), fused=True, dropout=0.1, steps=2)
    losses = trainer.run_steps(trainer.make_iterator(pretraining_batches()), 2)
    assert trainer.execution.fused_kernels and np.all(np.isfinite(losses))
    monkeypatch.setattr(strategies, "step_devices", lambda strategy: (GPU,))
    trainer = tiny_pretraining_trainer(str(tmp_path / "gpu"), fused=True, steps=2)
    assert not trainer.decide_execution().fused_kernels


@pytest.mark.parametrize("flag,found", [(None, 8), (0, 8), (0, 4), (0, 32), (4, 4), (8, 8)])
def test_num_tpu_cores_unset_or_equal_is_accepted(flag, found):
    assert strategies.check_tpu_cores(flag, found) == found


@pytest.mark.parametrize("flag,found", [(8, 4), (8, 32), (4, 8), (-1, 8)])
def test_num_tpu_cores_other_than_found_is_one_error(flag, found):
    with pytest.raises(strategies.DistributionError,
                       match=r"^--num_tpu_cores=%d but the TPU has %d cores" % (flag, found)):
        strategies.check_tpu_cores(flag, found)


def test_num_tpu_cores_flag_defaults_to_what_the_tpu_has():
    from absl import flags

    from bert_cli import flags as cli_flags

    values = flags.FlagValues()
    cli_flags.define_distribution_flags(values)
    values(["prog"])
    assert values.num_tpu_cores == 0
    assert "Only used if `use_tpu` is True." in values["num_tpu_cores"].help
