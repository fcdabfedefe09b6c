"""data/pretraining/corpus.py: input files read line for line as the original's GFile loop
(\\r dropped, \\n-only lines, documents continuing across files), glob expansion, clear
errors, and the split into worker runs at document boundaries."""

import os

import pytest

from data.pretraining import corpus as C
from data.tokenization.wordpiece import FastFullTokenizer
from tests import paths


@pytest.fixture(scope="module")
def tokenizer():
    return FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)


def _write(path, data: bytes):
    path.write_bytes(data)
    return str(path)


def _docs(corpus, tokenizer):
    return [[" ".join(tokenizer.convert_ids_to_tokens(s)) for s in doc]
            for doc in corpus.documents()]


def test_lines_are_read_like_gfile(tmp_path, tokenizer):
    f = _write(tmp_path / "a.txt",
               b"the cat\r\nsat\x0b on\xe2\x80\xa8the mat\n"  # \x0b and U+2028 stay in the line
               b"\r\n"                                     # \r\n: a blank line
               b"  \xe2\x80\xa8 \n"                         # only whitespace: a blank line too
               b"a\rb\n"                                   # a \r inside a line is dropped
               b"\x00\x01\n"                               # no tokens: no sentence, no boundary
               b"last line\r")                             # no final \n; its \r is dropped
    corpus = C.read_corpus([f], tokenizer)
    assert _docs(corpus, tokenizer) == [["the cat", "sat on the mat"], ["ab", "last line"]]
    assert list(C.iter_lines(f))[4] == "ab\n"


def test_documents_continue_across_files_and_empty_ones_are_dropped(tmp_path, tokenizer):
    a = _write(tmp_path / "a.txt", b"\n\none\ntwo")          # no trailing newline
    b = _write(tmp_path / "b.txt", b"three\n\n\n\nfour\n\r")  # a lone \r at the end is EOF
    c = _write(tmp_path / "c.txt", b"five\n")
    corpus = C.read_corpus([a, b, c], tokenizer)
    assert _docs(corpus, tokenizer) == [["one", "two", "three"], ["four", "five"]]
    assert corpus.num_documents == 2 and corpus.num_sentences == 5
    assert corpus.document_sentence_counts().tolist() == [3, 2]


def test_invalid_utf8_names_the_file_and_line(tmp_path, tokenizer):
    f = _write(tmp_path / "bad.txt", b"fine\n\nstill fine\nbad \xff here\n")
    with pytest.raises(C.CorpusError, match=r"bad.txt, line 4: invalid UTF-8 \(byte 0xff "
                                            r"at column 5\)"):
        C.read_corpus([f], tokenizer)


def test_input_patterns_are_globbed_in_order(tmp_path):
    for name in ("b.txt", "a.txt", ".hidden.txt", "c.md"):
        _write(tmp_path / name, b"x\n")
    (tmp_path / "sub").mkdir()
    pattern = str(tmp_path / "*.txt")
    files = C.expand_input_patterns(pattern + "," + str(tmp_path / "c.md"))
    assert sorted(files[:-1]) == sorted(str(tmp_path / n) for n in ("a.txt", "b.txt",
                                                                    ".hidden.txt"))
    assert files[-1] == str(tmp_path / "c.md")
    with pytest.raises(C.CorpusError, match="nope.txt: no such file"):
        C.expand_input_patterns(str(tmp_path / "nope.txt"))
    with pytest.raises(C.CorpusError, match="matches no file"):
        C.expand_input_patterns(str(tmp_path / "*.csv"))
    with pytest.raises(C.CorpusError, match="is a folder"):
        C.expand_input_patterns(str(tmp_path / "sub"))
    with pytest.raises(C.CorpusError, match="empty entry"):
        C.expand_input_patterns(pattern + ",")


def test_split_at_documents_keeps_every_document_whole(tmp_path, tokenizer):
    lines = []
    for d in range(40):
        lines += ["doc %d sentence %d" % (d, s) for s in range(d % 5 + 1)] + [""]
    text = ("\n".join(lines)).encode()
    cut = len(text) // 3
    a = _write(tmp_path / "a.txt", text[:cut])  # the first file ends mid-document
    b = _write(tmp_path / "b.txt", text[cut:])
    whole = _docs(C.read_corpus([a, b], tokenizer), tokenizer)
    for parts in (1, 2, 3, 7):
        runs = C.split_at_documents([a, b], parts)
        assert 1 <= len(runs) <= parts
        pieces = [_docs(C.read_corpus(run, tokenizer), tokenizer) for run in runs]
        assert [doc for p in pieces for doc in p] == whole
        if parts > 1:
            assert len(runs) > 1 and min(len(p) for p in pieces) > 0
    assert len(C.split_at_documents([_write(tmp_path / "one.txt", b"x\ny\n")], 4)) == 1


def test_corpus_from_documents_drops_empty_pieces():
    corpus = C.Corpus.from_documents([[[1, 2], []], [], [[3]]])
    assert corpus.documents() == [[[1, 2]], [[3]]]
    assert corpus.tokens.dtype.name == "int32" and corpus.num_tokens == 3


def test_real_corpus_counts(tokenizer):
    path = os.path.join(paths.GOLDEN, "inputs", "pretrain_trajectory_corpus.txt")
    corpus = C.read_corpus([path], tokenizer)
    assert corpus.num_documents == 6
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f.read().split("\n")]
    assert corpus.num_sentences == sum(1 for line in lines if tokenizer.tokenize(line))
