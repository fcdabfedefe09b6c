"""Learns a WordPiece vocabulary from text, laid out as Google's BERT vocabs.

The words are this project's own basic tokens: each line is normalised and split exactly as
``BasicTokenizer`` (and so ``FullTokenizer`` / ``FastFullTokenizer``) does it, cleaning,
CJK spacing, lower-casing and accent stripping with ``do_lower_case``, punctuation split, so
the vocab's entries are exactly the strings the tokenizer will look up. Only then are the words
handed to Hugging Face ``tokenizers``' WordPiece trainer (no normalizer of its own, a
whitespace split of the already split words, ``##`` continuations), which learns the pieces.

File layout (one token per line, line number = id), Google's::

    [PAD]                        0
    [unused0] .. [unused98]      1 .. 99       (the first min(num_unused, 99) unused tokens)
    [UNK] [CLS] [SEP] [MASK]     100 .. 103
    [unused99] .. [unusedN-1]    104 ..        (only when num_unused > 99)
    reserved tokens              in the order given
    single characters            every character of the text, by code point
    ##characters                 every character again as a continuation, by code point
    learned pieces               in the order the trainer learned them (most frequent first)

With ``num_unused < 99`` the special tokens move down (``num_unused=0``: ``[UNK]`` = 1,
``[CLS]`` = 2, ``[SEP]`` = 3, ``[MASK]`` = 4). Every character seen is in the vocab alone and
as ``##`` piece, so any word of the text is tokenizable without ``[UNK]`` (only a word longer
than the WordPiece limit, 100 characters, still is one).

Functions: ``learn_vocab`` (lines -> tokens), ``learn_vocab_from_counts`` (word counts ->
tokens), ``count_words``, ``layout_tokens``, ``write_vocab`` and ``build_vocab_files`` (the
``build_vocab.py`` tool: files -> vocab file, with progress and a summary).
"""

from __future__ import annotations

import collections
import time
from typing import Callable, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Set

from bert_common import atomic, files
from bert_common.errors import InputError
from bert_common.progress import Progress
from data.tokenization import special_tokens
# Plain-ASCII lines take FastFullTokenizer's regex path (its rules, imported: one definition),
# which gives BasicTokenizer's exact tokens ten times faster than its per-character loops.
from data.tokenization.wordpiece import _ASCII_DROPPED_RE, _ASCII_TOKENS_RE, BasicTokenizer

#: Unused tokens Google's vocabs put between [PAD] and [UNK] (ids 1..99).
UNUSED_BEFORE_UNK = 99
#: The continuation prefix of WordPiece, as the tokenizer expects it.
CONTINUATION = "##"

# Words per string handed to the trainer when a word is repeated ``count`` times: bounds the
# size of one string for very frequent words.
_REPEAT_CHUNK = 4096


class VocabBuildError(InputError):
    """Settings or text a vocabulary cannot be built from; the message names the flag/file."""


class LearnedVocab(NamedTuple):
    """What ``learn_vocab_from_counts`` made.

    tokens: the vocab, in file order. requested: the ``vocab_size`` asked for (``len(tokens)``
    is smaller only when the text has too few distinct pieces). words / distinct_words:
    basic tokens counted (with repeats / without). characters: distinct characters.

    Args:
      tokens: the vocab, in file order.
      requested: the ``vocab_size`` asked for.
      words: basic tokens counted, with repeats.
      distinct_words: distinct basic tokens.
      characters: distinct characters.
    """

    tokens: List[str]
    requested: int
    words: int
    distinct_words: int
    characters: int


class BuildSummary(NamedTuple):
    """What ``build_vocab_files`` did; ``str()`` is its one summary line.

    Args:
      output_file: the vocab file written.
      tokens: its number of tokens.
      requested: the ``vocab_size`` asked for.
      words: basic tokens counted, with repeats.
      distinct_words: distinct basic tokens.
      characters: distinct characters.
      lines: input lines read.
      files: input files read.
      megabytes: input size read, in MB.
      seconds: the run's duration.
    """

    output_file: str
    tokens: int
    requested: int
    words: int
    distinct_words: int
    characters: int
    lines: int
    files: int
    megabytes: float
    seconds: float

    def __str__(self) -> str:
        short = ("" if self.tokens >= self.requested else
                 " (fewer than --vocab_size=%d: the text has no more pieces to learn)"
                 % self.requested)
        return ("wrote %d tokens to %s%s; %d words seen (%d distinct, %d characters) in %d "
                "lines of %d file(s), %.1f MB, in %.1fs"
                % (self.tokens, self.output_file, short, self.words, self.distinct_words,
                   self.characters, self.lines, self.files, self.megabytes, self.seconds))


