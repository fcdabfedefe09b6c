"""Official SQuAD v1.1 and v2.0 scoring, built in.

Reproduces the official evaluate-v1.1.py / evaluate-v2.0.py results (rules in
``../shared/data/MANIFEST.md`` section 4):

* answers are normalized by lower-casing, deleting ASCII punctuation
  (``string.punctuation``), replacing the words a/an/the by a space and
  collapsing whitespace; EM compares normalized strings, F1 is the
  bag-of-tokens overlap; each question takes its best gold answer; scores x100.
* v1.1: F1 is 0 without a shared token (an empty prediction included); a
  question without a prediction scores 0 and still counts. Keys
  ``exact_match``, ``f1``.
* v2.0: gold answers that normalize to "" are dropped, none left means gold
  ``[""]``; F1 of two empty token lists is 1; questions without a prediction
  are left out. With null odds (``na_probs``), a question whose odds exceed
  ``na_prob_thresh`` counts as answered "", and the best threshold over the
  file is searched. Keys ``exact``, ``f1``, ``total``, ``HasAns_*``,
  ``NoAns_*`` (+ ``best_exact``, ``best_exact_thresh``, ``best_f1``,
  ``best_f1_thresh``).

A dataset is scored as v2.0 when any question has an ``is_impossible`` key.

CLI: ``python -m data.squad.evaluate DATASET.json PREDICTIONS.json
[--na-prob-file NULL_ODDS.json] [--na-prob-thresh 1.0]`` prints one JSON
object on stdout; notes (missing predictions, version) go to stderr; bad
input exits 1 with a one-line message.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import string
import sys
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from bert_common import files
from bert_common.errors import InputError

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b", re.UNICODE)

Notify = Callable[[str], None]


class SquadEvalError(InputError):
    """Input the scorer cannot use; the message names the file."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


# --------------------------------------------------------------------------
# Normalization and per-answer metrics.
# --------------------------------------------------------------------------


def normalize_answer(s: str) -> str:
    """Lower case, drop ASCII punctuation, drop a/an/the, collapse whitespace.

    Args:
        s: an answer.

    Returns:
        The normalized answer.
    """
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES_RE.sub(" ", s)
    return " ".join(s.split())


def _overlap_f1(pred_tokens: List[str], gold_tokens: List[str]) -> float:
    """Bag-of-tokens F1 (0 when nothing is shared)."""
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_tokens)
    recall = 1.0 * num_same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def f1_score_v1(prediction: str, ground_truth: str) -> float:
    """v1.1 F1: 0 unless the normalized token bags share a token.

    Args:
        prediction: the predicted answer.
        ground_truth: one gold answer.

    Returns:
        The F1, in [0, 1].
    """
    return _overlap_f1(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    """v1.1 exact match: the normalized strings are equal.

    Args:
        prediction: the predicted answer.
        ground_truth: one gold answer.

    Returns:
        Whether they match.
    """
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def get_tokens(s: str) -> List[str]:
    """v2.0 tokens: [] for an empty string, else the normalized split.

    Args:
        s: an answer.

    Returns:
        The tokens.
    """
    if not s:
        return []
    return normalize_answer(s).split()


def compute_exact(a_gold: str, a_pred: str) -> int:
    """v2.0 exact match, 1 or 0.

    Args:
        a_gold: one gold answer ("" for unanswerable).
        a_pred: the prediction.

    Returns:
        1 or 0.
    """
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    """v2.0 F1: 1 when both token lists are empty, 0 when only one is.

    Args:
        a_gold: one gold answer.
        a_pred: the prediction.

    Returns:
        The F1, in [0, 1].
    """
    gold_toks = get_tokens(a_gold)
    pred_toks = get_tokens(a_pred)
    if not gold_toks or not pred_toks:
        return int(gold_toks == pred_toks)
    return _overlap_f1(pred_toks, gold_toks)


# --------------------------------------------------------------------------
# Dataset walking.
# --------------------------------------------------------------------------


def _questions(dataset: list) -> Iterator[dict]:
    """Every ``qa`` dict of the ``data`` list, in file order."""
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield qa


def is_v2_dataset(dataset: list) -> bool:
    """True when any question carries an ``is_impossible`` key.

    Args:
        dataset: the file's ``data`` list.

    Returns:
        Whether the dataset is SQuAD 2.0.
    """
    return any("is_impossible" in qa for qa in _questions(dataset))


def _gold_texts(qa: dict) -> List[str]:
    return [a["text"] for a in qa["answers"]]


# --------------------------------------------------------------------------
# v1.1.
# --------------------------------------------------------------------------


def evaluate_v1(dataset: list, predictions: Mapping[str, str],
                notify: Notify = _stderr) -> Dict[str, float]:
    """``{"exact_match", "f1"}`` of the official v1.1 script.

    Args:
        dataset: the file's ``data`` list.
        predictions: question id -> answer text.
        notify: says a missing prediction (default: stderr).

    Returns:
        Percentages.

    Raises:
        SquadEvalError: the dataset has no questions.
    """
    f1 = exact_match = total = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            notify("Unanswered question %s will receive score 0." % qa["id"])
            continue
        ground_truths = _gold_texts(qa)
        prediction = predictions[qa["id"]]
        exact_match += max(exact_match_score(prediction, gt) for gt in ground_truths)
        f1 += max(f1_score_v1(prediction, gt) for gt in ground_truths)
    if total == 0:
        raise SquadEvalError("the dataset has no questions")
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


# --------------------------------------------------------------------------
# v2.0.
# --------------------------------------------------------------------------


def make_qid_to_has_ans(dataset: list) -> Dict[str, bool]:
    """Question id -> whether it has a gold answer.

    Args:
        dataset: the file's ``data`` list.

    Returns:
        Question id -> answerable.
    """
    return {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}


def get_raw_scores(dataset: list, preds: Mapping[str, str],
                   notify: Notify = _stderr) -> Tuple[Dict[str, int], Dict[str, float]]:
    """Per-question EM and F1 (questions without a prediction left out).

    Args:
        dataset: the file's ``data`` list.
        preds: question id -> answer text.
        notify: says a missing prediction.

    Returns:
        ``(exact, f1)``: question id -> score.
    """
    exact_scores: Dict[str, int] = {}
    f1_scores: Dict[str, float] = {}
    for qa in _questions(dataset):
        qid = qa["id"]
        gold_answers = [t for t in _gold_texts(qa) if normalize_answer(t)] or [""]
        if qid not in preds:
            notify("Missing prediction for %s" % qid)
            continue
        a_pred = preds[qid]
        exact_scores[qid] = max(compute_exact(a, a_pred) for a in gold_answers)
        f1_scores[qid] = max(compute_f1(a, a_pred) for a in gold_answers)
    return exact_scores, f1_scores


def apply_no_ans_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                           qid_to_has_ans: Mapping[str, bool], na_prob_thresh: float) -> Dict[str, float]:
    """Scores with questions whose null odds exceed the threshold answered "".

    Args:
        scores: question id -> raw score.
        na_probs: question id -> null odds.
        qid_to_has_ans: question id -> answerable.
        na_prob_thresh: the threshold.

    Returns:
        question id -> score.
    """
    new_scores = {}
    for qid, s in scores.items():
        if na_probs[qid] > na_prob_thresh:
            new_scores[qid] = float(not qid_to_has_ans[qid])
        else:
            new_scores[qid] = s
    return new_scores


def make_eval_dict(exact_scores: Mapping[str, float], f1_scores: Mapping[str, float],
                   qid_list: Optional[List[str]] = None) -> "collections.OrderedDict":
    """``{"exact", "f1", "total"}`` (percentages) over ``qid_list``, or over all questions.

    Args:
        exact_scores: question id -> EM.
        f1_scores: question id -> F1.
        qid_list: the questions to average, or None for all.

    Returns:
        The ordered dict of ``exact``, ``f1`` and ``total``.
    """
    if not qid_list:
        total = len(exact_scores)
        exact_sum = sum(exact_scores.values())
        f1_sum = sum(f1_scores.values())
    else:
        total = len(qid_list)
        exact_sum = sum(exact_scores[k] for k in qid_list)
        f1_sum = sum(f1_scores[k] for k in qid_list)
    return collections.OrderedDict([
        ("exact", 100.0 * exact_sum / total),
        ("f1", 100.0 * f1_sum / total),
        ("total", total),
    ])


def find_best_thresh(preds: Mapping[str, str], scores: Mapping[str, float],
                     na_probs: Mapping[str, float], qid_to_has_ans: Mapping[str, bool]):
    """(best score x100, its threshold): sweep questions by increasing null odds.

    Starts from answering nothing (one point per unanswerable question); each
    question passed adds its raw score if answerable, or -1 if unanswerable
    and answered with text.

    Args:
        preds: question id -> answer text.
        scores: question id -> raw score.
        na_probs: question id -> null odds.
        qid_to_has_ans: question id -> answerable.

    Returns:
        ``(best score x100, threshold)``.
    """
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def evaluate_v2(dataset: list, preds: Mapping[str, str],
                na_probs: Optional[Mapping[str, float]] = None, na_prob_thresh: float = 1.0,
                notify: Notify = _stderr) -> "collections.OrderedDict":
    """The official v2.0 result dict (``best_*`` only when ``na_probs`` is given).

    Args:
        dataset: the file's ``data`` list.
        preds: question id -> answer text ("" = no answer).
        na_probs: question id -> null odds, or None (all 0).
        na_prob_thresh: answer "" above these odds.
        notify: says a missing prediction.

    Returns:
        The ordered result dict.

    Raises:
        SquadEvalError: no question has a prediction, or the null odds lack a question.
    """
    qid_to_has_ans = make_qid_to_has_ans(dataset)
    exact_raw, f1_raw = get_raw_scores(dataset, preds, notify)
    if not exact_raw:
        raise SquadEvalError("no question of the dataset has a prediction")
    given_na_probs = na_probs is not None
    if na_probs is None:
        na_probs = {k: 0.0 for k in preds}
    missing = [q for q in exact_raw if q not in na_probs]
    if missing:
        raise SquadEvalError("the null odds have no entry for question %s" % missing[0])
    exact_thresh = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1_thresh = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    out_eval = make_eval_dict(exact_thresh, f1_thresh)
    # The official script raises KeyError on a subset question without a
    # prediction; here the subsets only hold predicted questions.
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v and k in exact_thresh]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v and k in exact_thresh]
    for prefix, qids in (("HasAns", has_ans_qids), ("NoAns", no_ans_qids)):
        if qids:
            for k, v in make_eval_dict(exact_thresh, f1_thresh, qid_list=qids).items():
                out_eval["%s_%s" % (prefix, k)] = v
    if given_na_probs:
        odds = {q: p for q, p in na_probs.items() if q in qid_to_has_ans}
        out_eval["best_exact"], out_eval["best_exact_thresh"] = find_best_thresh(
            preds, exact_raw, odds, qid_to_has_ans)
        out_eval["best_f1"], out_eval["best_f1_thresh"] = find_best_thresh(
            preds, f1_raw, odds, qid_to_has_ans)
    return out_eval


# --------------------------------------------------------------------------
# Files.
# --------------------------------------------------------------------------


