"""WordPiece tokenization, character for character as Google's BERT tokenizer.

Two host-side implementations share this module:

* ``FullTokenizer`` / ``BasicTokenizer`` / ``WordpieceTokenizer``: the faithful,
  readable path. Every rule of the original is written once here.
* ``FastFullTokenizer``: the same output, faster. A plain-ASCII line becomes
  basic tokens with one regex pass; other lines are cleaned in one
  ``str.translate`` pass (a lazily filled per-code-point table built from the
  faithful rules) and each distinct word is normalized once; WordPiece runs
  once per distinct basic token, so the per-character Python work is done
  once per type, not per occurrence.

The in-graph (tensorflow-text) path lives in ``data/graph_tokenization.py``.

Rules of the original reproduced here (see ``../shared/golden/README.md``):

* input bytes are decoded as UTF-8 with errors ignored;
* text cleaning drops U+0000, U+FFFD and Cc/Cf characters except tab, newline
  and carriage return; those three and every Zs character become a space;
* CJK ideographs (``_is_chinese_char`` ranges, not kana or hangul) are spaced
  out so each is its own token;
* words are split with ``str.split()`` (so U+2028/U+2029 still split words);
* with ``do_lower_case``: ``str.lower()`` of the word, then NFD, then every Mn
  character is dropped;
* every ASCII non-alphanumeric (33-47, 58-64, 91-96, 123-126) and every
  Unicode P* character is its own token;
* WordPiece is greedy longest-match-first with ``##`` continuation pieces; a
  word longer than ``max_input_chars_per_word`` characters, or with any piece
  not in the vocab, becomes a single ``[UNK]``.
"""

from __future__ import annotations

import collections
import itertools
import os
import re
import unicodedata
from typing import Dict, Iterable, List, Sequence, Union

from data import special_tokens

TextLike = Union[str, bytes]
_chain = itertools.chain.from_iterable

# ASCII characters the cleaning step deletes (Cc except tab, newline, CR).
_ASCII_DROPPED_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# The basic tokens of cleaned ASCII text: runs of alphanumerics, or one
# punctuation character (every printable ASCII non-alphanumeric); the only
# separators left after cleaning are space, tab, newline and CR.
_ASCII_TOKENS_RE = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9 \t\n\r]")


class VocabError(ValueError):
    """A vocabulary file that cannot be used; the message names the file."""


# --------------------------------------------------------------------------
# Decoding and character classes.
# --------------------------------------------------------------------------


def convert_to_unicode(text: TextLike) -> str:
    """Returns ``text`` as ``str``; bytes are decoded as UTF-8, errors ignored."""
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", "ignore")
    raise ValueError("Unsupported string type: %s" % (type(text),))


def printable_text(text: TextLike) -> str:
    """Returns text suitable for print/logging (``str`` in Python 3)."""
    return convert_to_unicode(text)


def _is_whitespace(char: str) -> bool:
    """Space, tab, newline, carriage return and every Zs character."""
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    """Cc and Cf characters, except tab, newline and carriage return."""
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char: str) -> bool:
    """ASCII non-alphanumerics (33-47, 58-64, 91-96, 123-126) and Unicode P*."""
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


# The CJK Unified Ideographs blocks and extensions A-E plus the compatibility
# ideographs, exactly the ranges of the original's _is_chinese_char.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_chinese_char(cp: int) -> bool:
    """Whether code point ``cp`` is a CJK ideograph (not kana, not hangul)."""
    for lo, hi in _CJK_RANGES:
        if lo <= cp <= hi:
            return True
    return False


def whitespace_tokenize(text: str) -> List[str]:
    """Strips and splits on Python whitespace (``str.split()``)."""
    text = text.strip()
    if not text:
        return []
    return text.split()


# --------------------------------------------------------------------------
# Vocabulary.
# --------------------------------------------------------------------------


