"""Model side of the BERT port: config, encoder, heads, checkpoints, optimizer.

The public API, as users of keras-hub / Model Garden and of the original ``modeling.py`` expect::

    import modeling

    config = modeling.BertConfig.from_json_file("uncased_L-12_H-768_A-12/bert_config.json")
    encoder = modeling.BertModel(config)                 # keras.Model: dict in, dict out
    modeling.load_checkpoint(encoder, "uncased_L-12_H-768_A-12/bert_model.ckpt")
    classifier = modeling.BertClassifier(encoder, num_labels=2)   # shares encoder's variables
    optimizer = modeling.create_optimizer(2e-5, num_train_steps, num_warmup_steps)

* ``BertConfig`` (``modeling.config``); ``BertModel`` (``modeling.encoder``);
  ``BertPretrainingModel`` (``modeling.heads.pretraining``): keras.Model subclasses built from a
  config;
* task models on an existing encoder: ``BertClassifier(encoder, num_labels)``,
  ``BertSpanLabeler(encoder)`` (SQuAD start/end logits), ``BertMultipleChoice(encoder,
  num_choices)`` (``modeling.heads``);
* ``load_checkpoint(model, path)``: Google TF1, Hugging Face, ``.keras`` or ``.weights.h5``
  (``modeling.checkpoints``); ``create_optimizer`` (``modeling.optimization``, the original's
  AdamWeightDecay with clipping and the warmup/decay schedule;
  ``optimization.AdamWeightDecayOptimizer``, the original's class and constructor);
* the original ``modeling.py``'s small helpers, same names and arguments (``modeling.helpers``):
  ``gelu``, ``get_activation``, ``create_attention_mask_from_input_mask``, ``get_shape_list``,
  ``create_initializer``.
"""

from modeling.config import BertConfig, ConfigError
from modeling.encoder import BertModel
from modeling.heads.pretraining import BertPretrainingModel
from modeling.heads.classifier import BertClassifier
from modeling.heads.squad import BertSpanLabeler
from modeling.heads.multiple_choice import BertMultipleChoice
from modeling import checkpoints, optimization
from modeling.checkpoints import CheckpointError, load_checkpoint, load_tf1_checkpoint
from modeling.optimization import create_optimizer
from modeling.helpers import (create_attention_mask_from_input_mask, create_initializer, gelu,
                              get_activation, get_shape_list)

__all__ = ["BertClassifier", "BertConfig", "BertModel", "BertMultipleChoice",
           "BertPretrainingModel", "BertSpanLabeler", "CheckpointError", "ConfigError",
           "checkpoints", "create_attention_mask_from_input_mask", "create_initializer",
           "create_optimizer", "gelu", "get_activation", "get_shape_list", "load_checkpoint",
           "load_tf1_checkpoint", "optimization"]
