"""SQuAD post-processing: model logits -> answer texts, as Google's ``run_squad.py``.

``write_predictions`` takes, for every feature (window), the ``n_best_size``
highest start and end logits, keeps the pairs that lie inside the window's
document tokens, start in the window where the start token has its maximum
context, have end >= start and at most ``max_answer_length`` tokens; ranks them
by start_logit + end_logit; turns each into text (WordPiece pieces joined,
then aligned back onto the original words by ``get_final_text``) and keeps the
first ``n_best_size`` distinct texts, with softmax probabilities over their
scores. For SQuAD 2.0 the null answer scores min over the question's windows
of start_logits[0] + end_logits[0]; the question is answered "" when
null score - best non-null score > ``null_score_diff_threshold``, and that
difference is written to ``null_odds.json``.

Deliberate fix: with ``version_2_with_negative`` the original crashes
(``AttributeError: 'NoneType' object has no attribute 'start_logit'``,
google-research/bert #211, #476) when no non-null span survives for a
question. Here that question is answered "" and its null odds are
``ALL_NULL_SCORE_DIFF`` (a large positive number: null wins by any margin).
"""

from __future__ import annotations

import collections
import json
import math
from typing import Dict, List, Optional, Sequence, Tuple

from absl import logging

from bert_common import atomic, files
from data.tokenization.wordpiece import BasicTokenizer

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])

# null_odds.json value of a question whose n-best list holds only the null answer.
ALL_NULL_SCORE_DIFF = 1e6

_PrelimPrediction = collections.namedtuple(
    "PrelimPrediction", ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])
_NbestPrediction = collections.namedtuple("NbestPrediction", ["text", "start_logit", "end_logit"])


def _as_floats(logits) -> List[float]:
    """Python floats of a list / numpy array of logits (float32 values kept exactly)."""
    return logits.tolist() if hasattr(logits, "tolist") else [float(x) for x in logits]


def _get_best_indexes(logits: Sequence[float], n_best_size: int) -> List[int]:
    """Indexes of the ``n_best_size`` largest logits, largest first (ties: lower index first)."""
    index_and_score = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
    return [i for i, _ in index_and_score[:n_best_size]]


def _compute_softmax(scores: Sequence[float]) -> List[float]:
    """Softmax of python floats, shifted by the max (as the original, in float64)."""
    if not scores:
        return []
    max_score = max(scores)
    exp_scores = [math.exp(s - max_score) for s in scores]
    total_sum = 0.0
    for x in exp_scores:
        total_sum += x
    return [x / total_sum for x in exp_scores]


_BASIC_TOKENIZERS: Dict[bool, BasicTokenizer] = {}


def _strip_spaces(text: str) -> Tuple[str, Dict[int, int]]:
    """``text`` without ' ' characters, and a map from its indexes to ``text``'s."""
    ns_chars = []
    ns_to_s_map = {}
    for i, c in enumerate(text):
        if c == " ":
            continue
        ns_to_s_map[len(ns_chars)] = i
        ns_chars.append(c)
    return "".join(ns_chars), ns_to_s_map


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool,
                   verbose_logging: bool = False) -> str:
    """Projects a normalized prediction back onto the original words' characters.

    ``pred_text`` is detokenized WordPiece output (lower-cased, accents
    stripped, punctuation spaced); ``orig_text`` the original words it came
    from, joined by spaces (e.g. "steve smith" in "Steve Smith's" gives
    "Steve Smith"). ``orig_text`` is basic-tokenized again; if the two agree
    character for character once spaces are removed, the span of
    ``pred_text`` in it maps back to ``orig_text``; otherwise ``orig_text`` is
    returned whole.

    Args:
        pred_text: the predicted span's detokenized text.
        orig_text: the original words of the span.
        do_lower_case: as the tokenizer.
        verbose_logging: log why a projection failed.

    Returns:
        The answer text in ``orig_text``'s characters.
    """
    tokenizer = _BASIC_TOKENIZERS.get(do_lower_case)
    if tokenizer is None:
        tokenizer = _BASIC_TOKENIZERS[do_lower_case] = BasicTokenizer(do_lower_case=do_lower_case)
    tok_text = " ".join(tokenizer.tokenize(orig_text))

    start_position = tok_text.find(pred_text)
    if start_position == -1:
        if verbose_logging:
            logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
        return orig_text
    end_position = start_position + len(pred_text) - 1

    orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        if verbose_logging:
            logging.info("Length not equal after stripping spaces: '%s' vs '%s'",
                         orig_ns_text, tok_ns_text)
        return orig_text

    tok_s_to_ns_map = {s: ns for ns, s in tok_ns_to_s_map.items()}

    def to_orig(tok_position: int) -> Optional[int]:
        ns = tok_s_to_ns_map.get(tok_position)
        return None if ns is None else orig_ns_to_s_map.get(ns)

    orig_start_position = to_orig(start_position)
    if orig_start_position is None:
        if verbose_logging:
            logging.info("Couldn't map start position")
        return orig_text
    orig_end_position = to_orig(end_position)
    if orig_end_position is None:
        if verbose_logging:
            logging.info("Couldn't map end position")
        return orig_text
    return orig_text[orig_start_position:orig_end_position + 1]


