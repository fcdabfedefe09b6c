"""data/tokenization/vocab_builder: the words are BasicTokenizer's tokens, the layout is Google's,
the size is exact, every character is covered, and bad settings are errors naming the flag."""

import os
import re

import pytest

from data.tokenization import special_tokens, vocab_builder
from data.tokenization.vocab_builder import VocabBuildError
from data.tokenization.wordpiece import BasicTokenizer, FullTokenizer
from tests import paths

CORPUS = os.path.join(paths.DATA, "pretrain", "derived_pretrain_corpus.txt")
SAMPLE = os.path.join(paths.DATA, "pretrain", "sample_text.txt")

# Lines where the ASCII fast path and BasicTokenizer's per-character rules could part ways.
TRICKY = [
    "Hello, World! It's 3.14 -- (ok)?",
    "tab\there\rcr\nnl  two  spaces",
    "controls\x00dropped\x01\x07\x0b\x0cjoined\x1f\x7fhere",  # deleted, not spaces
    "\x1c\x1d\x1e split by str.split but deleted by cleaning",
    "",
    "   ",
    "~`!@#$%^&*()_+-={}[]|\\:;\"'<>,./?",
    "Ünïcödé ÀÉÎÕÜ naïve café résumé",
    "non\u00a0breaking\u2003em\u3000ideographic spaces",
    "zero\u200bwidth\u200dand\ufeffbom",  # Cf: deleted
    "replacement \ufffd char",
    "中文字符和日本語のかな와 한국어",
    "Greek ΣΊΣΥΦΟΣ final sigma ὈΔΥΣΣΕΎΣ",
    "«quotes» „low“ ‘single’ — dash … ellipsis ¿que? ¡si!",
    "combining e\u0301 and lone \u0301 mark",
    "emoji 😀👍🏽 and math ∑∫≤",
    "line\u2028separator\u2029paragraph",
    "İstanbul ß ǅ ﬁ",
]


def _corpus_lines(limit=None):
    with open(CORPUS, encoding="utf-8") as f:
        lines = f.read().split("\n")
    return lines if limit is None else lines[:limit]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_basic_tokens_are_basic_tokenizers_tokens(do_lower_case):
    lines = TRICKY + [line for line in _corpus_lines() if not line.isascii()] + _corpus_lines(3000)
    assert sum(not line.isascii() for line in lines) > 500  # both paths are exercised
    basic = BasicTokenizer(do_lower_case=do_lower_case)
    got = list(vocab_builder.basic_tokens(lines, do_lower_case))
    assert got == [basic.tokenize(line) for line in lines]


def test_layout_is_googles():
    layout = vocab_builder.layout_tokens()
    assert len(layout) == 104
    assert layout[0] == "[PAD]" and layout[1] == "[unused0]" and layout[99] == "[unused98]"
    assert layout[100:] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    with open(os.path.join(paths.DATA, "vocab", "bert-base-uncased-vocab.txt"),
              encoding="utf-8") as f:
        google = f.read().split("\n")
    assert layout == google[:104]
    more = vocab_builder.layout_tokens(num_unused=120, reserved_tokens=["[URL]", "<e>"])
    assert more[:104] == layout and more == google[:125] + ["[URL]", "<e>"]
    none = vocab_builder.layout_tokens(num_unused=0, reserved_tokens=["[URL]"])
    assert none == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[URL]"]
    few = vocab_builder.layout_tokens(num_unused=3)
    assert few.index("[UNK]") == 4 and few[1:4] == ["[unused0]", "[unused1]", "[unused2]"]


@pytest.mark.parametrize("num_unused, reserved, message", [
    (-1, (), "--num_unused=-1"),
    (99, ("[CLS]",), "[CLS] is listed twice"),
    (99, ("[unused5]",), "[unused5] is listed twice"),
    (0, ("a", "a"), "a is listed twice"),
    (99, ("two words",), "'two words' is not a token"),
    (99, ("",), "'' is not a token"),
])
def test_bad_layout_settings(num_unused, reserved, message):
    with pytest.raises(VocabBuildError, match=re.escape(message)):
        vocab_builder.layout_tokens(num_unused, reserved)


def _sample_lines():
    with open(SAMPLE, encoding="utf-8") as f:
        return f.read().split("\n")


@pytest.mark.parametrize("vocab_size", [300, 457, 800])
def test_size_is_exact_and_every_character_is_covered(vocab_size, tmp_path):
    lines = _sample_lines()
    tokens = vocab_builder.learn_vocab(lines, vocab_size)
    assert len(tokens) == vocab_size and len(set(tokens)) == vocab_size
    assert tokens[:104] == vocab_builder.layout_tokens()
    chars = sorted({c for words in vocab_builder.basic_tokens(lines) for w in words for c in w})
    n = len(chars)
    # Characters alone then as continuations, by code point, right after the layout.
    assert tokens[104:104 + 2 * n] == chars + ["##" + c for c in chars]
    # Every word of the text tokenizes without [UNK] in FullTokenizer.
    path = str(tmp_path / "vocab.txt")
    vocab_builder.write_vocab(tokens, path)
    tokenizer = FullTokenizer(path, do_lower_case=True)
    pieces = [p for line in lines for p in tokenizer.tokenize(line)]
    assert len(pieces) > 900 and special_tokens.UNK not in pieces


