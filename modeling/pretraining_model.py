"""Encoder + masked-LM + next-sentence heads as one functional model (run_pretraining's graph).

Inputs (dict): the encoder's ``input_ids``, ``input_mask``, ``segment_ids`` (int32 [B, S]) plus
``masked_lm_positions``, ``masked_lm_ids`` (int32 [B, P]), ``masked_lm_weights`` (float32 [B, P])
and ``next_sentence_labels`` (int32 [B, 1]).

Outputs (dict, heads and losses in float32): ``masked_lm_log_probs`` [B*P, V],
``masked_lm_example_loss`` [B*P], ``masked_lm_loss`` [] (sum(w*CE) / (sum(w) + 1e-5)),
``next_sentence_log_probs`` [B, 2], ``next_sentence_example_loss`` [B], ``next_sentence_loss``
[] (mean), ``total_loss`` [] = MLM + NSP, and the encoder's ``sequence_output``,
``pooled_output``, ``embedding_output``, ``encoder_outputs``.

The MLM output layer is the word-embedding layer called with ``reverse=True``: one variable.
"""

from __future__ import annotations

from typing import Dict, Optional

import keras

from modeling.bert_model import bert_inputs, build_encoder
from modeling.config import BertConfig
from modeling.heads import (GatherIndexes, MaskedLMLoss, MaskedLMOutput, MaskedLMTransform,
                            NextSentenceLoss, NextSentenceOutput, SumLosses)

PRETRAINING_INPUT_NAMES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                           "next_sentence_labels")


def pretraining_inputs(seq_length: Optional[int] = None,
                       max_predictions_per_seq: Optional[int] = None) -> Dict[str, object]:
    """Symbolic inputs of ``BertPretrainingModel`` (dtypes and shapes as in the TFRecords)."""
    inputs = bert_inputs(seq_length)
    inputs["masked_lm_positions"] = keras.Input((max_predictions_per_seq,), dtype="int32",
                                                name="masked_lm_positions")
    inputs["masked_lm_ids"] = keras.Input((max_predictions_per_seq,), dtype="int32",
                                          name="masked_lm_ids")
    inputs["masked_lm_weights"] = keras.Input((max_predictions_per_seq,), dtype="float32",
                                              name="masked_lm_weights")
    inputs["next_sentence_labels"] = keras.Input((1,), dtype="int32", name="next_sentence_labels")
    return inputs


def BertPretrainingModel(config: BertConfig, seq_length: Optional[int] = None,
                         max_predictions_per_seq: Optional[int] = None, dtype=None,
                         name: str = "bert_pretraining") -> keras.Model:
    """Functional pre-training model (see the module docstring for inputs and outputs)."""
    config.validate("BertPretrainingModel config")
    inputs = pretraining_inputs(seq_length, max_predictions_per_seq)
    encoder, word_layer = build_encoder(config, inputs, dtype=dtype)

    gathered = GatherIndexes(dtype=dtype)(encoder["sequence_output"],
                                          inputs["masked_lm_positions"])  # [B*P, H]
    transformed = MaskedLMTransform(config.hidden_size, config.hidden_act,
                                    config.initializer_range, config.layer_norm_eps,
                                    dtype=dtype)(gathered)  # [B*P, H]
    tied_logits = word_layer(transformed, reverse=True)  # [B*P, V]
    mlm_log_probs = MaskedLMOutput(config.vocab_size)(tied_logits)  # [B*P, V] float32
    mlm_example_loss, mlm_loss = MaskedLMLoss()(
        mlm_log_probs, inputs["masked_lm_ids"], inputs["masked_lm_weights"])

    nsp_log_probs = NextSentenceOutput(config.initializer_range)(
        encoder["pooled_output"])  # [B, 2] float32
    nsp_example_loss, nsp_loss = NextSentenceLoss()(nsp_log_probs,
                                                    inputs["next_sentence_labels"])
    total_loss = SumLosses(name="total_loss")([mlm_loss, nsp_loss])  # []

    outputs = dict(encoder)
    outputs.update({
        "masked_lm_log_probs": mlm_log_probs,
        "masked_lm_example_loss": mlm_example_loss,
        "masked_lm_loss": mlm_loss,
        "next_sentence_log_probs": nsp_log_probs,
        "next_sentence_example_loss": nsp_example_loss,
        "next_sentence_loss": nsp_loss,
        "total_loss": total_loss,
    })
    return keras.Model(inputs=inputs, outputs=outputs, name=name)
