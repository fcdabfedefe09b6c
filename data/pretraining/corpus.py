"""Reads pre-training text into documents of sentences of WordPiece ids, as the original does.

Input format (the original create_pretraining_data's): one sentence per line, a blank line
between documents. Reading follows the original's ``tf.gfile.GFile(path, "r").readline()``
loop exactly:

* lines end at ``\\n`` only; every ``\\r`` byte is dropped wherever it is (GFile's line reader
  does that), so ``\\r\\n`` files read like ``\\n`` files;
* a last line without ``\\n`` is a line, unless it is empty once its ``\\r`` are dropped;
* each line is UTF-8 (invalid bytes are an error naming the file and line: the original
  crashes with a ``UnicodeDecodeError`` there) and ``str.strip()``-ped; an empty line starts a
  new document; any other line is tokenized and, if it has tokens, appended to the current
  document as one sentence;
* documents are NOT reset between input files: a file that does not end with a blank line
  continues its last document into the next file; empty documents are dropped at the end.

``--input_file`` is a comma-separated list of glob patterns, expanded in order like
``tf.gfile.Glob`` (directory order, hidden files included, no sorting); a pattern that matches
no file is an error here (the original silently skips it).

The corpus is kept compact (``Corpus``): one int32 array of all token ids and two offset
arrays, instead of one Python string per token.
"""

from __future__ import annotations

import array
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from bert_common import files
from bert_common.errors import InputError
from bert_common.progress import Progress


class CorpusError(InputError):
    """Unusable input text; the message names the file (and line)."""


class Corpus:
    """Documents of sentences of token ids, flattened.

    Args:
      tokens: int32 [T] token ids.
      sentence_starts: int64 [S + 1] sentence offsets.
      document_starts: int64 [D + 1] document offsets.

    Attributes:
      tokens: int32 [T], every token id, documents and sentences in reading order.
      sentence_starts: int64 [S + 1], offset in ``tokens`` of each sentence (last = T).
      document_starts: int64 [D + 1], index of each document's first sentence (last = S).
    Every document has at least one sentence and every sentence at least one token.
    """

    def __init__(self, tokens: np.ndarray, sentence_starts: np.ndarray,
                 document_starts: np.ndarray):
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        self.sentence_starts = np.ascontiguousarray(sentence_starts, dtype=np.int64)
        self.document_starts = np.ascontiguousarray(document_starts, dtype=np.int64)

    @property
    def num_documents(self) -> int:
        return len(self.document_starts) - 1

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_starts) - 1

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    def document_sentence_counts(self) -> np.ndarray:
        return np.diff(self.document_starts)

    def documents(self) -> List[List[List[int]]]:
        """The original's ``all_documents`` (before its shuffle): lists of lists of ids."""
        toks = self.tokens.tolist()
        starts = self.sentence_starts.tolist()
        docs = []
        d = self.document_starts.tolist()
        for lo, hi in zip(d[:-1], d[1:]):
            docs.append([toks[starts[s]:starts[s + 1]] for s in range(lo, hi)])
        return docs

    @classmethod
    def from_documents(cls, documents: Sequence[Sequence[Sequence[int]]]) -> "Corpus":
        """Builds a corpus from nested lists, dropping empty sentences and documents.

        Args:
          documents: documents of sentences of token ids.

        Returns:
          The ``Corpus``.
        """
        builder = _CorpusBuilder()
        for doc in documents:
            for sentence in doc:
                builder.sentence(sentence)
            builder.end_document()
        return builder.corpus(cls)


