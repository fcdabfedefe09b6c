"""Hugging Face import: name mapping, MiniLM golden via the converter, numpy exact-GELU check."""

import math
import os

import numpy as np
import pytest

from bert_tasks.exports.convert import convert
from modeling import checkpoints
from modeling.checkpoints import hf as hf_import
from modeling.encoder import BertModel
from modeling.config import BertConfig
from tests import paths
from tests.modeling.golden_utils import encoder_inputs, golden_dir, load_outputs, max_abs_diff
from tests.support import noise

MINILM = os.path.join(paths.DATA, "minilm")
MINILM_BOUND = noise.MINILM_GOLDEN_BOUND


def test_name_mapping():
    assert hf_import.hf_to_tf1_name("encoder.layer.11.attention.self.query.weight") == (
        "bert/encoder/layer_11/attention/self/query/kernel", True)
    assert hf_import.hf_to_tf1_name("bert.embeddings.LayerNorm.weight") == (
        "bert/embeddings/LayerNorm/gamma", False)
    assert hf_import.hf_to_tf1_name("encoder.layer.0.output.LayerNorm.beta") == (
        "bert/encoder/layer_0/output/LayerNorm/beta", False)
    assert hf_import.hf_to_tf1_name("embeddings.token_type_embeddings.weight") == (
        "bert/embeddings/token_type_embeddings", False)
    assert hf_import.hf_to_tf1_name("cls.predictions.transform.dense.weight") == (
        "cls/predictions/transform/dense/kernel", True)
    assert hf_import.hf_to_tf1_name("cls.predictions.bias") == ("cls/predictions/output_bias", False)
    assert hf_import.hf_to_tf1_name("cls.seq_relationship.weight") == (
        "cls/seq_relationship/output_weights", False)
    assert hf_import.hf_to_tf1_name("qa_outputs.bias") == ("cls/squad/output_bias", False)
    assert hf_import.hf_to_tf1_name("embeddings.position_ids") is None
    assert hf_import.hf_to_tf1_name("cls.predictions.decoder.weight") is None


@pytest.fixture(scope="module")
def minilm_tf1(tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm")
    prefix = str(out / "bert_model.ckpt")
    summary = convert(MINILM, prefix, hidden_act="gelu")
    assert "embeddings.position_ids" in summary
    return prefix


def test_minilm_golden_through_converted_tf1_checkpoint(minilm_tf1):
    names = checkpoints.tf1_checkpoint_source(minilm_tf1).shapes
    assert len(names) == 5 + 6 * 16 + 2 and "bert/pooler/dense/kernel" in names
    written = BertConfig.from_json_file(os.path.dirname(minilm_tf1) + "/bert_config.json")
    config = BertConfig.from_json_file(golden_dir("minilm") + "/bert_config.json")
    assert written == config  # tanh GELU, as the original computes
    model = BertModel(config)
    report = checkpoints.load_tf1_checkpoint(model, minilm_tf1)
    assert len(report.loaded) == len(names) and not report.missing and not report.unused
    golden = load_outputs("minilm")
    out = model(encoder_inputs(golden))
    for key in ("sequence_output", "pooled_output", "embedding_output"):
        noise.within("encoder_golden/minilm/" + key, max_abs_diff(out[key], golden[key]),
                     MINILM_BOUND)


# ------------------------------------------------------------------ independent numpy forward

def _numpy_bert(tensors, ids, mask, segments, num_heads):
    """float64 BERT forward with the exact erf GELU, straight from the HF tensors."""
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    erf = np.vectorize(math.erf)

    def ln(x, prefix):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * t[prefix + ".weight"] + t[prefix + ".bias"]

    def linear(x, prefix):
        return x @ t[prefix + ".weight"].T + t[prefix + ".bias"]

    b, s = ids.shape
    x = (t["embeddings.word_embeddings.weight"][ids]
         + t["embeddings.token_type_embeddings.weight"][segments]
         + t["embeddings.position_embeddings.weight"][:s][None])
    x = ln(x, "embeddings.LayerNorm")
    h = x.shape[-1]
    d = h // num_heads
    bias = (1.0 - mask[:, None, None, :].astype(np.float64)) * -10000.0
    layer = 0
    while "encoder.layer.%d.attention.self.query.weight" % layer in t:
        p = "encoder.layer.%d." % layer
        q, k, v = (linear(x, p + "attention.self." + n).reshape(b, s, num_heads, d)
                   .transpose(0, 2, 1, 3) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
        x = ln(linear(context, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        inner = linear(x, p + "intermediate.dense")
        inner = 0.5 * inner * (1.0 + erf(inner / math.sqrt(2.0)))
        x = ln(linear(inner, p + "output.dense") + x, p + "output.LayerNorm")
        layer += 1
    pooled = np.tanh(linear(x[:, 0], "pooler.dense"))
    return x, pooled


def test_hf_import_matches_numpy_exact_gelu():
    from safetensors.numpy import load_file

    config = hf_import.read_hf_config(MINILM)
    assert config.hidden_act == "gelu_exact"
    model = BertModel(config)
    report = checkpoints.load_checkpoint(model, MINILM)
    assert not report.missing and report.unused == ["embeddings.position_ids"]
    golden = load_outputs("minilm")
    inputs = encoder_inputs(golden)
    out = model(inputs)
    seq, pooled = _numpy_bert(load_file(os.path.join(MINILM, "model.safetensors")),
                              inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"],
                              config.num_attention_heads)
    noise.within("minilm_vs_numpy/sequence_output", max_abs_diff(out["sequence_output"], seq),
                 MINILM_BOUND)
    noise.within("minilm_vs_numpy/pooled_output", max_abs_diff(out["pooled_output"], pooled),
                 MINILM_BOUND)
    # ... and the exact GELU is really different from the original's tanh approximation.
    assert max_abs_diff(out["sequence_output"], golden["sequence_output"]) > 1e-2
