"""modeling/training/backends/tensorflow/execution.py where XLA cannot compile for the CPU
(tensorflow-tpu's wheel): the default paths run op by op, an explicit --use_xla stops with one
line naming the cause.

The first two tests run everywhere (the probe's answer is set by hand); the last one checks the
real probe of the installed TensorFlow and, under tensorflow-tpu (a Cloud TPU VM's wheel, or
``make install-tpu``), trains a classifier on the CPU through the tool."""

import importlib.metadata
import os

import pytest
import tensorflow as tf

from bert_common.errors import FlagError
from modeling.training import strategies
from modeling.training.backends.tensorflow import execution

HOST = "could not find registered transfer manager for platform Host -- check target linkage"


def _tensorflow_tpu_installed() -> bool:
    try:
        importlib.metadata.distribution("tensorflow-tpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.fixture
def no_xla_cpu(monkeypatch):
    monkeypatch.setattr(strategies, "_XLA_CPU_UNAVAILABLE", [HOST])


def test_without_xla_cpu_the_defaults_run_op_by_op(no_xla_cpu):
    variables = [tf.Variable(tf.zeros([2]))]
    chosen = execution.decide(tf.distribute.get_strategy(), object(), variables,
                              use_xla=False, fused_kernels=True, fuse_optimizer=True)
    assert chosen == execution.Execution()  # all off: op by op


def test_without_xla_cpu_use_xla_is_one_line_naming_the_cause(no_xla_cpu):
    with pytest.raises(FlagError) as raised:
        execution.decide(tf.distribute.get_strategy(), object(), [], use_xla=True)
    message = str(raised.value)
    assert message.startswith("--use_xla: XLA cannot compile for the CPU in this TensorFlow build")
    assert "transfer manager for platform Host" in message and "\n" not in message


def test_the_probe_of_the_installed_tensorflow(tmp_path):
    reason = strategies.xla_cpu_unavailable()
    if not _tensorflow_tpu_installed():
        assert reason is None  # tensorflow (CPU/GPU wheels) has XLA:CPU
        return
    assert reason and "transfer manager" in reason
    from bert_cli import run_classifier
    from tests import paths
    from tests.support.tools import run_tool

    tiny = os.path.join(paths.GOLDEN, "modeling", "tiny")
    out = tmp_path / "out"
    run = run_tool(run_classifier, [
        "--task_name=mrpc", "--data_dir=%s" % os.path.join(paths.DATA, "glue", "MRPC"),
        "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--bert_config_file=%s"
        % os.path.join(tiny, "bert_config.json"), "--init_checkpoint=%s"
        % os.path.join(tiny, "bert_model.ckpt"), "--output_dir=%s" % out, "--do_train",
        "--max_seq_length=32", "--train_batch_size=8", "--num_train_epochs=0.01"])
    assert run.code == 0, run.stderr[-2000:]
    assert (out / "train_steps.jsonl").exists()
    run = run_tool(run_classifier, [
        "--task_name=mrpc", "--data_dir=%s" % os.path.join(paths.DATA, "glue", "MRPC"),
        "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--bert_config_file=%s"
        % os.path.join(tiny, "bert_config.json"), "--output_dir=%s" % (tmp_path / "xla"),
        "--do_train", "--use_xla", "--max_seq_length=32", "--num_train_epochs=0.01"])
    assert run.code == 1
    assert "run_classifier.py: error: --use_xla: XLA cannot compile for the CPU" in run.stderr
    assert not (tmp_path / "xla").exists()  # stopped before anything was written