def load_vocab(vocab_file: str) -> "collections.OrderedDict[str, int]":
    """Loads a vocabulary file (one token per line) into an ordered dict.

    Token ``i`` is line ``i`` stripped of surrounding whitespace, as the
    original reads it; a token listed twice keeps its last index.

    Raises:
      VocabError: the file is missing, empty, not UTF-8, or lacks ``[UNK]``.
    """
    if not os.path.isfile(vocab_file):
        raise VocabError("vocab file %s: no such file" % vocab_file)
    with open(vocab_file, "rb") as f:
        raw = f.read()
    vocab: "collections.OrderedDict[str, int]" = collections.OrderedDict()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for index, line in enumerate(lines):
        try:
            token = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise VocabError(
                "vocab file %s, line %d: not valid UTF-8 (%s)" % (vocab_file, index + 1, e.reason)
            ) from None
        vocab[token.strip()] = index
    if not vocab:
        raise VocabError("vocab file %s is empty" % vocab_file)
    if special_tokens.UNK not in vocab:
        raise VocabError("vocab file %s has no %s token" % (vocab_file, special_tokens.UNK))
    return vocab


def convert_by_vocab(vocab: Dict, items: Iterable) -> List:
    """Maps every item through ``vocab`` (KeyError for an unknown item, as the original)."""
    return [vocab[item] for item in items]


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: str) -> None:
    """Raises if ``do_lower_case`` contradicts the casing of a known Google checkpoint.

    Checks the checkpoint's folder name against Google's released model names,
    as the original does; unknown names are accepted.
    """
    import re

    if not init_checkpoint:
        return
    m = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
    if m is None:
        return
    model_name = m.group(1)
    lower_models = [
        "uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
        "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12",
    ]
    cased_models = [
        "cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16", "multi_cased_L-12_H-768_A-12",
    ]
    if model_name in lower_models and not do_lower_case:
        actual_flag, case_name, opposite_flag = "False", "lowercased", "True"
    elif model_name in cased_models and do_lower_case:
        actual_flag, case_name, opposite_flag = "True", "cased", "False"
    else:
        return
    raise ValueError(
        "You passed in `--do_lower_case=%s` with `--init_checkpoint=%s`. However, `%s` seems to be "
        "a %s model, so you should pass in `--do_lower_case=%s` so that the fine-tuning matches "
        "how the model was pre-training. If this error is wrong, please just comment out this "
        "check." % (actual_flag, init_checkpoint, model_name, case_name, opposite_flag)
    )


# --------------------------------------------------------------------------
# The faithful path.
# --------------------------------------------------------------------------


class BasicTokenizer:
    """Cleaning, CJK spacing, optional lower-casing/accent stripping, punctuation split."""

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text: TextLike) -> List[str]:
        """Returns the basic tokens of ``text`` (str, or UTF-8 bytes decoded leniently)."""
        text = convert_to_unicode(text)
        text = self._clean_text(text)
        text = self._tokenize_chinese_chars(text)
        split_tokens: List[str] = []
        for token in whitespace_tokenize(text):
            split_tokens.extend(self._normalize_word(token))
        return whitespace_tokenize(" ".join(split_tokens))

    def _normalize_word(self, token: str) -> List[str]:
        """Lower-cases and strips accents (if asked), then splits off punctuation."""
        if self.do_lower_case:
            token = token.lower()
            token = self._run_strip_accents(token)
        return self._run_split_on_punc(token)

    @staticmethod
    def _run_strip_accents(text: str) -> str:
        """NFD, then drops every Mn (non-spacing mark) character."""
        text = unicodedata.normalize("NFD", text)
        return "".join(ch for ch in text if unicodedata.category(ch) != "Mn")

    @staticmethod
    def _run_split_on_punc(text: str) -> List[str]:
        """Splits ``text`` so that every punctuation character is its own piece."""
        output: List[List[str]] = []
        start_new_word = True
        for char in text:
            if _is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    @staticmethod
    def _tokenize_chinese_chars(text: str) -> str:
        """Puts a space on both sides of every CJK ideograph."""
        output = []
        for char in text:
            if _is_chinese_char(ord(char)):
                output.extend((" ", char, " "))
            else:
                output.append(char)
        return "".join(output)

    @staticmethod
    def _clean_text(text: str) -> str:
        """Drops NUL, U+FFFD and controls; maps whitespace characters to a space."""
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece over an already basic-tokenized text."""

    def __init__(self, vocab: Dict[str, int], unk_token: str = special_tokens.UNK,
                 max_input_chars_per_word: int = 200):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text: TextLike) -> List[str]:
        """Splits each whitespace-delimited word of ``text`` into vocab pieces.

        Example: ``"unaffable"`` -> ``["un", "##aff", "##able"]``.
        """
        text = convert_to_unicode(text)
        output_tokens: List[str] = []
        for token in whitespace_tokenize(text):
            output_tokens.extend(self.tokenize_word(token))
        return output_tokens

    def tokenize_word(self, token: str) -> List[str]:
        """The pieces of one word, or ``[unk_token]``."""
        chars = list(token)
        if len(chars) > self.max_input_chars_per_word:
            return [self.unk_token]
        sub_tokens = []
        start = 0
        while start < len(chars):
            end = len(chars)
            cur_substr = None
            while start < end:
                substr = "".join(chars[start:end])
                if start > 0:
                    substr = "##" + substr
                if substr in self.vocab:
                    cur_substr = substr
                    break
                end -= 1
            if cur_substr is None:
                return [self.unk_token]
            sub_tokens.append(cur_substr)
            start = end
        return sub_tokens


class FullTokenizer:
    """Basic tokenization followed by WordPiece: the original's end-to-end tokenizer."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True):
        self.vocab_file = vocab_file
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.do_lower_case = do_lower_case
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text: TextLike) -> List[str]:
        split_tokens: List[str] = []
        for token in self.basic_tokenizer.tokenize(text):
            split_tokens.extend(self.wordpiece_tokenizer.tokenize(token))
        return split_tokens

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
        return convert_by_vocab(self.inv_vocab, ids)


