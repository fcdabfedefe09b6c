"""Tokenization: WordPiece as Google's BERT, a fast host path, and the same in-graph.

* ``wordpiece``: ``FullTokenizer``, ``BasicTokenizer``, ``WordpieceTokenizer``, ``load_vocab``
  (the original's names and behaviour) and ``FastFullTokenizer`` (the same ids, fast; C engine
  ``_fast_wordpiece`` when built);
* ``graph``: ``BertGraphTokenizer``, the same ids in-graph (tensorflow-text), for ``tf.data`` and
  SavedModels (imports TensorFlow: not imported here);
* ``special_tokens``: ``[PAD] [UNK] [CLS] [SEP] [MASK]``, the one definition;
* ``vocab_builder``: a WordPiece vocabulary learned from text in Google's layout
  (``build_vocab.py``; Hugging Face ``tokenizers``' trainer on ``BasicTokenizer``'s words);
* the TF Hub-style preprocessor SavedModel (on ``graph``) is an export:
  ``bert_tasks.exports.hub_preprocessor``.

The original's names are importable from here, as ports of google-research/bert expect::

    from data import tokenization
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
"""

from data.tokenization.wordpiece import (ENGINE, BasicTokenizer, FastFullTokenizer,
                                         FullTokenizer, VocabError, WordpieceTokenizer,
                                         checkpoint_casing, convert_by_vocab,
                                         convert_ids_to_tokens, convert_to_unicode,
                                         convert_tokens_to_ids, load_vocab,
                                         printable_text, validate_case_matches_checkpoint,
                                         whitespace_tokenize)

__all__ = ["ENGINE", "BasicTokenizer", "FastFullTokenizer", "FullTokenizer", "VocabError",
           "WordpieceTokenizer", "checkpoint_casing", "convert_by_vocab", "convert_ids_to_tokens",
           "convert_to_unicode", "convert_tokens_to_ids", "load_vocab",
           "printable_text", "validate_case_matches_checkpoint", "whitespace_tokenize"]
