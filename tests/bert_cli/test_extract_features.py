"""extract_features.py reproduces the original's MiniLM outputs at every real token."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_cli import extract_features
from bert_tasks import features
from bert_tasks.exports.convert import convert
from tests import paths
from tests.modeling.golden_utils import golden_dir, load_outputs
from tests.support import noise

ROOT = paths.ROOT
MINILM = os.path.join(paths.DATA, "minilm")


@pytest.fixture(scope="module")
def minilm_prefix(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("ckpt") / "bert_model.ckpt")
    convert(MINILM, prefix, hidden_act="gelu")
    return prefix


def _input_file(tmp_path):
    with open(os.path.join(paths.GOLDEN, "inputs", "minilm_sentences.json")) as f:
        sentences = json.load(f)
    lines = [s["text_a"] + (" ||| " + s["text_b"] if "text_b" in s else "") for s in sentences]
    path = tmp_path / "input.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path), len(lines)


def test_minilm_features_match_golden(tmp_path, minilm_prefix):
    input_file, count = _input_file(tmp_path)
    output = str(tmp_path / "features.jsonl")
    assert features.extract(input_file, output, golden_dir("minilm") + "/bert_config.json",
                                minilm_prefix, os.path.join(MINILM, "vocab.txt"), layers="-1,-3",
                                max_seq_length=32, batch_size=4) == count
    _check_against_golden(output, count)


def _check_against_golden(output, count):
    golden = load_outputs("minilm")
    with open(golden_dir("minilm") + "/meta.json") as f:
        meta_sentences = json.load(f)["sentences"]
    with open(output) as f:
        records = [json.loads(line) for line in f]
    assert [r["linex_index"] for r in records] == list(range(count))
    worst = 0.0
    for b, record in enumerate(records):
        tokens = [feature["token"] for feature in record["features"]]
        assert tokens == meta_sentences[b]["tokens"]
        for i, feature in enumerate(record["features"]):
            assert [layer["index"] for layer in feature["layers"]] == [-1, -3]
            last = np.asarray(feature["layers"][0]["values"])
            third = np.asarray(feature["layers"][1]["values"])
            assert all(v == round(v, 6) for v in feature["layers"][0]["values"][:20])
            worst = max(worst, np.abs(last - golden["sequence_output"][b, i]).max(),
                        np.abs(third - golden["all_encoder_layers"][-3, b, i]).max())
    # the bound of the encoder's MiniLM golden, plus the JSON's rounding to 6 digits
    noise.within("extract_features/minilm", worst, noise.MINILM_GOLDEN_BOUND + 5e-7)


def test_on_jax_without_tensorflow(tmp_path):
    """KERAS_BACKEND=jax with TensorFlow imports blocked: the Hugging Face folder read from its
    safetensors, the same golden bound."""
    pytest.importorskip("jax", reason="jax is in requirements-dev.txt")
    input_file, count = _input_file(tmp_path)
    output = str(tmp_path / "features.jsonl")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "tests", "support",
                                                        "no_tensorflow"), ROOT]))
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "extract_features.py"), "--input_file=" + input_file,
         "--output_file=" + output, "--bert_config_file=" + golden_dir("minilm")
         + "/bert_config.json", "--init_checkpoint=" + MINILM,
         "--vocab_file=" + os.path.join(MINILM, "vocab.txt"), "--layers=-1,-3",
         "--max_seq_length=32", "--batch_size=4"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_against_golden(output, count)


@pytest.mark.bf16_matmul
def test_bfloat16_inference_is_close_to_golden(tmp_path, minilm_prefix):
    """--inference_dtype=bfloat16: same tokens, values within bfloat16 rounding of the golden."""
    input_file, count = _input_file(tmp_path)
    output = str(tmp_path / "features.jsonl")
    assert features.extract(input_file, output, golden_dir("minilm") + "/bert_config.json",
                                minilm_prefix, os.path.join(MINILM, "vocab.txt"), layers="-1",
                                max_seq_length=32, batch_size=4,
                                inference_dtype="bfloat16") == count
    golden = load_outputs("minilm")["sequence_output"]
    with open(output) as f:
        records = [json.loads(line) for line in f]
    errors = []
    for b, record in enumerate(records):
        for i, feature in enumerate(record["features"]):
            got = np.asarray(feature["layers"][0]["values"])
            errors.append(np.abs(got - golden[b, i]).max() / (np.abs(golden[b, i]).max()))
    # bf16 has an 8-bit mantissa (relative rounding 2^-9 per op): close, but not float32-close.
    assert max(errors) > 1e-4
    noise.within("bf16/extract_features/minilm_relative", max(errors), 0.1)
    assert np.mean(errors) < 0.03


def test_cli_bad_layers_flag(tmp_path, minilm_prefix):
    input_file, _ = _input_file(tmp_path)
    output = tmp_path / "out.jsonl"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "extract_features.py"), "--input_file=" + input_file,
         "--output_file=%s" % output, "--bert_config_file=%s/bert_config.json" % golden_dir("minilm"),
         "--init_checkpoint=" + minilm_prefix, "--vocab_file=%s/vocab.txt" % MINILM,
         "--layers=-1,7"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 1
    errors = [l for l in result.stderr.splitlines() if l.startswith("extract_features.py")]
    assert errors == ["extract_features.py: error: --layers=-1,7: index 7 is out of range for "
                      "6 encoder layers"]
    assert not output.exists()
