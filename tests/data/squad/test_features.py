"""data/squad/features.py + data/squad/postprocess.py against ../shared/golden/squad/ (README section 6)."""

import functools
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from bert_common.errors import InputError
from data.records import tf_example
from data.squad import features as squad
from data.squad import postprocess as squad_postprocess
from data.squad import schema as squad_schema
from data.tokenization.wordpiece import FastFullTokenizer, FullTokenizer
from tests import paths

SQUAD = os.path.join(paths.GOLDEN, "squad")

# variant -> (version_2_with_negative, max_seq_length, doc_stride, max_query_length), per README §6.
VARIANTS = {
    "v1.1": (False, 384, 128, 64),
    "v1.1_short": (False, 96, 32, 24),
    "v2.0": (True, 384, 128, 64),
    "v2.0_short": (True, 96, 32, 24),
}
MODES = {"eval": "input_dev_slice.json", "train": "input_train_style_slice.json"}


def _golden(variant, name):
    return os.path.join(SQUAD, variant, name)


def _jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@functools.lru_cache(maxsize=None)
def _fast_tokenizer():
    return FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)


@functools.lru_cache(maxsize=None)
def _examples(variant, mode):
    v2 = VARIANTS[variant][0]
    return squad.read_squad_examples(_golden(variant, MODES[mode]), is_training=(mode == "train"),
                                     version_2_with_negative=v2)


@functools.lru_cache(maxsize=None)
def _features(variant, mode, tokenizer=None):
    _, max_seq, stride, max_query = VARIANTS[variant]
    features = []
    n = squad.convert_examples_to_features(
        _examples(variant, mode), tokenizer or _fast_tokenizer(), max_seq, stride, max_query,
        is_training=(mode == "train"), output_fn=features.append)
    assert n == len(features)
    return features


def _example_record(index, e):
    return {"example_index": index, "qas_id": e.qas_id, "question_text": e.question_text,
            "doc_tokens": e.doc_tokens, "orig_answer_text": e.orig_answer_text,
            "start_position": e.start_position, "end_position": e.end_position,
            "is_impossible": e.is_impossible}


def _feature_record(f):
    record = {
        "unique_id": f.unique_id, "example_index": f.example_index,
        "doc_span_index": f.doc_span_index, "tokens": f.tokens,
        "token_to_orig_map": {str(k): v for k, v in f.token_to_orig_map.items()},
        "token_is_max_context": {str(k): v for k, v in f.token_is_max_context.items()},
        "input_ids": f.input_ids, "input_mask": f.input_mask, "segment_ids": f.segment_ids,
        "start_position": f.start_position, "end_position": f.end_position,
        "is_impossible": f.is_impossible,
    }
    # Keys are ints in memory (as in the original), strings only in the JSONL.
    assert all(isinstance(k, int) for k in f.token_to_orig_map)
    return record


def _assert_features_equal(mine, golden):
    assert len(mine) == len(golden)
    for f, g in zip(mine, golden):
        record = _feature_record(f)
        diff = {k: (record[k], g[k]) for k in g if record[k] != g[k]}
        assert not diff, "unique_id %d differs: %s" % (g["unique_id"], sorted(diff))


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_examples_match_golden(variant, mode):
    golden = _jsonl(_golden(variant, "%s_examples.jsonl" % mode))
    mine = [_example_record(i, e) for i, e in enumerate(_examples(variant, mode))]
    assert len(mine) == len(golden)
    for m, g in zip(mine, golden):
        assert m == g


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_features_match_golden(variant, mode):
    _assert_features_equal(_features(variant, mode),
                           _jsonl(_golden(variant, "%s_features.jsonl" % mode)))


def test_features_with_faithful_tokenizer_match_golden():
    slow = FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    _assert_features_equal(_features("v2.0_short", "train", slow),
                           _jsonl(_golden("v2.0_short", "train_features.jsonl")))


def test_short_variants_have_multiple_windows():
    # The multi-window path (stride, max context) is really exercised.
    for variant in ("v1.1_short", "v2.0_short"):
        features = _features(variant, "eval")
        assert len(features) > len(_examples(variant, "eval"))
        assert max(f.doc_span_index for f in features) >= 2


