"""WordPiece tokenization, character for character as Google's BERT tokenizer.

Two host-side implementations share this module:

* ``FullTokenizer`` / ``BasicTokenizer`` / ``WordpieceTokenizer``: the faithful,
  readable path. Every rule of the original is written once here.
* ``FastFullTokenizer``: the same output, faster. With the compiled engine
  ``data.tokenization._fast_wordpiece`` (built by ``pip install -e .``; optional), every
  plain-ASCII line is cleaned, split and WordPiece-tokenized in C against a
  hash table of the vocab, and WordPiece of any other basic token runs in C
  too. Without it (or with ``use_extension=False``) a plain-ASCII line becomes
  basic tokens with one regex pass. Other lines are cleaned in one
  ``str.translate`` pass (a lazily filled per-code-point table built from the
  faithful rules) and each distinct word is normalized once; WordPiece runs
  once per distinct basic token, so the per-character Python work is done
  once per type, not per occurrence. ``ENGINE`` names the engine in use.

The in-graph (tensorflow-text) path lives in ``data/tokenization/graph.py``.

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
import contextlib
import gc
import itertools
import re
import unicodedata
from typing import Dict, Iterable, List, Optional, Sequence, Union

from bert_common import files
from bert_common.errors import InputError
from data.tokenization import special_tokens

try:  # the compiled engine of FastFullTokenizer; optional (pure Python otherwise)
    from data.tokenization import _fast_wordpiece
except ImportError:  # not built: FastFullTokenizer uses its Python path, same output
    _fast_wordpiece = None

# Which engine a default FastFullTokenizer runs (for logs and benchmarks).
ENGINE = ("C extension data.tokenization._fast_wordpiece" if _fast_wordpiece is not None
          else "pure Python (data.tokenization._fast_wordpiece not built)")

TextLike = Union[str, bytes]
_chain = itertools.chain.from_iterable

# ASCII characters the cleaning step deletes (Cc except tab, newline, CR).
_ASCII_DROPPED_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# The basic tokens of cleaned ASCII text: runs of alphanumerics, or one
# punctuation character (every printable ASCII non-alphanumeric); the only
# separators left after cleaning are space, tab, newline and CR.
_ASCII_TOKENS_RE = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9 \t\n\r]")


class VocabError(InputError):
    """A vocabulary file that cannot be used; the message names the file."""


class MissingTokenError(VocabError, KeyError):
    """A token looked up (``convert_tokens_to_ids``) that the vocab does not hold, e.g. a
    ``[CLS]`` missing from a vocab file; a ``KeyError`` as the original's lookup raises, and a
    ``VocabError`` naming the file and the token (one line in the tools)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


def require_tokens(tokenizer, tokens: Iterable[str]) -> None:
    """``MissingTokenError`` naming the tokenizer's vocab file and the first of ``tokens``
    (e.g. ``[CLS]``, ``[SEP]``, ``[MASK]``) its vocab lacks: the check a tool makes when it
    makes its tokenizer, before any work.

    Args:
      tokenizer: a ``FullTokenizer`` or ``FastFullTokenizer``.
      tokens: the special tokens the caller needs.

    Raises:
      MissingTokenError: the first token the vocab lacks.
    """
    missing = [token for token in tokens if token not in tokenizer.vocab]
    if missing:
        raise MissingTokenError(
            "vocab file %s has no %s token (needed: %s)"
            % (getattr(tokenizer, "vocab_file", "<vocab>"), missing[0], " ".join(tokens)))


def _convert_tokens(tokenizer, tokens: Iterable[str]) -> List[int]:
    """``convert_by_vocab(tokenizer.vocab, tokens)``; a token not in the vocab raises
    ``MissingTokenError`` naming the vocab file (a KeyError, as the original)."""
    try:
        return convert_by_vocab(tokenizer.vocab, tokens)
    except KeyError as e:
        raise MissingTokenError("vocab file %s has no %s token"
                                % (getattr(tokenizer, "vocab_file", "<vocab>"),
                                   e.args[0] if e.args else "?")) from None


