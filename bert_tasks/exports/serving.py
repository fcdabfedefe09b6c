"""``ServingModule``: what the fine-tuned tasks' TF Serving modules (``classifier``, ``ner``,
``squad``) share, the model's variables and the in-graph tokenizer. Its attribute names
(``model_variables``, ``tokenizer``) are in the SavedModels' object graph: kept as they are.
"""

from __future__ import annotations

from typing import Any, Tuple

import tensorflow as tf

from data.tokenization import special_tokens


class ServingModule(tf.Module):
    """A model's variables and ``BertGraphTokenizer`` (the same ids as ``FullTokenizer``), for a
    serving module's signatures, which run the model through ``_run_model``.

    Args:
        model: the trained task model (dict inputs -> dict outputs).
        vocab_file: the WordPiece vocab the model was trained with.
        do_lower_case: the tokenizer's casing.
        name: the module's name.
    """

    def __init__(self, model: Any, vocab_file: str, do_lower_case: bool, name: str):
        super().__init__(name=name)
        from data.tokenization import graph as graph_tokenization

        # Only the variables are tracked: tracking the Keras model itself would make
        # tf.saved_model.save trace every layer again (slow) for nothing TF Serving uses.
        self._run_model = lambda inputs: model(inputs, training=False)
        self.model_variables = list(model.variables)
        self.tokenizer = graph_tokenization.BertGraphTokenizer(vocab_file,
                                                              do_lower_case=do_lower_case)

    def _special_ids(self) -> Tuple[int, int]:
        """The vocab's ``(cls_id, sep_id)``; ``KeyError`` naming the token the vocab lacks."""
        for token, token_id in ((special_tokens.CLS, self.tokenizer.cls_id),
                                (special_tokens.SEP, self.tokenizer.sep_id)):
            if token_id < 0:
                raise KeyError(token)
        return self.tokenizer.cls_id, self.tokenizer.sep_id
