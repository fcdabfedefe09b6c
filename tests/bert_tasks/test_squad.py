"""bert_tasks/squad.py: length-aware prediction against the original's padded path."""

import os

import numpy as np
import tensorflow as tf

from bert_tasks import squad as task
from data import squad
from data.squad import postprocess
from data.tokenization import wordpiece
from modeling import checkpoints
from modeling.config import BertConfig
from modeling.heads import squad as squad_head
from tests import paths

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
DEV = os.path.join(paths.GOLDEN, "squad", "v1.1_short", "input_dev_slice.json")
SEQ = 128


def _features(tmp_path):
    examples = squad.read_squad_examples(DEV, is_training=False)
    tokenizer = wordpiece.FastFullTokenizer(paths.GOLDEN_VOCAB, True)
    features = []
    with squad.FeatureWriter(str(tmp_path / "eval.tf_record"), is_training=False) as writer:
        def append(feature):
            features.append(feature)
            writer.process_feature(feature)

        squad.convert_examples_to_features(examples, tokenizer, SEQ, 32, 16, is_training=False,
                                           output_fn=append)
    return examples, features, writer.filename


def test_length_aware_results_are_the_padded_logits_of_the_real_positions(tmp_path):
    examples, features, eval_file = _features(tmp_path)
    lengths = {f.unique_id: sum(f.input_mask) for f in features}
    assert min(lengths.values()) < SEQ - 24 and max(lengths.values()) == SEQ  # mixed lengths
    tf.keras.utils.set_random_seed(5)
    model = squad_head.build_squad_model(BertConfig.from_json_file(
        os.path.join(TINY, "bert_config.json")))
    checkpoints.load_checkpoint(model, os.path.join(TINY, "bert_model.ckpt"), log=False)
    padded = task.predict_raw_results(model, eval_file, SEQ, 8)
    cut = task.predict_raw_results(model, eval_file, SEQ, 8, length_aware=True)
    assert sorted(r.unique_id for r in cut) == sorted(r.unique_id for r in padded)
    by_id = {r.unique_id: r for r in padded}
    for r in cut:
        n = lengths[r.unique_id]
        assert len(r.start_logits) == len(r.end_logits) == n
        np.testing.assert_allclose(r.start_logits, by_id[r.unique_id].start_logits[:n],
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(r.end_logits, by_id[r.unique_id].end_logits[:n],
                                   rtol=1e-5, atol=1e-5)

    def answers(results):
        return postprocess.compute_predictions(examples, features, results, 20, 30, True)[:2]

    # The answers are the padded path's with every padding position scored out of the n-best
    # search (the original lets padding take n-best slots; a trained head scores it low).
    low = [squad.RawResult(r.unique_id, r.start_logits[:lengths[r.unique_id]] + [-1e4] * (
        SEQ - lengths[r.unique_id]), r.end_logits[:lengths[r.unique_id]] + [-1e4] * (
        SEQ - lengths[r.unique_id])) for r in padded]
    expected_text, expected_nbest = answers(low)
    got_text, got_nbest = answers(cut)
    assert got_text == expected_text
    for qid in expected_nbest:
        assert [e["text"] for e in got_nbest[qid]] == [e["text"] for e in expected_nbest[qid]]
        np.testing.assert_allclose([e["probability"] for e in got_nbest[qid]],
                                   [e["probability"] for e in expected_nbest[qid]], rtol=1e-4)
