"""``ServingModule``: what the fine-tuned tasks' TF Serving modules (``classifier``, ``ner``,
``squad``) share: the model's variables, the in-graph tokenizer, and the two ways to write
the SavedModel (``export_version``: the next version folder of a TF Serving model base path;
``export_saved_model``: one folder). Its attribute names (``model_variables``, ``tokenizer``)
are in the SavedModels' object graph: kept as they are.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Tuple

import tensorflow as tf
from absl import logging

from bert_tasks.exports import saved_model
from data.tokenization import special_tokens


class ServingModule(tf.Module):
    """A model's variables and ``BertGraphTokenizer`` (the same ids as ``FullTokenizer``), for a
    serving module's signatures (``signatures()``), which run the model through ``_run_model``.
    ``DESCRIPTION`` says what the SavedModel serves, in the export's log line.

    Args:
        model: the trained task model (dict inputs -> dict outputs).
        vocab_file: the WordPiece vocab the model was trained with.
        do_lower_case: the tokenizer's casing.
        name: the module's name.
    """

    DESCRIPTION = ""

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

    def signatures(self) -> Dict[str, Any]:
        """The SavedModel's signatures (each task module's own).

        Returns:
            Signature name -> ``tf.function`` or concrete function.
        """
        raise NotImplementedError

    def export_saved_model(self, export_dir: str) -> None:
        """Writes the SavedModel to folder ``export_dir``: staged under a hidden name beside it,
        then renamed into place (``saved_model.save_saved_model``: an existing SavedModel
        there is replaced, anything else is refused).

        Args:
            export_dir: the SavedModel folder.

        Raises:
            InputError: ``export_dir`` exists and is not a SavedModel or an empty folder.
        """
        saved_model.save_saved_model(self, export_dir, self.signatures)

    def export_version(self, base_dir: str, flag: str = "--export_dir") -> str:
        """Writes the SavedModel as the next version of TF Serving model base path
        ``base_dir`` (``<base_dir>/1``, then ``2``, ...; ``saved_model.save_saved_model_version``:
        a base holding anything else is refused with an ``InputError`` naming ``flag``), logs
        it, and returns the version folder.

        Args:
            base_dir: the TF Serving model base path.
            flag: the flag named in error messages.

        Returns:
            The version folder ``<base_dir>/<version>``.

        Raises:
            InputError: ``base_dir`` holds something other than versions.
        """
        version_dir = saved_model.save_saved_model_version(self, base_dir, self.signatures, flag)
        logging.info("exported SavedModel version %s to %s (%s)", os.path.basename(version_dir),
                     version_dir, self.DESCRIPTION)
        return version_dir