# --------------------------------------------------------------------------
# The fast host path.
# --------------------------------------------------------------------------


class _CleanTable(dict):
    """``str.translate`` table: code point -> replacement, filled on first sight.

    A character is deleted (NUL, U+FFFD, controls), becomes a space (whitespace),
    is spaced out (CJK ideographs), or maps to itself.
    """

    def __missing__(self, cp: int):
        char = chr(cp)
        if cp == 0 or cp == 0xFFFD or _is_control(char):
            value = None
        elif _is_whitespace(char):
            value = " "
        elif _is_chinese_char(cp):
            value = " " + char + " "
        else:
            value = char
        self[cp] = value
        return value


class _TokenCache(dict):
    """basic token -> its WordPiece pieces or ids (``fn``), computed on first sight."""

    def __init__(self, fn, max_size: int):
        super().__init__()
        self._fn = fn
        self._max_size = max_size

    def __missing__(self, token: str):
        if len(self) >= self._max_size:
            self.clear()
        value = self[token] = self._fn(token)
        return value


class _WordCache(dict):
    """cleaned whitespace-delimited word -> its WordPiece pieces or ids, computed on first sight.

    ASCII words are split into basic tokens by regex (lower-cased first if
    asked); their tokens are looked up in this same cache, which is exact
    because an ASCII basic token (an alphanumeric run or one punctuation
    character, already lower-cased) is its own only basic token as a word.
    Other words go through the faithful per-word normalization and a
    separate cache of (non-ASCII) basic tokens.
    """

    def __init__(self, wordpiece_fn, tokenizer: "FastFullTokenizer", max_size: int):
        super().__init__()
        self._wordpiece = wordpiece_fn
        self._lower = tokenizer.do_lower_case
        self._normalize = tokenizer._normalize_word
        self._tokens = _TokenCache(wordpiece_fn, max_size)
        self._max_size = max_size

    def __missing__(self, word: str):
        if len(self) >= self._max_size:
            self.clear()
        if word.isascii():
            text = word.lower() if self._lower else word
            if len(text) == 1 or text.isalnum():
                value = self._wordpiece(text)  # one basic token: the word itself
            else:
                value = list(_chain(map(self.__getitem__, _ASCII_TOKENS_RE.findall(text))))
        else:
            value = list(_chain(map(self._tokens.__getitem__, self._normalize(word))))
        self[word] = value
        return value


