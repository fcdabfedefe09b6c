"""bert_cli.flags: the shared flags, defined once, build the strategy they name."""

import json

import pytest
import tensorflow as tf
from absl import flags

from bert_cli import flags as cli_flags
from modeling.training import distribution


def test_flag_choices_match_the_library():
    assert cli_flags.STRATEGIES == distribution.STRATEGIES
    assert cli_flags.MIXED_PRECISIONS == distribution.MIXED_PRECISIONS


def test_distribution_flags_and_errors(monkeypatch):
    values = flags.FlagValues()
    cli_flags.define_distribution_flags(values)
    cli_flags.define_distribution_flags(values)  # idempotent
    cli_flags.define_precision_flags(values)
    values(["prog", "--use_tpu", "--tpu_name=my-tpu", "--num_tpu_cores=8",
            "--mixed_precision=bf16"])
    assert cli_flags.wants_tpu(values) and values.mixed_precision == "bf16"
    values.unparse_flags()
    values(["prog", "--strategy=default"])
    assert cli_flags.strategy_from_flags(values) is tf.distribute.get_strategy()
    assert distribution.is_chief(tf.distribute.get_strategy())
    # The TPU path needs hardware: without a TPU name or a TPU VM it stops with one line.
    with pytest.raises(distribution.DistributionError, match="--tpu_name"):
        distribution.make_strategy("tpu")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(distribution.DistributionError, match="TF_CONFIG"):
        distribution.make_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1"]},
                                                "task": {"type": "worker", "index": 3}}))
    with pytest.raises(distribution.DistributionError, match="index 3"):
        distribution.make_strategy("multi_worker")
    with pytest.raises(distribution.DistributionError, match="--mixed_precision"):
        distribution.set_precision("int8")
