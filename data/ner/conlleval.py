"""The CoNLL shared tasks' ``conlleval`` scorer (Perl script, version 2004-01-26), in Python.

The numbers and the report text are the script's with its default settings: fields split on
whitespace, sentence boundary ``-X-``, no ``-r`` (raw tags), no ``-l`` (LaTeX). The rules:

* Input: one token a line; the last field is the guessed tag, the one before it the correct
  tag. Every non-empty line has as many fields as the first non-empty one, and at least two.
  An empty line, or one whose first field is ``-X-``, is a sentence boundary and reads as
  ``-X- O O``. A ``-DOCSTART-`` line is *not* a boundary: it is scored as a token.
* Tags: split at the first hyphen into prefix and type (``B-PER`` -> ``B``, ``PER``;
  ``B-PER-X`` -> ``B``, ``PER-X``; ``O`` -> ``O``, ``""``). The script keeps the prefix as it
  is (``B``, ``I``, ``O``, ``E``, ``S``, ``[``, ``]``, ``.``, anything) and drops a type that
  Perl counts as false (``""`` and ``"0"``).
* A chunk *ends* between two tags for the prefix pairs (B,B) (B,O) (I,B) (I,O) (E,E) (E,I)
  (E,O), when the previous prefix is not ``O``/``.`` and the type changes, or after a ``[`` or
  ``]``. A chunk *starts* for (B,B) (I,B) (O,B) (O,I) (E,E) (E,I) (O,E), when the prefix is not
  ``O``/``.`` and the type changes, or at a ``[`` or ``]``. So ``I-`` after ``O`` starts a chunk
  and ``I-LOC`` after ``B-PER`` ends one and starts another; ``S-`` tags only split chunks by
  type changes (the 2004 script predates IOBES support).
* Found chunks are counted at their starts. A chunk is correct when both sides start one at
  the same token with the same type and both end it at the same token with no type difference
  in between (the script's ``inCorrect`` state machine, below).
* Precision = 100 * correct / found guessed, recall = 100 * correct / found correct, FB1 their
  harmonic mean (each 0 when undefined); accuracy = 100 * correct tags / tokens, boundary lines
  excluded.

``evaluate_file(path)`` / ``evaluate_lines(lines)`` score the script's input format,
``evaluate_tags(gold, guessed)`` sentences of tags, ``chunks(tags)`` lists the chunks the script
counts in one sentence. ``ConllEvalResult.report()`` is the script's output text.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from bert_common import files  # the file layer; loads TensorFlow only for URLs

BOUNDARY = "-X-"  # the script's $boundary: first field of a sentence-break line
OUTSIDE = "O"

# Perl's split on " " (awk mode, Perl >= 5.18): runs of ASCII whitespace, leading and trailing
# ones ignored. Not str.split(): that also splits on Unicode spaces (NBSP, U+0085, ...), which
# the byte-oriented script keeps inside a field.
_WHITESPACE = re.compile(r"[ \t\n\r\f\v]+")

# Prefix pairs (previous, current) from the script's endOfChunk / startOfChunk.
_END_PAIRS = frozenset(
    {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")}
)
_START_PAIRS = frozenset(
    {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")}
)
_NO_TYPE_RULE = ("O", ".")  # prefixes exempt from the "type changed" rule
_SINGLE = ("[", "]")  # chunks of length one


def _split_tag(tag: str) -> Tuple[str, str]:
    """(prefix, type) as the 2004-01-26 script: ``/^([^-]*)-(.*)$/``, else the whole tag."""
    prefix, _, chunk_type = tag.partition("-")
    # `$type = $type ? $type : ""`: Perl's false strings are "" and "0", so a type "0" is none.
    if chunk_type == "0":
        chunk_type = ""
    return prefix, chunk_type


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, chunk_type: str) -> bool:
    """Whether a chunk ended between the previous and the current token (``endOfChunk``)."""
    return (
        (prev_tag, tag) in _END_PAIRS
        or (prev_tag not in _NO_TYPE_RULE and prev_type != chunk_type)
        or prev_tag in _SINGLE
    )


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, chunk_type: str) -> bool:
    """Whether a chunk started at the current token (``startOfChunk``)."""
    return (
        (prev_tag, tag) in _START_PAIRS
        or (tag not in _NO_TYPE_RULE and prev_type != chunk_type)
        or tag in _SINGLE
    )


def _byte_key(name: str) -> bytes:
    # Perl compares and pads byte strings: sort and measure types by their bytes.
    return name.encode("utf-8", "surrogateescape")


def _scores(correct: int, guessed: int, gold: int) -> Tuple[float, float, float]:
    """Percent precision, recall, FB1, computed in the script's order of operations (so the
    floats are bit-identical to Perl's), 0 where a denominator is 0."""
    precision = 100 * correct / guessed if guessed > 0 else 0.0
    recall = 100 * correct / gold if gold > 0 else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