def _parse_tfrecord(path):
    records = []
    for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
        example = tf.train.Example.FromString(raw)
        records.append({k: list(v.int64_list.value) for k, v in example.features.feature.items()})
    return records


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_feature_writer_matches_golden_tfrecord(variant, mode, tmp_path):
    path = str(tmp_path / "features.tfrecord")
    with squad.FeatureWriter(path, is_training=(mode == "train")) as writer:
        for feature in _features(variant, mode):
            writer.process_feature(feature)
    assert writer.num_features == len(_features(variant, mode))
    mine = _parse_tfrecord(path)
    golden = _parse_tfrecord(_golden(variant, "%s_features.tfrecord" % mode))
    assert mine == golden
    expected = set(squad_schema.EVAL_FEATURES)
    if mode == "train":
        expected |= set(squad_schema.TRAIN_ONLY_FEATURES)
    assert set(mine[0]) == expected


def test_feature_writer_records_parse_with_schema(tmp_path):
    path = str(tmp_path / "train.tfrecord")
    features = _features("v1.1_short", "train")[:3]
    with squad.FeatureWriter(path, is_training=True) as writer:
        for feature in features:
            writer.process_feature(feature)
    spec = squad_schema.record_spec(96, is_training=True)
    parsed = [tf_example.decode_tf(r, spec) for r in tf.data.TFRecordDataset(path)]
    assert len(parsed) == 3
    for p, f in zip(parsed, features):
        assert p[squad_schema.INPUT_IDS].dtype == tf.int32
        assert p[squad_schema.INPUT_IDS].numpy().tolist() == f.input_ids
        assert int(p[squad_schema.UNIQUE_IDS]) == f.unique_id
        assert int(p[squad_schema.START_POSITIONS]) == f.start_position


def test_feature_writer_leaves_nothing_on_error(tmp_path):
    path = tmp_path / "eval.tfrecord"
    with pytest.raises(RuntimeError):
        with squad.FeatureWriter(str(path), is_training=False) as writer:
            writer.process_feature(_features("v1.1_short", "eval")[0])
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []


def _golden_results(variant):
    logits = np.load(_golden(variant, "logits.npz"))
    return [squad_postprocess.RawResult(unique_id=int(u), start_logits=[float(x) for x in s],
                                        end_logits=[float(x) for x in e])
            for u, s, e in zip(logits["unique_ids"], logits["start_logits"], logits["end_logits"])]


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_write_predictions_matches_golden(variant, tmp_path):
    v2 = VARIANTS[variant][0]
    out = {name: str(tmp_path / name) for name in
           ("predictions.json", "nbest_predictions.json", "null_odds.json")}
    squad_postprocess.write_predictions(
        _examples(variant, "eval"), _features(variant, "eval"), _golden_results(variant),
        n_best_size=20, max_answer_length=30, do_lower_case=True,
        output_prediction_file=out["predictions.json"],
        output_nbest_file=out["nbest_predictions.json"],
        output_null_log_odds_file=out["null_odds.json"],
        version_2_with_negative=v2, null_score_diff_threshold=0.0)

    assert _read_json(out["predictions.json"]) == _read_json(_golden(variant, "predictions.json"))
    mine = _read_json(out["nbest_predictions.json"])
    golden = _read_json(_golden(variant, "nbest_predictions.json"))
    assert list(mine) == list(golden)
    for qid, entries in golden.items():
        assert [list(e) for e in mine[qid]] == [["text", "probability", "start_logit", "end_logit"]] * len(entries)
        assert [e["text"] for e in mine[qid]] == [e["text"] for e in entries]
        assert [(e["start_logit"], e["end_logit"]) for e in mine[qid]] == \
            [(e["start_logit"], e["end_logit"]) for e in entries]
        np.testing.assert_allclose([e["probability"] for e in mine[qid]],
                                   [e["probability"] for e in entries], rtol=0, atol=1e-6)
    if v2:
        odds = _read_json(out["null_odds.json"])
        golden_odds = _read_json(_golden(variant, "null_odds.json"))
        assert list(odds) == list(golden_odds)
        np.testing.assert_allclose([odds[q] for q in golden_odds], list(golden_odds.values()),
                                   rtol=0, atol=1e-5)
    else:
        assert not os.path.exists(out["null_odds.json"])


def test_write_predictions_accepts_numpy_logits():
    logits = np.load(_golden("v1.1_short", "logits.npz"))
    results = [squad_postprocess.RawResult(int(u), s, e) for u, s, e in
               zip(logits["unique_ids"], logits["start_logits"], logits["end_logits"])]
    predictions, _, _ = squad_postprocess.compute_predictions(
        _examples("v1.1_short", "eval"), _features("v1.1_short", "eval"), results, 20, 30, True)
    assert predictions == _read_json(_golden("v1.1_short", "predictions.json"))


N_BEST_ALL_NULL = 5


