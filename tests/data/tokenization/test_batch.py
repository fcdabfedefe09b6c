"""The batch API of FastFullTokenizer (tokenize_lines / convert_lines_to_ids) against FullTokenizer.

Each batch must equal the faithful tokenizer applied line by line: on the
golden records, on a slice of the real pre-training corpus, and on lines made
to hit the batch machinery's own edges (NUL, the line separator of a batch;
newlines and other whitespace inside a line; the ASCII controls cleaning
deletes; bytes; empty lines; a cache smaller than the batch).
"""

import json
import os

import pytest

from data.tokenization import wordpiece as tokenization
from tests import paths

CORPUS = os.path.join(paths.DATA, "pretrain", "derived_pretrain_corpus.txt")
GOLDEN_FILES = {True: "uncased_lower_true.jsonl", False: "cased_lower_false.jsonl"}

EDGE_LINES = [
    "", " ", "\x00", "a\x00b", "Hello\nWorld", "two\r\nlines\tand\x0btab\x0cff",
    "\x1c\x1d\x1e\x1fsep", "ctrl\x01\x7fchars", "\u2028para\u2029graph", "\x85next",
    "caf\u00e9 CAF\u00c9 na\u00efve", "\u039f\u0394\u039f\u03a3 \u03a3\u03a3", "\u0130stanbul",
    "\u4e2d\u6587abc\u4e2d", "unaffable running [UNK] ##ing", "x" * 200, "x" * 201,
    "\u00e9" * 201, "\ufffd\ufeff\u200d", b"caf\xc3\xa9 \xff\xfe bytes", b"", "(1998).",
    "Mr. O'Neil's \"quote\" -- 3.14 $5 50% a_b",
]


def _faithful(full, lines):
    return ([full.tokenize(line) for line in lines],
            [full.convert_tokens_to_ids(full.tokenize(line)) for line in lines])


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def tokenizers(request):
    lower = request.param
    return (lower, tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=lower))


def _fast(lower, **kwargs):
    return tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=lower, **kwargs)


def test_golden_records_in_one_batch(tokenizers):
    lower, full = tokenizers
    with open(os.path.join(paths.GOLDEN, "tokenization", GOLDEN_FILES[lower]),
              encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    fast = _fast(lower)
    for _ in range(2):  # cold, then served from the caches
        assert fast.tokenize_lines([r["text"] for r in records]) == [
            r["wordpiece_tokens"] for r in records]
        assert fast.convert_lines_to_ids([r["text"] for r in records]) == [
            r["ids"] for r in records]


def test_corpus_slice_in_one_batch(tokenizers):
    lower, full = tokenizers
    with open(CORPUS, "rb") as f:
        lines = f.read().split(b"\n")[:1500]
    texts = [tokenization.convert_to_unicode(line) for line in lines]
    want_tokens, want_ids = _faithful(full, texts)
    assert _fast(lower).convert_lines_to_ids(texts) == want_ids
    assert _fast(lower).tokenize_lines(lines) == want_tokens  # bytes in


def test_edge_lines(tokenizers):
    lower, full = tokenizers
    want_tokens, want_ids = _faithful(full, EDGE_LINES)
    fast = _fast(lower)
    assert fast.convert_lines_to_ids(EDGE_LINES) == want_ids
    assert fast.tokenize_lines(EDGE_LINES) == want_tokens
    # Every line alone, and the batch reversed (other cache states, other neighbours).
    assert [fast.convert_lines_to_ids([line])[0] for line in EDGE_LINES] == want_ids
    assert _fast(lower).convert_lines_to_ids(EDGE_LINES[::-1]) == want_ids[::-1]
    # The per-line API on the caches the batch filled.
    assert [fast.tokenize_to_ids(line) for line in EDGE_LINES] == want_ids


def test_batch_and_per_line_share_caches(tokenizers):
    lower, full = tokenizers
    lines = ["The quick brown fox.", "jumps over the lazy dog!", "The quick brown fox."]
    _, want_ids = _faithful(full, lines)
    fast = _fast(lower)
    assert [fast.tokenize_to_ids(line) for line in lines[:1]] == want_ids[:1]
    assert fast.convert_lines_to_ids(lines) == want_ids
    assert fast.tokenize(lines[1]) == full.tokenize(lines[1])


def test_cache_smaller_than_the_batch(tokenizers):
    lower, full = tokenizers
    with open(CORPUS, "rb") as f:
        lines = [tokenization.convert_to_unicode(x) for x in f.read().split(b"\n")[:300]]
    _, want_ids = _faithful(full, lines)
    fast = _fast(lower, cache_size=50)
    assert fast.convert_lines_to_ids(lines[:150]) == want_ids[:150]
    assert fast.convert_lines_to_ids(lines) == want_ids
    assert [fast.tokenize_to_ids(line) for line in lines] == want_ids


def test_empty_batch_and_iterables():
    fast = _fast(True)
    assert fast.convert_lines_to_ids([]) == []
    assert fast.tokenize_lines(iter(())) == []
    assert fast.convert_lines_to_ids(line for line in ["hello world", "hi"]) == [
        fast.tokenize_to_ids("hello world"), fast.tokenize_to_ids("hi")]


def test_gc_state_is_restored():
    import gc

    fast = _fast(True)
    assert gc.isenabled()
    fast.convert_lines_to_ids(["a b c"])
    assert gc.isenabled()
    gc.disable()
    try:
        fast.convert_lines_to_ids(["a b c"])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_vocab_loaded_as_the_original(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("[PAD]\r\n[UNK]\n caf\u00e9 \nab\nab\n\n##x\n".encode("utf-8"))
    fast = tokenization.FastFullTokenizer(str(path))
    assert fast.vocab == tokenization.load_vocab(str(path))
    assert list(fast.vocab.items()) == list(tokenization.load_vocab(str(path)).items())
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"[UNK]\n\xff\n")
    with pytest.raises(tokenization.VocabError, match="bad.txt, line 2"):
        tokenization.FastFullTokenizer(str(bad))
    with pytest.raises(tokenization.VocabError, match="no such file"):
        tokenization.FastFullTokenizer(str(tmp_path / "missing.txt"))