class _CorpusBuilder:
    """A ``Corpus`` built a sentence at a time: a sentence without a token, then a document
    without a sentence, are dropped."""

    def __init__(self):
        self.tokens = array.array("i")
        self.sentence_starts = array.array("q", [0])
        self.document_starts = array.array("q", [0])

    def sentence(self, ids: Sequence[int]) -> None:
        """Appends a sentence of token ids to the open document (none if ``ids`` is empty)."""
        if len(ids):
            self.tokens.extend(ids)
            self.sentence_starts.append(len(self.tokens))

    def end_document(self) -> None:
        """Closes the open document (nothing if it has no sentence)."""
        if len(self.sentence_starts) - 1 > self.document_starts[-1]:
            self.document_starts.append(len(self.sentence_starts) - 1)

    def corpus(self, cls=Corpus) -> Corpus:
        """The ``cls`` of what was added, the open document closed."""
        self.end_document()
        return cls(np.frombuffer(self.tokens, dtype=np.int32) if len(self.tokens)
                   else np.empty(0, np.int32),
                   np.frombuffer(self.sentence_starts, dtype=np.int64),
                   np.frombuffer(self.document_starts, dtype=np.int64))


# ------------------------------------------------------------------------------------------
# Input files.
# ------------------------------------------------------------------------------------------


def expand_input_patterns(patterns: Union[str, Sequence[str]], sort: bool = False) -> List[str]:
    """``--input_file`` -> files: each comma-separated pattern globbed, in order.

    ``sort``: each pattern's matches sorted by name, not in directory order (which differs
    between machines). Raises CorpusError naming the pattern when one matches nothing or
    matches a folder.

    Args:
      patterns: comma-separated glob patterns, or a list of them.
      sort: sort each pattern's matches by name.

    Returns:
      The files, in pattern order.

    Raises:
      CorpusError: a pattern matches nothing or a folder.
    """
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    found: List[str] = []
    for pattern in patterns:
        if not pattern:
            raise CorpusError("--input_file has an empty entry (stray comma?)")
        if files.has_magic(pattern):
            matches = files.glob(pattern)
            if sort:
                matches = sorted(matches)
        else:
            matches = [pattern] if files.exists(pattern) else []
        if not matches:
            raise CorpusError("input file %s: no such file" % pattern if not files.has_magic(
                pattern) else "input pattern %s matches no file" % pattern)
        for path in matches:
            if files.isdir(path):
                raise CorpusError("input file %s is a folder, not a text file" % path)
        found.extend(matches)
    return found


def no_text_error(input_files: Sequence[str]) -> CorpusError:
    """The error of a corpus without a line that gives a token (the one wording).

    Args:
      input_files: the corpus files.

    Returns:
      The ``CorpusError``.
    """
    return CorpusError("the input files have no text (no line with a token): %s: nothing to "
                       "write" % name_files(input_files))


def name_files(files: Sequence[str], most: int = 3) -> str:
    """``files`` for a message: ``a, b, c`` or ``a, b, c and 7 more``.

    Args:
      files: the paths.
      most: the most paths named.

    Returns:
      The text.
    """
    shown = ", ".join(files[:most])
    return shown if len(files) <= most else "%s and %d more" % (shown, len(files) - most)


def _line_number(path: str, offset: int) -> int:
    """1-based number of the line that starts at byte ``offset`` of ``path``."""
    count = 1
    with files.open(path, "rb") as f:
        while offset > 0:
            block = f.read(min(offset, 1 << 20))
            if not block:
                break
            count += block.count(b"\n")
            offset -= len(block)
    return count