def _span_text(example, feature, start_index: int, end_index: int, do_lower_case: bool,
               verbose_logging: bool) -> str:
    """Answer text of sequence positions [start_index, end_index] of a feature."""
    tok_tokens = feature.tokens[start_index:end_index + 1]
    orig_doc_start = feature.token_to_orig_map[start_index]
    orig_doc_end = feature.token_to_orig_map[end_index]
    orig_tokens = example.doc_tokens[orig_doc_start:orig_doc_end + 1]
    # Undo WordPiece splitting, then normalize whitespace.
    tok_text = " ".join(tok_tokens).replace(" ##", "").replace("##", "")
    tok_text = " ".join(tok_text.strip().split())
    orig_text = " ".join(orig_tokens)
    return get_final_text(tok_text, orig_text, do_lower_case, verbose_logging)


def _predict_example(example, features, unique_id_to_result, n_best_size: int,
                     max_answer_length: int, do_lower_case: bool, version_2_with_negative: bool,
                     null_score_diff_threshold: float, verbose_logging: bool):
    """(prediction text, n-best json list, null score diff or None) of one example."""
    prelim_predictions = []
    score_null = 1000000.0  # min over windows of start[0] + end[0]; large before any window
    min_null_feature_index = 0
    null_start_logit = 0.0
    null_end_logit = 0.0
    for feature_index, feature in enumerate(features):
        result = unique_id_to_result.get(feature.unique_id)
        if result is None:
            raise ValueError("write_predictions: no RawResult for feature unique_id %d"
                             % feature.unique_id)
        start_logits = _as_floats(result.start_logits)
        end_logits = _as_floats(result.end_logits)
        start_indexes = _get_best_indexes(start_logits, n_best_size)
        end_indexes = _get_best_indexes(end_logits, n_best_size)
        if version_2_with_negative:
            feature_null_score = start_logits[0] + end_logits[0]
            if feature_null_score < score_null:
                score_null = feature_null_score
                min_null_feature_index = feature_index
                null_start_logit = start_logits[0]
                null_end_logit = end_logits[0]
        num_tokens = len(feature.tokens)
        for start_index in start_indexes:
            # Only starts inside the window's doc tokens, in their max-context window.
            if (start_index >= num_tokens or start_index not in feature.token_to_orig_map
                    or not feature.token_is_max_context.get(start_index, False)):
                continue
            for end_index in end_indexes:
                if end_index >= num_tokens or end_index not in feature.token_to_orig_map:
                    continue
                if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                    continue
                prelim_predictions.append(_PrelimPrediction(
                    feature_index=feature_index, start_index=start_index, end_index=end_index,
                    start_logit=start_logits[start_index], end_logit=end_logits[end_index]))

    if version_2_with_negative:
        prelim_predictions.append(_PrelimPrediction(
            feature_index=min_null_feature_index, start_index=0, end_index=0,
            start_logit=null_start_logit, end_logit=null_end_logit))
    # Stable sort: equal scores keep their order of discovery, as in the original.
    prelim_predictions.sort(key=lambda x: x.start_logit + x.end_logit, reverse=True)

    seen_predictions = set()
    nbest = []
    for pred in prelim_predictions:
        if len(nbest) >= n_best_size:
            break
        if pred.start_index > 0:  # a span; position 0 ([CLS]) is the null answer
            final_text = _span_text(example, features[pred.feature_index], pred.start_index,
                                    pred.end_index, do_lower_case, verbose_logging)
            if final_text in seen_predictions:
                continue
        else:
            final_text = ""
        seen_predictions.add(final_text)
        nbest.append(_NbestPrediction(final_text, pred.start_logit, pred.end_logit))

    if version_2_with_negative and "" not in seen_predictions:
        nbest.append(_NbestPrediction("", null_start_logit, null_end_logit))
    if not nbest:  # v1.1 with no valid span at all: the original's placeholder
        nbest.append(_NbestPrediction("empty", 0.0, 0.0))

    total_scores = [e.start_logit + e.end_logit for e in nbest]
    best_non_null_entry = next((e for e in nbest if e.text), None)
    probs = _compute_softmax(total_scores)
    nbest_json = []
    for entry, prob in zip(nbest, probs):
        output = collections.OrderedDict()
        output["text"] = entry.text
        output["probability"] = prob
        output["start_logit"] = entry.start_logit
        output["end_logit"] = entry.end_logit
        nbest_json.append(output)

    if not version_2_with_negative:
        return nbest_json[0]["text"], nbest_json, None
    if best_non_null_entry is None:
        # Every n-best entry is null: the original crashes here (bert #211, #476).
        return "", nbest_json, ALL_NULL_SCORE_DIFF
    score_diff = score_null - best_non_null_entry.start_logit - best_non_null_entry.end_logit
    if score_diff > null_score_diff_threshold:
        return "", nbest_json, score_diff
    return best_non_null_entry.text, nbest_json, score_diff


