"""TF Serving export of a NER model: words (or text) in, one tag per word out, in graph.

``NerServingModule(model, vocab_file, do_lower_case, max_seq_length, label_list)`` is a
``tf.Module`` with two signatures (its ``export_version``, ``export_saved_model`` write
them):

* ``serving_default``: ``words`` string [B, W], each row a sentence's words padded with ``""``;
* ``text``: ``text`` string [B], each a sentence split on whitespace in the graph.

Outputs: ``tags`` string [B, W] (IOB2, ``""`` past a row's words), ``label_ids`` int32 [B, W]
(-1 past the words), ``probabilities`` float32 [B, W, K], ``num_words`` int32 [B].

In-graph, as ``data.ner.features`` without document context (a request is sentences): each
word becomes its WordPiece ids (``BertGraphTokenizer``, the same ids as ``FullTokenizer``; a word
that gives none gets one ``[UNK]``), one window ``[CLS] sentence [SEP]`` per sentence, and the
tag of a word is the argmax at its first sub-token. A sentence longer than the window
(``max_seq_length - 2`` sub-tokens) is cut into consecutive target chunks of half a window, each
run in a window of its own with the sentence's neighbouring sub-tokens as context: every word
gets a tag. (``run_ner.py`` cuts long sentences at word boundaries instead, so tags of such
sentences may differ; sentences that fit get the same windows.) Loading needs
``import tensorflow_text`` first (its ops), and TF Serving built with the TF Text ops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Sequence, Union

import tensorflow as tf

from bert_tasks.exports.serving import ServingModule

if TYPE_CHECKING:
    from modeling.heads.token_classifier import BertFeatureTagger, BertTokenClassifier

    TokenClassifier = Union[BertTokenClassifier, BertFeatureTagger]

SIGNATURES = ("serving_default", "text")


class NerServingModule(ServingModule):
    """Serving wrapper around a token classifier (dict inputs -> ``logits`` [B, S, K]).

    Args:
        model: the trained ``TokenClassifier``.
        vocab_file: the WordPiece vocab.
        do_lower_case: the tokenizer's casing.
        max_seq_length: the longest packed row.
        label_list: the tag names, by label id.
    """

    DESCRIPTION = "signatures " + ", ".join(SIGNATURES)

    def __init__(self, model: TokenClassifier, vocab_file: str, do_lower_case: bool,
                 max_seq_length: int, label_list: Sequence[str]):
        if max_seq_length < 3:
            raise ValueError("max_seq_length must be at least 3, got %d" % max_seq_length)
        super().__init__(model, vocab_file, do_lower_case, "ner_serving")
        self.max_seq_length = int(max_seq_length)
        self.label_names = tf.constant(list(label_list), tf.string)

    def _windows(self, tokens: tf.RaggedTensor):
        """Sub-tokens [B, (T)] -> (window ids [J, (L)] with [CLS]/[SEP], window sentence [J],
        window first sub-token [J], target chunk [J] start, chunk size), see the module."""
        budget = self.max_seq_length - 2
        half = max(1, budget // 2)
        lengths = tokens.row_lengths()  # [B] int64
        single = lengths <= budget
        count = tf.where(single, tf.ones_like(lengths), (lengths + half - 1) // half)  # [B]
        sentence = tf.repeat(tf.range(tf.size(lengths, out_type=tf.int64)), count)  # [J]
        chunk = tf.ragged.range(count).flat_values  # [J]: k-th window of its sentence
        total = tf.gather(lengths, sentence)
        one = tf.gather(single, sentence)
        target_start = tf.where(one, tf.zeros_like(chunk), chunk * half)
        target_end = tf.where(one, total, tf.minimum((chunk + 1) * half, total))
        room = budget - (target_end - target_start)
        left = tf.minimum(target_start, room // 2)
        right = tf.minimum(total - target_end, room - left)
        left = tf.minimum(target_start, room - right)
        start, end = target_start - left, target_end + right
        offsets = tf.gather(tokens.row_splits, sentence)
        ids = tf.gather(tokens.flat_values, tf.ragged.range(offsets + start, offsets + end))
        batch = tf.shape(ids.row_splits, out_type=tf.int64)[0] - 1
        cls = tf.fill([batch, 1], tf.cast(self.tokenizer.cls_id, ids.dtype))
        sep = tf.fill([batch, 1], tf.cast(self.tokenizer.sep_id, ids.dtype))
        ids = tf.concat([cls, ids, sep], axis=1)  # [J, (L)]
        first_window = tf.cumsum(count, exclusive=True)  # [B]
        return ids, first_window, start, half, single

    def tag(self, words: tf.RaggedTensor) -> Dict[str, tf.Tensor]:
        """Words [B, (W)] -> the signatures' outputs (see the module).

        Args:
            words: string ragged [B, (W)].

        Returns:
            ``tags``/``label_ids`` [B, W] and ``num_words`` [B], among others.
        """
        flat_words = words.flat_values  # [N]
        pieces = self.tokenizer.tokenize(flat_words)  # [N, (P)]
        empty = tf.equal(pieces.row_lengths(), 0)
        unk = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(empty, tf.int32))],
                    tf.cast(self.tokenizer.unk_id, pieces.dtype)),
            tf.cast(empty, tf.int64))
        pieces = tf.concat([pieces, unk], axis=1)  # a word is never dropped: [UNK] if empty
        per_word = tf.cast(pieces.row_lengths(), tf.int64)  # [N]
        tokens = tf.RaggedTensor.from_row_lengths(pieces.flat_values,
                                                  _sum_per_row(per_word, words))  # [B, (T)]
        ids, first_window, window_start, half, single = self._windows(tokens)
        input_ids = tf.cast(ids.to_tensor(), tf.int32)  # [J, L]
        mask = tf.cast(tf.sequence_mask(ids.row_lengths(), tf.shape(input_ids)[1]), tf.int32)
        logits = self._run_model({"input_ids": input_ids, "input_mask": mask,
                                  "segment_ids": tf.zeros_like(input_ids)})["logits"]
        logits = tf.cast(logits, tf.float32)  # [J, L, K]

        # Each word: its sentence, its first sub-token's offset in the sentence, its window.
        row = words.value_rowids()  # [N]
        word_start = tf.cumsum(per_word, exclusive=True) - tf.gather(
            tf.cumsum(_sum_per_row(per_word, words), exclusive=True), row)  # [N]
        chunk = tf.where(tf.gather(single, row), tf.zeros_like(word_start), word_start // half)
        window = tf.gather(first_window, row) + chunk  # [N]
        position = 1 + word_start - tf.gather(window_start, window)  # [N]
        word_logits = tf.gather_nd(logits, tf.stack([window, position], axis=1))  # [N, K]
        label_ids = tf.argmax(word_logits, axis=-1, output_type=tf.int32)  # [N]
        as_rows = words.with_flat_values
        return {
            "tags": as_rows(tf.gather(self.label_names, label_ids)).to_tensor(default_value=""),
            "label_ids": as_rows(label_ids).to_tensor(default_value=-1),
            "probabilities": as_rows(tf.nn.softmax(word_logits, axis=-1)).to_tensor(),
            "num_words": tf.cast(words.row_lengths(), tf.int32),
        }

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.string, name="words")])
    def serve_words(self, words):
        """The ``serving_default`` signature: padded words -> tags.

        Args:
            words: string [B, W], padded with ``""``.

        Returns:
            The outputs of ``tag``.
        """
        return self.tag(tf.RaggedTensor.from_tensor(words, padding=""))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve_text(self, text):
        """The ``text`` signature: whitespace-split texts -> tags.

        Args:
            text: string [B].

        Returns:
            The outputs of ``tag``.
        """
        return self.tag(tf.strings.split(text))

    def signatures(self) -> Dict[str, object]:
        """The SavedModel's signatures (``SIGNATURES``), traced."""
        return {"serving_default": self.serve_words.get_concrete_function(),
                "text": self.serve_text.get_concrete_function()}


def _sum_per_row(values: tf.Tensor, rows: tf.RaggedTensor) -> tf.Tensor:
    """``values`` [N] (one per flat value of ``rows`` [B, (W)]) summed per row -> [B]."""
    return tf.math.unsorted_segment_sum(values, rows.value_rowids(), rows.nrows())
