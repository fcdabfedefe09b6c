"""bert_tasks/exports/classifier.py, pack_rows: the in-graph packing gives run_classifier's features
(the original's truncation rule, single vs pair per row), with in-graph tokenization too."""

import os

import numpy as np
import tensorflow as tf

from data.glue import processors as classifier
from data.glue import features as cf
from bert_tasks.exports import classifier as classifier_serving
from data.tokenization import wordpiece as tokenization
from tests import paths

CLS, SEP = 101, 102


def _host(a_len, b_len, seq):
    tokens_a = ["a%d" % i for i in range(a_len)]
    tokens_b = ["b%d" % i for i in range(b_len)]
    tokens, segments, _ = cf.pair_tokens(tokens_a, tokens_b, seq)
    ids = [CLS if t == "[CLS]" else SEP if t == "[SEP]" else
           (1000 + int(t[1:]) if t[0] == "a" else 2000 + int(t[1:])) for t in tokens]
    return ids, segments


def test_every_length_pair_matches_truncate_seq_pair():
    cases = [(la, lb, seq) for seq in (3, 4, 5, 8, 11) for la in range(0, 13) for lb in range(0, 13)]
    for seq in sorted({c[2] for c in cases}):
        rows = [(la, lb) for la, lb, s in cases if s == seq]
        ids_a = tf.ragged.constant([[1000 + i for i in range(la)] for la, _ in rows],
                                   dtype=tf.int32, ragged_rank=1)
        ids_b = tf.ragged.constant([[2000 + i for i in range(lb)] for _, lb in rows],
                                   dtype=tf.int32, ragged_rank=1)
        packed = classifier_serving.pack_rows(ids_a, ids_b, seq, CLS, SEP)
        got_ids = packed["input_ids"].numpy()
        width = got_ids.shape[1]
        assert width <= seq
        for r, (la, lb) in enumerate(rows):
            ids, segments = _host(la, lb, seq)
            pad = [0] * (width - len(ids))
            assert got_ids[r].tolist() == ids + pad, (la, lb, seq)
            assert packed["segment_ids"][r].numpy().tolist() == segments + pad
            assert packed["input_mask"][r].numpy().tolist() == [1] * len(ids) + pad


def test_graph_tokenized_mrpc_matches_host_features():
    from data.tokenization import graph as graph_tokenization

    examples = classifier.get_processor("mrpc").get_dev_examples(
        os.path.join(paths.DATA, "glue", "MRPC"))[:40]
    examples.append(classifier.InputExample("x", "Only one sentence here.", "", "0"))
    host_tok = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    graph_tok = graph_tokenization.BertGraphTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    for seq in (32, 128):
        host = cf.convert_examples_to_features(examples, ["0", "1"], seq, host_tok)
        packed = classifier_serving.pack_rows(
            graph_tok.tokenize(tf.constant([e.text_a for e in examples])),
            graph_tok.tokenize(tf.constant([e.text_b for e in examples])), seq, CLS, SEP)
        width = packed["input_ids"].shape[1]
        assert width == max(sum(f.input_mask) for f in host)
        for name in ("input_ids", "input_mask", "segment_ids"):
            expected = np.array([getattr(f, name)[:width] for f in host])
            np.testing.assert_array_equal(packed[name].numpy(), expected, err_msg=name)


def test_single_sentence_rows_without_text_b():
    ids_a = tf.ragged.constant([[5, 6, 7, 8, 9], []], dtype=tf.int32)
    packed = classifier_serving.pack_rows(ids_a, None, 5, CLS, SEP)
    assert packed["input_ids"].numpy().tolist() == [[CLS, 5, 6, 7, SEP], [CLS, SEP, 0, 0, 0]]
    assert packed["segment_ids"].numpy().sum() == 0
