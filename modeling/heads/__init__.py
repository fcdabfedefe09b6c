"""Heads on the encoder: pre-training (MLM + NSP), classifier, SQuAD span, multiple choice.

Each module holds the head layer, its loss and a ``build_*_model(config, ...)`` that builds the
encoder with it. The fine-tuning heads also come as task models that take an existing encoder
(``BertClassifier``, ``BertSpanLabeler``, ``BertMultipleChoice``; their base is ``task.py``);
``pretraining.py`` holds ``BertPretrainingModel``.
"""
