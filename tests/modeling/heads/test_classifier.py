"""modeling/heads/classifier.py and modeling/heads/multiple_choice.py: shapes, the original's
variable layout and TF1 names, the losses, dropout only in training."""

import os

import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoints
from modeling.heads import classifier as classifier_head
from modeling.heads import multiple_choice as multiple_choice_head
from modeling.config import BertConfig
from tests import paths

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")


@pytest.fixture(scope="module")
def config():
    return BertConfig.from_json_file(os.path.join(TINY, "bert_config.json"))


def _inputs(shape):
    ids = np.full(shape, 1000, np.int32)
    mask = np.ones(shape, np.int32)
    mask[..., -3:] = 0
    return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": np.zeros(shape, np.int32)}


def test_classifier_layout_names_and_outputs(config):
    model = classifier_head.build_classifier_model(config, 3)
    names = {tf1 for tf1 in checkpoints.tf1_variable_map(model)}
    assert {"output_weights", "output_bias"} <= names  # run_classifier's top-level names
    head = model.get_layer("classifier")
    assert tuple(head.output_weights.shape) == (3, 64) and tuple(head.output_bias.shape) == (3,)
    out = model(_inputs((2, 10)))
    assert out["logits"].shape == (2, 3) and out["logits"].dtype == tf.float32
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, atol=1e-6)
    pooled = model.get_layer("pooler").output
    # logits = pooled @ W^T + b, checked against numpy through a sub-model
    sub = tf.keras.Model(model.inputs, pooled)
    expected = sub(_inputs((2, 10))).numpy() @ head.output_weights.numpy().T + \
        head.output_bias.numpy()
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=1e-5)
    # dropout only with training=True
    again = model(_inputs((2, 10)))
    np.testing.assert_array_equal(out["logits"].numpy(), again["logits"].numpy())
    dropped = model(_inputs((2, 10)), training=True)
    assert not np.allclose(out["logits"].numpy(), dropped["logits"].numpy())
    assert classifier_head.ClassifierHead.from_config(head.get_config()).num_labels == 3


def test_losses_by_hand():
    logits = tf.constant([[2.0, 0.0], [0.0, 0.0]])
    loss = classifier_head.classification_loss(logits, tf.constant([0, 1]))
    np.testing.assert_allclose(loss.numpy(), [np.log(1 + np.exp(-2.0)), np.log(2.0)], rtol=1e-6)
    sq = classifier_head.regression_loss(tf.constant([1.0, 2.5]), tf.constant([2.0, 2.0]))
    np.testing.assert_allclose(sq.numpy(), [1.0, 0.25])


def test_regression_head(config):
    model = classifier_head.build_classifier_model(config, 1, regression=True)
    out = model(_inputs((3, 8)))
    assert out["predictions"].shape == (3,) and out["logits"].shape == (3, 1)
    with pytest.raises(ValueError, match="one output"):
        classifier_head.build_classifier_model(config, 2, regression=True)


def test_multiple_choice_scores_each_choice(config):
    model = multiple_choice_head.build_multiple_choice_model(config, num_choices=4)
    assert checkpoints.unmapped_variables(model) == []
    names = set(checkpoints.tf1_variable_map(model))
    assert {"cls/multiple_choice/output_weights", "cls/multiple_choice/output_bias"} <= names
    x = _inputs((2, 4, 9))
    x["input_ids"][0, 2, :4] = [101, 2000, 2001, 102]  # choice 2 of example 0 differs
    out = model(x)
    assert out["logits"].shape == (2, 4)
    logits = out["logits"].numpy()
    # identical choices score identically; the changed one differs
    np.testing.assert_allclose(logits[1], logits[1, 0], atol=1e-6)
    assert abs(logits[0, 2] - logits[0, 0]) > 1e-6
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, atol=1e-6)
    # same result as running the 4 sequences through the encoder as a flat batch
    enc = tf.keras.Model(model.inputs, model.get_layer("pooler").output)
    pooled = enc(x).numpy()  # [8, H]
    head = model.get_layer("multiple_choice")
    expected = (pooled @ head.output_weights.numpy().T + head.output_bias.numpy()).reshape(2, 4)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
