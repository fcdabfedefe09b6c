"""The host tokenizers against the original's outputs (golden README section 1)."""

import json
import os

import pytest

from data.tokenization import wordpiece as tokenization
from tests import paths

GOLDEN_FILES = {True: "uncased_lower_true.jsonl", False: "cased_lower_false.jsonl"}


def _records(lower):
    with open(os.path.join(paths.GOLDEN, "tokenization", GOLDEN_FILES[lower]), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def golden(request):
    lower = request.param
    return lower, _records(lower)


def test_golden_record_count(golden):
    _, records = golden
    assert len(records) == 293


def test_basic_tokenizer_matches_golden(golden):
    lower, records = golden
    basic = tokenization.BasicTokenizer(do_lower_case=lower)
    bad = [r["source"] for r in records if basic.tokenize(r["text"]) != r["basic_tokens"]]
    assert bad == []


def test_full_tokenizer_matches_golden(golden):
    lower, records = golden
    tok = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=lower)
    for r in records:
        tokens = tok.tokenize(r["text"])
        assert tokens == r["wordpiece_tokens"], r["source"]
        assert tok.convert_tokens_to_ids(tokens) == r["ids"], r["source"]
        assert tok.convert_ids_to_tokens(r["ids"]) == r["wordpiece_tokens"]


def test_fast_tokenizer_matches_golden(golden):
    lower, records = golden
    tok = tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=lower)
    for _ in range(2):  # second pass is served from the word cache
        for r in records:
            assert tok.tokenize(r["text"]) == r["wordpiece_tokens"], r["source"]
            assert tok.tokenize_to_ids(r["text"]) == r["ids"], r["source"]


def test_bytes_are_decoded_with_errors_ignored():
    tok = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    fast = tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    raw = b"hello \xff\xfeworld caf\xc3\xa9"
    assert tok.tokenize(raw) == ["hello", "world", "cafe"]
    assert fast.tokenize(raw) == ["hello", "world", "cafe"]


def test_wordpiece_greedy_and_unk():
    vocab = {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "runn": 4, "##ing": 5}
    wp = tokenization.WordpieceTokenizer(vocab, max_input_chars_per_word=10)
    assert wp.tokenize("unaffable running") == ["un", "##aff", "##able", "runn", "##ing"]
    assert wp.tokenize("unaffablex") == ["[UNK]"]
    assert wp.tokenize("a" * 11) == ["[UNK]"]


def test_missing_vocab_names_file(tmp_path):
    path = str(tmp_path / "nope.txt")
    with pytest.raises(tokenization.VocabError, match="nope.txt"):
        tokenization.FullTokenizer(path)


def test_empty_vocab_names_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    with pytest.raises(tokenization.VocabError, match="empty.txt.*empty"):
        tokenization.load_vocab(str(path))


def test_vocab_without_unk(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("[PAD]\n[CLS]\nhello\n", encoding="utf-8")
    with pytest.raises(tokenization.VocabError, match=r"v.txt has no \[UNK\]"):
        tokenization.load_vocab(str(path))


def test_vocab_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"[PAD]\n[UNK]\nca\xfffe\n")
    with pytest.raises(tokenization.VocabError, match="bad.txt, line 3"):
        tokenization.load_vocab(str(path))


def test_vocab_indices_follow_lines():
    vocab = tokenization.load_vocab(paths.GOLDEN_VOCAB)
    assert len(vocab) == 30522
    assert vocab["[PAD]"] == 0 and vocab["[UNK]"] == 100 and vocab["[MASK]"] == 103
