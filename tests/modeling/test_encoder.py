"""BertModel (encoder only): golden outputs, .keras round trip, XLA, bf16, tf.distribute."""

import keras
import pytest
import tensorflow as tf

from modeling.encoder import BertModel
from modeling.checkpoints.tf1 import load_tf1_checkpoint
from modeling.config import BertConfig
from tests.modeling.golden_utils import encoder_inputs, golden_dir, load_outputs, max_abs_diff
from tests.support import noise

NAME = "tiny_wide_init"
BF16_BOUND = noise.BF16_ENCODER_BOUND


@pytest.fixture(scope="module")
def loaded():
    config = BertConfig.from_json_file(golden_dir(NAME) + "/bert_config.json")
    model = BertModel(config)
    report = load_tf1_checkpoint(model, golden_dir(NAME) + "/bert_model.ckpt")
    return config, model, report


def test_encoder_matches_golden_and_reports_unused_heads(loaded):
    _, model, report = loaded
    assert len(report.loaded) == 39 and not report.missing
    assert report.unused == ["cls/predictions/output_bias",
                             "cls/predictions/transform/LayerNorm/beta",
                             "cls/predictions/transform/LayerNorm/gamma",
                             "cls/predictions/transform/dense/bias",
                             "cls/predictions/transform/dense/kernel",
                             "cls/seq_relationship/output_bias",
                             "cls/seq_relationship/output_weights"]
    golden = load_outputs(NAME)
    out = model(encoder_inputs(golden))
    assert sorted(out) == ["embedding_output", "encoder_outputs", "pooled_output",
                           "sequence_output"]
    assert len(out["encoder_outputs"]) == 2
    for key in ("embedding_output", "sequence_output", "pooled_output"):
        noise.within("encoder_golden/%s/%s" % (NAME, key), max_abs_diff(out[key], golden[key]),
                     1e-5)


def test_keras_file_round_trip(loaded, tmp_path):
    _, model, _ = loaded
    path = str(tmp_path / "bert.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    inputs = encoder_inputs(load_outputs(NAME))
    assert max_abs_diff(model(inputs)["sequence_output"],
                        again(inputs)["sequence_output"]) == 0.0


def test_jit_compile_matches_eager(loaded):
    _, model, _ = loaded
    inputs = encoder_inputs(load_outputs(NAME))
    compiled = tf.function(lambda x: model(x)["pooled_output"], jit_compile=True)
    assert max_abs_diff(compiled(inputs), model(inputs)["pooled_output"]) < 1e-5


@pytest.mark.bf16_matmul
def test_mixed_bfloat16(loaded):
    config, reference, _ = loaded
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = BertModel(config)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    load_tf1_checkpoint(model, golden_dir(NAME) + "/bert_model.ckpt")
    assert all(v.dtype == "float32" for v in model.weights)
    inputs = encoder_inputs(load_outputs(NAME))
    out = model(inputs)["sequence_output"]
    assert out.dtype == tf.bfloat16
    # bf16 keeps ~3 significant digits: close to the float32 model, not equal.
    diff = max_abs_diff(out, reference(inputs)["sequence_output"])
    assert diff > 0.0
    noise.within("bf16/mixed_bfloat16/sequence_output", diff, BF16_BOUND)


@pytest.mark.bf16_matmul
@pytest.mark.parametrize("policy, weight_dtype", [("mixed_bfloat16", "float32"),
                                                  ("bfloat16", "bfloat16")])
def test_dtype_argument_reaches_every_sublayer(loaded, policy, weight_dtype):
    """``BertModel(config, dtype=...)``: every variable and matmul follows the policy."""
    config, reference, _ = loaded
    model = BertModel(config, dtype=policy)
    load_tf1_checkpoint(model, golden_dir(NAME) + "/bert_model.ckpt")
    assert {v.dtype for v in model.weights} == {weight_dtype}
    for layer in model.get_layer("layer_0")._flatten_layers():
        assert layer.compute_dtype == "bfloat16", layer.path
    inputs = encoder_inputs(load_outputs(NAME))
    out = model(inputs)
    assert out["sequence_output"].dtype == tf.bfloat16
    want = reference(inputs)
    for key in ("sequence_output", "pooled_output"):
        diff = max_abs_diff(out[key], want[key])
        assert diff > 0.0
        noise.within("bf16/%s/%s" % (policy, key), diff, BF16_BOUND)
    # The XLA-compiled graph computes the same bf16 model: as close to the float32 model as
    # the op-by-op one (XLA keeps some intermediates in float32 that the ops round to bf16,
    # so the two bf16 results differ from each other by about as much).
    compiled = tf.function(lambda x: model(x)["pooled_output"], jit_compile=True)(inputs)
    assert compiled.dtype == tf.bfloat16
    noise.within("bf16/%s/xla_pooled_output" % policy,
                 max_abs_diff(compiled, want["pooled_output"]), BF16_BOUND)


def test_under_distribution_strategy(loaded):
    config, reference, _ = loaded
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = BertModel(config)
    load_tf1_checkpoint(model, golden_dir(NAME) + "/bert_model.ckpt")
    inputs = encoder_inputs(load_outputs(NAME))

    @tf.function
    def step(x):
        return strategy.run(lambda y: model(y, training=False)["pooled_output"], args=(x,))

    out = strategy.experimental_local_results(step(inputs))[0]
    # The traced graph against the eager model: other kernels' sums (1.1e-6 on a Sapphire
    # Rapids Xeon, under every instruction-set cap; docs/testing.md).
    noise.within("encoder/mirrored_vs_eager/pooled_output",
                 max_abs_diff(out, reference(inputs)["pooled_output"]), 2.2e-6)


def _tiny_config():
    return BertConfig(vocab_size=99, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)


def test_trainable_false_freezes_every_encoder_variable(tmp_path):
    """BertModel(config, trainable=False): no encoder variable is trained by a task model on
    it, nor after get_config/from_config and a .keras save and load."""
    import modeling

    encoder = BertModel(_tiny_config(), seq_length=8, trainable=False)
    assert encoder.trainable_variables == []
    assert all(not layer.trainable for layer in encoder._flatten_layers(include_self=False))
    classifier = modeling.BertClassifier(encoder, num_labels=3)
    names = [v.path for v in classifier.trainable_variables]
    assert names and all("bert/" not in n for n in names), names  # the head's only
    frozen = {id(v) for v in classifier.non_trainable_variables}
    assert all(id(v) in frozen for v in encoder.variables)

    rebuilt = BertModel.from_config(encoder.get_config())
    assert rebuilt.trainable_variables == []
    path = str(tmp_path / "frozen.keras")
    classifier.save(path)
    loaded = keras.saving.load_model(path)
    assert [v.path for v in loaded.trainable_variables] == names

    trainable = BertModel(_tiny_config(), seq_length=8)
    weights = [v for v in trainable.variables if "seed_generator" not in v.path]
    assert len(trainable.trainable_variables) == len(weights) > 30