def test_learned_pieces_follow_frequency():
    # "the" is the most frequent word of the text: among the first words learned (after the
    # layout and the characters), before any rare word.
    lines = _sample_lines()
    tokens = vocab_builder.learn_vocab(lines, 300, num_unused=0)
    words = [t for t in tokens if len(t) > 1 and not t.startswith(("##", "["))]
    assert "the" in words[:3], words[:10]
    small = vocab_builder.learn_vocab(lines, 140, num_unused=0)
    assert "the" in small and "gratitude" not in small


def test_text_with_few_pieces_gives_fewer_tokens():
    learned = vocab_builder.learn_vocab_from_counts(
        vocab_builder.count_words(["aa ab ba", "ab ab"]), 1000, num_unused=0)
    # Layout 5 + characters a, b alone and as ##: 9; the trainer can then only learn whole
    # words and the pieces on the way to them.
    assert learned.requested == 1000 and 9 < len(learned.tokens) < 20
    assert {"aa", "ab", "ba"} <= set(learned.tokens)
    assert (learned.words, learned.distinct_words, learned.characters) == (5, 3, 2)


def test_reserved_token_also_learned_is_kept_once():
    lines = _sample_lines()
    tokens = vocab_builder.learn_vocab(lines, 300, num_unused=0, reserved_tokens=["the", "x",
                                                                                  "[URL]"])
    assert len(tokens) == 300 and len(set(tokens)) == 300
    assert tokens[5:8] == ["the", "x", "[URL]"]


def test_cased_vocab_keeps_case_and_accents():
    lines = ["The Café of Zoë", "the cafe", "THE END"]
    cased = vocab_builder.learn_vocab(lines, 200, do_lower_case=False, num_unused=0)
    uncased = vocab_builder.learn_vocab(lines, 200, do_lower_case=True, num_unused=0)
    assert {"The", "THE", "é", "##é", "ë", "Z"} <= set(cased)
    assert not {"The", "é", "Z", "T"} & set(uncased)
    assert {"the", "cafe", "z"} <= set(uncased)


@pytest.mark.parametrize("vocab_size, message", [
    (104, "--vocab_size=104 is too small: the special, unused and reserved tokens alone take "
          "104 lines"),
    (150, "--vocab_size=150 is too small: the 104 special/unused/reserved tokens and the 51 "
          "characters of the text (each alone and as ##piece) need 206 lines"),
])
def test_vocab_size_too_small(vocab_size, message):
    with pytest.raises(VocabBuildError) as e:
        vocab_builder.learn_vocab(_sample_lines(), vocab_size)
    assert str(e.value) == message


def test_no_words_is_an_error():
    with pytest.raises(VocabBuildError, match="no words"):
        vocab_builder.learn_vocab(["", "  ", "\x00"], 1000)


def test_write_vocab(tmp_path):
    path = tmp_path / "vocab.txt"
    vocab_builder.write_vocab(["[PAD]", "[UNK]", "a", "##b"], str(path))
    assert path.read_text(encoding="utf-8") == "[PAD]\n[UNK]\na\n##b\n"
    for bad in (["ok", " padded"], ["ok", ""], ["a\nb"]):
        with pytest.raises(VocabBuildError, match="cannot be written"):
            vocab_builder.write_vocab(bad, str(path))
    assert path.read_text(encoding="utf-8") == "[PAD]\n[UNK]\na\n##b\n"  # left as it was
    with pytest.raises(OSError, match="does not exist"):
        vocab_builder.write_vocab(["a"], str(tmp_path / "missing" / "vocab.txt"))
    assert sorted(os.listdir(tmp_path)) == ["vocab.txt"]  # no temporary left behind


def test_same_text_same_vocab():
    # HF's trainer numbers its ## pieces in hash-map order unless they are given to it: equally
    # frequent merges then come out in another order, and another set at the cut, run to run.
    lines = _corpus_lines(5000)
    first = vocab_builder.learn_vocab(lines, 2000)
    for _ in range(3):
        assert vocab_builder.learn_vocab(lines, 2000) == first
    # Learned pieces come in the trainer's order: the most frequent merges first.
    learned = first[104 + 2 * len(vocab_builder._characters(vocab_builder.count_words(lines))):]
    assert "the" in learned[:5] and len(learned) > 1000
