"""The compiled engine of FastFullTokenizer (data/tokenization/_fast_wordpiece.c) against FullTokenizer.

The engine tokenizes plain-ASCII lines itself and runs WordPiece on any basic
token; every test compares it with the faithful path: the golden records, a
slice of the pre-training corpus, edge lines (empty, punctuation only,
200/201-character words, ``##`` in the text, every ASCII character, controls
that join words), edge vocabularies ([UNK] only, duplicate lines, blank and
``##`` lines, an entry longer than a word may be), hypothesis-drawn ASCII and
Unicode text, and small vocabularies with multi-byte pieces (UTF-8 character
boundaries). The pure-Python engine (``use_extension=False``) is checked on
the same inputs.
"""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data.tokenization import special_tokens
from data.tokenization import wordpiece as tokenization
from tests import paths

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CORPUS = os.path.join(paths.DATA, "pretrain", "derived_pretrain_corpus.txt")
GOLDEN_FILES = {True: "uncased_lower_true.jsonl", False: "cased_lower_false.jsonl"}
ENGINES = {"c": True, "python": False}

EDGE_LINES = [
    "", " ", "\t\n\r ", ".", "!!!", "...,;:", "(1998).", "##", "a##b", "##ing", "un##aff",
    "[UNK]", "[CLS] [SEP]", "x" * 200, "x" * 201, "X" * 201, "a" * 199 + ".", "ab" * 150,
    "unaffable", "UNAFFABLE running", "ab\x01cd", "ab\x0bcd", "ab\x7fcd", "\x00", "a\x00b",
    "\x1c\x1d\x1e\x1fsep", "Hello\nWorld\r\nagain\ttab", "".join(map(chr, range(128))),
    "".join(map(chr, range(127, -1, -1))), "Mr. O'Neil's \"quote\" -- 3.14 $5 50% a_b ~`|\\",
    b"bytes line, ASCII", b"caf\xc3\xa9 not ASCII", b"\xff\xfe invalid", b"",
    "caf\u00e9", "a\ud800b", "\ud800",
]


def _faithful(full, lines):
    tokens = [full.tokenize(line) for line in lines]
    return tokens, [full.convert_tokens_to_ids(t) for t in tokens]


def _write_vocab(tmp_path, entries, name="vocab.txt"):
    path = tmp_path / name
    path.write_text("\n".join(entries) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def full(request):
    return tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=request.param)


@pytest.fixture(params=sorted(ENGINES))
def engine(request):
    return request.param


def _fast(vocab_file, lower, engine):
    fast = tokenization.FastFullTokenizer(vocab_file, do_lower_case=lower,
                                          use_extension=ENGINES[engine])
    assert fast.engine == engine
    return fast


def test_extension_is_built_and_default():
    """`pip install -e .` builds it; a default FastFullTokenizer runs it."""
    from data.tokenization import _fast_wordpiece  # noqa: F401

    assert tokenization.ENGINE == "C extension data.tokenization._fast_wordpiece"
    assert tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB).engine == "c"


