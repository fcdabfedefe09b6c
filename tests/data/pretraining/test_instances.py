"""data/pretraining/instances.py (the faithful path) and data/pretraining/instances_fast.py (the fast one): both
against the original's golden records (README section 2 and the trajectory's training data),
and against each other on random corpora and settings."""

import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_common import record_framing
from data.pretraining import instances as pretraining
from data.pretraining import corpus as pretraining_corpus
from data.pretraining import instances_fast
from data.tokenization import special_tokens
from data.pretraining.corpus import Corpus
from data.pretraining.rng import WordStream
from data.tokenization.wordpiece import FastFullTokenizer, VocabError
from data.records import numpy_reader
from tests import paths

GOLDEN_SETS = [
    # (jsonl, corpus, max_seq_length, max_predictions_per_seq, dupe_factor, whole-word mask)
    ("pretraining_data/seq128_seed12345_dupe5_wwmfalse.jsonl", "sample_text.txt", 128, 20, 5,
     False),
    ("pretraining_data/seq128_seed12345_dupe5_wwmtrue.jsonl", "sample_text.txt", 128, 20, 5,
     True),
    ("pretraining_trajectory/seq64_seed12345_dupe1.jsonl", "pretrain_trajectory_corpus.txt", 64,
     10, 1, False),
]
IDS = ["seq128_wwmfalse", "seq128_wwmtrue", "trajectory_seq64"]
FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")


@pytest.fixture(scope="module")
def tokenizer():
    return FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)


@pytest.fixture(scope="module")
def vocab(tokenizer):
    return pretraining.PretrainingVocab(tokenizer.vocab, paths.GOLDEN_VOCAB)


def _golden(jsonl):
    with open(os.path.join(paths.GOLDEN, jsonl)) as f:
        return [json.loads(line) for line in f]


def _assert_records_equal(got, want):
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want)):
        for name in FEATURES:
            assert list(g[name]) == list(w[name]), "record %d, %s" % (index, name)


def _fast_records(corpus, vocab, seq, preds, dupe, wwm, seed=12345, prob=0.15, short=0.1):
    store, order = instances_fast.generate_records(corpus, vocab, seq, preds, prob, short, dupe,
                                                     seed, wwm)
    out = []
    for framed in (store.record(index) for index in order):
        n = int.from_bytes(framed[:8], "little")
        data = framed[12:12 + n]
        assert record_framing.frame_record(data) == framed  # both CRCs
        out.append(numpy_reader.decode_example(data))
    return out


def _reference_records(corpus, vocab, seq, preds, dupe, wwm, seed=12345, prob=0.15, short=0.1):
    instances = pretraining.create_instances_from_documents(
        corpus.documents(), vocab, seq, dupe, short, prob, preds, random.Random(seed), wwm)
    return [pretraining.instance_features(i, seq, preds) for i in instances]


@pytest.mark.parametrize("golden", GOLDEN_SETS, ids=IDS)
def test_reference_path_matches_the_original(golden, tokenizer, vocab):
    jsonl, text, seq, preds, dupe, wwm = golden
    corpus = pretraining_corpus.read_corpus([os.path.join(paths.GOLDEN, "inputs", text)],
                                            tokenizer)
    _assert_records_equal(_reference_records(corpus, vocab, seq, preds, dupe, wwm),
                          _golden(jsonl))


@pytest.mark.parametrize("golden", GOLDEN_SETS, ids=IDS)
def test_fast_path_matches_the_original(golden, tokenizer, vocab):
    jsonl, text, seq, preds, dupe, wwm = golden
    corpus = pretraining_corpus.read_corpus([os.path.join(paths.GOLDEN, "inputs", text)],
                                            tokenizer)
    want = _golden(jsonl)
    got = _fast_records(corpus, vocab, seq, preds, dupe, wwm)
    _assert_records_equal(got, want)
    # The convenience keys of the golden file agree with the ids (a check of the test data).
    first = want[0]
    n = sum(first["input_mask"])
    assert tokenizer.convert_ids_to_tokens(first["input_ids"][:n]) == first["tokens"]


def test_create_training_instances_reads_and_shuffles_like_the_original(tokenizer):
    path = os.path.join(paths.GOLDEN, "inputs", "sample_text.txt")
    instances = pretraining.create_training_instances(
        [path], tokenizer, 128, 5, 0.1, 0.15, 20, random.Random(12345))
    want = _golden(GOLDEN_SETS[0][0])
    assert len(instances) == len(want)
    for inst, w in zip(instances, want):
        assert inst.tokens == w["input_ids"][:len(inst.tokens)]
        assert inst.masked_lm_labels == w["masked_lm_ids"][:len(inst.masked_lm_labels)]
        assert inst.is_random_next == bool(w["next_sentence_labels"][0])


# -- fast path == faithful path on random input -------------------------------------------


def _toy_vocab(num_words, subword_every=3):
    """[PAD] [UNK] [CLS] [SEP] [MASK], then words w5.. with every ``subword_every``-th a
    '##' piece."""
    tokens = [special_tokens.PAD, special_tokens.UNK, special_tokens.CLS, special_tokens.SEP,
              special_tokens.MASK]
    for i in range(len(tokens), num_words):
        tokens.append(("##w%d" if i % subword_every == 0 else "w%d") % i)
    return pretraining.PretrainingVocab({t: i for i, t in enumerate(tokens)})


