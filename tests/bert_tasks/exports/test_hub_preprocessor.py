"""bert_tasks/exports/hub_preprocessor.py: the TF Hub-style preprocessor SavedModel gives
FullTokenizer's ids and run_classifier's features (data/glue/features.py), single texts and
pairs, at the export's seq_length and at any other one.

The fresh-process load and ``saved_model_cli`` are checked end to end in
tests/bert_tasks/exports/test_hub.py (one export of both SavedModels)."""

import filecmp
import itertools
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from bert_common.errors import InputError
from data.glue import features as cf
from data.glue.processors import InputExample
from data.tokenization import graph as graph_tokenization
from bert_tasks.exports import hub_preprocessor
from data.tokenization import wordpiece as tokenization
from tests import paths

SEQ = 16  # the export's default: short, so that the texts below are cut
NAMES = {"input_word_ids": "input_ids", "input_mask": "input_mask",
         "input_type_ids": "segment_ids"}
TEXTS_A = [
    "The quick brown fox jumps over the lazy dog, again and again and again!",
    "Unwänted rünning: ΟΔΟΣ İstanbul 中文字 naïve café",
    "short",
    "",
    "a " * 40,
]
TEXTS_B = [
    "A second sentence that is long enough to be truncated by the pair rule.",
    "",  # an empty b: a single text, as the original's ``if tokens_b:``
    "b c d e f g h i j k l m n o p",
    "only b",
    "x",
]


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hub") / "preprocessor")
    hub_preprocessor.export_preprocessor(path, paths.GOLDEN_VOCAB, do_lower_case=True,
                                         seq_length=SEQ)
    return path


@pytest.fixture(scope="module")
def loaded(export_dir):
    return tf.saved_model.load(export_dir)


@pytest.fixture(scope="module")
def host_tokenizer():
    return tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)


def _host_features(texts_a, texts_b, seq_length, tokenizer):
    """run_classifier's features: dict of int32 [B, seq_length] under TF Hub's names."""
    texts_b = texts_b or [""] * len(texts_a)
    examples = [InputExample(str(i), a, b or None, "0")
                for i, (a, b) in enumerate(zip(texts_a, texts_b))]
    features = cf.convert_examples_to_features(examples, ["0"], seq_length, tokenizer)
    return {hub: np.array([getattr(f, ours) for f in features], np.int32)
            for hub, ours in NAMES.items()}


def _assert_packed(got, want):
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].dtype == tf.int32
        np.testing.assert_array_equal(got[name].numpy(), want[name], err_msg=name)


def test_call_equals_run_classifier_single_text_features(loaded, host_tokenizer):
    got = loaded(tf.constant(TEXTS_A))
    _assert_packed(got, _host_features(TEXTS_A, None, SEQ, host_tokenizer))
    serving = loaded.signatures["serving_default"](text=tf.constant(TEXTS_A))
    _assert_packed(serving, _host_features(TEXTS_A, None, SEQ, host_tokenizer))


def test_text_pair_signature_equals_run_classifier_pair_features(loaded, host_tokenizer):
    got = loaded.signatures["text_pair"](text_a=tf.constant(TEXTS_A), text_b=tf.constant(TEXTS_B))
    _assert_packed(got, _host_features(TEXTS_A, TEXTS_B, SEQ, host_tokenizer))


@pytest.mark.parametrize("seq_length", [5, 9, 64])
def test_bert_pack_inputs_at_any_seq_length(loaded, host_tokenizer, seq_length):
    words_a = loaded.tokenize(tf.constant(TEXTS_A))
    words_b = loaded.tokenize(tf.constant(TEXTS_B))
    for length in (seq_length, tf.constant(seq_length, tf.int32)):
        _assert_packed(loaded.bert_pack_inputs([words_a], seq_length=length),
                       _host_features(TEXTS_A, None, seq_length, host_tokenizer))
        _assert_packed(loaded.bert_pack_inputs([words_a, words_b], seq_length=length),
                       _host_features(TEXTS_A, TEXTS_B, seq_length, host_tokenizer))
    # [B, (P)] segments (the word level merged) pack the same.
    _assert_packed(loaded.bert_pack_inputs([words_a.merge_dims(1, 2), words_b.merge_dims(1, 2)],
                                           seq_length=seq_length),
                   _host_features(TEXTS_A, TEXTS_B, seq_length, host_tokenizer))
    # Without seq_length: the export's.
    _assert_packed(loaded.bert_pack_inputs([words_a, words_b]),
                   _host_features(TEXTS_A, TEXTS_B, SEQ, host_tokenizer))


