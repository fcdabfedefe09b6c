"""data/ner/conll.py: reading CoNLL-2003 files (documents, sentences, line numbers), IOB1 ->
IOB2, the one-line errors naming file:line, the label list, and the predictions file read back;
plus the counts of the real train.txt."""

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.ner import conll
from data.ner.conll import NerDataError
from tests import paths

# A small 4-column file in IOB2. Line numbers (1-based) are used below.
IOB2_FILE = """\
-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
.  .  O   O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER


-DOCSTART- -X- -X- O

Paris NNP B-NP B-LOC
New NNP B-NP B-LOC
York NNP I-NP I-LOC
John NNP B-NP B-PER
Smith NNP I-NP I-PER
Mary NNP B-NP B-PER
"""

# The same chunks in IOB1: a chunk starts with I- unless it follows one of the same type.
IOB1_FILE = IOB2_FILE.replace("B-ORG", "I-ORG").replace("B-MISC", "I-MISC") \
    .replace("Peter NNP B-NP B-PER", "Peter NNP B-NP I-PER") \
    .replace("Paris NNP B-NP B-LOC", "Paris NNP B-NP I-LOC") \
    .replace("John NNP B-NP B-PER", "John NNP B-NP I-PER")
# "New B-LOC" stays B-: it follows the LOC chunk "Paris"; "Mary B-PER" stays B- (after "John
# Smith"); in IOB2 they are the same.


def _write(tmp_path, text, name="f.txt", binary=False):
    path = tmp_path / name
    if binary:
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def _error(path, **kwargs):
    with pytest.raises(NerDataError) as info:
        conll.read_conll(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_read_small_file(tmp_path):
    path = _write(tmp_path, IOB2_FILE)
    sentences = conll.read_conll(path)
    assert [s.words for s in sentences] == [
        ["EU", "rejects", "German", "call", "."],
        ["Peter", "Blackburn"],
        ["Paris", "New", "York", "John", "Smith", "Mary"]]
    assert sentences[0].tags == ["B-ORG", "O", "B-MISC", "O", "O"]
    assert sentences[2].tags == ["B-LOC", "B-LOC", "I-LOC", "B-PER", "I-PER", "B-PER"]
    assert [s.line_numbers for s in sentences] == [[3, 4, 5, 6, 7], [9, 10],
                                                   [15, 16, 17, 18, 19, 20]]
    assert [s.document for s in sentences] == [0, 0, 1]
    assert conll.documents(sentences) == [[0, 1], [2]]
    assert [s.starts_document for s in sentences] == ["-DOCSTART- -X- -X- O", None,
                                                      "-DOCSTART- -X- -X- O"]
    # the lines keep every column, joined by one space (the extra spaces of line 7 go)
    assert sentences[0].lines[0] == "EU NNP B-NP B-ORG"
    assert sentences[0].lines[4] == ". . O O"
    assert all(s.path == path for s in sentences)
    assert sentences[1].origin == "%s:9" % path


def test_without_docstart_crlf_and_unlabelled(tmp_path):
    path = _write(tmp_path, "a B-PER\r\nb I-PER\r\n\r\nc O\r\n")
    sentences = conll.read_conll(path)
    assert [s.words for s in sentences] == [["a", "b"], ["c"]]
    assert [s.document for s in sentences] == [0, 0]  # a file without -DOCSTART- is one document
    assert sentences[1].line_numbers == [4]
    words = _write(tmp_path, "-DOCSTART-\n\nx\ny\n\nz\n", name="words.txt")
    sentences = conll.read_conll(words, labelled=False)
    assert [s.words for s in sentences] == [["x", "y"], ["z"]]
    assert all(s.tags is None and s.iob2_tags is None for s in sentences)
    assert conll.label_list(sentences) == ["O"]
    # labelled=True refuses the one-column file at its first line
    message = _error(words)
    assert "%s:1:" % words in message and "1 column" in message


def test_iob1_file_gives_the_iob2_tags(tmp_path):
    iob1 = conll.read_conll(_write(tmp_path, IOB1_FILE, name="iob1.txt"))
    iob2 = conll.read_conll(_write(tmp_path, IOB2_FILE, name="iob2.txt"))
    assert [s.words for s in iob1] == [s.words for s in iob2]
    assert [s.tags for s in iob1] != [s.tags for s in iob2]  # the file's own tags are kept
    assert iob1[0].tags[0] == "I-ORG"
    assert [s.iob2_tags for s in iob1] == [s.tags for s in iob2]
    assert [s.iob2_tags for s in iob2] == [s.tags for s in iob2]
    assert conll.label_list(iob1) == conll.label_list(iob2)


@pytest.mark.parametrize("tags, expected", [
    (["I-PER", "I-PER", "O", "I-LOC"], ["B-PER", "I-PER", "O", "B-LOC"]),  # I- after O
    (["O", "I-PER"], ["O", "B-PER"]),
    (["I-PER", "B-PER", "I-PER"], ["B-PER", "B-PER", "I-PER"]),  # B- between two PER chunks
    (["I-PER", "I-LOC"], ["B-PER", "B-LOC"]),  # a type change starts a chunk
    (["B-PER", "I-LOC", "I-LOC"], ["B-PER", "B-LOC", "I-LOC"]),
    (["B-PER", "I-PER", "B-PER", "O"], ["B-PER", "I-PER", "B-PER", "O"]),  # IOB2 unchanged
    ([], []),
])
def test_to_iob2_cases(tags, expected):
    assert conll.to_iob2(tags) == expected
    assert conll.to_iob2(expected) == expected  # idempotent


def _chunks(tags):
    """(start, end, type) of the IOB2 chunks."""
    chunks, start, kind = [], None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, k = conll.split_tag(tag)
        if start is not None and (prefix != "I" or k != kind):
            chunks.append((start, i, kind))
            start = None
        if prefix == "B":
            start, kind = i, k
    return chunks


def _to_iob1(iob2):
    out = []
    for i, tag in enumerate(iob2):
        prefix, kind = conll.split_tag(tag)
        if prefix == "B" and not (i > 0 and conll.split_tag(iob2[i - 1])[1] == kind):
            tag = "I-" + kind
        out.append(tag)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]), max_size=12))