def iter_lines(path: str, start: int = 0, stop: Optional[int] = None) -> Iterator[str]:
    """Yields each line of ``path`` as the original reads it (``\\r`` dropped, UTF-8 decoded,
    not stripped; see the module docstring).

    ``start``/``stop`` restrict it to the lines that start in bytes ``[start, stop)``
    (``start`` must be a line start). Raises CorpusError naming the file and line for invalid
    UTF-8 or an unreadable file.

    Args:
      path: the text file (local or URL).
      start: the first byte (a line start).
      stop: the end byte, or None for the end of the file.

    Yields:
      The lines, as str.

    Raises:
      CorpusError: invalid UTF-8 or an unreadable file.
    """
    try:
        f = files.open(path, "rb")
    except OSError as e:
        raise CorpusError("input file %s: %s" % (path, e.strerror or e)) from None
    with f:
        if start:
            f.seek(start)
        offset = start
        for raw in f:
            if stop is not None and offset >= stop:
                break
            line_start = offset
            offset += len(raw)
            if b"\r" in raw:
                raw = raw.replace(b"\r", b"")
                if not raw:  # only \r after the last newline: end of file for GFile
                    continue
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusError(
                    "input file %s, line %d: invalid UTF-8 (byte 0x%02x at column %d)"
                    % (path, _line_number(path, line_start), raw[e.start], e.start + 1)
                ) from None


Piece = Tuple[str, int, Optional[int]]  # (path, start byte, stop byte or None = end of file)


def _read_counts(document_starts: array.array, lines: int) -> str:
    """The ``extra`` of a reading progress line."""
    return "%d documents, %d lines" % (len(document_starts) - 1, lines)


def _ids_function(tokenizer) -> Callable[[str], List[int]]:
    fast = getattr(tokenizer, "tokenize_to_ids", None)
    if fast is not None:
        return fast
    return lambda text: tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))


def read_corpus(input_files: Sequence[Union[str, Piece]], tokenizer,
                show_progress: bool = False) -> Corpus:
    """Reads and tokenizes ``input_files`` (in order) into a ``Corpus``.

    Each entry is a path or a ``(path, start, stop)`` piece of a file (``start`` at a line
    start, ``stop`` None for the end); pieces are how a corpus is split across workers.
    ``tokenizer`` needs ``tokenize_to_ids`` (``FastFullTokenizer``) or ``tokenize`` +
    ``convert_tokens_to_ids``.

    Args:
      input_files: paths or ``(path, start, stop)`` pieces.
      tokenizer: the tokenizer (above).
      show_progress: report progress on stderr.

    Returns:
      The ``Corpus``.
    """
    to_ids = _ids_function(tokenizer)
    pieces: List[Piece] = [(p, 0, None) if isinstance(p, str) else tuple(p)
                           for p in input_files]
    sizes = []
    for path, start, stop in pieces:
        size = files.getsize(path) if files.isfile(path) else 0
        sizes.append(max(0, (size if stop is None else min(stop, size)) - start))
    builder = _CorpusBuilder()
    # Progress in MB of input read (whole files or pieces done), so that its ETA holds for
    # files of any line length.
    progress = Progress("reading", sum(sizes) / 1e6, unit="MB", enabled=show_progress)
    done_bytes = 0
    lines = 0
    for (path, start, stop), size in zip(pieces, sizes):
        for text in iter_lines(path, start, stop):
            lines += 1
            text = text.strip()
            if not text:
                builder.end_document()
            else:
                builder.sentence(to_ids(text))
            if not lines & 4095:  # the clock is read every 4096 lines only
                progress.update(done_bytes / 1e6, _read_counts(builder.document_starts, lines))
        done_bytes += size
    builder.end_document()
    progress.update(done_bytes / 1e6, _read_counts(builder.document_starts, lines), force=True)
    return builder.corpus()


def iter_documents(input_files: Sequence[Union[str, Piece]]) -> Iterator[List[str]]:
    """The documents of ``input_files`` (paths or pieces, in order) as lists of their
    stripped, non-empty lines, before tokenization: ``read_corpus``'s reading rules (documents
    continue across files and pieces; a line that will give no token is still kept here).

    Raises CorpusError naming the file and line for invalid UTF-8 or an unreadable file.

    Args:
      input_files: paths or ``(path, start, stop)`` pieces.

    Yields:
      Each document's lines.

    Raises:
      CorpusError: invalid UTF-8 or an unreadable file.
    """
    document: List[str] = []
    for entry in input_files:
        path, start, stop = (entry, 0, None) if isinstance(entry, str) else entry
        for text in iter_lines(path, start, stop):
            text = text.strip()
            if text:
                document.append(text)
            elif document:
                yield document
                document = []
    if document:
        yield document