# ------------------------------------------------------------------------------------------
# Layout.
# ------------------------------------------------------------------------------------------


def layout_tokens(num_unused: int = UNUSED_BEFORE_UNK,
                  reserved_tokens: Sequence[str] = ()) -> List[str]:
    """The tokens before the learned ones: ``[PAD]``, ``[unused0..]`` (at most 99), ``[UNK]
    [CLS] [SEP] [MASK]``, any further ``[unusedN]``, then ``reserved_tokens`` in order.

    Raises VocabBuildError for a negative ``num_unused`` or a reserved token that is empty,
    holds whitespace (a vocab line is stripped when read, and WordPiece never yields one) or
    repeats a token of the layout.

    Args:
      num_unused: the number of ``[unusedN]`` tokens.
      reserved_tokens: extra tokens after them.

    Returns:
      The layout's tokens, in file order.

    Raises:
      VocabBuildError: as above.
    """
    if num_unused < 0:
        raise VocabBuildError("--num_unused=%d must be >= 0" % num_unused)
    unused = ["[unused%d]" % i for i in range(num_unused)]
    layout = ([special_tokens.PAD] + unused[:UNUSED_BEFORE_UNK]
              + [special_tokens.UNK, special_tokens.CLS, special_tokens.SEP, special_tokens.MASK]
              + unused[UNUSED_BEFORE_UNK:])
    seen = set(layout)
    for token in reserved_tokens:
        if not token or token.split() != [token]:
            raise VocabBuildError("--reserved_tokens: %r is not a token (empty, or holds "
                                  "whitespace)" % token)
        if token in seen:
            raise VocabBuildError("--reserved_tokens: %s is listed twice or is one of the "
                                  "special/unused tokens" % token)
        seen.add(token)
        layout.append(token)
    return layout


def _check_room(vocab_size: int, layout: Sequence[str]) -> None:
    """VocabBuildError unless ``vocab_size`` leaves room for more than ``layout``."""
    if vocab_size <= len(layout):
        raise VocabBuildError("--vocab_size=%d is too small: the special, unused and reserved "
                              "tokens alone take %d lines" % (vocab_size, len(layout)))


# ------------------------------------------------------------------------------------------
# Words.
# ------------------------------------------------------------------------------------------


def basic_tokens(lines: Iterable[str], do_lower_case: bool = True) -> Iterator[List[str]]:
    """Per line, ``BasicTokenizer(do_lower_case).tokenize(line)``: the words of the vocab.

    Plain-ASCII lines take an equivalent regex path (see ``_ASCII_TOKENS_RE``); the others go
    through ``BasicTokenizer`` itself.

    Args:
      lines: raw text lines.
      do_lower_case: lower-case and strip accents.

    Yields:
      The basic tokens of each line.
    """
    basic = BasicTokenizer(do_lower_case=do_lower_case)
    findall, dropped = _ASCII_TOKENS_RE.findall, _ASCII_DROPPED_RE
    for line in lines:
        if line.isascii():
            if dropped.search(line) is not None:
                line = dropped.sub("", line)
            yield findall(line.lower() if do_lower_case else line)
        else:
            yield basic.tokenize(line)


def count_words(lines: Iterable[str], do_lower_case: bool = True,
                on_line: Optional[Callable[[int, int], None]] = None) -> collections.Counter[str]:
    """Counts the basic tokens (``basic_tokens``) of ``lines``: word -> occurrences.

    ``on_line(lines_done, words_done)``, if given, is called after every line (progress).

    Args:
      lines: raw text lines.
      do_lower_case: lower-case and strip accents.
      on_line: a progress callback, or None.

    Returns:
      A ``Counter`` of basic tokens.
    """
    counts: collections.Counter[str] = collections.Counter()
    words = 0
    for n, tokens in enumerate(basic_tokens(lines, do_lower_case), 1):
        counts.update(tokens)
        words += len(tokens)
        if on_line is not None:
            on_line(n, words)
    return counts


def _characters(words: Iterable[str]) -> List[str]:
    chars: Set[str] = set()
    for word in words:
        chars.update(word)
    return sorted(chars)


def _trainer_input(word_counts: collections.Counter[str]) -> Iterator[str]:
    """Strings whose whitespace-split words have the counts of ``word_counts`` (a word
    repeated, at most ``_REPEAT_CHUNK`` times per string)."""
    for word, count in word_counts.items():
        while count > 0:
            n = min(count, _REPEAT_CHUNK)
            yield (word + " ") * n
            count -= n