def test_tokenize_is_ragged_words_of_wordpieces(loaded, host_tokenizer):
    words = loaded.tokenize(tf.constant(TEXTS_A))
    assert isinstance(words, tf.RaggedTensor)
    assert words.dtype == tf.int32 and words.ragged_rank == 2
    assert words.shape.as_list() == [len(TEXTS_A), None, None]
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    for row, text in zip(words.to_list(), TEXTS_A):
        expected = [host_tokenizer.convert_tokens_to_ids(host_tokenizer.wordpiece_tokenizer
                                                         .tokenize(word))
                    for word in basic.tokenize(text)]
        assert row == expected
        assert sum(row, []) == host_tokenizer.convert_tokens_to_ids(host_tokenizer.tokenize(text))
    special = {k: int(v) for k, v in loaded.tokenize.get_special_tokens_dict().items()}
    vocab = host_tokenizer.vocab
    assert special == {"vocab_size": len(vocab), "start_of_sequence_id": vocab["[CLS]"],
                       "end_of_segment_id": vocab["[SEP]"], "padding_id": 0,
                       "mask_id": vocab["[MASK]"]}


def test_three_segments_round_robin(loaded):
    segments = [tf.ragged.constant([[[1000 + i] for i in range(n)]], dtype=tf.int32)
                for n in (5, 1, 4)]
    got = loaded.bert_pack_inputs(segments, seq_length=10)  # 6 ids fit: 3, 1, 2 round robin
    assert got["input_word_ids"].numpy().tolist() == [
        [101, 1000, 1001, 1002, 102, 1000, 102, 1000, 1001, 102]]
    assert got["input_type_ids"].numpy().tolist() == [[0, 0, 0, 0, 0, 1, 1, 2, 2, 2]]
    assert got["input_mask"].numpy().tolist() == [[1] * 10]


def test_two_segment_rule_is_tf_hub_round_robin_trimmer():
    """The original's pair truncation (graph.truncated_pair_lengths) equals TF Text's
    RoundRobinTrimmer (TF Hub's) for every pair of lengths and budget (both non-empty)."""
    pairs = [(la, lb) for la in range(1, 14) for lb in range(1, 14)]
    len_a = tf.constant([p[0] for p in pairs])
    len_b = tf.constant([p[1] for p in pairs])
    seg_a = tf.ragged.range(len_a)
    seg_b = tf.ragged.range(len_b)
    for budget in range(0, 16):
        trimmed = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim([seg_a, seg_b])
        ours = graph_tokenization.truncated_pair_lengths(len_a, len_b, tf.constant(budget))
        for got, want in zip(ours, trimmed):
            np.testing.assert_array_equal(got.numpy(), want.row_lengths().numpy(),
                                          err_msg="budget %d" % budget)


def test_round_robin_lengths_are_tf_text_round_robin_trimmer():
    """hub_preprocessor.round_robin_lengths (the closed form the TF Hub packing trims by) equals
    TF Text's RoundRobinTrimmer for 1-3 segments of every length 0-6 (empty ones too) and every
    budget 0-20."""
    for count in (1, 2, 3):
        grid = list(itertools.product(range(7), repeat=count))
        lengths = [tf.constant([row[i] for row in grid], tf.int32) for i in range(count)]
        segments = [tf.ragged.range(n) for n in lengths]
        for budget in range(21):
            trimmed = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments)
            ours = hub_preprocessor.round_robin_lengths(lengths, tf.constant(budget))
            for got, want in zip(ours, trimmed):
                np.testing.assert_array_equal(got.numpy(), want.row_lengths().numpy(),
                                              err_msg="%d segments, budget %d" % (count, budget))