def test_golden_records(full, engine):
    lower = full.do_lower_case
    with open(os.path.join(paths.GOLDEN, "tokenization", GOLDEN_FILES[lower]),
              encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    fast = _fast(paths.GOLDEN_VOCAB, lower, engine)
    texts = [r["text"] for r in records]
    assert fast.tokenize_lines(texts) == [r["wordpiece_tokens"] for r in records]
    assert fast.convert_lines_to_ids(texts) == [r["ids"] for r in records]
    assert [fast.tokenize_to_ids(t) for t in texts] == [r["ids"] for r in records]


def test_corpus_slice(full, engine):
    with open(CORPUS, "rb") as f:
        raw = f.read().split(b"\n")[5000:6500]
    texts = [tokenization.convert_to_unicode(line) for line in raw]
    want_tokens, want_ids = _faithful(full, texts)
    fast = _fast(paths.GOLDEN_VOCAB, full.do_lower_case, engine)
    assert fast.convert_lines_to_ids(texts) == want_ids
    assert fast.tokenize_lines(raw) == want_tokens  # bytes in


def test_edge_lines(full, engine):
    want_tokens, want_ids = _faithful(full, EDGE_LINES)
    fast = _fast(paths.GOLDEN_VOCAB, full.do_lower_case, engine)
    assert fast.tokenize_lines(EDGE_LINES) == want_tokens
    assert fast.convert_lines_to_ids(EDGE_LINES) == want_ids
    assert [fast.tokenize(line) for line in EDGE_LINES] == want_tokens
    assert [fast.tokenize_to_ids(line) for line in EDGE_LINES] == want_ids


def test_word_length_limit(full, engine):
    """A word of 200 characters is split; 201 is [UNK] (ASCII and non-ASCII)."""
    fast = _fast(paths.GOLDEN_VOCAB, full.do_lower_case, engine)
    for word in ("ab" * 100, "ab" * 100 + "a", "\u00e9" * 200, "\u00e9" * 201,
                 "a" * 199 + "\u00e9", "a" * 200 + "\u00e9"):
        want = full.tokenize(word)
        assert fast.tokenize(word) == want
        if len(word) > 200:
            assert want == [special_tokens.UNK]
    assert fast.tokenize("ab" * 100 + "a") == [special_tokens.UNK]
    assert fast.tokenize("ab" * 100) != [special_tokens.UNK]


def test_engine_rows_and_rest():
    """ASCII str and bytes lines come back from the engine; the others are left to Python."""
    from data.tokenization import _fast_wordpiece

    vocab = tokenization.load_vocab(paths.GOLDEN_VOCAB)
    eng = _fast_wordpiece.Engine(vocab, vocab[special_tokens.UNK], 200, True)
    lines = ["Hello, World!", b"Hello, World!", "caf\u00e9", b"caf\xc3\xa9", 7, bytearray(b"x")]
    rows, rest = eng.encode_lines(lines, True)
    assert rows[:2] == [["hello", ",", "world", "!"]] * 2
    assert rows[2:] == [None] * 4 and rest == [2, 3, 4, 5]
    rows, rest = eng.encode_lines(lines[:2], False)
    assert rows == [[vocab[t] for t in ["hello", ",", "world", "!"]]] * 2 and rest == []
    assert eng.encode_line(b"Hello, World!", True) == ["hello", ",", "world", "!"]
    assert eng.encode_line("caf\u00e9") is None and eng.encode_line(7) is None

    class Text(str):
        pass

    assert eng.encode_line(Text("Hello, World!"), True) == ["hello", ",", "world", "!"]
    assert eng.encode_token("unaffable") == [vocab[t] for t in ["una", "##ffa", "##ble"]]
    assert eng.encode_token("\ud800") == [vocab[special_tokens.UNK]]
    with pytest.raises(TypeError):
        eng.encode_token(b"bytes")
    with pytest.raises(TypeError):
        _fast_wordpiece.Engine({"[UNK]": "0"}, 0, 200, True)
    with pytest.raises(ValueError):
        _fast_wordpiece.Engine({"[UNK]": 0}, 5, 200, True)


def test_words_without_tokens_keep_batch_alignment(engine):
    """A word of only Mn marks has no basic tokens when lower-casing (regression).

    Such a word, first among a batch's unseen non-ASCII words (set order), once
    shifted the ids of the words after it.
    """
    full = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    for mark in ("\u0300", "\u0301", "\u0322", "\u0308\u0301"):
        for word in ("\u00e9t\u00e9", "caf\u00e9", "na\u00efve", "\u00fcber", "r\u00e9sum\u00e9"):
            line = "%s %s %s" % (mark, word, mark)
            fast = _fast(paths.GOLDEN_VOCAB, True, engine)  # new instance: every word unseen
            assert fast.convert_lines_to_ids([line]) == [
                full.convert_tokens_to_ids(full.tokenize(line))], line


def test_non_text_line_raises_as_before(engine):
    fast = _fast(paths.GOLDEN_VOCAB, True, engine)
    with pytest.raises(ValueError, match="Unsupported string type"):
        fast.convert_lines_to_ids(["fine", 7])


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
def test_edge_vocabularies(tmp_path, engine, lower):
    texts = EDGE_LINES + ["the cat sat", "The CAT sat!", "##x ##", "aab abab", "x" * 201]
    vocabs = {
        "unk_only": ["[UNK]"],
        # Duplicates: load_vocab keeps the last line's id; a blank line and "##" are entries.
        "duplicates": ["[PAD]", "[UNK]", "the", "cat", "the", "", "##", "##a", "a", "##a", "x",
                       "##x", "[UNK]", ".", "!"],
        # An entry longer than a word may be: the word itself is still [UNK].
        "long_entry": ["[UNK]", "x" * 201, "x" * 200, "##x", "a", "##b", "ab", "##ab", "#"],
        "no_suffixes": ["[UNK]", "the", "cat", "sat", "a", "b", "x", "."],
    }
    for name, entries in vocabs.items():
        vocab_file = _write_vocab(tmp_path, entries, name + ".txt")
        full = tokenization.FullTokenizer(vocab_file, do_lower_case=lower)
        fast = _fast(vocab_file, lower, engine)
        want_tokens, want_ids = _faithful(full, texts)
        assert fast.tokenize_lines(texts) == want_tokens, name
        assert fast.convert_lines_to_ids(texts) == want_ids, name
        assert [fast.tokenize_to_ids(t) for t in texts] == want_ids, name
    dup = tokenization.FastFullTokenizer(str(tmp_path / "duplicates.txt"), use_extension=True)
    assert dup.tokenize_to_ids("the a a") == [4, 8, 8]
    assert dup.tokenize_to_ids("aa") == [8, 9]


# Hypothesis: ASCII text (every character, controls included) and mixed text
# over the golden vocab, through the batch API and line by line.
ASCII_TEXT = st.text(st.characters(max_codepoint=0x7F), max_size=60)
WORDY_TEXT = st.lists(st.sampled_from(["the", "Running", "unaffable", "##", "[UNK]", "x" * 201,
                                       "caf\u00e9", "\u4e2d", " ", ".", "\t", "\x00", "\x0b",
                                       "aB", "ing", "##ing", "'s", "\u00a0"]),
                      max_size=12).map("".join)
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
LINES = st.lists(st.one_of(ASCII_TEXT, WORDY_TEXT, ANY_TEXT,
                           ASCII_TEXT.map(lambda t: t.encode("ascii"))), max_size=10)
HOSTS = {lower: tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=lower)
         for lower in (True, False)}
