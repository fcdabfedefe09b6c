"""data/ner/features.py: sentences -> windows with the first sub-token of each word labelled,
the document context around them, long sentences split, the errors, and the TFRecords; checked
with the real uncased vocab on hand-made sentences and on random documents (hypothesis)."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from data.glue import features as cf
from data.ner import conll, features
from data.ner.conll import NerDataError
from data.records import tf_example
from data.tokenization import FullTokenizer
from tests import paths

LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
LABEL_MAP = {label: i for i, label in enumerate(LABELS)}


@pytest.fixture(scope="module")
def tokenizer():
    return FullTokenizer(paths.GOLDEN_VOCAB)


def _pieces(tokenizer, word):
    """The word's WordPiece ids, [UNK] for a word WordPiece drops."""
    ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))
    return ids or tokenizer.convert_tokens_to_ids(["[UNK]"])


def _special(tokenizer):
    return tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]", "[UNK]"])


def _write_conll(tmp_path, documents, name="data.txt"):
    """documents: [[[(word, tag), ...] sentence, ...] document, ...] -> path (2 columns)."""
    lines = []
    for document in documents:
        lines += ["-DOCSTART- O", ""]
        for sentence in document:
            lines += ["%s %s" % pair for pair in sentence] + [""]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _sentences(documents):
    """The same without a file: Sentence objects (one line per word, numbered in order)."""
    out, line = [], 1
    for d, document in enumerate(documents):
        for sentence in document:
            words = [w for w, _ in sentence]
            tags = [t for _, t in sentence]
            out.append(conll.Sentence(words=words, tags=tags, lines=list(words),
                                      line_numbers=list(range(line, line + len(words))),
                                      document=d, path="mem"))
            line += len(words) + 1
    return out


