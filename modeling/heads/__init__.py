"""Heads on the encoder: pre-training (MLM + NSP), classifier, SQuAD span, multiple choice.

Each module holds the head layer, its loss and a ``build_*_model`` that puts it on an encoder.
"""