# ------------------------------------------------------------------------------------------
# Learning.
# ------------------------------------------------------------------------------------------


def learn_vocab_from_counts(word_counts: collections.Counter[str], vocab_size: int,
                            num_unused: int = UNUSED_BEFORE_UNK,
                            reserved_tokens: Sequence[str] = ()) -> LearnedVocab:
    """The vocab (layout of the module docstring) of basic tokens with counts ``word_counts``.

    Args:
      word_counts: basic token -> occurrences (``count_words``); the tokens must hold no
        whitespace (basic tokens never do).
      vocab_size: the number of lines of the vocab file. Exactly that many tokens come back
        unless the text has fewer pieces to learn (every word already one piece).
      num_unused, reserved_tokens: see ``layout_tokens``.

    Returns:
      The ``LearnedVocab``.

    Raises:
      VocabBuildError: no words, or ``vocab_size`` below the layout plus every character
        (alone and as ``##`` piece).
    """
    layout = layout_tokens(num_unused, reserved_tokens)
    _check_room(vocab_size, layout)
    if not word_counts:
        raise VocabBuildError("the text has no words: nothing to learn a vocab from")
    chars = _characters(word_counts)
    # Every character alone and as a continuation: any word of the text is then tokenizable.
    alphabet = chars + [CONTINUATION + c for c in chars]
    needed = len(layout) + len(alphabet)
    if vocab_size < needed:
        raise VocabBuildError(
            "--vocab_size=%d is too small: the %d special/unused/reserved tokens and the %d "
            "characters of the text (each alone and as ##piece) need %d lines"
            % (vocab_size, len(layout), len(chars), needed))
    # The trainer's vocab_size counts the alphabet too. A reserved token that the trainer also
    # learns is kept once, in the layout: ask for that many more pieces, cut at the end.
    learned = _train(word_counts, chars, vocab_size - len(layout) + len(reserved_tokens))
    tokens = list(layout)
    seen = set(tokens)
    for token in alphabet + learned:
        if token not in seen:
            seen.add(token)
            tokens.append(token)
    return LearnedVocab(tokens[:vocab_size], vocab_size, sum(word_counts.values()),
                        len(word_counts), len(chars))


def _train(word_counts: collections.Counter[str], chars: Sequence[str],
           vocab_size: int) -> List[str]:
    """The pieces HF's WordPiece trainer learns from ``word_counts`` (a vocab of ``vocab_size``
    with the alphabet ``chars``, alone and as ``##`` pieces), in the order it learned them."""
    try:  # imported here: only learning a vocab needs it
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError as e:
        raise VocabBuildError("learning a vocab needs Hugging Face tokenizers (pip install "
                              "tokenizers==0.23.3; it is in requirements.txt): %s" % e) from None

    tokenizer = Tokenizer(models.WordPiece(unk_token=special_tokens.UNK))
    # No normalizer: the words are already normalised as BasicTokenizer does it. The split is
    # only to undo the joining of _trainer_input (words hold no whitespace).
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # Every ##character is given to the trainer as a "special" token: it then has one for each
    # character (its own alphabet has ## forms only for characters seen inside a word), and,
    # above all, fixed ids for them. Otherwise it numbers them in hash-map order, which breaks
    # ties between equally frequent merges differently from run to run: another vocab each time.
    continuations = [CONTINUATION + c for c in chars]
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=continuations,
        continuing_subword_prefix=CONTINUATION, show_progress=False)
    tokenizer.train_from_iterator(_trainer_input(word_counts), trainer=trainer)
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    alphabet = set(chars).union(continuations, special_tokens.ALL)
    return [token for token, _ in by_id if token not in alphabet]


def learn_vocab(lines: Iterable[str], vocab_size: int, do_lower_case: bool = True,
                num_unused: int = UNUSED_BEFORE_UNK,
                reserved_tokens: Sequence[str] = ()) -> List[str]:
    """The vocab tokens (file order, ``vocab_size`` of them when the text allows) of ``lines``.

    ``lines``: raw text lines (str), normalised and split as ``BasicTokenizer(do_lower_case)``
    does. See ``learn_vocab_from_counts`` for the rest.

    Args:
      lines: raw text lines.
      vocab_size: the number of lines of the vocab file.
      do_lower_case: lower-case and strip accents.
      num_unused: the number of ``[unusedN]`` tokens (``layout_tokens``).
      reserved_tokens: extra tokens of the layout (``layout_tokens``).

    Returns:
      The vocab's tokens, in file order.

    Raises:
      VocabBuildError: as ``learn_vocab_from_counts``.
    """
    counts = count_words(lines, do_lower_case)
    return learn_vocab_from_counts(counts, vocab_size, num_unused, reserved_tokens).tokens


