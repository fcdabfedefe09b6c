"""BertPretrainingModel reproduces the original's outputs (golden tiny, tiny_wide_init)."""

import numpy as np
import pytest
import tensorflow as tf

from modeling.checkpoints.tf1 import load_tf1_checkpoint
from modeling.config import BertConfig
from modeling.heads.pretraining import BertPretrainingModel
from tests.modeling.golden_utils import golden_dir, load_outputs, max_abs_diff, pretraining_inputs
from tests.support import noise

TOLERANCE = 1e-5
KEYS = ("embedding_output", "sequence_output", "pooled_output", "masked_lm_log_probs",
        "masked_lm_example_loss", "masked_lm_loss", "next_sentence_log_probs",
        "next_sentence_example_loss", "next_sentence_loss", "total_loss")


def _loaded_model(name):
    config = BertConfig.from_json_file(golden_dir(name) + "/bert_config.json")
    model = BertPretrainingModel(config)
    report = load_tf1_checkpoint(model, golden_dir(name) + "/bert_model.ckpt")
    assert len(report.loaded) == 46 and not report.missing and not report.unused
    return config, model


@pytest.mark.parametrize("name", ["tiny", "tiny_wide_init"])
def test_matches_golden(name):
    _, model = _loaded_model(name)
    golden = load_outputs(name)
    out = model(pretraining_inputs(golden))
    for key in KEYS:
        assert out[key].shape == golden[key].shape, key
        noise.within("pretraining_golden/%s/%s" % (name, key),
                     max_abs_diff(out[key], golden[key]), TOLERANCE)
    layers = np.stack([np.asarray(x) for x in out["encoder_outputs"]])
    noise.within("pretraining_golden/%s/all_encoder_layers" % name,
                 max_abs_diff(layers, golden["all_encoder_layers"]), TOLERANCE)
    assert out["masked_lm_log_probs"].dtype == tf.float32


def test_mlm_output_is_tied_and_gradient_of_lookup_is_sparse():
    config, model = _loaded_model("tiny_wide_init")
    golden = load_outputs("tiny_wide_init")
    table = model.get_layer("word_embeddings").embeddings
    big = [v for v in model.weights if tuple(v.shape) == (config.vocab_size, config.hidden_size)]
    assert len(model.weights) == 46 and len(big) == 1 and big[0] is table
    # The MLM log-probs are log_softmax(transform(h) @ table^T + output_bias) with that table.
    out = model(pretraining_inputs(golden))
    hidden = tf.gather(out["sequence_output"], golden["masked_lm_positions"], batch_dims=1)
    transformed = model.get_layer("predictions_transform")(tf.reshape(hidden, [-1, 32]))
    bias = model.get_layer("predictions").output_bias
    expected = tf.nn.log_softmax(tf.matmul(transformed, table.value, transpose_b=True) + bias)
    assert max_abs_diff(expected, out["masked_lm_log_probs"]) < 1e-5
    encoder_inputs = {k: golden[k2] for k, k2 in (("input_ids", "input_ids"),
                                                   ("input_mask", "input_mask"),
                                                   ("segment_ids", "token_type_ids"))}
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(pretraining_inputs(golden))["sequence_output"])
    grad = tape.gradient(loss, table.value)
    assert isinstance(grad, tf.IndexedSlices)
    assert encoder_inputs["input_ids"].size == grad.indices.shape[0]


def test_weight_decay_names():
    _, model = _loaded_model("tiny")
    for variable in model.trainable_weights:
        path = variable.path
        excluded = any(s in path for s in ("LayerNorm", "layer_norm", "bias"))
        is_norm_or_bias = variable.name in ("gamma", "beta", "bias", "output_bias")
        assert excluded == is_norm_or_bias, path


def test_dropout_only_in_training():
    _, model = _loaded_model("tiny_wide_init")
    inputs = pretraining_inputs(load_outputs("tiny_wide_init"))
    a = model(inputs)["sequence_output"]
    b = model(inputs, training=False)["sequence_output"]
    c = model(inputs, training=True)["sequence_output"]
    assert max_abs_diff(a, b) == 0.0
    assert max_abs_diff(a, c) > 1e-3


def test_pretraining_model_bf16_and_xla():
    import keras

    config = BertConfig.from_json_file(golden_dir("tiny_wide_init") + "/bert_config.json")
    golden = load_outputs("tiny_wide_init")
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = BertPretrainingModel(config)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    load_tf1_checkpoint(model, golden_dir("tiny_wide_init") + "/bert_model.ckpt")
    step = tf.function(lambda x: model(x), jit_compile=True)
    out = step(pretraining_inputs(golden))
    assert out["sequence_output"].dtype == tf.bfloat16
    for key in ("masked_lm_log_probs", "next_sentence_log_probs", "total_loss"):
        assert out[key].dtype == tf.float32, key
    assert abs(float(out["total_loss"]) - float(golden["total_loss"])) < 0.1