@st.composite
def _cases(draw):
    num_words = draw(st.sampled_from([40, 300, 30522, 70000]))
    docs = draw(st.lists(st.lists(st.lists(st.integers(5, num_words - 1), min_size=1,
                                           max_size=40), min_size=1, max_size=8),
                         min_size=1, max_size=5))
    return dict(
        num_words=num_words, docs=docs,
        seq=draw(st.sampled_from([5, 6, 9, 16, 33, 64, 128])),
        preds=draw(st.integers(1, 25)),
        dupe=draw(st.integers(1, 3)),
        wwm=draw(st.booleans()),
        seed=draw(st.integers(0, 2 ** 40)),
        prob=draw(st.sampled_from([0.0, 0.15, 0.5, 1.0])),
        short=draw(st.sampled_from([0.0, 0.1, 0.5, 1.0])))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_fast_path_equals_faithful_path(case):
    vocab = _toy_vocab(case["num_words"])
    corpus = Corpus.from_documents(case["docs"])
    args = (corpus, vocab, case["seq"], case["preds"], case["dupe"], case["wwm"], case["seed"],
            case["prob"], case["short"])
    _assert_records_equal(_fast_records(*args), _reference_records(*args))


def test_fast_path_with_long_sequences_and_exact_replays(monkeypatch):
    """max_seq_length 300 (shuffles of 256+ candidates scan 16-bit words) and every third
    instance's masked-LM draws replayed one by one (as for an undecidable word)."""
    rng = random.Random(3)
    docs = [[[rng.randrange(5, 3000) for _ in range(rng.randrange(1, 120))]
             for _ in range(rng.randrange(2, 9))] for _ in range(4)]
    vocab = _toy_vocab(3000)
    corpus = Corpus.from_documents(docs)
    real_scan = instances_fast.MaskedLmScanner.scan
    calls = {"n": 0}

    def sometimes(self, *args):
        calls["n"] += 1
        return None if calls["n"] % 3 == 0 else real_scan(self, *args)

    monkeypatch.setattr(instances_fast.MaskedLmScanner, "scan", sometimes)
    args = (corpus, vocab, 300, 40, 2, False, 7)
    _assert_records_equal(_fast_records(*args), _reference_records(*args))
    assert calls["n"] > 6


def test_truncation_counts_match_truncate_seq_pair():
    rng = random.Random(11)
    for _ in range(300):
        la, lb = rng.randrange(1, 90), rng.randrange(1, 90)
        max_tokens = rng.randrange(2, la + lb + 1)
        seed = rng.randrange(1 << 30)
        a, b = list(range(la)), list(range(100, 100 + lb))
        pretraining.truncate_seq_pair(a, b, max_tokens, random.Random(seed))
        gen = instances_fast.FastGenerator.__new__(instances_fast.FastGenerator)
        gen.stream = WordStream(seed)
        gen.stream.ensure(4 * (la + lb) + 16)
        excess = la + lb - max_tokens
        if excess <= 0:
            assert (a, b) == (list(range(la)), list(range(100, 100 + lb)))
            continue
        a_s, a_e, b_s, b_e = gen._truncate(0, 0, la, 100, 100 + lb, excess)
        assert (list(range(a_s, a_e)), list(range(b_s, b_e))) == (a, b)


# -- pieces ----------------------------------------------------------------------------------


def test_vocab_needs_the_special_tokens_and_keeps_last_duplicate_index():
    with pytest.raises(VocabError, match=r"\[MASK\]"):
        pretraining.PretrainingVocab({"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3}, "v.txt")
    vocab = pretraining.PretrainingVocab(
        {"[CLS]": 0, "[SEP]": 1, "[MASK]": 2, "a": 5, "##b": 4})  # "a" was listed twice
    assert vocab.word_ids.tolist() == [0, 1, 2, 5, 4] and vocab.num_words == 5
    assert vocab.is_subword[4] and not vocab.is_subword[5]


@pytest.mark.parametrize("kwargs, flag", [
    (dict(max_seq_length=4), "--max_seq_length"),
    (dict(max_predictions_per_seq=0), "--max_predictions_per_seq"),
    (dict(dupe_factor=0), "--dupe_factor"),
    (dict(masked_lm_prob=1.5), "--masked_lm_prob"),
    (dict(short_seq_prob=-0.1), "--short_seq_prob"),
])
def test_settings_the_original_cannot_use_are_errors(kwargs, flag):
    args = dict(max_seq_length=128, max_predictions_per_seq=20, dupe_factor=10,
                masked_lm_prob=0.15, short_seq_prob=0.1)
    args.update(kwargs)
    with pytest.raises(pretraining.PretrainingDataError, match=flag):
        pretraining.check_settings(**args)
    pretraining.check_settings(128, 20, 10, 0.15, 0.1)


def test_num_to_predict_rounds_half_to_even():
    assert pretraining.num_to_predict(10, 0.25, 20) == 2  # round(2.5) == 2
    assert pretraining.num_to_predict(14, 0.25, 20) == 4  # round(3.5) == 4
    assert pretraining.num_to_predict(3, 0.0, 20) == 1
    assert pretraining.num_to_predict(200, 0.15, 20) == 20


def test_one_document_pairs_with_itself_and_one_sentence_documents_are_random_next():
    vocab = _toy_vocab(50)
    corpus = Corpus.from_documents([[[7, 8, 9]]])
    records = _fast_records(corpus, vocab, 16, 3, 3, False)
    assert len(records) == 3
    for r in records:
        assert r["next_sentence_labels"] == [1]
        n = sum(r["input_mask"])
        assert n == 9  # [CLS] 7 8 9 [SEP] 7 8 9 [SEP] (B from the same document)
    _assert_records_equal(records, _reference_records(corpus, vocab, 16, 3, 3, False))