# ------------------------------------------------------------------------------------------
# Files.
# ------------------------------------------------------------------------------------------


def write_vocab(tokens: Sequence[str], path: str) -> None:
    """Writes one token per line to ``path`` (local or URL), atomically (temporary name, then
    rename). Raises OSError when its folder is missing; VocabBuildError for a token that would
    not read back as itself (empty, surrounding whitespace, a newline).

    Args:
      tokens: the vocab, in file order.
      path: the output file.

    Raises:
      OSError: the output folder is missing.
      VocabBuildError: a token that would not read back.
    """
    for token in tokens:
        if not token or token.strip() != token or "\n" in token:
            raise VocabBuildError("vocab token %r cannot be written as a line" % token)
    with atomic.atomic_open(path) as f:
        f.write("\n".join(tokens) + "\n")


def build_vocab_files(input_patterns: str | Sequence[str], output_file: str, vocab_size: int,
                      do_lower_case: bool = True, num_unused: int = UNUSED_BEFORE_UNK,
                      reserved_tokens: Sequence[str] = (),
                      show_progress: bool = True) -> BuildSummary:
    """``build_vocab.py``: learns a vocab of ``vocab_size`` lines from the text files and writes
    it to ``output_file`` (nothing is written unless everything succeeds).

    ``input_patterns``: comma-separated glob patterns (or a list of them), expanded as
    create_pretraining_data's ``--input_file``; the files are read as it reads them (the
    pre-training corpus format; any text with one sentence or paragraph per line will do).
    Progress (MB read) goes to stderr with ``show_progress``.

    Raises VocabBuildError / CorpusError (InputError) naming the flag, file or line, and
    OSError for an output folder that is missing or not writable.

    Args:
      input_patterns: comma-separated glob patterns, or a list of them.
      output_file: the vocab file to write.
      vocab_size: the number of lines of the vocab.
      do_lower_case: lower-case and strip accents.
      num_unused: the number of ``[unusedN]`` tokens (``layout_tokens``).
      reserved_tokens: extra tokens of the layout (``layout_tokens``).
      show_progress: report MB read on stderr.

    Returns:
      The run's ``BuildSummary``.

    Raises:
      VocabBuildError: as above (also CorpusError / OSError).
    """
    from data.pretraining import corpus as corpus_reader

    start = time.perf_counter()
    layout = layout_tokens(num_unused, reserved_tokens)  # bad settings fail before any reading
    _check_room(vocab_size, layout)
    atomic.check_output_folder(output_file)
    if files.isdir(output_file):
        raise VocabBuildError("--output_file %s is a folder" % output_file)
    input_files = corpus_reader.expand_input_patterns(input_patterns)
    sizes = [files.getsize(path) for path in input_files]
    megabytes = sum(sizes) / 1e6
    progress = Progress("reading", megabytes, unit="MB", enabled=show_progress)
    done = {"MB": 0.0, "lines": 0, "words": 0}

    def lines() -> Iterator[str]:
        before = 0
        for path, size in zip(input_files, sizes):
            read = 0
            for text in corpus_reader.iter_lines(path):
                # Characters read: the bytes of ASCII text (fewer for other text), close enough
                # for a progress line within a long file; exact at each file's end.
                read += len(text) + 1
                done["MB"] = (before + min(read, size)) / 1e6
                yield text
            before += size
            done["MB"] = before / 1e6

    def on_line(n: int, words: int) -> None:
        done["lines"], done["words"] = n, words
        if not n & 4095:  # the clock is read every 4096 lines only
            progress.update(done["MB"], "%d lines, %d words" % (n, words))

    counts = count_words(lines(), do_lower_case, on_line)
    if not counts:
        raise VocabBuildError("the text has no words (%s): nothing to learn a vocab from"
                              % corpus_reader.name_files(input_files))
    progress.update(megabytes, "%d lines, %d words" % (done["lines"], done["words"]),
                    force=True)
    learned = learn_vocab_from_counts(counts, vocab_size, num_unused, reserved_tokens)
    write_vocab(learned.tokens, output_file)
    return BuildSummary(output_file, len(learned.tokens), vocab_size, learned.words,
                        learned.distinct_words, learned.characters, done["lines"],
                        len(input_files), megabytes, time.perf_counter() - start)
