"""convert_checkpoint.py: TF1 <-> .keras conversions and one-line errors with exit code 1."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_tasks.exports.convert import convert
from tests import paths
from modeling import checkpoints
from modeling.checkpoints.tf1 import CheckpointError
from modeling.config import ConfigError
from tests.modeling.golden_utils import golden_dir

ROOT = paths.ROOT
TINY = golden_dir("tiny_wide_init")


def _run(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, os.path.join(ROOT, "convert_checkpoint.py"), *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def test_cli_tf1_to_keras_and_back(tmp_path):
    keras_file = str(tmp_path / "tiny.keras")
    result = _run("--input=%s/bert_model.ckpt" % TINY,
                  "--bert_config_file=%s/bert_config.json" % TINY, "--output=" + keras_file)
    assert result.returncode == 0, result.stderr
    assert "46 variables" in result.stderr and os.path.isfile(keras_file)
    out_dir = tmp_path / "back"
    out_dir.mkdir()
    summary = convert(keras_file, str(out_dir / "bert_model.ckpt"),
                                         config_file=TINY + "/bert_config.json")
    assert "46 variables" in summary
    original = checkpoints.read_tf1_checkpoint(TINY + "/bert_model.ckpt")
    again = checkpoints.read_tf1_checkpoint(str(out_dir / "bert_model.ckpt"))
    assert sorted(original) == sorted(again)
    assert all(np.array_equal(original[k], again[k]) for k in original)
    with open(out_dir / "bert_config.json") as f, open(TINY + "/bert_config.json") as g:
        assert json.load(f) == json.load(g)


def test_cli_missing_input_is_one_line_error(tmp_path):
    result = _run("--input=%s" % (tmp_path / "absent.ckpt"), "--output=%s" % (tmp_path / "x.keras"),
                  "--bert_config_file=%s/bert_config.json" % TINY)
    assert result.returncode == 1
    errors = [l for l in result.stderr.splitlines() if l.startswith("convert_checkpoint.py")]
    assert len(errors) == 1 and "absent.ckpt" in errors[0] and "Traceback" not in result.stderr
    assert errors[0].startswith("convert_checkpoint.py: error: ")


def test_wrong_size_and_bad_config_errors(tmp_path):
    config = json.load(open(TINY + "/bert_config.json"))
    config["hidden_size"] = 64
    bigger = tmp_path / "bert_config.json"
    bigger.write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"bert/embeddings/LayerNorm/beta has shape \[32\]"):
        convert(TINY + "/bert_model.ckpt", str(tmp_path / "x.keras"),
                                   config_file=str(bigger))
    del config["vocab_size"]
    bigger.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="'vocab_size' is missing"):
        convert(TINY + "/bert_model.ckpt", str(tmp_path / "x.keras"),
                                   config_file=str(bigger))
    assert not list(tmp_path.glob("*.keras"))