def compute_predictions(all_examples, all_features, all_results, n_best_size: int,
                        max_answer_length: int, do_lower_case: bool,
                        version_2_with_negative: bool = False,
                        null_score_diff_threshold: float = 0.0,
                        verbose_logging: bool = False):
    """``write_predictions`` without the files.

    Returns ``(predictions, nbest, null_odds)``: ordered dicts keyed by
    ``qas_id`` in example order (``null_odds`` empty unless v2.0).

    Args:
        all_examples: the ``SquadExample`` s.
        all_features: their ``InputFeatures`` windows.
        all_results: the model's ``RawResult`` per feature.
        n_best_size: candidates kept per question.
        max_answer_length: the longest answer in tokens.
        do_lower_case: as the tokenizer (``get_final_text``).
        version_2_with_negative: SQuAD 2.0 (the null answer).
        null_score_diff_threshold: predict "" when null score - best span score exceeds it.
        verbose_logging: log ``get_final_text``'s failures.

    Returns:
        ``(predictions, nbest, null_odds)`` as above.
    """
    example_index_to_features = collections.defaultdict(list)
    for feature in all_features:
        example_index_to_features[feature.example_index].append(feature)
    unique_id_to_result = {result.unique_id: result for result in all_results}

    all_predictions = collections.OrderedDict()
    all_nbest_json = collections.OrderedDict()
    scores_diff_json = collections.OrderedDict()
    for example_index, example in enumerate(all_examples):
        text, nbest_json, score_diff = _predict_example(
            example, example_index_to_features[example_index], unique_id_to_result,
            n_best_size, max_answer_length, do_lower_case, version_2_with_negative,
            null_score_diff_threshold, verbose_logging)
        all_predictions[example.qas_id] = text
        all_nbest_json[example.qas_id] = nbest_json
        if version_2_with_negative:
            scores_diff_json[example.qas_id] = score_diff
    return all_predictions, all_nbest_json, scores_diff_json


