"""A tiny BERT pre-training trainer and one repeated batch, for tests of the training kernels."""

import keras
import numpy as np
import tensorflow as tf

from modeling.training import optimizers
from modeling.training import objectives as pretraining_objective
from modeling.training import job
from modeling.training.backends.tensorflow import steps as trainer
from modeling.config import BertConfig
from modeling.heads.pretraining import BertPretrainingModel


def tiny_pretraining_trainer(model_dir, fused: bool, dtype: str = "float32",
                             dropout: float = 0.0, steps: int = 4) -> trainer.Trainer:
    """L=2 H=16 BERT (vocab 64, seq 8, 3 predictions), lr 1e-2, ``steps`` updates per loop."""
    keras.utils.set_random_seed(5)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, max_position_embeddings=16)
    keras.mixed_precision.set_global_policy(dtype)
    try:
        model = BertPretrainingModel(config, seq_length=8, max_predictions_per_seq=3)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    optimizer = optimizers.create_optimizer(1e-2, 100, 2)
    return trainer.Trainer(
        model, optimizer, pretraining_objective.PretrainingObjective(), None,
        job.TrainerConfig(model_dir, steps, steps_per_loop=steps, fused_kernels=fused,
                              write_summaries=False, step_log=False, progress=False))


def pretraining_batches() -> tf.data.Dataset:
    """One batch of 16 random pre-training features for the tiny model, repeated."""
    rng = np.random.RandomState(2)
    n = 16
    features = {
        "input_ids": rng.randint(5, 64, (n, 8)).astype(np.int32),
        "input_mask": np.ones((n, 8), np.int32),
        "segment_ids": np.repeat([[0] * 4 + [1] * 4], n, 0).astype(np.int32),
        "masked_lm_positions": np.tile(np.array([1, 3, 6], np.int32), (n, 1)),
        "masked_lm_ids": rng.randint(5, 64, (n, 3)).astype(np.int32),
        "masked_lm_weights": np.ones((n, 3), np.float32),
        "next_sentence_labels": rng.randint(0, 2, (n, 1)).astype(np.int32),
    }
    return tf.data.Dataset.from_tensor_slices(features).batch(n).take(1).repeat()