def test_iob1_of_random_iob2_tags_converts_back(raw):
    iob2 = conll.to_iob2(raw)  # any sequence -> valid IOB2 (no I- opening a chunk)
    for i, tag in enumerate(iob2):
        if tag.startswith("I-"):
            assert i > 0 and conll.split_tag(iob2[i - 1])[1] == tag[2:]
    iob1 = _to_iob1(iob2)
    assert conll.to_iob2(iob1) == iob2
    assert _chunks(conll.to_iob2(iob1)) == _chunks(iob2)


@pytest.mark.parametrize("tag", ["X-PER", "B-", "I-", "B", "PER", "o", "B_PER"])
def test_bad_tag_names_its_line(tmp_path, tag):
    path = _write(tmp_path, "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nx NN I-NP %s\n" % tag)
    message = _error(path)
    assert message.startswith("%s:4:" % path) and repr(tag) in message
    conll.check_tag("B-ORG", "here")
    with pytest.raises(NerDataError, match="^here: "):
        conll.check_tag(tag, "here")


def test_column_count_error(tmp_path):
    path = _write(tmp_path, "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n\nrejects VBZ O\n")
    message = _error(path)
    assert message.startswith("%s:5:" % path)
    assert "3 columns" in message and "4" in message


def test_empty_and_docstart_only_files(tmp_path):
    for name, text in [("empty.txt", ""), ("blank.txt", "\n\n  \n"),
                       ("docstart.txt", "-DOCSTART- -X- -X- O\n\n-DOCSTART- -X- -X- O\n")]:
        path = _write(tmp_path, text, name=name)
        message = _error(path)
        assert message.startswith(path) and "no sentence" in message
    missing = str(tmp_path / "missing.txt")
    assert _error(missing).startswith(missing)


