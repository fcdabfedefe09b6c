"""TF Serving export of a fine-tuned classifier: ids in, or raw text in (tokenized in graph).

``ClassifierServingModule(model, vocab_file, do_lower_case, max_seq_length, label_list)`` is a
``tf.Module`` with three signatures (its ``export_version``, ``export_saved_model`` write
them):

* ``serving_default``: ``input_ids``, ``input_mask``, ``segment_ids`` int32 [B, S] (the
  features run_classifier writes). Checked in graph (``bert_common.serving_inputs``): the
  three of one shape, mask values 0/1, ids in [0, vocab_size), segment ids in
  [0, type_vocab_size), S at most max_position_embeddings, else ``InvalidArgumentError``
  naming the input; an empty batch (B = 0, any S) gives empty outputs;
* ``text``: ``text_a`` string [B] (single-sentence tasks);
* ``text_pair``: ``text_a``, ``text_b`` string [B]; an empty ``text_b`` means a single
  sentence for that row, as the original's ``if example.text_b:``.

The text signatures tokenize with ``data.tokenization.graph.BertGraphTokenizer`` (the same ids
as ``FullTokenizer``) and pack ``[CLS] a [SEP] (b [SEP])`` with the project's one in-graph
packer, ``graph_tokenization.pack_inputs`` (the original's truncation,
``data.glue.features._truncate_seq_pair``, in closed form), then cut the batch to its
longest row.

Outputs of every signature: classification: ``probabilities`` float32 [B, K], ``logits``
float32 [B, K], ``label_id`` int32 [B] (argmax) and ``label`` string [B] (its name in the label
list); regression: ``predictions`` float32 [B]. Loading a SavedModel with the text signatures
needs ``import tensorflow_text`` first (its ops), and TF Serving built with the TF Text ops.

``module.export_version(base_dir)`` writes the next version folder ``<base_dir>/<N>`` of TF
Serving's model base path (``bert_tasks.exports.saved_model.save_saved_model_version``) and
returns it; ``module.export_saved_model(export_dir)`` writes one SavedModel folder
(``bert_tasks.exports.serving.ServingModule``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Sequence

import tensorflow as tf

from bert_common import serving_inputs
from bert_tasks.exports.serving import ServingModule

if TYPE_CHECKING:
    from modeling.heads.classifier import BertClassifier

_IDS_SPEC = [tf.TensorSpec([None, None], tf.int32, name=n)
             for n in ("input_ids", "input_mask", "segment_ids")]


def pack_rows(ids_a: tf.RaggedTensor, ids_b: Optional[tf.RaggedTensor], max_seq_length: int,
              cls_id: int, sep_id: int) -> Dict[str, tf.Tensor]:
    """Ragged ids [B, (Na)] and [B, (Nb)] -> int32 [B, L] model inputs, L = longest packed row.

    ``graph_tokenization.pack_inputs`` with run_classifier's per-row rule
    (``data.glue.features.pair_tokens``): a row whose b is empty (or ``ids_b`` None) is a
    single sentence cut to ``max_seq_length - 2`` ids; other rows are pairs cut to
    ``max_seq_length - 3`` by the original's rule. Positions past a row's end are 0 in all
    three outputs.

    Args:
        ids_a: the first texts' word-piece ids, ragged [B, (Na)].
        ids_b: the second texts' ids, ragged [B, (Nb)], or None (single texts).
        max_seq_length: the longest packed row.
        cls_id: the ``[CLS]`` id.
        sep_id: the ``[SEP]`` id.

    Returns:
        ``{"input_ids", "input_mask", "segment_ids"}``, int32 [B, L] each.
    """
    from data.tokenization import graph as graph_tokenization

    return graph_tokenization.pack_inputs(ids_a, ids_b, max_seq_length, cls_id, sep_id,
                                          trim_to_longest=True)


SIGNATURES = ("serving_default", "text", "text_pair")


class ClassifierServingModule(ServingModule):
    """Serving wrapper around a classifier model (dict inputs -> ``logits``).

    Args:
        model: the trained ``BertClassifier``.
        vocab_file: the WordPiece vocab the model was trained with.
        do_lower_case: lower-case and strip accents before tokenizing.
        max_seq_length: the longest packed row of the text signatures.
        label_list: the label names, by label id (the ``label`` output).
        regression: a regression model (a ``predictions`` output, no labels).
    """

    DESCRIPTION = "signatures " + ", ".join(SIGNATURES)

    def __init__(self, model: BertClassifier, vocab_file: str, do_lower_case: bool,
                 max_seq_length: int, label_list: Sequence[str], regression: bool = False):
        super().__init__(model, vocab_file, do_lower_case, "classifier_serving")
        self._cls_id, self._sep_id = self._special_ids()
        self.max_seq_length = max_seq_length
        self.regression = regression
        self.label_names = tf.constant(list(label_list) if label_list else [""], tf.string)
        self._sizes = serving_inputs.model_sizes(model)

    def _outputs(self, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        out = self._run_model(inputs)
        if self.regression:
            return {"predictions": tf.cast(out["predictions"], tf.float32)}
        probabilities = tf.cast(out["probabilities"], tf.float32)  # [B, K]
        label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)  # [B]
        return {"probabilities": probabilities, "logits": tf.cast(out["logits"], tf.float32),
                "label_id": label_id, "label": tf.gather(self.label_names, label_id)}

    def pack(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
        """Tokenizes and packs the texts (``pack_rows``).

        Args:
            text_a: string [B].
            text_b: string [B], or None (single texts).

        Returns:
            The model inputs, int32 [B, L] each.
        """
        ids_b = self.tokenizer.tokenize(text_b) if text_b is not None else None
        return pack_rows(self.tokenizer.tokenize(text_a), ids_b, self.max_seq_length,
                         self._cls_id, self._sep_id)

    @tf.function(input_signature=_IDS_SPEC)
    def serve_ids(self, input_ids, input_mask, segment_ids):
        """The ``serving_default`` signature: packed ids -> outputs.

        Args:
            input_ids: int32 [B, S].
            input_mask: int32 [B, S].
            segment_ids: int32 [B, S].

        Returns:
            ``probabilities`` [B, K], ``logits`` [B, K], ``label_id`` [B] and ``label`` [B]
            (a regression model: ``predictions``).
        """
        inputs, _ = serving_inputs.check_id_inputs(
            {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
            **self._sizes)
        return self._outputs(inputs)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text_a")])
    def serve_text(self, text_a):
        """The ``text`` signature: single texts -> outputs.

        Args:
            text_a: string [B].

        Returns:
            The outputs of ``serve_ids``.
        """
        return self._outputs(self.pack(text_a))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text_a"),
                                  tf.TensorSpec([None], tf.string, name="text_b")])
    def serve_text_pair(self, text_a, text_b):
        """The ``text_pair`` signature: text pairs -> outputs.

        Args:
            text_a: string [B].
            text_b: string [B] (an empty one: a single text).

        Returns:
            The outputs of ``serve_ids``.
        """
        return self._outputs(self.pack(text_a, text_b))

    def signatures(self) -> Dict[str, object]:
        """The SavedModel's signatures (``SIGNATURES``), traced."""
        return {"serving_default": self.serve_ids.get_concrete_function(),
                "text": self.serve_text.get_concrete_function(),
                "text_pair": self.serve_text_pair.get_concrete_function()}
