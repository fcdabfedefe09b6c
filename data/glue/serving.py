"""TF Serving export of a fine-tuned classifier: ids in, or raw text in (tokenized in graph).

``ClassifierServingModule(model, vocab_file, do_lower_case, max_seq_length, label_list)`` is a
``tf.Module`` with three signatures (``export_saved_model`` writes them):

* ``serving_default``: ``input_ids``, ``input_mask``, ``segment_ids`` int32 [B, S] (the
  features run_classifier writes);
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
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import tensorflow as tf

from bert_common import files as io_utils
from data.tokenization import special_tokens
from data.tokenization.wordpiece import load_vocab

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
    """
    from data.tokenization import graph as graph_tokenization

    return graph_tokenization.pack_inputs(ids_a, ids_b, max_seq_length, cls_id, sep_id,
                                          trim_to_longest=True)


class ClassifierServingModule(tf.Module):
    """Serving wrapper around a classifier model (dict inputs -> ``logits``)."""

    def __init__(self, model, vocab_file: str, do_lower_case: bool, max_seq_length: int,
                 label_list: Sequence[str], regression: bool = False):
        super().__init__(name="classifier_serving")
        from data.tokenization import graph as graph_tokenization

        # Only the variables are tracked: tracking the Keras model itself would make
        # tf.saved_model.save trace every layer again (slow) for nothing TF Serving uses.
        self._run_model = lambda inputs: model(inputs, training=False)
        self.model_variables = list(model.variables)
        self.tokenizer = graph_tokenization.BertGraphTokenizer(vocab_file,
                                                              do_lower_case=do_lower_case)
        vocab = load_vocab(vocab_file)
        self._cls_id = vocab[special_tokens.CLS]
        self._sep_id = vocab[special_tokens.SEP]
        self.max_seq_length = max_seq_length
        self.regression = regression
        self.label_names = tf.constant(list(label_list) if label_list else [""], tf.string)

    def _outputs(self, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        out = self._run_model(inputs)
        if self.regression:
            return {"predictions": tf.cast(out["predictions"], tf.float32)}
        probabilities = tf.cast(out["probabilities"], tf.float32)  # [B, K]
        label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)  # [B]
        return {"probabilities": probabilities, "logits": tf.cast(out["logits"], tf.float32),
                "label_id": label_id, "label": tf.gather(self.label_names, label_id)}

    def pack(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
        ids_b = self.tokenizer.tokenize(text_b) if text_b is not None else None
        return pack_rows(self.tokenizer.tokenize(text_a), ids_b, self.max_seq_length,
                         self._cls_id, self._sep_id)

    @tf.function(input_signature=_IDS_SPEC)
    def serve_ids(self, input_ids, input_mask, segment_ids):
        return self._outputs({"input_ids": input_ids, "input_mask": input_mask,
                              "segment_ids": segment_ids})

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text_a")])
    def serve_text(self, text_a):
        return self._outputs(self.pack(text_a))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text_a"),
                                  tf.TensorSpec([None], tf.string, name="text_b")])
    def serve_text_pair(self, text_a, text_b):
        return self._outputs(self.pack(text_a, text_b))


SIGNATURES = ("serving_default", "text", "text_pair")


def export_saved_model(model, export_dir: str, vocab_file: str, do_lower_case: bool,
                       max_seq_length: int, label_list: Sequence[str],
                       regression: bool = False) -> ClassifierServingModule:
    """Writes the SavedModel (signatures ``SIGNATURES``) under a temporary name beside
    ``export_dir``, then renames it into place (an existing ``export_dir`` is replaced)."""
    module = ClassifierServingModule(model, vocab_file, do_lower_case, max_seq_length,
                                     label_list, regression)
    io_utils.save_saved_model(module, export_dir, lambda: {
        "serving_default": module.serve_ids.get_concrete_function(),
        "text": module.serve_text.get_concrete_function(),
        "text_pair": module.serve_text_pair.get_concrete_function(),
    })
    return module
