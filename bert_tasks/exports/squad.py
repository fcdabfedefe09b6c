"""Raw-text SQuAD serving: question + context strings in, answer text and span out, in graph.

``SquadServingModule(model, vocab_file, ...)`` is a ``tf.Module`` whose
``serve(question, context)`` (both string [B]) runs entirely in TensorFlow,
so it can be exported as a SavedModel signature:

1. the context is split into words on run_squad's whitespace set
   (' ', '\\t', '\\r', '\\n', U+202F), keeping each word's byte offsets;
2. every word and the question are WordPiece-tokenized in graph by
   ``data.tokenization.graph.BertGraphTokenizer`` (``FullTokenizer``'s output);
3. ``[CLS] question[:max_query_length] [SEP] doc[:room] [SEP]``, zero-padded
   to ``max_seq_length`` (laid out by ``graph_tokenization.pack_segments``, the
   project's one in-graph packer): ONE window per question (the context is truncated
   to what fits; run_squad's sliding windows are not reproduced here);
4. the best span is the (start, end) over the window's doc tokens with
   end >= start and at most ``max_answer_length`` tokens that maximizes
   start_logit + end_logit; with ``version_2_with_negative`` the answer is ""
   when start[0] + end[0] - best > ``null_score_diff_threshold``;
5. the span maps back through the words: the answer is the context from the
   first character of its first word to the last character of its last word
   (whole words: ``get_final_text``'s trimming inside a word is not done).

Outputs (dict): ``answer_text`` string [B]; ``answer_start``/``answer_end``
int32 [B] character offsets into the context (end exclusive; -1/-1 for a
null answer); ``score`` float32 [B] (the span's start+end logit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict

import tensorflow as tf

from bert_tasks.exports.serving import ServingModule
from data.tokenization import graph as graph_tokenization

if TYPE_CHECKING:
    from modeling.heads.squad import BertSpanLabeler

# run_squad's doc_tokens whitespace: space, tab, CR, LF and U+202F.
_SPLIT_PATTERN = "[ \t\r\n\u202f]+"


class SquadServingModule(ServingModule):
    """Wraps a SQuAD model (dict inputs -> ``start_logits``/``end_logits``) for raw text.

    Args:
        model: the trained ``BertSpanLabeler``.
        vocab_file: the WordPiece vocab.
        do_lower_case: the tokenizer's casing.
        max_seq_length: the longest packed row (question + context window).
        max_query_length: the most question tokens kept.
        max_answer_length: the longest answer span, in tokens.
        version_2_with_negative: SQuAD 2.0: the answer may be "no answer".
        null_score_diff_threshold: "no answer" when the null score beats the best span's by more.
    """

    DESCRIPTION = "raw text: question, context"

    def __init__(self, model: BertSpanLabeler, vocab_file: str, do_lower_case: bool = True,
                 max_seq_length: int = 384, max_query_length: int = 64, max_answer_length: int = 30,
                 version_2_with_negative: bool = False, null_score_diff_threshold: float = 0.0):
        if max_seq_length <= max_query_length + 3:
            raise ValueError("The max_seq_length (%d) must be greater than max_query_length (%d) + 3"
                             % (max_seq_length, max_query_length))
        super().__init__(model, vocab_file, do_lower_case, "squad_serving")
        self._cls_id, self._sep_id = self._special_ids()
        self.max_seq_length = max_seq_length
        self.max_query_length = max_query_length
        self.max_answer_length = max_answer_length
        self.version_2_with_negative = version_2_with_negative
        self.null_score_diff_threshold = null_score_diff_threshold

    def _tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """strings [N] -> WordPiece ids int32 [N, (P)] (the faithful in-graph FullTokenizer)."""
        return tf.cast(self.tokenizer.tokenize(strings), tf.int32)

    def features(self, question: tf.Tensor, context: tf.Tensor) -> Dict[str, tf.Tensor]:
        """Model inputs [B, S] plus the doc-token -> word map and word byte offsets.

        Args:
            question: string [B].
            context: string [B].

        Returns:
            ``input_ids``/``input_mask``/``segment_ids`` [B, S], ``in_doc`` bool [B, S], and the
            token -> word and word byte-offset maps.
        """
        import tensorflow_text as tf_text

        S = self.max_seq_length
        words, begins, ends = tf_text.regex_split_with_offsets(context, _SPLIT_PATTERN)  # [B, (W)]
        word_pieces = self._tokenize(words.flat_values)  # [sum W, (P)]
        pieces_per_word = word_pieces.row_lengths()  # [sum W]
        doc_ids = tf.RaggedTensor.from_row_lengths(
            word_pieces.flat_values,
            tf.math.unsorted_segment_sum(pieces_per_word, words.value_rowids(),
                                         words.nrows()))  # [B, (T)]
        # Word index (within its example) of every doc piece.
        word_in_example = tf.range(tf.shape(words.flat_values, out_type=tf.int64)[0]) \
            - tf.gather(words.row_starts(), words.value_rowids())  # [sum W]
        tok_to_word = tf.RaggedTensor.from_row_lengths(
            tf.repeat(word_in_example, pieces_per_word), doc_ids.row_lengths())  # [B, (T)]

        # run_squad's truncation (not the classifier's pair rule): the question keeps its first
        # max_query_length pieces, the doc what is left of S after the 3 special tokens.
        q_ids = self._tokenize(question)  # [B, (Q)]
        q_len = tf.minimum(tf.cast(q_ids.row_lengths(), tf.int32), self.max_query_length)  # [B]
        doc_len = tf.minimum(tf.cast(doc_ids.row_lengths(), tf.int32), S - q_len - 3)  # [B]
        # run_squad closes the window with [SEP] even when no doc piece fits.
        packed = graph_tokenization.pack_segments(q_ids, doc_ids, q_len, doc_len, S, self._cls_id,
                                                  self._sep_id, always_close_b=True)  # [B, S]
        positions = tf.range(S)[None, :]  # [1, S]
        doc_offset = q_len + 2  # [B]
        in_doc = (positions >= doc_offset[:, None]) & (positions < (doc_offset + doc_len)[:, None])  # [B, S]
        return {
            "input_ids": packed["input_ids"], "input_mask": packed["input_mask"],
            "segment_ids": packed["segment_ids"],
            "in_doc": in_doc, "doc_offset": doc_offset,
            "tok_to_word": tok_to_word.to_tensor(0), "word_begins": begins.to_tensor(0),
            "word_ends": ends.to_tensor(0),
        }

    def best_span(self, start_logits: tf.Tensor, end_logits: tf.Tensor, in_doc: tf.Tensor):
        """(start, end, score) [B] of the best valid span; logits [B, S] float32, in_doc [B, S] bool.

        Args:
            start_logits: float32 [B, S].
            end_logits: float32 [B, S].
            in_doc: bool [B, S], the context tokens.

        Returns:
            ``(start, end, score)``, [B] each.
        """
        S = self.max_seq_length
        scores = start_logits[:, :, None] + end_logits[:, None, :]  # [B, S, S]
        i = tf.range(S)[:, None]
        j = tf.range(S)[None, :]
        shape_ok = (j >= i) & (j - i < self.max_answer_length)  # [S, S]
        valid = shape_ok[None] & in_doc[:, :, None] & in_doc[:, None, :]  # [B, S, S]
        masked = tf.where(valid, scores, tf.fill(tf.shape(scores), -1e30))
        flat = tf.reshape(masked, [-1, S * S])  # [B, S*S]
        best = tf.argmax(flat, axis=-1, output_type=tf.int32)  # [B]
        score = tf.reduce_max(flat, axis=-1)  # [B]
        return best // S, best % S, score

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="question"),
                                  tf.TensorSpec([None], tf.string, name="context")])
    def serve(self, question, context):
        """The ``serving_default`` signature: question and context -> the best answer.

        Args:
            question: string [B].
            context: string [B].

        Returns:
            ``answer_text`` string [B], ``answer_start``/``answer_end`` int32 [B] (character
            offsets into ``context``; -1 for no answer) and ``score`` float32 [B].
        """
        f = self.features(question, context)
        out = self._run_model({k: f[k] for k in ("input_ids", "input_mask", "segment_ids")})
        start_logits = tf.cast(out["start_logits"], tf.float32)  # [B, S]
        end_logits = tf.cast(out["end_logits"], tf.float32)  # [B, S]
        start, end, score = self.best_span(start_logits, end_logits, f["in_doc"])
        has_span = tf.reduce_any(f["in_doc"], axis=-1)  # [B] (false for an empty context)
        if self.version_2_with_negative:
            null_score = start_logits[:, 0] + end_logits[:, 0]
            has_span &= ~(null_score - score > self.null_score_diff_threshold)
        first_word = tf.gather(f["tok_to_word"], tf.maximum(start - f["doc_offset"], 0), batch_dims=1)
        last_word = tf.gather(f["tok_to_word"], tf.maximum(end - f["doc_offset"], 0), batch_dims=1)
        byte_begin = tf.gather(f["word_begins"], first_word, batch_dims=1)  # [B]
        byte_end = tf.gather(f["word_ends"], last_word, batch_dims=1)  # [B]
        text = tf.strings.substr(context, byte_begin, byte_end - byte_begin, unit="BYTE")
        char_begin = tf.strings.length(tf.strings.substr(context, tf.zeros_like(byte_begin), byte_begin, unit="BYTE"),
                                       unit="UTF8_CHAR")
        char_end = char_begin + tf.strings.length(text, unit="UTF8_CHAR")
        none = tf.fill(tf.shape(char_begin), -1)
        return {
            "answer_text": tf.where(has_span, text, tf.fill(tf.shape(text), "")),
            "answer_start": tf.where(has_span, char_begin, none),
            "answer_end": tf.where(has_span, char_end, none),
            "score": score,
        }

    def signatures(self) -> Dict[str, object]:
        """The SavedModel's signatures: ``serving_default`` is ``serve``."""
        return {"serving_default": self.serve}
