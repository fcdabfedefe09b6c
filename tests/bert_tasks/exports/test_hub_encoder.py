"""bert_tasks/exports/hub_encoder.py: the TF Hub-style encoder SavedModel (restored
``obj(inputs, training)``, reuse attributes, vocab asset, ``serving_default``) gives
BertModel's outputs.

The fresh-process load and ``saved_model_cli`` are checked end to end in
tests/bert_tasks/exports/test_hub.py (one export of both SavedModels)."""

import filecmp
import os

import numpy as np
import pytest
import tensorflow as tf

import modeling
from bert_common.errors import InputError
from bert_tasks.exports import hub_encoder
from tests import paths

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")


@pytest.fixture(scope="module")
def encoder():
    config = modeling.BertConfig.from_json_file(os.path.join(TINY, "bert_config.json"))
    model = modeling.BertModel(config)
    modeling.load_checkpoint(model, os.path.join(TINY, "bert_model.ckpt"), log=False)
    return model


@pytest.fixture(scope="module")
def export_dir(encoder, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hub") / "encoder")
    hub_encoder.export_encoder(encoder, path, paths.GOLDEN_VOCAB, do_lower_case=True)
    return path


@pytest.fixture(scope="module")
def loaded(export_dir):
    return tf.saved_model.load(export_dir)


def _inputs(batch, seq, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 30000, size=(batch, seq)).astype(np.int32)
    ids[:, 0] = 101
    mask = np.ones_like(ids)
    mask[0, seq - 2:] = 0  # padding in the first row
    ids[mask == 0] = 0
    types = np.zeros_like(ids)
    types[:, seq // 2:] = 1
    return ids, mask, types


def _hub(ids, mask, types):
    return {"input_word_ids": tf.constant(ids), "input_mask": tf.constant(mask),
            "input_type_ids": tf.constant(types)}


@pytest.mark.parametrize("batch,seq", [(2, 9), (3, 17)])
def test_restored_call_matches_bert_model(encoder, loaded, batch, seq):
    ids, mask, types = _inputs(batch, seq)
    want = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": types}, training=False)
    got = loaded(_hub(ids, mask, types), training=False)
    assert sorted(got) == ["default_output", "encoder_outputs", "pooled_output",
                           "sequence_output"]
    assert got["pooled_output"].shape == (batch, 64)
    assert got["sequence_output"].shape == (batch, seq, 64)
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], atol=1e-5)
    np.testing.assert_allclose(got["sequence_output"], want["sequence_output"], atol=1e-5)
    assert len(got["encoder_outputs"]) == 2
    for g, w in zip(got["encoder_outputs"], want["encoder_outputs"]):
        np.testing.assert_allclose(g, w, atol=1e-5)
    np.testing.assert_array_equal(got["default_output"], got["pooled_output"])


def test_training_true_is_dropout_false_is_deterministic(loaded):
    inputs = _hub(*_inputs(2, 9))
    off = [loaded(inputs, training=False)["pooled_output"].numpy() for _ in range(2)]
    np.testing.assert_array_equal(off[0], off[1])
    np.testing.assert_array_equal(loaded(inputs)["pooled_output"], off[0])  # default: False
    on = [loaded(inputs, training=True)["sequence_output"].numpy() for _ in range(2)]
    assert not np.allclose(on[0], on[1])  # a fresh dropout mask per call
    seq_off = loaded(inputs, training=False)["sequence_output"].numpy()
    assert not np.allclose(on[0], seq_off)


def test_reuse_attributes_asset_and_casing(encoder, loaded, export_dir):
    assert len(loaded.variables) == len(encoder.variables)
    assert len(loaded.trainable_variables) == len(encoder.trainable_variables) == 39
    assert all(v.trainable for v in loaded.trainable_variables)
    assert list(loaded.regularization_losses) == []
    trainable = {v.name: v.numpy() for v in loaded.trainable_variables}
    table = trainable[[n for n in trainable if n.startswith("word_embeddings")][0]]
    np.testing.assert_array_equal(table, encoder.get_layer("word_embeddings").embeddings.numpy())
    asset = loaded.vocab_file.asset_path.numpy().decode()
    assert asset == os.path.join(export_dir, "assets", "vocab.txt")
    assert filecmp.cmp(asset, paths.GOLDEN_VOCAB, shallow=False)
    assert bool(loaded.do_lower_case.numpy()) is True


def test_serving_default_signature_has_flat_outputs(encoder, loaded):
    serve = loaded.signatures["serving_default"]
    assert sorted(serve.structured_input_signature[1]) == ["input_mask", "input_type_ids",
                                                           "input_word_ids"]
    ids, mask, types = _inputs(2, 9)
    got = serve(**_hub(ids, mask, types))
    assert sorted(got) == ["default_output", "encoder_outputs_0", "encoder_outputs_1",
                           "pooled_output", "sequence_output"]
    flat = modeling.encoder.flat_outputs(
        encoder({"input_ids": ids, "input_mask": mask, "segment_ids": types}))
    for name in ("pooled_output", "sequence_output", "encoder_outputs_0", "encoder_outputs_1"):
        np.testing.assert_allclose(got[name], flat[name], atol=1e-5, err_msg=name)


def test_missing_vocab_is_one_line_input_error(encoder, tmp_path):
    missing = str(tmp_path / "nope" / "vocab.txt")
    with pytest.raises(InputError) as error:
        hub_encoder.export_encoder(encoder, str(tmp_path / "encoder"), missing, True)
    assert str(error.value) == "vocab file %s: no such file" % missing
    assert not os.path.exists(tmp_path / "encoder")