def check_windows(windows, sentences, label_list, max_seq_length, tokenizer, document_context):
    """Every rule of the module docstring, checked window by window against sub-tokens worked
    out here with ``tokenizer.tokenize``; returns the windows per sentence."""
    cls_id, sep_id, _ = _special(tokenizer)
    budget = max_seq_length - 2
    label_map = {label: i for i, label in enumerate(label_list)} if label_list else None
    # each document's flat sub-tokens, each word's start and each sentence's [begin, end)
    flat, starts, bounds, pieces = {}, {}, {}, {}
    for indexes in conll.documents(sentences):
        ids = []
        for index in indexes:
            begin = len(ids)
            starts[index] = []
            pieces[index] = []
            for word in sentences[index].words:
                starts[index].append(len(ids))
                pieces[index].append(_pieces(tokenizer, word))
                ids += pieces[index][-1]
            bounds[index] = (begin, len(ids))
            flat[index] = ids  # shared list, complete once the loop is done
    predicted = collections.Counter()
    per_sentence = collections.defaultdict(list)
    for window in windows:
        s = window.sentence
        sentence = sentences[s]
        per_sentence[s].append(window)
        for name in ("input_ids", "input_mask", "segment_ids", "label_ids", "label_weights"):
            assert len(getattr(window, name)) == max_seq_length, name
        n = sum(window.input_mask)
        assert window.input_mask == [1] * n + [0] * (max_seq_length - n)
        assert window.input_ids[n:] == [0] * (max_seq_length - n)
        assert window.segment_ids == [0] * max_seq_length
        assert window.input_ids[0] == cls_id and window.input_ids[n - 1] == sep_id
        content = window.input_ids[1:n - 1]
        # the target: whole words, a contiguous run of the sentence
        a, b = window.words[0], window.words[-1] + 1
        assert window.words == list(range(a, b))
        t0 = starts[s][a]
        t1 = starts[s][b] if b < len(starts[s]) else bounds[s][1]
        target = t1 - t0
        left = window.positions[0] - 1
        right = len(content) - left - target
        assert left >= 0 and right >= 0
        # the content is the sub-tokens around the target, from the same document (or
        # sentence), as many as fit, split evenly unless a side runs out
        scope = (0, len(flat[s])) if document_context else bounds[s]
        assert scope[0] <= t0 - left and t1 + right <= scope[1]
        assert content == flat[s][t0 - left:t1 + right]
        assert len(content) == min(budget, scope[1] - scope[0])
        assert abs(left - right) <= 1 or left == t0 - scope[0] or right == scope[1] - t1
        # labels: exactly the first sub-token of every target word
        expected_ids = [0] * max_seq_length
        expected_weights = [0.0] * max_seq_length
        for w, position in zip(window.words, window.positions):
            assert position == 1 + left + starts[s][w] - t0
            word = pieces[s][w]
            assert window.input_ids[position:position + len(word)] == word
            if label_map is not None:
                expected_ids[position] = label_map[conll.to_iob2(sentence.tags)[w]]
            expected_weights[position] = 1.0
            predicted[(s, w)] += 1
        assert window.label_ids == expected_ids
        assert window.label_weights == expected_weights
    # every word of every sentence exactly once; short sentences in one window
    assert predicted == collections.Counter(
        {(s, w): 1 for s in range(len(sentences)) for w in range(len(sentences[s].words))})
    for s, group in per_sentence.items():
        length = bounds[s][1] - bounds[s][0]
        if length <= budget:
            assert len(group) == 1 and group[0].words == list(range(len(sentences[s].words)))
        else:
            for window in group:
                a, b = window.words[0], window.words[-1] + 1
                end = starts[s][b] if b < len(starts[s]) else bounds[s][1]
                assert end - starts[s][a] <= max(1, budget // 2) or b == a + 1
    # windows in file order
    assert [w.sentence for w in windows] == sorted(w.sentence for w in windows)
    return per_sentence


SENTENCE = [("EU", "B-ORG"), ("rejects", "O"), ("unaffable", "B-MISC"), ("Zwingmann", "B-PER"),
            ("1996-08-22", "O"), (".", "O")]


def test_labels_on_first_subtokens(tmp_path, tokenizer):
    sentences = conll.read_conll(_write_conll(tmp_path, [[SENTENCE]]))
    windows = features.convert_sentences(sentences, LABELS, 32, tokenizer)
    assert len(windows) == 1
    window = windows[0]
    tokens = tokenizer.convert_ids_to_tokens(window.input_ids[:sum(window.input_mask)])
    assert tokens == ["[CLS]", "eu", "rejects", "una", "##ffa", "##ble", "z", "##wing", "##mann",
                      "1996", "-", "08", "-", "22", ".", "[SEP]"]
    assert window.words == [0, 1, 2, 3, 4, 5]
    assert window.positions == [1, 2, 3, 6, 9, 14]
    assert [i for i, w in enumerate(window.label_weights) if w] == window.positions
    assert set(window.label_weights) == {0.0, 1.0}
    assert [window.label_ids[p] for p in window.positions] == [
        LABEL_MAP[t] for t in ["B-ORG", "O", "B-MISC", "B-PER", "O", "O"]]
    assert sum(window.label_ids) == sum(LABEL_MAP[t] for _, t in SENTENCE)
    assert window.input_mask == [1] * 16 + [0] * 16
    check_windows(windows, sentences, LABELS, 32, tokenizer, True)


def test_iob1_tags_are_labelled_as_iob2(tmp_path, tokenizer):
    sentences = conll.read_conll(_write_conll(tmp_path, [[[("Peter", "I-PER"), ("x", "O"),
                                                           ("Paris", "I-LOC")]]]))
    window = features.convert_sentences(sentences, LABELS, 16, tokenizer)[0]
    assert [window.label_ids[p] for p in window.positions] == [
        LABEL_MAP["B-PER"], 0, LABEL_MAP["B-LOC"]]


def test_unlabelled_sentences(tmp_path, tokenizer):
    path = tmp_path / "words.txt"
    path.write_text("-DOCSTART-\n\nPeter\nunaffable\n\nParis\n", encoding="utf-8")
    sentences = conll.read_conll(str(path), labelled=False)
    for label_list in (None, LABELS):
        windows = features.convert_sentences(sentences, label_list, 16, tokenizer)
        assert all(w.label_ids == [0] * 16 for w in windows)
        assert [w.positions for w in windows] == [[1, 2], [5]]  # peter una ##ffa ##ble paris
        assert sum(sum(w.label_weights) for w in windows) == 3.0
        check_windows(windows, sentences, None, 16, tokenizer, True)


DOC_A = [[("hello", "O"), ("world", "O")],
         [("Peter", "B-PER"), ("Blackburn", "I-PER"), ("unaffable", "O")],
         [("good", "O"), ("morning", "O"), ("Zwingmann", "B-PER")]]
DOC_B = [[("Paris", "B-LOC"), ("London", "B-LOC")], [("Berlin", "B-LOC"), ("Rome", "B-LOC")]]


def _tokens(tokenizer, window):
    return tokenizer.convert_ids_to_tokens(window.input_ids[:sum(window.input_mask)])


def test_no_document_context(tmp_path, tokenizer):
    sentences = conll.read_conll(_write_conll(tmp_path, [DOC_A, DOC_B]))
    windows = features.convert_sentences(sentences, LABELS, 24, tokenizer,
                                         document_context=False)
    assert len(windows) == 5
    for window, sentence in zip(windows, sentences):
        expected = ["[CLS]"] + [t for w in sentence.words for t in tokenizer.tokenize(w)] + \
            ["[SEP]"]
        assert _tokens(tokenizer, window) == expected
    check_windows(windows, sentences, LABELS, 24, tokenizer, False)


def test_document_context_same_document_both_sides(tmp_path, tokenizer):
    sentences = conll.read_conll(_write_conll(tmp_path, [DOC_A, DOC_B]))
    # doc A: hello world | peter blackburn una ##ffa ##ble | good morning z ##wing ##mann
    # room for all of it: every sentence of A sees all of A, and nothing of B
    windows = features.convert_sentences(sentences, LABELS, 24, tokenizer)
    doc_a = ["hello", "world", "peter", "blackburn", "una", "##ffa", "##ble", "good", "morning",
             "z", "##wing", "##mann"]
    doc_b = ["paris", "london", "berlin", "rome"]
    for window in windows[:3]:
        assert _tokens(tokenizer, window) == ["[CLS]"] + doc_a + ["[SEP]"]
    for window in windows[3:]:
        assert _tokens(tokenizer, window) == ["[CLS]"] + doc_b + ["[SEP]"]
    assert windows[1].positions == [3, 4, 5] and windows[4].positions == [3, 4]
    check_windows(windows, sentences, LABELS, 24, tokenizer, True)

    # a window of 5 sub-tokens around the middle sentence of A: one each side
    windows = features.convert_sentences(sentences, LABELS, 9, tokenizer)
    assert _tokens(tokenizer, windows[1]) == ["[CLS]", "world", "peter", "blackburn", "una",
                                              "##ffa", "##ble", "good", "[SEP]"]
    assert windows[1].positions == [2, 3, 4]
    # 6 sub-tokens: the first sentence of B has no left context (A is another document): all
    # the room goes right; the last sentence of A has none right: all goes left
    windows = features.convert_sentences(sentences, LABELS, 8, tokenizer)
    assert _tokens(tokenizer, windows[3]) == ["[CLS]", "paris", "london", "berlin", "rome",
                                              "[SEP]"]
    assert windows[3].positions == [1, 2]
    assert _tokens(tokenizer, windows[2]) == ["[CLS]", "##ble", "good", "morning", "z", "##wing",
                                              "##mann", "[SEP]"]
    assert windows[2].positions == [2, 3, 4]
    # context is cut at sub-tokens (inside "unaffable" here too), not at words
    windows = features.convert_sentences(sentences, LABELS, 9, tokenizer)
    assert _tokens(tokenizer, windows[2]) == ["[CLS]", "##ffa", "##ble", "good", "morning", "z",
                                              "##wing", "##mann", "[SEP]"]
    assert windows[2].positions == [3, 4, 5]
    for length in (8, 9, 10, 11, 12, 16):
        check_windows(features.convert_sentences(sentences, LABELS, length, tokenizer),
                      sentences, LABELS, length, tokenizer, True)


def test_context_is_balanced(tokenizer):
    # 10 one-piece words each side of a 2-word sentence; a window of 8 sub-tokens: 3 left, 3
    # right (the 10-word sentences are split, their windows are not checked here)
    words = ["the", "of", "and", "in", "to", "was", "he", "is", "for", "on"]
    left = [(w, "O") for w in words]
    right = [(w, "O") for w in reversed(words)]
    sentences = _sentences([[left, [("Peter", "B-PER"), ("Paris", "B-LOC")], right]])
    windows = features.convert_sentences(sentences, LABELS, 10, tokenizer)
    [middle] = [w for w in windows if w.sentence == 1]
    assert _tokens(tokenizer, middle) == ["[CLS]", "is", "for", "on", "peter", "paris", "on",
                                          "for", "is", "[SEP]"]
    assert middle.positions == [4, 5]
    windows = features.convert_sentences(sentences, LABELS, 11, tokenizer)  # odd room: 3 + 4
    [middle] = [w for w in windows if w.sentence == 1]
    tokens = _tokens(tokenizer, middle)
    assert tokens[1:-1].index("peter") == 3 and len(tokens) == 11
    check_windows(windows, sentences, LABELS, 11, tokenizer, True)


LONG = [(w, "O") for w in ["hello", "world", "unaffable", "good", "morning", "Peter", "the",
                           "Zwingmann", "of", "and", "Paris", "in", "to", "was", "he", "is",
                           "1996-08-22", "for", "on", "London"]]


@pytest.mark.parametrize("document_context", [False, True])
def test_long_sentence_is_split(tmp_path, tokenizer, document_context):
    path = _write_conll(tmp_path, [[[("before", "O")], LONG, [("after", "O")]]])
    sentences = conll.read_conll(path)
    length = sum(len(tokenizer.tokenize(w)) for w, _ in LONG)
    assert length == 28
    windows = features.convert_sentences(sentences, LABELS, 12, tokenizer,
                                         document_context=document_context)
    long_windows = [w for w in windows if w.sentence == 1]
    assert len(long_windows) > 2
    words = [i for w in long_windows for i in w.words]
    assert sorted(words) == list(range(len(LONG))) and len(set(words)) == len(LONG)
    for window in long_windows:
        assert sum(window.input_mask) == 12  # the rest of the sentence fills the window
        assert window.input_ids[11] == _special(tokenizer)[1]
    per_sentence = check_windows(windows, sentences, LABELS, 12, tokenizer, document_context)
    assert len(per_sentence[0]) == len(per_sentence[2]) == 1
    if not document_context:  # the long sentence's own words are its context, nothing else
        before = tokenizer.convert_tokens_to_ids(["before"])[0]
        assert all(before not in w.input_ids for w in long_windows)


def test_long_sentence_not_split_is_an_error(tmp_path, tokenizer):
    path = _write_conll(tmp_path, [[[("before", "O")], LONG]])
    sentences = conll.read_conll(path)
    assert sentences[1].line_numbers[0] == 5
    with pytest.raises(NerDataError) as info:
        features.convert_sentences(sentences, LABELS, 12, tokenizer, split_long_sentences=False)
    message = str(info.value)
    assert "\n" not in message and message.startswith("%s:5:" % path)
    # fits: no error
    features.convert_sentences(sentences, LABELS, 30, tokenizer, split_long_sentences=False)


@pytest.mark.parametrize("split", [True, False])
def test_word_longer_than_window(tmp_path, tokenizer, split):
    long_word = "antidisestablishmentarianism"
    assert len(tokenizer.tokenize(long_word)) == 8
    path = _write_conll(tmp_path, [[[("before", "O")], [("a", "O"), ("the", "O"),
                                                         (long_word, "O"), ("b", "O")]]])
    sentences = conll.read_conll(path)
    with pytest.raises(NerDataError) as info:
        features.convert_sentences(sentences, LABELS, 9, tokenizer, split_long_sentences=split)
    message = str(info.value)
    assert "\n" not in message and message.startswith("%s:7:" % path)
    assert long_word in message
    # a window of 8 sub-tokens holds it: split, with every word predicted once
    windows = features.convert_sentences(sentences, LABELS, 10, tokenizer)
    check_windows(windows, sentences, LABELS, 10, tokenizer, True)


@pytest.mark.parametrize("empty_word", ["\u200b", "\x00", "\ufffd"])
def test_word_without_wordpieces_gets_unk(tmp_path, tokenizer, empty_word):
    assert tokenizer.tokenize(empty_word) == []
    sentences = conll.read_conll(_write_conll(tmp_path, [[[("Peter", "B-PER"),
                                                           (empty_word, "I-PER"),
                                                           ("Paris", "B-LOC")]]]))
    assert sentences[0].words[1] == empty_word
    window = features.convert_sentences(sentences, LABELS, 16, tokenizer)[0]
    assert _tokens(tokenizer, window) == ["[CLS]", "peter", "[UNK]", "paris", "[SEP]"]
    assert window.positions == [1, 2, 3]
    assert window.label_ids[2] == LABEL_MAP["I-PER"] and window.label_weights[2] == 1.0
    check_windows([window], sentences, LABELS, 16, tokenizer, True)


def test_bad_max_seq_length(tokenizer):
    with pytest.raises(ValueError, match="at least 3"):
        features.convert_sentences(_sentences([[SENTENCE]]), LABELS, 2, tokenizer)
    assert features.convert_sentences([], LABELS, 16, tokenizer) == []


def test_tf_records_round_trip(tmp_path, tokenizer):
    sentences = _sentences([DOC_A, DOC_B, [LONG]])
    windows = features.convert_sentences(sentences, LABELS, 12, tokenizer)
    output = str(tmp_path / "ner.tf_record")
    assert features.write_tf_records(windows, output) == len(windows)
    dataset = tf.data.TFRecordDataset(output).map(
        lambda record: tf_example.decode_tf(record, features.record_spec(12)))
    parsed = list(dataset.as_numpy_iterator())
    assert len(parsed) == len(windows)
    for record, window in zip(parsed, windows):
        assert set(record) == {cf.INPUT_IDS, cf.INPUT_MASK, cf.SEGMENT_IDS, cf.LABEL_IDS,
                               features.LABEL_WEIGHTS}
        for name in (cf.INPUT_IDS, cf.INPUT_MASK, cf.SEGMENT_IDS, cf.LABEL_IDS):
            assert record[name].dtype == np.int32 and record[name].shape == (12,)
            np.testing.assert_array_equal(record[name], getattr(window, name))
        assert record[features.LABEL_WEIGHTS].dtype == np.float32
        np.testing.assert_array_equal(record[features.LABEL_WEIGHTS], window.label_weights)
    assert not [f for f in os.listdir(tmp_path) if f != "ner.tf_record"]  # no temp file left


WORDS = ["the", "Peter", "unaffable", "Zwingmann", "1996-08-22", "Paris", ",", "\u200b", "good",
         "morning", "EU", "rejects"]  # 1 to 5 sub-tokens each
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
_word = st.tuples(st.sampled_from(WORDS), st.sampled_from(TAGS))
_documents = st.lists(st.lists(st.lists(_word, min_size=1, max_size=14), min_size=1, max_size=4),
                      min_size=1, max_size=3)


@settings(max_examples=120, deadline=None)
@given(documents=_documents, max_seq_length=st.integers(8, 40),
       document_context=st.booleans())
def test_random_documents(tokenizer, documents, max_seq_length, document_context):
    sentences = _sentences(documents)
    windows = features.convert_sentences(sentences, LABELS, max_seq_length, tokenizer,
                                         document_context=document_context)
    check_windows(windows, sentences, LABELS, max_seq_length, tokenizer, document_context)
    # without splitting: the same windows where every sentence fits, else the error
    budget = max_seq_length - 2
    too_long = [s for s in sentences
                if sum(len(_pieces(tokenizer, w)) for w in s.words) > budget]
    if too_long:
        with pytest.raises(NerDataError, match="^mem:%d: " % too_long[0].line_numbers[0]):
            features.convert_sentences(sentences, LABELS, max_seq_length, tokenizer,
                                       document_context=document_context,
                                       split_long_sentences=False)
    else:
        again = features.convert_sentences(sentences, LABELS, max_seq_length, tokenizer,
                                           document_context=document_context,
                                           split_long_sentences=False)
        assert again == windows
