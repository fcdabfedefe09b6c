"""bert_tasks/exports/squad.py: in-graph features equal the original's first window; best span.

The exported signature (span -> text on whole words) is tested in tests/bert_cli/test_run_squad.py.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tasks.exports import squad as squad_serving
from modeling.heads import squad as squad_head
from modeling.config import BertConfig
from tests import paths

SQUAD = os.path.join(paths.GOLDEN, "squad")
TINY_CONFIG = os.path.join(paths.GOLDEN, "modeling", "tiny", "bert_config.json")


@pytest.fixture(scope="module")
def tiny_model():
    return squad_head.build_squad_model(BertConfig.from_json_file(TINY_CONFIG))


def _questions(variant):
    with open(os.path.join(SQUAD, variant, "input_dev_slice.json"), encoding="utf-8") as f:
        data = json.load(f)["data"]
    return [(qa["question"], p["context"]) for a in data for p in a["paragraphs"] for qa in p["qas"]]


@pytest.mark.parametrize("variant,max_seq,max_query", [("v1.1_short", 96, 24), ("v2.0_short", 96, 24)])
def test_in_graph_features_equal_first_window_of_golden(tiny_model, variant, max_seq, max_query):
    module = squad_serving.SquadServingModule(tiny_model, paths.GOLDEN_VOCAB, max_seq_length=max_seq,
                                              max_query_length=max_query)
    pairs = _questions(variant)
    f = module.features(tf.constant([q for q, _ in pairs]), tf.constant([c for _, c in pairs]))
    with open(os.path.join(SQUAD, variant, "eval_features.jsonl"), encoding="utf-8") as fh:
        golden = [json.loads(line) for line in fh]
    first_windows = [g for g in golden if g["doc_span_index"] == 0]
    assert len(first_windows) == len(pairs)
    for i, g in enumerate(first_windows):
        for name in ("input_ids", "input_mask", "segment_ids"):
            assert f[name][i].numpy().tolist() == g[name], (i, name)
        in_doc = np.flatnonzero(f["in_doc"][i].numpy()).tolist()
        assert in_doc == sorted(int(k) for k in g["token_to_orig_map"])
        # Doc piece -> word index, as token_to_orig_map.
        offset = int(f["doc_offset"][i])
        words = f["tok_to_word"][i].numpy()
        assert {str(p): int(words[p - offset]) for p in in_doc} == g["token_to_orig_map"]


def test_best_span_is_brute_force_best(tiny_model):
    module = squad_serving.SquadServingModule(tiny_model, paths.GOLDEN_VOCAB, max_seq_length=12,
                                              max_query_length=4, max_answer_length=3)
    rng = np.random.RandomState(0)
    start = rng.normal(size=(5, 12)).astype(np.float32)
    end = rng.normal(size=(5, 12)).astype(np.float32)
    in_doc = np.zeros((5, 12), bool)
    in_doc[:, 4:10] = True
    s, e, score = module.best_span(tf.constant(start), tf.constant(end), tf.constant(in_doc))
    for b in range(5):
        best = max(((start[b, i] + end[b, j], i, j) for i in range(4, 10) for j in range(i, min(10, i + 3))))
        assert (int(s[b]), int(e[b])) == best[1:]
        assert float(score[b]) == pytest.approx(best[0])


def test_max_seq_length_must_exceed_query_plus_3(tiny_model):
    with pytest.raises(ValueError, match="max_query_length"):
        squad_serving.SquadServingModule(tiny_model, paths.GOLDEN_VOCAB, max_seq_length=10,
                                         max_query_length=7)