FASTS = {(lower, engine): tokenization.FastFullTokenizer(
    paths.GOLDEN_VOCAB, do_lower_case=lower, use_extension=ENGINES[engine])
    for lower in (True, False) for engine in ENGINES}


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
@settings(max_examples=250, **SETTINGS)
@given(lines=LINES)
def test_lines_agree(lower, engine, lines):
    want_tokens, want_ids = _faithful(HOSTS[lower], lines)
    fast = FASTS[lower, engine]
    assert fast.tokenize_lines(lines) == want_tokens
    assert fast.convert_lines_to_ids(lines) == want_ids
    assert [fast.tokenize_to_ids(line) for line in lines] == want_ids


# Small vocabularies over an alphabet of 1- to 4-byte UTF-8 characters: the
# engine's WordPiece must cut pieces on character boundaries only.
_ALPHABET = "a\u00e9\u4e2d\U0001F600b"
_PIECE = st.text(st.sampled_from(_ALPHABET), min_size=1, max_size=4)
_TOKEN = st.text(st.sampled_from(_ALPHABET), min_size=1, max_size=12)


@settings(max_examples=60, **SETTINGS)
@given(starts=st.lists(_PIECE, max_size=10), suffixes=st.lists(_PIECE, max_size=10),
       tokens=st.lists(_TOKEN, min_size=1, max_size=10))
def test_wordpiece_on_multibyte_tokens(starts, suffixes, tokens):
    from data.tokenization import _fast_wordpiece

    entries = ["[UNK]"] + starts + ["##" + s for s in suffixes] + starts[:2]  # duplicates too
    vocab = {}
    for index, token in enumerate(entries):
        vocab[token] = index  # load_vocab's rule: the last line wins
    wordpiece = tokenization.WordpieceTokenizer(vocab)
    eng = _fast_wordpiece.Engine(vocab, vocab["[UNK]"], 200, True)
    for token in tokens:
        assert eng.encode_token(token) == [vocab[p] for p in wordpiece.tokenize_word(token)]
