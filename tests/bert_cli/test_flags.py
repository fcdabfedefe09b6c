"""bert_cli.flags: the shared flags, defined once, build the strategy they name."""

import json

import pytest
import tensorflow as tf
from absl import flags

from bert_cli import flags as cli_flags
from modeling.training import strategies


def test_flag_choices_match_the_library():
    assert cli_flags.STRATEGIES == strategies.STRATEGIES
    assert cli_flags.MIXED_PRECISIONS == strategies.MIXED_PRECISIONS


def test_distribution_flags_and_errors(monkeypatch):
    values = flags.FlagValues()
    cli_flags.define_distribution_flags(values)
    cli_flags.define_distribution_flags(values)  # idempotent
    cli_flags.define_precision_flags(values)
    values(["prog", "--use_tpu", "--tpu_name=my-tpu", "--num_tpu_cores=8",
            "--mixed_precision=bf16"])
    assert values.use_tpu and values.tpu_name == "my-tpu" and values.num_tpu_cores == 8
    assert values.mixed_precision == "bf16"
    values.unparse_flags()
    values(["prog", "--strategy=default"])
    assert strategies.strategy_from_settings(values) is tf.distribute.get_strategy()
    assert strategies.is_chief(tf.distribute.get_strategy())
    # JAX's process flags: refused on TensorFlow, naming its own ways to several hosts
    values.unparse_flags()
    values(["prog", "--num_processes=2"])
    with pytest.raises(strategies.DistributionError,
                       match="--num_processes: JAX's processes .* --strategy=multi_worker"):
        strategies.strategy_from_settings(values)
    values.unparse_flags()
    # The TPU path needs hardware: without a TPU name or a TPU VM it stops with one line.
    with pytest.raises(strategies.DistributionError, match="--tpu_name"):
        strategies.make_strategy("tpu")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(strategies.DistributionError, match="TF_CONFIG"):
        strategies.make_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1"]},
                                                "task": {"type": "worker", "index": 3}}))
    with pytest.raises(strategies.DistributionError, match="index 3"):
        strategies.make_strategy("multi_worker")
    with pytest.raises(strategies.DistributionError, match="--mixed_precision"):
        strategies.set_precision("int8")


def test_pretraining_flag_choices_match_the_optimizer():
    from bert_cli import run_pretraining
    from modeling.training import optimizers

    assert run_pretraining.OPTIMIZERS == optimizers.OPTIMIZERS
    assert run_pretraining.GRADIENT_REDUCTIONS == optimizers.GRADIENT_REDUCTIONS


TOOLS = ("create_pretraining_data", "run_pretraining", "run_classifier", "run_swag",
         "run_squad", "extract_features", "convert_checkpoint")


def test_defining_every_tools_flags_imports_no_tensorflow():
    # --help must answer at once: importing a tool and defining its flags stays off TensorFlow.
    import subprocess
    import sys

    from tests import paths

    probe = ("import sys\nfrom absl import flags\n"
             "for name in %r:\n"
             "    module = __import__('bert_cli.' + name, fromlist=['define_flags'])\n"
             "    module.define_flags(flags.FlagValues())\n"
             "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))\n" % (TOOLS,))
    proc = subprocess.run([sys.executable, "-c", probe], cwd=paths.ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout
