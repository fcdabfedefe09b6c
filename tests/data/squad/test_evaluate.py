"""data/squad/evaluate.py: reproduces official_eval.json of ../shared/golden/squad/ (README section 6)."""

import json
import os
import subprocess
import sys

import pytest

from data.squad import evaluate as squad_eval
from tests import paths

SQUAD = os.path.join(paths.GOLDEN, "squad")
VARIANTS = ["v1.1", "v1.1_short", "v2.0", "v2.0_short"]


def _g(variant, name):
    return os.path.join(SQUAD, variant, name)


def _official(variant):
    with open(_g(variant, "official_eval.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("variant", VARIANTS)
def test_plain_scores_reproduce_official_eval(variant):
    result = squad_eval.evaluate_files(_g(variant, "input_dev_slice.json"), _g(variant, "predictions.json"))
    assert dict(result) == _official(variant)["plain"]
    # v1.1 keys exactly when no question has is_impossible.
    if variant.startswith("v1.1"):
        assert list(result) == ["exact_match", "f1"]


@pytest.mark.parametrize("variant", ["v2.0", "v2.0_short"])
def test_na_prob_scores_reproduce_official_eval(variant):
    result = squad_eval.evaluate_files(_g(variant, "input_dev_slice.json"), _g(variant, "predictions.json"),
                                       na_prob_file=_g(variant, "null_odds.json"))
    expected = _official(variant)["with_na_prob_file_null_odds"]
    assert list(result) == list(expected)
    assert dict(result) == expected


def _run_cli(*args):
    return subprocess.run([sys.executable, "-m", "data.squad.evaluate", *args], capture_output=True,
                          text=True, cwd=paths.ROOT, timeout=120)


def test_cli_prints_one_json_object():
    variant = "v2.0_short"
    proc = _run_cli(_g(variant, "input_dev_slice.json"), _g(variant, "predictions.json"),
                    "--na-prob-file", _g(variant, "null_odds.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == _official(variant)["with_na_prob_file_null_odds"]
    assert len(proc.stdout.strip().splitlines()) == 1


def test_cli_bad_dataset_is_one_line_error(tmp_path):
    bad = tmp_path / "nodata.json"
    bad.write_text('{"version": "1.1"}')
    proc = _run_cli(str(bad), _g("v1.1", "predictions.json"))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0
    assert "nodata.json" in proc.stderr and "'data'" in proc.stderr


def test_question_without_id_is_an_error(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [{"answers": []}]}]}]}))
    preds = tmp_path / "p.json"
    preds.write_text("{}")
    with pytest.raises(squad_eval.SquadEvalError, match="question 0 has no 'id'"):
        squad_eval.evaluate_files(str(path), str(preds))


@pytest.mark.parametrize("text,expected", [
    ("The  Cat's hat!", "cats hat"),
    ("an apple and a theory", "apple and theory"),
    ("¿Qué pasó?", "¿qué pasó"),  # Unicode punctuation is kept
    ("  A  ", ""),
])
def test_normalize_answer(text, expected):
    assert squad_eval.normalize_answer(text) == expected


def _dataset(qas):
    return [{"paragraphs": [{"context": "c", "qas": qas}]}]


def test_v1_missing_prediction_counts_in_total_and_empty_scores_zero():
    data = _dataset([{"id": "a", "answers": [{"text": "red car"}]},
                     {"id": "b", "answers": [{"text": "blue"}]},
                     {"id": "c", "answers": [{"text": "x"}]}])
    notes = []
    result = squad_eval.evaluate_v1(data, {"a": "the red", "b": ""}, notify=notes.append)
    # a: P=1, R=1/2 -> F1 2/3, EM 0; b: empty -> 0; c: missing -> 0 but counted.
    assert result["exact_match"] == 0.0
    assert result["f1"] == pytest.approx(100.0 * (2 / 3) / 3)
    assert notes == ["Unanswered question c will receive score 0."]


def test_v2_rules_empty_gold_missing_preds_and_threshold():
    data = _dataset([{"id": "has", "answers": [{"text": "Paris"}], "is_impossible": False},
                     {"id": "none", "answers": [], "is_impossible": True},
                     {"id": "punct", "answers": [{"text": "."}], "is_impossible": False},
                     {"id": "missing", "answers": [], "is_impossible": True}])
    preds = {"has": "paris", "none": "", "punct": ""}
    notes = []
    result = squad_eval.evaluate_v2(data, preds, notify=notes.append)
    # "punct" normalizes to "": gold becomes [""], so "" scores 1; "missing" is left out.
    assert result["total"] == 3 and result["exact"] == 100.0 and result["f1"] == 100.0
    assert result["HasAns_total"] == 2 and result["NoAns_total"] == 1
    assert notes == ["Missing prediction for missing"]

    odds = {"has": 2.0, "none": -1.0, "punct": 0.5}
    result = squad_eval.evaluate_v2(data, {"has": "paris", "none": "x", "punct": "y"}, odds,
                                    na_prob_thresh=1.0, notify=notes.append)
    # "has" odds 2.0 > 1.0: treated as empty, scores 0 (it has an answer).
    assert result["HasAns_exact"] == 0.0
    assert result["NoAns_exact"] == 0.0
    # Sweep (by odds): none(-1, answered -> -1), punct(0.5, 0), has(2, +1): start at 2 unanswerable
    # questions ("missing" included) -> 1, 1, 2: best stays 2/3 at threshold 0.0.
    assert result["best_exact"] == pytest.approx(200.0 / 3) and result["best_exact_thresh"] == 0.0


def test_v1_dataset_is_detected_by_missing_is_impossible():
    assert not squad_eval.is_v2_dataset(_dataset([{"id": "a", "answers": []}]))
    assert squad_eval.is_v2_dataset(_dataset([{"id": "a", "answers": []},
                                              {"id": "b", "answers": [], "is_impossible": False}]))