# --------------------------------------------------------------------------
# Decoding and character classes.
# --------------------------------------------------------------------------


def convert_to_unicode(text: TextLike) -> str:
    """Returns ``text`` as ``str``; bytes are decoded as UTF-8, errors ignored.

    Args:
      text: a str or bytes.

    Returns:
      The text as ``str``.

    Raises:
      ValueError: neither.
    """
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", "ignore")
    raise ValueError("Unsupported string type: %s" % (type(text),))


def printable_text(text: TextLike) -> str:
    """Returns text suitable for print/logging (``str`` in Python 3).

    Args:
      text: a str or bytes.

    Returns:
      The text as ``str``.
    """
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
    """Strips and splits on Python whitespace (``str.split()``).

    Args:
      text: the text.

    Returns:
      The words (empty for blank text).
    """
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

    Args:
      vocab_file: local path or ``gs://`` URL.

    Returns:
      token -> id, in file order.

    Raises:
      VocabError: the file is missing, empty, not UTF-8, or lacks ``[UNK]``.
    """
    if not files.isfile(vocab_file):
        raise VocabError("vocab file %s: %s" % (vocab_file, "a folder, not a file" if
                                                files.isdir(vocab_file) else "no such file"))
    with files.open(vocab_file, "rb") as f:
        raw = f.read()
    try:
        # UTF-8 never encodes a newline inside a multi-byte character, so decoding the whole
        # file equals decoding each line as the original does.
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        for index, line in enumerate(raw.split(b"\n")):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise VocabError("vocab file %s, line %d: not valid UTF-8 (%s)"
                                 % (vocab_file, index + 1, e.reason)) from None
        raise
    if lines and lines[-1] == "":
        lines.pop()
    vocab: "collections.OrderedDict[str, int]" = collections.OrderedDict(
        zip(map(str.strip, lines), range(len(lines))))
    if not vocab:
        raise VocabError("vocab file %s is empty" % vocab_file)
    if special_tokens.UNK not in vocab:
        raise VocabError("vocab file %s has no %s token" % (vocab_file, special_tokens.UNK))
    return vocab


def convert_by_vocab(vocab: Dict, items: Iterable) -> List:
    """Maps every item through ``vocab`` (KeyError for an unknown item, as the original).

    Args:
      vocab: token -> id, or id -> token.
      items: the keys to look up.

    Returns:
      The values, in order.
    """
    return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab: Dict, tokens: Iterable[str]) -> List[int]:
    """The original module-level ``convert_tokens_to_ids``: each token's id in ``vocab``.

    Args:
      vocab: token -> id (``load_vocab``).
      tokens: the tokens.

    Returns:
      The ids, in order.

    Raises:
      KeyError: a token not in ``vocab`` (as the original).
    """
    return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab: Dict, ids: Iterable[int]) -> List[str]:
    """The original module-level ``convert_ids_to_tokens``: each id's token in ``inv_vocab``.

    Args:
      inv_vocab: id -> token (``{v: k for k, v in vocab.items()}``).
      ids: the ids.

    Returns:
      The tokens, in order.

    Raises:
      KeyError: an id not in ``inv_vocab`` (as the original).
    """
    return convert_by_vocab(inv_vocab, ids)


_LOWER_CASED_MODELS = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                       "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_MODELS = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16", "multi_cased_L-12_H-768_A-12")


def checkpoint_casing(init_checkpoint: str) -> Optional[bool]:
    """``do_lower_case`` of a Google release, told by the folder name in
    ``<folder>/bert_model.ckpt`` as the original's check does; None for other names.

    Args:
      init_checkpoint: a checkpoint path (or None / empty).

    Returns:
      True (an uncased release), False (cased) or None.
    """
    import re

    m = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint or "")
    if m is None:
        return None
    if m.group(1) in _LOWER_CASED_MODELS:
        return True
    if m.group(1) in _CASED_MODELS:
        return False
    return None


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: str) -> None:
    """Raises if ``do_lower_case`` contradicts the casing of a known Google checkpoint.

    Checks the checkpoint's folder name against Google's released model names,
    as the original does; unknown names are accepted.

    Args:
      do_lower_case: the casing the caller tokenizes with.
      init_checkpoint: the checkpoint path (None / empty: nothing to check).

    Raises:
      ValueError: the casing contradicts the release's name.
    """
    casing = checkpoint_casing(init_checkpoint)
    if casing is None or casing == bool(do_lower_case):
        return
    model_name = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint).group(1)
    if casing:
        actual_flag, case_name, opposite_flag = "False", "lowercased", "True"
    else:
        actual_flag, case_name, opposite_flag = "True", "cased", "False"
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
    """Cleaning, CJK spacing, optional lower-casing/accent stripping, punctuation split.

    Args:
      do_lower_case: lower-case and strip accents (uncased models).
    """

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text: TextLike) -> List[str]:
        """Returns the basic tokens of ``text`` (str, or UTF-8 bytes decoded leniently).

        Args:
          text: one line of text.

        Returns:
          The basic tokens, in order.
        """
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
    """Greedy longest-match-first WordPiece over an already basic-tokenized text.

    Args:
      vocab: token -> id (``load_vocab``).
      unk_token: the piece of a word that cannot be split.
      max_input_chars_per_word: longer words become ``unk_token``.
    """

    def __init__(self, vocab: Dict[str, int], unk_token: str = special_tokens.UNK,
                 max_input_chars_per_word: int = 200):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text: TextLike) -> List[str]:
        """Splits each whitespace-delimited word of ``text`` into vocab pieces.

        Example: ``"unaffable"`` -> ``["un", "##aff", "##able"]``.

        Args:
          text: basic-tokenized text (words separated by whitespace).

        Returns:
          The pieces, in order.
        """
        text = convert_to_unicode(text)
        output_tokens: List[str] = []
        for token in whitespace_tokenize(text):
            output_tokens.extend(self.tokenize_word(token))
        return output_tokens

    def tokenize_word(self, token: str) -> List[str]:
        """The pieces of one word, or ``[unk_token]``.

        Args:
          token: one basic token.

        Returns:
          The WordPiece tokens.
        """
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
    """Basic tokenization followed by WordPiece: the original's end-to-end tokenizer.

    Args:
      vocab_file: the model's ``vocab.txt`` (local or ``gs://``).
      do_lower_case: True for uncased models.

    Raises:
      VocabError: as ``load_vocab``.
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True):
        self.vocab_file = vocab_file
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.do_lower_case = do_lower_case
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text: TextLike) -> List[str]:
        """The WordPiece tokens of ``text``.

        Args:
          text: a str, or UTF-8 bytes (decoded with errors ignored).

        Returns:
          The tokens (``["hello", "##s"]``), without ``[CLS]``/``[SEP]``.
        """
        split_tokens: List[str] = []
        for token in self.basic_tokenizer.tokenize(text):
            split_tokens.extend(self.wordpiece_tokenizer.tokenize(token))
        return split_tokens

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        """The vocab ids of ``tokens``.

        Args:
          tokens: vocab tokens.

        Returns:
          The ids.

        Raises:
          MissingTokenError: a token the vocab lacks (a ``KeyError``, as the original).
        """
        return _convert_tokens(self, tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
        """The tokens of vocab ``ids`` (``KeyError`` for an id out of the vocab).

        Args:
          ids: vocab ids.

        Returns:
          The tokens.
        """
        return convert_by_vocab(self.inv_vocab, ids)


# --------------------------------------------------------------------------
# The fast host path.
# --------------------------------------------------------------------------

# The word that separates lines in a batch: NUL, which cleaning deletes, so no
# cleaned line holds it (a raw NUL is deleted before the lines are joined).
_LINE_BREAK = "\x00"
_LINE_JOIN = " \x00 "
# The ASCII characters cleaning deletes, NUL apart (counted separately).
_ASCII_DROPPED_BUT_NUL_RE = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MAX_CODE_POINT = 0x10FFFF


@contextlib.contextmanager
def _gc_paused():
    """Pauses the cyclic garbage collector inside the block (restored after, if it was on).

    A batch allocates many objects at once and no reference cycles; the
    collections those allocations would trigger cost about a sixth of a cold
    pass over a corpus and free nothing.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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


class _WordCache(dict):
    """word -> its WordPiece ids as a str (one character ``chr(id)`` per piece).

    Keys are the cleaned whitespace-delimited words of a line, already
    lower-cased when the tokenizer lower-cases (see ``FastFullTokenizer``); an
    unseen word is resolved on lookup by ``resolve(word) -> str``. The batch
    line marker ``_LINE_BREAK`` maps to ``marker`` (a character no id uses).
    """

    def __init__(self, resolve, marker: str):
        super().__init__()
        self._resolve = resolve
        self._marker = marker

    def __missing__(self, word: str) -> str:
        value = self[word] = self._marker if word == _LINE_BREAK else self._resolve(word)
        return value


class _Slices(dict):
    """(start, n) -> the slices ``[start:end]``, end from the longest allowed down to start + 1.

    The candidate length is bounded by the longest vocab entry of the kind
    looked up there: a word-initial piece at 0, a ``##`` piece after.
    """

    def __init__(self, longest_start: int, longest_suffix: int):
        super().__init__()
        self._longest = (longest_start, longest_suffix)

    def __missing__(self, key):
        start, n = key
        top = min(n, start + self._longest[start > 0])
        value = self[key] = [slice(start, end) for end in range(top, start, -1)]
        return value


class FastFullTokenizer:
    """``FullTokenizer``'s exact output, with the per-character work done in C or once per type.

    A line is cleaned, lower-cased (if asked) and split into whitespace-delimited
    words, and every word is mapped through a cache (word -> its ids encoded as
    a str, one character ``chr(id)`` per WordPiece); a line's ids are the
    characters of its words' values joined, so the per-word loop runs in C:

    * a plain-ASCII line is cleaned by deleting the ASCII controls cleaning
      drops (a regex; usually there are none) and lower-cased at once (NFD is
      the identity there, and there is no Mn, CJK or Unicode whitespace);
    * any other line is cleaned and CJK-spaced in one ``str.translate`` pass (a
      lazily filled per-code-point table built from the faithful predicates)
      and then lower-cased whole. ``str.lower`` maps character by character
      except for the final sigma, whose context never crosses whitespace, so
      this equals the original's lower-casing of each word.

    An unseen word is resolved once: a plain-ASCII word's basic tokens are a
    regex ``findall`` (alphanumeric runs, and every printable ASCII
    non-alphanumeric alone: all are punctuation); any other word goes through
    the faithful per-word rules (NFD and Mn removal if lower-casing, punctuation
    split). WordPiece runs once per distinct basic token: a vocab entry is its
    own piece; otherwise greedy longest-match-first as the original, the
    candidates of each step tried from longest to shortest by C iteration over
    precomputed slices, bounded by the longest vocab entry of their kind.
    Pieces come back from ids through ``inv_vocab`` (a piece is the token of its
    own id).

    The batch API (``tokenize_lines`` / ``convert_lines_to_ids``) does a whole
    list of lines at once: the lines are cleaned, joined with a NUL word between
    them (cleaning deletes NUL, so it is never a word) and split in one call;
    all unseen words of the batch are resolved together (their basic tokens
    found by one ``findall`` over them all, their vocab hits by one set
    intersection); the values of all words are joined into one str, the NUL
    word giving a marker character no id uses, and decoded to ids in one call.

    The word and token caches hold about ``cache_size`` entries each and are
    cleared when full (a batch with more distinct words than that is still
    served whole).

    With the compiled engine (``data.tokenization._fast_wordpiece``, used unless
    ``use_extension`` is false or it was not built; ``self.engine`` says which
    runs), every plain-ASCII line (a str of code points < 128, or bytes all
    < 0x80) is tokenized in C: cleaning (ASCII controls but tab, newline and
    CR deleted), lower-casing A-Z if asked, punctuation split and greedy
    WordPiece against a hash table of the vocab, straight to a list of ids or
    tokens. The other lines take the path above, with WordPiece of unseen
    basic tokens in C.

    Args:
      vocab_file: the model's ``vocab.txt`` (local or ``gs://``).
      do_lower_case: True for uncased models.
      cache_size: about how many words (and tokens) the caches hold.
      use_extension: use the compiled engine when it is built.

    Raises:
      VocabError: as ``load_vocab``, or a vocab of more than 1114110 lines (ids
        must be code points).
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True, cache_size: int = 1 << 20,
                 use_extension: bool = True):
        self.vocab_file = vocab_file
        self.vocab = load_vocab(vocab_file)
        self.do_lower_case = do_lower_case
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
        max_id = max(self.vocab.values())
        if max_id >= _MAX_CODE_POINT:
            raise VocabError("vocab file %s: %d lines, more than FastFullTokenizer supports (%d)"
                             % (vocab_file, max_id + 1, _MAX_CODE_POINT))
        self._inv_vocab: Union[Dict[int, str], None] = None
        self._id_pieces: Union[Dict[str, str], None] = None
        self._max_chars = self.wordpiece_tokenizer.max_input_chars_per_word
        self._cache_size = cache_size
        self._marker = chr(max_id + 1)  # the batch line marker: no id uses it
        self._table = _CleanTable()
        self._tokens = _WordCache(self._encode_token, self._marker)  # basic token -> ids as a str
        self._cache = _WordCache(self._encode_word, self._marker)  # word -> ids as a str
        self._engine = None
        if use_extension and _fast_wordpiece is not None:
            self._engine = _fast_wordpiece.Engine(
                self.vocab, self.vocab[special_tokens.UNK], self._max_chars, do_lower_case)
        else:
            self._build_wordpiece_tables()  # no engine: WordPiece runs in Python
        self.engine = "c" if self._engine is not None else "python"

    def _build_wordpiece_tables(self) -> None:
        """The search tables of the Python WordPiece (``_wordpiece``, ``_resolve``)."""
        # Continuation pieces without their "##", and the longest entry of each
        # kind (longer candidates cannot match).
        self._vocab_keys = frozenset(self.vocab)
        self._suffixes = frozenset(t[2:] for t in self.vocab if t.startswith("##"))
        # First characters of the entries: a piece can only start with one of them.
        self._initials = frozenset(t[:1] for t in self.vocab)
        self._suffix_initials = frozenset(t[:1] for t in self._suffixes)
        longest = max(map(len, self.vocab))
        self._slices = _Slices(longest, max(map(len, self._suffixes), default=0))
        # Vocab entries too long to be a word's single piece (the original gives [UNK]).
        self._too_long = (frozenset(t for t in self.vocab if len(t) > self._max_chars)
                          if longest > self._max_chars else frozenset())

    @property
    def inv_vocab(self) -> Dict[int, str]:
        """id -> token (built on first use)."""
        if self._inv_vocab is None:
            self._inv_vocab = {v: k for k, v in self.vocab.items()}
        return self._inv_vocab

    @property
    def _pieces(self) -> Dict[str, str]:
        """``chr(id)`` -> token (built on first use)."""
        if self._id_pieces is None:
            self._id_pieces = {chr(v): k for v, k in self.inv_vocab.items()}
        return self._id_pieces

    # -- cleaning and words ----------------------------------------------------

    def _clean_line(self, text: TextLike) -> str:
        """A line (str or UTF-8 bytes) cleaned, CJK-spaced and lower-cased (if asked)."""
        if not isinstance(text, str):
            text = convert_to_unicode(text)
        if text.isascii():
            if _ASCII_DROPPED_RE.search(text) is not None:
                text = _ASCII_DROPPED_RE.sub("", text)  # deleted before split: \x0b is not a space here
        else:
            text = text.translate(self._table)
        return text.lower() if self.do_lower_case else text

    def _words(self, text: TextLike) -> List[str]:
        """The cleaned words of one line (lower-cased if asked)."""
        return self._clean_line(text).split()

    def _batch_words(self, lines: Sequence[TextLike]) -> List[str]:
        """The cleaned words of all lines (lower-cased if asked), ``_LINE_BREAK`` between lines."""
        clean = self._clean_line
        if self.do_lower_case:
            texts = [t.lower() if type(t) is str and t.isascii() else clean(t) for t in lines]
        else:
            texts = [t if type(t) is str and t.isascii() else clean(t) for t in lines]
        joined = _LINE_JOIN.join(texts)
        if (joined.count(_LINE_BREAK) != len(texts) - 1
                or _ASCII_DROPPED_BUT_NUL_RE.search(joined) is not None):
            # Some ASCII line holds a character cleaning deletes (lower-casing keeps them).
            joined = _LINE_JOIN.join([_ASCII_DROPPED_RE.sub("", t) for t in texts])
        return joined.split()

    def _split_word(self, word: str) -> List[str]:
        """The basic tokens of one cleaned (and lower-cased, if asked) word, as the original."""
        if word.isascii():
            return _ASCII_TOKENS_RE.findall(word)
        if self.do_lower_case:
            word = BasicTokenizer._run_strip_accents(word)
        return [t for piece in BasicTokenizer._run_split_on_punc(word) for t in piece.split()]

    def _encode_word(self, word: str) -> str:
        """The ids of one unseen word's WordPiece tokens as a str (the word cache's resolver)."""
        tokens = self._tokens
        if len(tokens) > self._cache_size:
            tokens.clear()
        if len(self._cache) > self._cache_size:
            self._cache.clear()
        return "".join(map(tokens.__getitem__, self._split_word(word)))

    def _resolve(self, words: Iterable[str]) -> None:
        """Puts the encoded ids of every word of ``words`` (all unseen) into the word cache.

        The basic tokens of all plain-ASCII words come from one ``findall``
        over the words joined with a NUL word between them (``findall`` gives
        NUL back as a token: the word boundary); unseen tokens that are vocab
        entries are found by one set intersection; the words' values are the
        tokens' values joined and split at the boundaries.
        """
        cache, tokens = self._cache, self._tokens
        words = list(words)
        if len(cache) + len(words) > self._cache_size:
            cache.clear()
        if len(tokens) > self._cache_size:
            tokens.clear()
        joined = _LINE_JOIN.join(words)
        if joined.isascii():
            stream = _ASCII_TOKENS_RE.findall(joined)
        else:
            ascii_words = [w for w in words if w.isascii()]
            others = [w for w in words if not w.isascii()]
            words = ascii_words + others
            stream = _ASCII_TOKENS_RE.findall(_LINE_JOIN.join(ascii_words)) if ascii_words else []
            for k, word in enumerate(others):
                if k or ascii_words:  # not "if stream": a word may have no tokens (only Mn)
                    stream.append(_LINE_BREAK)
                stream.extend(self._split_word(word))
        need = set(stream).difference(tokens)
        need.discard(_LINE_BREAK)
        if self._engine is None:
            hits = need.intersection(self._vocab_keys)  # set & set: iterates the smaller
            hits.difference_update(self._too_long)
            tokens.update(zip(hits, map(chr, map(self.vocab.__getitem__, hits))))
            need.difference_update(hits)
        tokens.update(zip(need, map(self._encode_token, need)))  # the engine's WordPiece, if any
        values = "".join(map(tokens.__getitem__, stream)).split(self._marker)
        cache.update(zip(words, values))

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
        if token[0] not in self._initials:
            return [special_tokens.UNK]
        slices, get = self._slices, token.__getitem__
        piece = next(filter(self.vocab.__contains__, map(get, slices[0, n])), None)
        if piece is None:
            return [special_tokens.UNK]
        pieces = [piece]
        start = len(piece)
        is_suffix = self._suffixes.__contains__
        while start < n:
            if token[start] not in self._suffix_initials:
                return [special_tokens.UNK]
            piece = next(filter(is_suffix, map(get, slices[start, n])), None)
            if piece is None:
                return [special_tokens.UNK]
            pieces.append("##" + piece)
            start += len(piece)
        return pieces

    def _encode_token(self, token: str) -> str:
        """The ids of ``_wordpiece(token)`` as a str, one ``chr(id)`` per piece."""
        if self._engine is not None:
            return "".join(map(chr, self._engine.encode_token(token)))
        if len(token) <= self._max_chars:
            index = self.vocab.get(token)
            if index is not None:
                return chr(index)
        return "".join(map(chr, map(self.vocab.__getitem__, self._wordpiece(token))))

    # -- encoded lines ---------------------------------------------------------

    def _encode_line(self, text: TextLike) -> str:
        """The ids of one line's WordPiece tokens as a str, one ``chr(id)`` per token."""
        return "".join(map(self._cache.__getitem__, self._words(text)))

    def _encode_batch(self, lines: Sequence[TextLike]) -> str:
        """The encoded ids of a non-empty list of lines, the marker between lines."""
        words = self._batch_words(lines)
        cache = self._cache
        distinct = set(words)
        distinct.discard(_LINE_BREAK)
        unseen = distinct.difference(cache)
        if len(cache) + len(unseen) > self._cache_size:
            cache.clear()
            unseen = distinct
        if unseen:
            self._resolve(unseen)
        return "".join(map(cache.__getitem__, words))

    def _rows(self, lines: Iterable[TextLike], as_tokens: bool) -> List[List]:
        """Per line, its ids (or tokens, if ``as_tokens``): the engine's rows, the rest in Python."""
        if not isinstance(lines, (list, tuple)):
            lines = list(lines)
        if self._engine is not None:
            rows, rest = self._engine.encode_lines(lines, as_tokens)  # rest: indices it left
            if not rest:
                return rows
            encoded = self._encode_batch([lines[i] for i in rest]).split(self._marker)
        else:
            rest = range(len(lines))
            if not lines:
                return []
            rows = [None] * len(lines)
            encoded = self._encode_batch(lines).split(self._marker)
        get = self._pieces.__getitem__ if as_tokens else ord
        for i, s in zip(rest, encoded):
            rows[i] = list(map(get, s))
        return rows

    # -- public API --------------------------------------------------------------

    def tokenize(self, text: TextLike) -> List[str]:
        """``FullTokenizer.tokenize(text)``: the WordPiece tokens of a str or UTF-8 bytes.

        Args:
          text: one line.

        Returns:
          The WordPiece tokens.
        """
        if self._engine is not None:
            row = self._engine.encode_line(text, True)
            if row is not None:
                return row
        return list(map(self._pieces.__getitem__, self._encode_line(text)))

    def tokenize_to_ids(self, text: TextLike) -> List[int]:
        """``convert_tokens_to_ids(tokenize(text))`` in one cached pass.

        Args:
          text: one line.

        Returns:
          The WordPiece ids.
        """
        if self._engine is not None:
            row = self._engine.encode_line(text, False)
            if row is not None:
                return row
        return list(map(ord, self._encode_line(text)))

    def tokenize_lines(self, lines: Iterable[TextLike]) -> List[List[str]]:
        """``[tokenize(line) for line in lines]``, computed for the whole batch at once.

        Args:
          lines: str or UTF-8 bytes lines.

        Returns:
          The WordPiece tokens of each line.
        """
        with _gc_paused():
            return self._rows(lines, True)

    def convert_lines_to_ids(self, lines: Iterable[TextLike]) -> List[List[int]]:
        """``[tokenize_to_ids(line) for line in lines]``, computed for the whole batch at once.

        Each line is a str or UTF-8 bytes (decoded with errors ignored) and is
        tokenized on its own, as ``FullTokenizer`` would; a line may hold any
        character, newlines included. Returns one list of int ids per line.

        Args:
          lines: str or UTF-8 bytes lines.

        Returns:
          The WordPiece ids of each line.
        """
        with _gc_paused():
            return self._rows(lines, False)

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        """As ``FullTokenizer.convert_tokens_to_ids``.

        Args:
          tokens: vocab tokens.

        Returns:
          The ids, in order.

        Raises:
          MissingTokenError: a token the vocab lacks.
        """
        return _convert_tokens(self, tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
        """As ``FullTokenizer.convert_ids_to_tokens``.

        Args:
          ids: vocab ids.

        Returns:
          The tokens, in order.
        """
        return convert_by_vocab(self.inv_vocab, ids)
