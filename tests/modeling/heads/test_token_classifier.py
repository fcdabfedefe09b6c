"""modeling/heads/token_classifier.py: the fine-tuned token classifier (the classifier head on
every token), its loss, and the feature-based tagger on a frozen encoder (features per
FEATURE_MODE, only the BiLSTM/classifier train, padding masked, .keras round trip)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertModel
from modeling.heads import token_classifier as tc
from modeling.heads.classifier import ClassifierHead

TINY = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=4, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=32)
H = 16
K = 5


def _inputs(batch=2, seq=7, pad=2, seed=0):
    rng = np.random.RandomState(seed)
    mask = np.ones((batch, seq), np.int32)
    if pad:
        mask[:, -pad:] = 0
    ids = rng.randint(1, TINY.vocab_size, size=(batch, seq)).astype(np.int32) * mask
    segments = np.zeros((batch, seq), np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def _frozen_encoder():
    return BertModel(tc.feature_encoder_config(TINY))


@pytest.fixture(scope="module")
def token_classifier():
    return tc.BertTokenClassifier(BertModel(TINY), K)


def test_token_classifier_outputs_equal_the_head_per_token(token_classifier):
    model = token_classifier
    x = _inputs()
    out = model(x)
    assert set(out) == {"logits", "probabilities"}
    assert out["logits"].shape == (2, 7, K) and out["logits"].dtype == tf.float32
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(out["probabilities"].numpy(),
                               tf.nn.softmax(out["logits"]).numpy(), atol=1e-6)
    head = model.get_layer("classifier")
    assert isinstance(head, ClassifierHead)
    assert tuple(head.output_weights.shape) == (K, H) and tuple(head.output_bias.shape) == (K,)
    head.output_bias.assign(np.arange(K, dtype=np.float32) * 0.1)  # not all zeros
    out = model(x)
    sequence = model.encoder(x)["sequence_output"].numpy()  # [B, S, H], the shared variables
    assert sequence.shape == (2, 7, H)
    for position in range(7):
        # the rank-2 path (the sentence classifier's) on that token's vector
        per_token = head(tf.constant(sequence[:, position, :])).numpy()  # [B, K]
        np.testing.assert_allclose(out["logits"].numpy()[:, position], per_token, atol=1e-5)
    expected = sequence @ head.output_weights.numpy().T + head.output_bias.numpy()
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=1e-5)
    # the head alone on [B, S, H]
    assert head.compute_output_shape((None, 7, H)) == (None, 7, K)
    np.testing.assert_allclose(head(tf.constant(sequence)).numpy(), expected, atol=1e-5)
    # dropout only with training=True
    np.testing.assert_array_equal(model(x)["logits"].numpy(), out["logits"].numpy())
    assert not np.allclose(model(x, training=True)["logits"].numpy(), out["logits"].numpy())
    # every variable is trainable (fine-tuning trains all of BERT), TF1 head names
    assert model.trainable_variables
    assert all("seed_generator" in v.path for v in model.non_trainable_variables)
    assert not [v.path for v in model.variables if "pooler" in v.path]  # no pooler: not used
    names = set(checkpoints.tf1_variable_map(model))
    assert {"output_weights", "output_bias"} <= names
    # any sequence length
    assert model(_inputs(batch=3, seq=11, pad=0))["logits"].shape == (3, 11, K)


def test_token_classification_loss_is_cross_entropy_per_token():
    rng = np.random.RandomState(3)
    logits = rng.normal(size=(2, 6, K)).astype(np.float32) * 3
    labels = rng.randint(0, K, size=(2, 6)).astype(np.int32)
    loss = tc.token_classification_loss({"logits": tf.constant(logits)},
                                        {"label_ids": tf.constant(labels)}).numpy()
    assert loss.shape == (2, 6)
    log_z = np.log(np.exp(logits.astype(np.float64)).sum(-1))
    picked = np.take_along_axis(logits, labels[..., None], -1)[..., 0]
    np.testing.assert_allclose(loss, log_z - picked, rtol=1e-5, atol=1e-6)
    assert np.all(loss > 0)


def _features_model(encoder, mode):
    return keras.Model(encoder.input, tc.encoder_features(encoder, mode))


def test_feature_modes_are_what_they_say():
    encoder = _frozen_encoder()
    x = _inputs(seed=5)
    ref = encoder(x)
    layers = [t.numpy() for t in ref["encoder_outputs"]]
    assert len(layers) == 4
    expected = {
        "embeddings": ref["embedding_output"].numpy(),
        "second_to_last_hidden": layers[-2],
        "last_hidden": layers[-1],
        "sum_last_four_hidden": np.sum(layers[-4:], axis=0),
        "concat_last_four_hidden": np.concatenate(layers[-4:], axis=-1),
        "weighted_sum_last_four_hidden": np.mean(layers[-4:], axis=0),
        "weighted_sum_all_layers": np.mean(layers, axis=0),
    }
    assert set(expected) == set(tc.FEATURE_MODES)
    np.testing.assert_array_equal(layers[-1], ref["sequence_output"].numpy())
    for mode in tc.FEATURE_MODES:
        got = _features_model(encoder, mode)(x).numpy()
        assert got.shape == expected[mode].shape, mode
        np.testing.assert_allclose(got, expected[mode], atol=1e-5, err_msg=mode)
    assert expected["concat_last_four_hidden"].shape == (2, 7, 4 * H)
    with pytest.raises(ValueError, match="feature_mode must be one of"):
        tc.encoder_features(encoder, "first_hidden")


def test_layer_mix_weights():
    encoder = _frozen_encoder()
    model = _features_model(encoder, "weighted_sum_last_four_hidden")
    mix = model.get_layer("layer_mix")
    assert isinstance(mix, tc.LayerMix)
    scalars = np.array([1.0, -0.5, 2.0, 0.0], np.float32)
    mix.scalars.assign(scalars)
    mix.gamma.assign(1.5)
    x = _inputs(seed=6)
    layers = np.stack([t.numpy() for t in encoder(x)["encoder_outputs"]])
    w = np.exp(scalars) / np.exp(scalars).sum()
    np.testing.assert_allclose(model(x).numpy(), 1.5 * np.tensordot(w, layers, axes=1),
                               atol=1e-5)


def test_second_to_last_needs_two_layers():
    encoder = BertModel(tc.feature_encoder_config(TINY.replace(num_hidden_layers=1)))
    with pytest.raises(ValueError, match="2 encoder layers"):
        tc.encoder_features(encoder, "second_to_last_hidden")
    # the last-four modes take what there is
    x = _inputs()
    np.testing.assert_allclose(
        _features_model(encoder, "concat_last_four_hidden")(x).numpy(),
        encoder(x)["sequence_output"].numpy(), atol=1e-6)


def test_encoder_with_dropout_is_refused():
    with pytest.raises(ValueError, match="feature_encoder_config"):
        tc.BertFeatureTagger(BertModel(TINY), K)
    with pytest.raises(ValueError, match="feature_encoder_config"):
        tc.BertFeatureTagger(BertModel(TINY.replace(hidden_dropout_prob=0.0)), K)
    frozen = tc.feature_encoder_config(TINY)
    assert frozen.hidden_dropout_prob == 0 and frozen.attention_probs_dropout_prob == 0
    assert TINY.hidden_dropout_prob == 0.1  # the original config is not changed


def _check_frozen(tagger, own):
    """Only the layers named ``own`` train; every encoder variable the tagger uses is frozen."""
    encoder = tagger.encoder
    assert encoder.trainable_variables == [] and not encoder.trainable
    own_ids = {id(v) for name in own for v in tagger.get_layer(name).trainable_variables}
    assert own_ids
    assert {id(v) for v in tagger.trainable_variables} == own_ids
    used = {id(v) for v in encoder.variables if not v.path.startswith("pooler/")}  # no pooler
    assert not used & own_ids
    assert used <= {id(v) for v in tagger.non_trainable_variables}


def test_feature_tagger_trains_only_its_own_layers():
    encoder = _frozen_encoder()
    tagger = tc.BertFeatureTagger(encoder, K, feature_mode="weighted_sum_last_four_hidden",
                                  lstm_units=6)
    x = _inputs(seed=7)
    out = tagger(x)
    assert out["logits"].shape == (2, 7, K) and out["probabilities"].shape == (2, 7, K)
    assert tagger.get_layer("bilstm_0").output.shape[-1] == 12  # 2 directions x 6 units
    _check_frozen(tagger, ["layer_mix", "bilstm_0", "bilstm_1", "classifier"])
    concat = tc.BertFeatureTagger(_frozen_encoder(), K, feature_mode="concat_last_four_hidden",
                                  lstm_units=6)
    _check_frozen(concat, ["bilstm_0", "bilstm_1", "classifier"])
    assert concat.get_layer("concat_last_four").output.shape[-1] == 4 * H

    before = [v.numpy().copy() for v in encoder.variables]
    own_before = [v.numpy().copy() for v in tagger.trainable_variables]
    labels = np.random.RandomState(8).randint(0, K, size=(2, 7))
    optimizer = keras.optimizers.Adam(learning_rate=0.05)
    with tf.GradientTape() as tape:
        outputs = tagger(x, training=True)
        loss = tf.reduce_mean(tc.token_classification_loss(outputs, {"label_ids": labels})
                              * tf.cast(x["input_mask"], tf.float32))
    grads = tape.gradient(loss, tagger.trainable_variables)
    assert all(g is not None for g in grads)
    optimizer.apply_gradients(zip(grads, tagger.trainable_variables))
    assert all(not np.array_equal(v.numpy(), b)
               for v, b in zip(tagger.trainable_variables, own_before))
    for value, variable in zip(before, encoder.variables):
        np.testing.assert_array_equal(variable.numpy(), value, err_msg=variable.path)


@pytest.mark.parametrize("mode", ["last_hidden", "weighted_sum_all_layers"])
def test_feature_tagger_masks_padding(mode):
    tagger = tc.BertFeatureTagger(_frozen_encoder(), K, feature_mode=mode, lstm_units=4)
    x = _inputs(batch=2, seq=9, pad=3, seed=9)
    base = tagger(x)["logits"].numpy()
    changed = {k: v.copy() for k, v in x.items()}
    changed["input_ids"][:, -3:] = np.random.RandomState(10).randint(1, 100, size=(2, 3))
    changed["segment_ids"][:, -3:] = 1
    got = tagger(changed)["logits"].numpy()
    np.testing.assert_allclose(got[:, :6], base[:, :6], atol=1e-6)
    # a real token does change them (the check above is not vacuous), both directions of it
    real = {k: v.copy() for k, v in x.items()}
    real["input_ids"][:, 3] = (real["input_ids"][:, 3] % 98) + 1
    got = tagger(real)["logits"].numpy()
    assert not np.allclose(got[:, 0], base[:, 0], atol=1e-6)
    assert not np.allclose(got[:, 5], base[:, 5], atol=1e-6)


def test_build_token_classifier_model():
    model = tc.build_token_classifier_model(TINY, K, seq_length=8)
    assert isinstance(model, tc.BertTokenClassifier)
    assert model(_inputs(seq=8))["logits"].shape == (2, 8, K)
    tagger = tc.build_token_classifier_model(TINY, K, seq_length=8,
                                             feature_mode="sum_last_four_hidden", lstm_units=5)
    assert isinstance(tagger, tc.BertFeatureTagger)
    assert tagger.encoder.config.hidden_dropout_prob == 0
    assert tagger.encoder.config.attention_probs_dropout_prob == 0
    assert tagger.lstm_units == 5 and tagger.feature_mode == "sum_last_four_hidden"
    assert tagger(_inputs(seq=8))["logits"].shape == (2, 8, K)
    default = tc.BertFeatureTagger(_frozen_encoder(), K, feature_mode="last_hidden",
                                   lstm_layers=1)
    assert default.lstm_units == H and default.get_layer("bilstm_0").output.shape[-1] == 2 * H
    with pytest.raises(ValueError):
        default.get_layer("bilstm_1")
    with pytest.raises(ValueError, match="num_labels"):
        tc.BertTokenClassifier(BertModel(TINY), 0)
    with pytest.raises(ValueError, match="lstm_layers"):
        tc.BertFeatureTagger(_frozen_encoder(), K, lstm_layers=0)


def test_keras_round_trip(tmp_path, token_classifier):
    x = _inputs(seed=11)
    tagger = tc.BertFeatureTagger(_frozen_encoder(), K,
                                  feature_mode="weighted_sum_last_four_hidden", lstm_units=4)
    tagger.get_layer("layer_mix").scalars.assign([0.3, -0.2, 0.1, 0.5])  # not the initial ones
    tagger.get_layer("classifier").output_bias.assign(np.linspace(-1, 1, K))
    for name, model in (("token_classifier", token_classifier), ("tagger", tagger)):
        path = str(tmp_path / ("%s.keras" % name))
        model.save(path)
        again = keras.saving.load_model(path)
        assert type(again) is type(model)
        np.testing.assert_allclose(again(x)["logits"].numpy(), model(x)["logits"].numpy(),
                                   atol=1e-5, err_msg=name)
        assert len(again.variables) == len(model.variables)
    assert again.feature_mode == "weighted_sum_last_four_hidden" and again.lstm_units == 4


def test_loaded_feature_tagger_keeps_the_encoder_frozen(tmp_path):
    tagger = tc.BertFeatureTagger(_frozen_encoder(), K, feature_mode="last_hidden",
                                  lstm_units=4, lstm_layers=1)
    own = ["bilstm_0", "classifier"]
    _check_frozen(tagger, own)
    path = str(tmp_path / "tagger.keras")
    tagger.save(path)
    _check_frozen(tc.BertFeatureTagger.from_config(tagger.get_config()), own)
    _check_frozen(keras.saving.load_model(path), own)