def write_predictions(all_examples, all_features, all_results, n_best_size: int,
                      max_answer_length: int, do_lower_case: bool,
                      output_prediction_file: Optional[str], output_nbest_file: Optional[str],
                      output_null_log_odds_file: Optional[str],
                      version_2_with_negative: bool = False,
                      null_score_diff_threshold: float = 0.0,
                      verbose_logging: bool = False):
    """Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json.

    ``all_results``: ``RawResult``s whose ``start_logits``/``end_logits`` are
    [max_seq_length] floats (lists or numpy arrays) for every feature. Files
    are JSON with indent 4 and a final newline, written together
    (``write_files_together``: all renamed into place only when every one is
    written; a file given as None is skipped). Returns
    ``compute_predictions``'s triple.

    Args:
        all_examples: the ``SquadExample`` s.
        all_features: their ``InputFeatures`` windows.
        all_results: the ``RawResult`` s.
        n_best_size: candidates kept per question.
        max_answer_length: the longest answer in tokens.
        do_lower_case: as the tokenizer.
        output_prediction_file: predictions.json, or None.
        output_nbest_file: nbest_predictions.json, or None.
        output_null_log_odds_file: null_odds.json (v2.0), or None.
        version_2_with_negative: SQuAD 2.0.
        null_score_diff_threshold: as ``compute_predictions``.
        verbose_logging: as ``compute_predictions``.

    Returns:
        ``(predictions, nbest, null_odds)`` of ``compute_predictions``.
    """
    logging.info("Writing predictions to: %s", output_prediction_file)
    logging.info("Writing nbest to: %s", output_nbest_file)
    predictions, nbest, null_odds = compute_predictions(
        all_examples, all_features, all_results, n_best_size, max_answer_length, do_lower_case,
        version_2_with_negative, null_score_diff_threshold, verbose_logging)
    write_files_together(prediction_texts(
        (predictions, nbest, null_odds), output_prediction_file, output_nbest_file,
        output_null_log_odds_file, version_2_with_negative))
    return predictions, nbest, null_odds


def prediction_texts(triple, output_prediction_file: Optional[str],
                     output_nbest_file: Optional[str], output_null_log_odds_file: Optional[str],
                     version_2_with_negative: bool = False) -> List[Tuple[str, str]]:
    """``(path, JSON text)`` of each prediction file of ``compute_predictions``'s ``triple``
    (indent 4, final newline; null odds only for v2.0; a path given as None is skipped).

    Args:
        triple: ``(predictions, nbest, null_odds)``.
        output_prediction_file: its path, or None.
        output_nbest_file: its path, or None.
        output_null_log_odds_file: its path, or None.
        version_2_with_negative: write the null odds.

    Returns:
        The ``(path, text)`` pairs.
    """
    predictions, nbest, null_odds = triple
    outputs = [(output_prediction_file, predictions), (output_nbest_file, nbest)]
    if version_2_with_negative:
        outputs.append((output_null_log_odds_file, null_odds))
    return [(path, json.dumps(obj, indent=4) + "\n") for path, obj in outputs if path]


def write_files_together(texts: Sequence[Tuple[str, str]]) -> None:
    """Writes each ``(path, text)`` (UTF-8) as one group: every file is renamed into place only
    when all of them are written (``bert_common.atomic.atomic_paths``), so a failure (a full
    disk, a missing folder) leaves all the previous files as they were and no temporary.

    Args:
        texts: ``(path, text)`` pairs.

    Raises:
        OSError: a file could not be written (naming it); nothing is replaced then.
    """
    texts = list(texts)
    if not texts:
        return
    with atomic.atomic_paths([path for path, _ in texts]) as temps:
        for temp, (path, text) in zip(temps, texts):
            try:
                _write_text(temp, text)
            except OSError as e:  # named by its final path, not the temporary
                raise OSError(e.errno, "%s (writing %s)" % (e.strerror or e, path)) from None


def _write_text(path: str, text: str) -> None:
    """One file of ``write_files_together`` (a temporary path)."""
    with files.open(path, "w") as writer:
        writer.write(text)