def _all_null_results(features):
    """Logits whose best starts ([CLS], query, [SEP]s, padding) are all outside the doc tokens.

    Every feature has at least ``N_BEST_ALL_NULL`` such positions.
    """
    results = []
    for f in features:
        start = np.full(len(f.input_ids), -5.0, np.float32)
        end = np.zeros(len(f.input_ids), np.float32)
        outside = [i for i in range(len(f.input_ids)) if i not in f.token_to_orig_map]
        assert len(outside) >= N_BEST_ALL_NULL
        start[outside] = 5.0
        results.append(squad_postprocess.RawResult(f.unique_id, start, end))
    return results


def test_all_null_nbest_gives_empty_answer_not_crash(tmp_path):
    # google-research/bert #211/#476: the original raises AttributeError here.
    examples = _examples("v2.0_short", "eval")[:3]
    features = [f for f in _features("v2.0_short", "eval") if f.example_index < 3]
    predictions, nbest, odds = squad_postprocess.write_predictions(
        examples, features, _all_null_results(features), N_BEST_ALL_NULL, 30, True,
        str(tmp_path / "p.json"), str(tmp_path / "n.json"), str(tmp_path / "o.json"),
        version_2_with_negative=True)
    assert list(predictions.values()) == ["", "", ""]
    assert all([e["text"] for e in entries] == [""] for entries in nbest.values())
    assert all(v == squad_postprocess.ALL_NULL_SCORE_DIFF for v in odds.values())
    assert _read_json(str(tmp_path / "o.json")) == dict(odds)


def test_v1_with_no_valid_span_keeps_original_placeholder():
    examples = _examples("v1.1_short", "eval")[:1]
    features = [f for f in _features("v1.1_short", "eval") if f.example_index == 0]
    predictions, nbest, _ = squad_postprocess.compute_predictions(
        examples, features, _all_null_results(features), N_BEST_ALL_NULL, 30, True)
    assert list(predictions.values()) == ["empty"]
    assert nbest[examples[0].qas_id][0]["probability"] == 1.0


def test_null_score_diff_threshold_switches_answers():
    variant = "v2.0_short"
    args = (_examples(variant, "eval"), _features(variant, "eval"), _golden_results(variant), 20, 30, True)
    base, _, odds = squad_postprocess.compute_predictions(*args, version_2_with_negative=True)
    high, _, _ = squad_postprocess.compute_predictions(
        *args, version_2_with_negative=True, null_score_diff_threshold=1e9)
    low, _, _ = squad_postprocess.compute_predictions(
        *args, version_2_with_negative=True, null_score_diff_threshold=-1e9)
    assert all(text == "" for text in low.values())
    assert all(text != "" for text in high.values())
    assert {q for q, t in base.items() if t == ""} == {q for q, d in odds.items() if d > 0.0}


@pytest.mark.parametrize("pred,orig,lower,expected", [
    ("steve smith", "Steve Smith's", True, "Steve Smith"),
    ("1895", "(1895-1943).", True, "1895"),
    ("cafe", "Café", True, "Café"),
    ("xyz", "Steve Smith's", True, "Steve Smith's"),  # not found: orig_text whole
])
def test_get_final_text(pred, orig, lower, expected):
    assert squad_postprocess.get_final_text(pred, orig, lower) == expected


def test_compute_softmax_and_best_indexes():
    probs = squad_postprocess._compute_softmax([1.0, 2.0, 3.0])
    assert probs == pytest.approx(np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum(), abs=1e-12)
    assert squad_postprocess._compute_softmax([]) == []
    assert squad_postprocess._get_best_indexes([0.5, 2.0, 2.0, -1.0, 3.0], 3) == [4, 1, 2]


def test_doc_tokens_split_only_on_squad_whitespace():
    tokens, offsets = squad.split_doc_tokens("a b\u00a0c\u202fd\te\u3000f")
    # NBSP and ideographic space do not split; U+202F and tab do.
    assert tokens == ["a", "b\u00a0c", "d", "e\u3000f"]
    assert offsets == [0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3]


@settings(max_examples=200, deadline=None)
@given(num_tokens=st.integers(1, 60), max_doc=st.integers(1, 20), stride=st.integers(1, 25))
def test_max_context_table_equals_check_is_max_context(num_tokens, max_doc, stride):
    spans = squad._doc_spans(num_tokens, max_doc, stride)
    assert spans[0].start == 0 and spans[-1].start + spans[-1].length == num_tokens
    table = squad._max_context_windows(spans, num_tokens)
    for position in range(num_tokens):
        for index in range(len(spans)):
            assert (table[position] == index) == squad._check_is_max_context(spans, index, position)