def test_asset_casing_and_signatures(loaded, export_dir):
    asset = loaded.vocab_file.asset_path.numpy().decode()
    assert asset == os.path.join(export_dir, "assets", "vocab.txt")
    assert filecmp.cmp(asset, paths.GOLDEN_VOCAB, shallow=False)
    assert bool(loaded.do_lower_case.numpy()) is True
    assert sorted(loaded.signatures) == ["serving_default", "text_pair"]
    outputs = loaded.signatures["text_pair"].structured_outputs
    assert {k: v.shape.as_list() for k, v in outputs.items()} == {
        name: [None, SEQ] for name in NAMES}


def test_too_short_seq_length_fails(loaded):
    words = loaded.tokenize(tf.constant(["a b"]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="too short for 3 special tokens"):
        loaded.bert_pack_inputs([words, words], seq_length=2)


def test_errors_are_one_line_input_errors(tmp_path):
    missing = str(tmp_path / "vocab.txt")
    with pytest.raises(InputError) as error:
        hub_preprocessor.export_preprocessor(str(tmp_path / "out"), missing, True)
    assert str(error.value) == "vocab file %s: no such file" % missing
    with pytest.raises(InputError, match="seq_length must be an integer >= 3") as error:
        hub_preprocessor.export_preprocessor(str(tmp_path / "out"), paths.GOLDEN_VOCAB, True,
                                             seq_length=2)
    assert "\n" not in str(error.value)
    assert not os.path.exists(tmp_path / "out")


def _tf_hub_rule(segments, seq_length, cls_id, sep_id):
    """TF Hub's bert_pack_inputs, from TensorFlow Text's pieces: round-robin trimming to
    seq_length - (segments + 1) ids, every segment followed by [SEP], padded."""
    trimmed = tf_text.RoundRobinTrimmer(max_seq_length=seq_length - len(segments) - 1).trim(
        segments)
    ids, types = tf_text.combine_segments(trimmed, start_of_sequence_id=cls_id,
                                          end_of_segment_id=sep_id)
    word_ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=seq_length)
    type_ids, _ = tf_text.pad_model_inputs(types, max_seq_length=seq_length)
    return {"input_word_ids": word_ids.numpy(), "input_mask": mask.numpy(),
            "input_type_ids": type_ids.numpy()}


@pytest.mark.parametrize("seq_length", [6, 9, 64])
def test_keep_empty_segments_packs_as_tf_hub_for_every_segment_count(seq_length):
    module = hub_preprocessor.HubPreprocessor(paths.GOLDEN_VOCAB, True, SEQ,
                                              keep_empty_segments=True)
    cls_id, sep_id = module.bert_pack_inputs._cls_id, module.bert_pack_inputs._sep_id
    texts_c = ["", "third one here", "c", "", "more text for the third segment"]
    words = [module.tokenize.ids(tf.constant(t)).merge_dims(1, 2)
             for t in (TEXTS_A, TEXTS_B, texts_c)]
    assert any(int(n) == 0 for n in words[1].row_lengths())  # an empty second segment
    for count in (1, 2, 3):
        got = module.bert_pack_inputs.pack(words[:count], seq_length)
        _assert_packed(got, _tf_hub_rule(words[:count], seq_length, cls_id, sep_id))
    # The default keeps run_classifier's rule: the empty second segment is a single text.
    default = hub_preprocessor.HubPreprocessor(paths.GOLDEN_VOCAB, True, SEQ)
    row = [int(n) for n in words[1].row_lengths()].index(0)
    ours = default.bert_pack_inputs.pack(words[:2], seq_length)["input_word_ids"].numpy()[row]
    hubs = _tf_hub_rule(words[:2], seq_length, cls_id, sep_id)["input_word_ids"][row]
    assert list(ours).count(sep_id) == 1 and list(hubs).count(sep_id) == 2