@dataclasses.dataclass
class ConllEvalResult:
    """The script's counters; scores and the report are derived from them.

    Per-type dicts are keyed by chunk type (``""`` for chunks of tags without a type, such as a
    bare ``B``); a type absent from a dict has count 0.

    Args:
        tokens: scored lines (sentence boundaries excluded).
        correct_tags: tokens whose correct and guessed tags agree.
        found_correct: chunks in the correct tags.
        found_guessed: chunks in the guessed tags.
        correct_chunks: guessed chunks that match a correct one exactly.
        found_correct_by_type: ``found_correct`` per chunk type.
        found_guessed_by_type: ``found_guessed`` per chunk type.
        correct_chunks_by_type: ``correct_chunks`` per chunk type.
    """

    tokens: int = 0  # scored lines (sentence boundaries excluded)
    correct_tags: int = 0  # tokens whose correct and guessed tags agree
    found_correct: int = 0  # chunks in the correct tags
    found_guessed: int = 0  # chunks in the guessed tags
    correct_chunks: int = 0  # guessed chunks that match a correct one exactly
    found_correct_by_type: Dict[str, int] = dataclasses.field(default_factory=dict)
    found_guessed_by_type: Dict[str, int] = dataclasses.field(default_factory=dict)
    correct_chunks_by_type: Dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def precision(self) -> float:
        """Percent of guessed chunks that are correct (0 when none was guessed)."""
        return _scores(self.correct_chunks, self.found_guessed, self.found_correct)[0]

    @property
    def recall(self) -> float:
        """Percent of correct chunks that were found (0 when there are none)."""
        return _scores(self.correct_chunks, self.found_guessed, self.found_correct)[1]

    @property
    def f1(self) -> float:
        """FB1: harmonic mean of precision and recall, percent (0 when both are 0)."""
        return _scores(self.correct_chunks, self.found_guessed, self.found_correct)[2]

    @property
    def accuracy(self) -> float:
        """Percent of tokens whose tag is right (0 with no tokens; the script prints none)."""
        return 100 * self.correct_tags / self.tokens if self.tokens > 0 else 0.0

    @property
    def types(self) -> List[str]:
        """Chunk types seen on either side, sorted as the script sorts (by bytes)."""
        return sorted(
            set(self.found_correct_by_type) | set(self.found_guessed_by_type), key=_byte_key
        )

    def type_scores(self, chunk_type: str) -> Tuple[float, float, float, int]:
        """(precision, recall, FB1, number of guessed chunks) for one type, percent.

        Args:
            chunk_type: the entity type (``"PER"``).

        Returns:
            ``(precision, recall, FB1, guessed)``.
        """
        guessed = self.found_guessed_by_type.get(chunk_type, 0)
        precision, recall, f1 = _scores(
            self.correct_chunks_by_type.get(chunk_type, 0),
            guessed,
            self.found_correct_by_type.get(chunk_type, 0),
        )
        return precision, recall, f1, guessed

    def metrics(self) -> Dict[str, float]:
        """``precision``, ``recall``, ``f1``, ``accuracy`` and per type ``<TYPE>_precision``,
        ``<TYPE>_recall``, ``<TYPE>_f1``, ``<TYPE>_count`` (guessed chunks): percent, unrounded."""
        out: Dict[str, float] = {
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "accuracy": self.accuracy,
        }
        for chunk_type in self.types:
            precision, recall, f1, count = self.type_scores(chunk_type)
            out[f"{chunk_type}_precision"] = precision
            out[f"{chunk_type}_recall"] = recall
            out[f"{chunk_type}_f1"] = f1
            out[f"{chunk_type}_count"] = float(count)
        return out

    def _report_types(self) -> List[str]:
        # The script's de-duplication of the sorted keys of both hashes is
        # `if (not($lastType) or $lastType ne $i)`: the empty type is false in Perl, so when both
        # sides have typeless chunks their line is printed twice. Kept, for the exact text.
        keys = sorted(
            list(self.found_correct_by_type) + list(self.found_guessed_by_type), key=_byte_key
        )
        kept: List[str] = []
        last: Optional[str] = None
        for key in keys:
            if not last or last != key:
                kept.append(key)
            last = key
        return kept

    def report(self) -> str:
        """The script's output, byte for byte (as text)."""
        lines = [
            f"processed {self.tokens} tokens with {self.found_correct} phrases; "
            f"found: {self.found_guessed} phrases; correct: {self.correct_chunks}.\n"
        ]
        if self.tokens > 0:
            lines.append(
                "accuracy: %6.2f%%; precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f\n"
                % (self.accuracy, self.precision, self.recall, self.f1)
            )
        for chunk_type in self._report_types():
            precision, recall, f1, count = self.type_scores(chunk_type)
            # printf "%17s" pads to 17 bytes, not characters.
            padded = " " * max(0, 17 - len(_byte_key(chunk_type))) + chunk_type
            lines.append(
                "%s: precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f  %d\n"
                % (padded, precision, recall, f1, count)
            )
        return "".join(lines)