class FastFullTokenizer:
    """``FullTokenizer``'s exact output, with the per-character work done in C or once per type.

    Every line is cleaned, split into whitespace-delimited words, and each
    word mapped through a cache (word -> WordPiece ids, or -> pieces for
    ``tokenize``; see ``_WordCache``), the per-line loop running in C:

    * a plain-ASCII line needs no table: the ASCII controls cleaning deletes
      are removed with one regex substitution and the whole line is
      lower-cased at once (plain ASCII; NFD is the identity, there is no Mn,
      CJK or Unicode whitespace); a new word's basic tokens are one
      ``re.findall`` (every printable ASCII non-alphanumeric is punctuation);
    * any other line is cleaned and CJK-spaced in one ``str.translate`` pass
      (a lazily filled per-code-point table built from the faithful
      predicates); a new non-ASCII word goes through the faithful per-word
      pipeline (lower-casing, NFD, accent stripping, punctuation split).

    WordPiece runs once per distinct basic token (greedy longest-match-first
    as the original, with the search bounded by the longest vocab entry).
    Caches hold up to ``cache_size`` entries each and are cleared when full.
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True, cache_size: int = 1 << 20):
        self.vocab_file = vocab_file
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.do_lower_case = do_lower_case
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
        self._max_chars = self.wordpiece_tokenizer.max_input_chars_per_word
        self._table = _CleanTable()
        # WordPiece search tables: continuation pieces without their "##", and
        # the longest entry of each kind (longer candidates cannot match).
        self._suffixes = frozenset(t[2:] for t in self.vocab if t.startswith("##"))
        self._max_start = max(len(t) for t in self.vocab)
        self._max_suffix = max(map(len, self._suffixes), default=0)
        self._word_pieces = _WordCache(self._wordpiece, self, cache_size)  # word -> pieces
        self._word_ids = _WordCache(self._wordpiece_ids, self, cache_size)  # word -> ids

    # -- basic tokenization --------------------------------------------------

    def _normalize_word(self, word: str) -> List[str]:
        """The basic tokens of one cleaned whitespace-delimited word (the faithful rules)."""
        tokens: List[str] = []
        for piece in self.basic_tokenizer._normalize_word(word):
            tokens.extend(whitespace_tokenize(piece))
        return tokens

    def _words(self, text: TextLike) -> List[str]:
        """The cleaned line split on whitespace (ASCII lines already lower-cased if asked)."""
        if not isinstance(text, str):
            text = convert_to_unicode(text)
        if text.isascii():
            if _ASCII_DROPPED_RE.search(text) is not None:
                text = _ASCII_DROPPED_RE.sub("", text)  # deleted before split: \x0b is not a space here
            return (text.lower() if self.do_lower_case else text).split()
        return text.translate(self._table).split()

    # -- WordPiece -------------------------------------------------------------

    def _wordpiece(self, token: str) -> List[str]:
        """``WordpieceTokenizer.tokenize_word(token)``, greedy longest match first.

        Candidates longer than the longest vocab entry of their kind are not
        tried (they cannot match), and continuation candidates are looked up
        without building their ``"##"`` form; the pieces are unchanged.
        """
        n = len(token)
        if n > self._max_chars:
            return [special_tokens.UNK]
        if token in self.vocab:
            return [token]
        table, longest = self.vocab, self._max_start
        sub_tokens = []
        start = 0
        while start < n:
            end = min(n, start + longest)
            while end > start and token[start:end] not in table:
                end -= 1
            if end == start:
                return [special_tokens.UNK]
            sub_tokens.append(token[:end] if start == 0 else "##" + token[start:end])
            start = end
            table, longest = self._suffixes, self._max_suffix
        return sub_tokens

    def _wordpiece_ids(self, token: str) -> List[int]:
        """The ids of ``_wordpiece(token)``."""
        if len(token) <= self._max_chars:
            index = self.vocab.get(token)
            if index is not None:
                return [index]
        vocab = self.vocab
        return [vocab[piece] for piece in self._wordpiece(token)]

    # -- public API --------------------------------------------------------------

    def tokenize(self, text: TextLike) -> List[str]:
        """``FullTokenizer.tokenize(text)``: the WordPiece tokens of a str or UTF-8 bytes."""
        return list(_chain(map(self._word_pieces.__getitem__, self._words(text))))

    def tokenize_to_ids(self, text: TextLike) -> List[int]:
        """``convert_tokens_to_ids(tokenize(text))`` in one cached pass."""
        return list(_chain(map(self._word_ids.__getitem__, self._words(text))))

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
        return convert_by_vocab(self.inv_vocab, ids)
