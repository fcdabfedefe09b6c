"""modeling/heads/squad.py: the span head, its loss, and the TF1 names of its variables."""

import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoints
from modeling.heads import squad as squad_head
from modeling.config import BertConfig

TINY = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=32, type_vocab_size=2)


def test_head_is_linear_in_original_layout():
    head = squad_head.SquadHead()
    x = np.random.RandomState(0).normal(size=(2, 5, 16)).astype(np.float32)
    start, end = head(x)
    assert head.output_weights.shape == (2, 16) and head.output_bias.shape == (2,)
    head.output_bias.assign([0.5, -1.0])
    start, end = head(x)
    w = head.output_weights.numpy()
    np.testing.assert_allclose(start.numpy(), x @ w[0] + 0.5, atol=1e-5)
    np.testing.assert_allclose(end.numpy(), x @ w[1] - 1.0, atol=1e-5)
    assert start.dtype == tf.float32 and start.shape == (2, 5)


def test_head_get_config_round_trip():
    head = squad_head.SquadHead(initializer_range=0.05, name="squad")
    clone = squad_head.SquadHead.from_config(head.get_config())
    assert clone.initializer_range == 0.05 and clone.name == "squad"


def test_loss_matches_original_formula():
    rng = np.random.RandomState(1)
    start = rng.normal(size=(3, 7)).astype(np.float32)
    end = rng.normal(size=(3, 7)).astype(np.float32)
    sp, ep = np.array([0, 3, 6]), np.array([0, 4, 6])

    def ce(logits, pos):
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return -np.mean(log_probs[np.arange(len(pos)), pos])

    loss = squad_head.squad_loss(start, end, sp, ep)
    assert float(loss) == pytest.approx((ce(start, sp) + ce(end, ep)) / 2, rel=1e-5)


def test_model_outputs_and_checkpoint_names():
    model = squad_head.build_squad_model(TINY, seq_length=8)
    ids = np.array([[2, 5, 6, 3, 7, 3, 0, 0]] * 2, np.int32)
    out = model({"input_ids": ids, "input_mask": (ids > 0).astype(np.int32),
                 "segment_ids": np.zeros_like(ids)})
    assert set(out) == {"start_logits", "end_logits"}
    assert out["start_logits"].shape == (2, 8)
    names = checkpoints.tf1_variable_map(model)
    assert names["cls/squad/output_weights"][0].shape == (2, 16)
    assert names["cls/squad/output_weights"][1] is False  # stored [2, H] as the original
    assert "cls/squad/output_bias" in names
    assert checkpoints.unmapped_variables(model) == []