def tokenize_documents(documents: Iterable[Sequence[str]], tokenizer) -> Corpus:
    """A ``Corpus`` of documents given as lists of lines (``iter_documents``): each line one
    sentence; lines without a token and then documents without a sentence are dropped, as
    ``read_corpus`` drops them.

    Args:
      documents: the documents, as lists of lines.
      tokenizer: the tokenizer (as ``read_corpus``).

    Returns:
      The ``Corpus``.
    """
    to_ids = _ids_function(tokenizer)
    return Corpus.from_documents([to_ids(text) for text in document] for document in documents)


def concatenate(corpora: Sequence[Corpus]) -> Corpus:
    """The documents of ``corpora``, one after the other.

    Args:
      corpora: the corpora, in order.

    Returns:
      One ``Corpus``.
    """
    tokens, sentences, documents = [], [np.zeros(1, np.int64)], [np.zeros(1, np.int64)]
    n_tok = n_sent = 0
    for c in corpora:
        tokens.append(c.tokens)
        sentences.append(c.sentence_starts[1:] + n_tok)
        documents.append(c.document_starts[1:] + n_sent)
        n_tok += c.num_tokens
        n_sent += c.num_sentences
    return Corpus(np.concatenate(tokens) if tokens else np.empty(0, np.int32),
                  np.concatenate(sentences), np.concatenate(documents))


def split_at_documents(input_files: Sequence[str], parts: int) -> List[List[Piece]]:
    """Splits the files (read in order, as one stream) into up to ``parts`` runs of pieces of
    about equal size, each cut right after a blank line, so no document is split.

    A run may span files (documents continue across files). Fewer runs come back when the
    text has fewer document boundaries than needed.

    Args:
      input_files: the corpus files, in order.
      parts: the most runs.

    Returns:
      The runs, each a list of ``(path, start, stop)`` pieces.
    """
    sizes = [files.getsize(p) for p in input_files]
    total = sum(sizes)
    cuts: List[Tuple[int, int]] = []  # (file index, byte offset): start of a new run
    for k in range(1, parts):
        target = total * k // parts
        cut = _next_boundary(input_files, sizes, target)
        if cut is not None and (not cuts or cut > cuts[-1]) and cut != (0, 0):
            cuts.append(cut)
    runs: List[List[Piece]] = []
    bounds = [(0, 0)] + cuts + [(len(input_files), 0)]
    for (f0, o0), (f1, o1) in zip(bounds[:-1], bounds[1:]):
        run: List[Piece] = []
        for f in range(f0, min(f1, len(input_files) - 1) + 1):
            start = o0 if f == f0 else 0
            stop = o1 if f == f1 else None
            if f == f1 and o1 == 0:
                continue
            run.append((input_files[f], start, stop))
        if run:
            runs.append(run)
    return runs


def _next_boundary(paths: Sequence[str], sizes: Sequence[int], target: int):
    """The (file, offset) of the first line after the first blank line at or after the
    global byte ``target``; None when there is none."""
    f = 0
    while f < len(paths) and target >= sizes[f]:
        target -= sizes[f]
        f += 1
    first = True
    while f < len(paths):
        with files.open(paths[f], "rb") as fh:
            fh.seek(target)
            offset = target
            if first and target:
                skipped = fh.readline()  # finish the line the target falls in
                offset += len(skipped)
            for raw in fh:
                offset += len(raw)
                if not raw.replace(b"\r", b"").decode("utf-8", "replace").strip():
                    if offset >= sizes[f]:
                        return (f + 1, 0) if f + 1 < len(paths) else None
                    return (f, offset)
        first = False
        f += 1
        target = 0
    return None