def test_not_utf8_names_its_line(tmp_path):
    path = _write(tmp_path, b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nM\xfcnchen NNP I-NP O\n",
                  binary=True)
    message = _error(path)
    assert message.startswith("%s:4:" % path) and "UTF-8" in message
    # a BOM is not an error, nor part of the first word
    bom = _write(tmp_path, b"\xef\xbb\xbfa B-PER\nb O\n", name="bom.txt", binary=True)
    assert conll.read_conll(bom)[0].words == ["a", "b"]


def test_label_list_order():
    sentence = conll.Sentence(words=["a", "b", "c", "d"], tags=["B-PER", "O", "B-LOC", "B-ORG"],
                              lines=[""] * 4, line_numbers=[1, 2, 3, 4], document=0, path="p")
    other = conll.Sentence(words=["e"], tags=["I-MISC"], lines=[""], line_numbers=[6],
                           document=0, path="p")
    assert conll.label_list([sentence, other]) == [
        "O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert conll.label_list([sentence]) == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG",
                                            "B-PER", "I-PER"]


def test_check_labels(tmp_path):
    train = conll.read_conll(_write(tmp_path, IOB2_FILE, name="train.txt"))
    labels = conll.label_list(train)
    conll.check_labels(train, labels, "--train_file")
    # IOB1 tags are checked after IOB2: I-PER opening a chunk is B-PER, in the set
    conll.check_labels(conll.read_conll(_write(tmp_path, IOB1_FILE, name="iob1.txt")), labels,
                       "--train_file")
    dev_path = _write(tmp_path, "a NN O O\nb NN O I-PER\n\nc NN O B-EVENT\nd NN O O\n",
                      name="dev.txt")
    dev = conll.read_conll(dev_path)
    with pytest.raises(NerDataError) as info:
        conll.check_labels(dev, labels, "--train_file")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("%s:4:" % dev_path) and "B-EVENT" in message
    assert "--train_file" in message


def test_prediction_lines_round_trip(tmp_path):
    path = _write(tmp_path, IOB2_FILE)
    sentences = conll.read_conll(path)
    rng = random.Random(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    predictions = [[rng.choice(tags) for _ in s.words] for s in sentences]
    lines = list(conll.prediction_lines(sentences, predictions))
    assert lines[0] == "-DOCSTART- -X- -X- O O\n" and lines[1] == "\n"
    assert lines[2] == "EU NNP B-NP B-ORG %s\n" % predictions[0][0]
    out = str(tmp_path / "predictions.txt")
    conll.write_predictions(out, sentences, predictions)
    with open(out, encoding="utf-8") as f:
        assert f.readlines() == lines
    again = conll.read_conll(out)
    assert [s.words for s in again] == [s.words for s in sentences]
    assert [s.tags for s in again] == predictions
    assert [s.document for s in again] == [s.document for s in sentences]
    # the gold column (the file's own tags) is kept, just before the predictions
    assert [[line.split()[-2] for line in s.lines] for s in again] == \
        [s.tags for s in sentences]
    assert all(s.starts_document == "-DOCSTART- -X- -X- O O"
               for s in again if s.starts_document)
    with pytest.raises(ValueError, match="1 predictions for 5 words"):
        list(conll.prediction_lines(sentences, [["O"]] + predictions[1:]))


def test_prediction_lines_of_unlabelled_file(tmp_path):
    path = _write(tmp_path, "-DOCSTART-\n\nx\ny\n\nz\n")
    sentences = conll.read_conll(path, labelled=False)
    out = str(tmp_path / "p.txt")
    conll.write_predictions(out, sentences, [["B-PER", "I-PER"], ["O"]])
    with open(out, encoding="utf-8") as f:
        assert f.read() == "-DOCSTART- O\n\nx B-PER\ny I-PER\n\nz O\n\n"


def test_real_train_file():
    sentences = conll.read_conll(os.path.join(paths.DATA, "conll2003", "train.txt"))
    assert len(sentences) == 14041
    assert len(conll.documents(sentences)) == 946
    assert sum(len(s.words) for s in sentences) == 203621
    assert all(conll.to_iob2(s.tags) == s.tags for s in sentences)  # the file is IOB2
    assert conll.label_list(sentences) == [
        "O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert sentences[0].words[:3] == ["EU", "rejects", "German"]
    assert sentences[0].line_numbers[0] == 3