def _increment(counts: Dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


class _Scorer:
    """The script's main loop, one token (or boundary) at a time."""

    def __init__(self) -> None:
        self.result = ConllEvalResult()
        self.in_correct = False  # the chunk being read matches on both sides so far
        self.last_correct, self.last_correct_type = OUTSIDE, ""
        self.last_guessed, self.last_guessed_type = OUTSIDE, ""

    def add(self, correct_tag: str, guessed_tag: str, boundary: bool) -> None:
        r = self.result
        correct, correct_type = _split_tag(correct_tag)
        guessed, guessed_type = _split_tag(guessed_tag)
        if boundary:
            # The script forces a break outside any chunk (1999-06-26); without -r its tags are
            # already O O, so this only mirrors it.
            guessed = OUTSIDE

        end_correct = _end_of_chunk(
            self.last_correct, correct, self.last_correct_type, correct_type
        )
        end_guessed = _end_of_chunk(
            self.last_guessed, guessed, self.last_guessed_type, guessed_type
        )
        start_correct = _start_of_chunk(
            self.last_correct, correct, self.last_correct_type, correct_type
        )
        start_guessed = _start_of_chunk(
            self.last_guessed, guessed, self.last_guessed_type, guessed_type
        )

        if self.in_correct:
            if end_correct and end_guessed and self.last_guessed_type == self.last_correct_type:
                # Both sides close the chunk they opened together: a correct chunk.
                self.in_correct = False
                r.correct_chunks += 1
                _increment(r.correct_chunks_by_type, self.last_correct_type)
            elif end_correct != end_guessed or guessed_type != correct_type:
                # One side ends (or changes type) where the other does not: no match.
                self.in_correct = False

        if start_correct and start_guessed and guessed_type == correct_type:
            self.in_correct = True
        if start_correct:
            r.found_correct += 1
            _increment(r.found_correct_by_type, correct_type)
        if start_guessed:
            r.found_guessed += 1
            _increment(r.found_guessed_by_type, guessed_type)

        if not boundary:
            # Compared after splitting, as the script does: prefix and type.
            if correct == guessed and guessed_type == correct_type:
                r.correct_tags += 1
            r.tokens += 1

        self.last_correct, self.last_correct_type = correct, correct_type
        self.last_guessed, self.last_guessed_type = guessed, guessed_type

    def finish(self) -> ConllEvalResult:
        # A chunk still open at the end of the input is closed by it.
        if self.in_correct:
            self.in_correct = False
            self.result.correct_chunks += 1
            _increment(self.result.correct_chunks_by_type, self.last_correct_type)
        return self.result


def evaluate_lines(lines: Iterable[str], *, source: str = "<lines>") -> ConllEvalResult:
    """Score lines in the script's input format (``... correct_tag guessed_tag``; a trailing
    newline on each line is fine; a single ``str`` is taken as a whole text).

    Raises ``ValueError`` ("``source``:``line``: ...", 1-based) for a line with a different
    number of fields than the first non-empty line, or fewer than two (the script's errors).

    Args:
        lines: the lines (or one str).
        source: the name in messages.

    Returns:
        The ``ConllEvalResult``.

    Raises:
        ValueError: a line with too few or an unexpected number of columns.
    """
    if isinstance(lines, str):
        lines = files.split_lines(lines)  # as Perl's <STDIN> reads them
    scorer = _Scorer()
    expected: Optional[int] = None  # the script's $nbrOfFeatures: set by a non-empty line
    expected_line = 0
    for number, line in enumerate(lines, 1):
        features = [field for field in _WHITESPACE.split(line) if field]
        if expected is None:
            if features:
                expected, expected_line = len(features), number
        elif features and len(features) != expected:
            raise ValueError(
                f"{source}:{number}: expected {expected} columns, got {len(features)} "
                f"(as on line {expected_line})"
            )
        # The count check above comes first, as in the script: a "-X-" line needs the same
        # number of fields as the others, and then reads as "-X- O O" whatever its tags are.
        boundary = not features or features[0] == BOUNDARY
        if boundary:
            features = [BOUNDARY, OUTSIDE, OUTSIDE]
        if len(features) < 2:
            raise ValueError(
                f"{source}:{number}: expected at least 2 columns (correct and guessed tag), "
                f"got {len(features)}"
            )
        scorer.add(features[-2], features[-1], boundary)
    return scorer.finish()


def evaluate_file(path: str) -> ConllEvalResult:
    """Score a file in the script's input format (local path or ``gs://``); errors name
    ``path`` and the line.

    Args:
        path: the file.

    Returns:
        The ``ConllEvalResult``.
    """
    with files.open(path, "rb") as f:
        data = f.read()
    # Split at b"\n" only (a lone "\r" is no line break for Perl). Bytes that are not UTF-8 (a
    # Latin-1 word column, as in older CoNLL files) pass through, as through the byte-oriented
    # script, as surrogate escapes.
    text = data.decode("utf-8", "surrogateescape")
    return evaluate_lines(files.split_lines(text), source=path)


def evaluate_tags(
    gold: Sequence[Sequence[str]], guessed: Sequence[Sequence[str]]
) -> ConllEvalResult:
    """Score sentences of tags: the same as the lines ``w <gold> <guessed>`` with an empty line
    after each sentence.

    Raises ``ValueError`` when the numbers of sentences or of tags in a sentence differ, when a
    sentence is a string rather than a sequence of tags, or when a tag is empty or contains
    whitespace (it would not be one field of a line).

    Args:
        gold: the true tags, per sentence.
        guessed: the predicted tags, per sentence.

    Returns:
        The ``ConllEvalResult``.

    Raises:
        ValueError: sentences or tags that do not pair up, or a malformed tag.
    """
    if len(gold) != len(guessed):
        raise ValueError(f"{len(gold)} gold sentences but {len(guessed)} guessed sentences")
    scorer = _Scorer()
    for number, (gold_tags, guessed_tags) in enumerate(zip(gold, guessed), 1):
        if isinstance(gold_tags, str) or isinstance(guessed_tags, str):
            raise ValueError(f"sentence {number} is a string, not a sequence of tags")
        if len(gold_tags) != len(guessed_tags):
            raise ValueError(
                f"sentence {number}: {len(gold_tags)} gold tags but {len(guessed_tags)} guessed"
            )
        for index, (gold_tag, guessed_tag) in enumerate(zip(gold_tags, guessed_tags), 1):
            for tag in (gold_tag, guessed_tag):
                if not tag or _WHITESPACE.search(tag):
                    raise ValueError(
                        f"sentence {number}, token {index}: tag {tag!r} is empty or contains "
                        "whitespace"
                    )
            scorer.add(gold_tag, guessed_tag, boundary=False)
        scorer.add(OUTSIDE, OUTSIDE, boundary=True)  # the empty line after the sentence
    return scorer.finish()


def chunks(tags: Sequence[str]) -> List[Tuple[str, int, int]]:
    """The chunks the script counts in one sentence: ``(type, start, end)``, end exclusive.

    One chunk per ``startOfChunk``; it runs until the next ``endOfChunk`` or start, or the end
    of the sentence. ``["B-PER", "I-PER", "O", "I-LOC"]`` -> ``[("PER", 0, 2), ("LOC", 3, 4)]``.
    For IOB tags, the script's correct count is the number of chunks two sentences share.

    Args:
        tags: one sentence's tags.

    Returns:
        The ``(type, start, end)`` chunks, in order.
    """
    found: List[Tuple[str, int, int]] = []
    prev_tag, prev_type = OUTSIDE, ""
    begin: Optional[int] = None
    begin_type = ""
    for index, tag in enumerate(tags):
        prefix, chunk_type = _split_tag(tag)
        starts = _start_of_chunk(prev_tag, prefix, prev_type, chunk_type)
        if begin is not None and (starts or _end_of_chunk(prev_tag, prefix, prev_type, chunk_type)):
            found.append((begin_type, begin, index))
            begin = None
        if starts:
            begin, begin_type = index, chunk_type
        prev_tag, prev_type = prefix, chunk_type
    if begin is not None:
        found.append((begin_type, begin, len(tags)))
    return found