def load_json(path: str, what: str):
    """The parsed JSON file ``path``; ``SquadEvalError`` naming it and ``what`` it should be
    (unreadable, not JSON).

    Args:
        path: the file.
        what: what it should hold, for the message.

    Returns:
        The parsed JSON value.

    Raises:
        SquadEvalError: the file is unreadable or not JSON.
    """
    try:
        with files.open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise SquadEvalError("%s: cannot read %s: %s" % (path, what, e.strerror or e)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SquadEvalError("%s: %s is not valid JSON: %s" % (path, what, e)) from None


def _check_dataset(dataset_json, path: str) -> list:
    if not isinstance(dataset_json, dict) or not isinstance(dataset_json.get("data"), list):
        raise SquadEvalError("%s: not a SQuAD dataset: no top-level 'data' list" % path)
    dataset = dataset_json["data"]
    for a_i, article in enumerate(dataset):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise SquadEvalError("%s: article %d has no 'paragraphs' list" % (path, a_i))
        for p_i, paragraph in enumerate(article["paragraphs"]):
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise SquadEvalError("%s: article %d paragraph %d has no 'qas' list" % (path, a_i, p_i))
            for q_i, qa in enumerate(paragraph["qas"]):
                where = "article %d paragraph %d question %d" % (a_i, p_i, q_i)
                if not isinstance(qa, dict) or "id" not in qa:
                    raise SquadEvalError("%s: %s has no 'id'" % (path, where))
                answers = qa.get("answers")
                if not isinstance(answers, list) or not all(
                        isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
                    raise SquadEvalError("%s: question %r has no valid 'answers' list" % (path, qa["id"]))
    return dataset


def _check_mapping(obj, path: str, what: str, value_type) -> dict:
    if not isinstance(obj, dict):
        raise SquadEvalError("%s: %s must be a JSON object keyed by question id" % (path, what))
    for k, v in obj.items():
        if not isinstance(v, value_type) or isinstance(v, bool):
            raise SquadEvalError("%s: %s entry %r is not a %s" % (
                path, what, k, getattr(value_type, "__name__", "number")))
    return obj


def load_dataset(dataset_file: str, dataset_json=None) -> dict:
    """The parsed SQuAD file ``dataset_file`` (its top-level object; ``dataset_json`` when
    already parsed), checked as the scorer needs it; ``SquadEvalError`` naming the file (and
    the article/question) otherwise.

    Args:
        dataset_file: the SQuAD file.
        dataset_json: its parsed content, or None to read it.

    Returns:
        The file's top-level object.

    Raises:
        SquadEvalError: the file is unreadable or not a SQuAD file.
    """
    if dataset_json is None:
        dataset_json = load_json(dataset_file, "the dataset")
    _check_dataset(dataset_json, dataset_file)
    return dataset_json


def unscorable_v1_questions(dataset_json: dict) -> List[str]:
    """Ids of the questions the official v1.1 scorer cannot score (no gold answer: it takes
    the max over an empty list); always [] for a dataset scored as v2.0.

    Args:
        dataset_json: the file's top-level object.

    Returns:
        The question ids, in file order.
    """
    dataset = dataset_json["data"]
    if is_v2_dataset(dataset):
        return []
    return [qa["id"] for qa in _questions(dataset) if not qa["answers"]]


def evaluate_dataset(dataset_json: dict, preds: Mapping[str, str],
                     na_probs: Optional[Mapping[str, float]] = None, na_prob_thresh: float = 1.0,
                     notify: Notify = _stderr, dataset_name: str = "the dataset",
                     na_prob_name: str = "the null odds") -> Dict[str, float]:
    """Scores predictions (and null odds) already in memory, as ``evaluate_files`` scores
    them from files: ``dataset_json`` from ``load_dataset``; v1.1 or v2.0 keys as the dataset
    says. ``dataset_name`` / ``na_prob_name`` name the inputs in messages (their files).

    Args:
        dataset_json: the file's top-level object (``load_dataset``).
        preds: question id -> answer text.
        na_probs: question id -> null odds, or None.
        na_prob_thresh: answer "" above these odds.
        notify: says a missing prediction.
        dataset_name: the dataset in messages.
        na_prob_name: the null odds in messages.

    Returns:
        The official result dict.

    Raises:
        SquadEvalError: predictions or null odds unusable (named).
    """
    dataset = dataset_json["data"]
    if is_v2_dataset(dataset):
        return evaluate_v2(dataset, preds, na_probs, na_prob_thresh, notify)
    version = dataset_json.get("version")
    if version != "1.1":
        notify("Evaluation expects v-1.1, but got dataset with v-%s" % version)
    if na_probs is not None:
        notify("%s: no question has 'is_impossible' (v1.1 scoring): null odds ignored"
               % na_prob_name)
    unscorable = unscorable_v1_questions(dataset_json)
    if unscorable:
        raise SquadEvalError("%s: question %r has no answers: v1.1 scoring (no question has "
                             "'is_impossible') needs at least one per question"
                             % (dataset_name, unscorable[0]))
    return evaluate_v1(dataset, preds, notify)


def evaluate_files(dataset_file: str, prediction_file: str, na_prob_file: Optional[str] = None,
                   na_prob_thresh: float = 1.0, notify: Notify = _stderr) -> Dict[str, float]:
    """Scores a predictions file against a SQuAD file: v1.1 or v2.0 keys as the dataset says.

    Args:
        dataset_file: the SQuAD JSON file.
        prediction_file: predictions.json.
        na_prob_file: null_odds.json (v2.0), or None.
        na_prob_thresh: answer "" above these odds.
        notify: says a missing prediction.

    Returns:
        The official result dict.

    Raises:
        SquadEvalError: an input file that cannot be used (named).
    """
    dataset_json = load_dataset(dataset_file)
    preds = _check_mapping(load_json(prediction_file, "the predictions"), prediction_file,
                           "the predictions", str)
    na_probs = None
    if na_prob_file:
        na_probs = _check_mapping(load_json(na_prob_file, "the null odds"), na_prob_file,
                                  "the null odds", (int, float))
    return evaluate_dataset(dataset_json, preds, na_probs, na_prob_thresh, notify,
                            dataset_name=dataset_file,
                            na_prob_name=na_prob_file or "the null odds")


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m data.squad_eval DATASET.json PREDICTIONS.json [--na-prob-file ...]``.

    Args:
        argv: the arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit status (the result JSON on stdout; an error in one line on stderr).
    """
    parser = argparse.ArgumentParser(
        prog="python -m data.squad_eval",
        description="Official SQuAD v1.1/v2.0 scoring (v2.0 when any question has is_impossible).")
    parser.add_argument("data_file", metavar="DATASET.json")
    parser.add_argument("pred_file", metavar="PREDICTIONS.json")
    parser.add_argument("--na-prob-file", "-n", default=None, metavar="NULL_ODDS.json",
                        help="model estimates of the no-answer odds (v2.0 null_odds.json)")
    parser.add_argument("--na-prob-thresh", "-t", type=float, default=1.0,
                        help="predict no answer when the odds exceed this (default 1.0)")
    args = parser.parse_args(argv)
    try:
        result = evaluate_files(args.data_file, args.pred_file, args.na_prob_file, args.na_prob_thresh)
    except SquadEvalError as e:
        print("squad_eval: error: %s" % e, file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