def test_improve_answer_span_narrows_to_answer():
    tok = _fast_tokenizer()
    doc = tok.tokenize("the leader was john smith (1895-1943).")
    start, end = doc.index("("), len(doc) - 1
    new_start, new_end = squad._improve_answer_span(doc, start, end, tok, "1895")
    assert doc[new_start:new_end + 1] == ["1895"]
    # Not recoverable (sub-word answer): the input span comes back.
    assert squad._improve_answer_span(doc, 0, 1, tok, "lead") == (0, 1)


# ------------------------------------------------------------------ bad input


def _write_json(tmp_path, obj, name="in.json"):
    path = tmp_path / name
    path.write_text(json.dumps(obj), encoding="utf-8")
    return str(path)


def _squad(qas, context="The cat sat on the mat."):
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}


def test_file_without_data_is_a_clear_error(tmp_path):
    path = _write_json(tmp_path, {"version": "1.1"})
    with pytest.raises(squad.SquadFormatError, match="in.json.*'data'"):
        squad.read_squad_examples(path, is_training=False)


def test_missing_and_invalid_files_are_clear_errors(tmp_path):
    with pytest.raises(squad.SquadFormatError, match="nope.json"):
        squad.read_squad_examples(str(tmp_path / "nope.json"), is_training=False)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(squad.SquadFormatError, match="bad.json:1: not valid JSON"):
        squad.read_squad_examples(str(bad), is_training=False)


def test_question_without_id_is_a_clear_error(tmp_path):
    path = _write_json(tmp_path, _squad([{"question": "Who?", "answers": []}]))
    with pytest.raises(squad.SquadFormatError, match="article 0 paragraph 0 question 0 has no 'id'"):
        squad.read_squad_examples(path, is_training=False)


@pytest.mark.parametrize("is_training", [False, True])
def test_answer_start_outside_context_is_a_clear_error(tmp_path, is_training):
    qa = {"id": "q1", "question": "Where?", "answers": [{"text": "mat", "answer_start": 99}]}
    path = _write_json(tmp_path, _squad([qa]))
    with pytest.raises(squad.SquadFormatError, match="'q1'.*answer_start 99 falls outside its context"):
        squad.read_squad_examples(path, is_training=is_training)


def test_answer_running_past_context_is_a_clear_error_in_training(tmp_path):
    qa = {"id": "q1", "question": "Where?", "answers": [{"text": "mat. And more", "answer_start": 19}]}
    path = _write_json(tmp_path, _squad([qa]))
    with pytest.raises(squad.SquadFormatError, match="runs past the end"):
        squad.read_squad_examples(path, is_training=True)


def test_training_needs_exactly_one_answer(tmp_path):
    answers = [{"text": "mat", "answer_start": 19}, {"text": "the mat", "answer_start": 15}]
    path = _write_json(tmp_path, _squad([{"id": "q1", "question": "Where?", "answers": answers}]))
    with pytest.raises(squad.SquadFormatError, match="exactly 1 answer"):
        squad.read_squad_examples(path, is_training=True)
    assert len(squad.read_squad_examples(path, is_training=False)) == 1


def test_unfindable_answer_is_skipped_with_warning(tmp_path):
    qas = [{"id": "bad", "question": "Where?", "answers": [{"text": "dog", "answer_start": 19}]},
           {"id": "good", "question": "Where?", "answers": [{"text": "mat", "answer_start": 19}]}]
    path = _write_json(tmp_path, _squad(qas))
    examples = squad.read_squad_examples(path, is_training=True)
    assert [e.qas_id for e in examples] == ["good"]
    assert (examples[0].start_position, examples[0].end_position) == (5, 5)
    assert examples[0].doc_tokens[5] == "mat."


def test_v2_training_reads_is_impossible(tmp_path):
    qas = [{"id": "imp", "question": "Why?", "answers": [], "is_impossible": True}]
    path = _write_json(tmp_path, _squad(qas))
    (example,) = squad.read_squad_examples(path, is_training=True, version_2_with_negative=True)
    assert (example.is_impossible, example.start_position, example.end_position,
            example.orig_answer_text) == (True, -1, -1, "")
    (eval_example,) = squad.read_squad_examples(path, is_training=False, version_2_with_negative=True)
    assert eval_example.is_impossible is False and eval_example.start_position is None


@pytest.mark.parametrize("max_seq,max_query", [(67, 64), (10, 8)])
def test_max_seq_length_must_exceed_query_plus_3(max_seq, max_query):
    # an InputError (one line, exit status 1 in the tools), still a ValueError for callers
    with pytest.raises(InputError, match="must be greater than max_query_length"):
        squad.convert_examples_to_features(_examples("v1.1_short", "eval")[:1], _fast_tokenizer(),
                                           max_seq, 16, max_query, False, lambda f: None)
