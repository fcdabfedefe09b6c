"""CoNLL-2003 files: reader, tag schemes, label list and the predictions file.

The layout (``train.txt``/``valid.txt``/``test.txt`` of the CoNLL-2003 release)::

    -DOCSTART- -X- -X- O          <- a new document
                                  <- blank line: end of a sentence
    EU NNP B-NP B-ORG             <- token POS chunk NER: the first column is the word,
    rejects VBZ B-VP O               the last its tag
    ...

Every non-blank line of a file has the same number of whitespace-separated columns (fixed by
its first line, as ``conlleval``): two or more = word ... tag; one = words only (an unlabelled
file, for ``--do_predict``). A ``-DOCSTART-`` line starts a document (and ends a sentence).

Tags are ``O``, ``B-<type>`` or ``I-<type>``: IOB2 (every chunk starts with ``B-``) or IOB1 (a
chunk starts with ``I-``; ``B-`` only where a chunk follows one of the same type). Both are read
and turned into IOB2 (``to_iob2``): the chunks ``conlleval`` counts are the same in both, and
the model gets one tag set. The written predictions keep the file's own tags as the gold column.

Bad input raises ``NerDataError``: one line naming the file and line.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Optional, Sequence

from bert_common import atomic, files
from bert_common.errors import InputError

DOCSTART = "-DOCSTART-"
OUTSIDE = "O"


class NerDataError(InputError):
    """Unusable NER input; the one-line message names the file and line."""


@dataclasses.dataclass
class Sentence:
    """One sentence of a CoNLL file.

    ``words`` [W]; ``tags`` [W] as written in the file (None for an unlabelled file);
    ``lines`` [W]: the file's lines (columns joined by one space), for the predictions file;
    ``line_numbers`` [W] (1-based); ``document``: index of its document in the file;
    ``starts_document``: the ``-DOCSTART-`` line before it, if there is one.

    Args:
        words: [W] the words.
        tags: [W] the tags, or None.
        lines: [W] the file's lines.
        line_numbers: [W] their 1-based line numbers.
        document: the index of its document.
        path: the file it was read from.
        starts_document: the ``-DOCSTART-`` line before it, or None.
    """

    words: List[str]
    tags: Optional[List[str]]
    lines: List[str]
    line_numbers: List[int]
    document: int
    path: str
    starts_document: Optional[str] = None

    @property
    def origin(self) -> str:
        """``path:line`` of its first word."""
        return "%s:%d" % (self.path, self.line_numbers[0])

    @property
    def iob2_tags(self) -> Optional[List[str]]:
        return None if self.tags is None else to_iob2(self.tags)


def split_tag(tag: str):
    """``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", "")``.

    Args:
        tag: an IOB tag.

    Returns:
        ``(prefix, type)``.
    """
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def check_tag(tag: str, where: str) -> None:
    """``NerDataError`` unless ``tag`` is ``O``, ``B-<type>`` or ``I-<type>``.

    Args:
        tag: the tag.
        where: ``"path:line"``, for the message.

    Raises:
        NerDataError: not an IOB tag.
    """
    prefix, kind = split_tag(tag)
    if tag == OUTSIDE or (prefix in ("B", "I") and kind):
        return
    raise NerDataError("%s: tag %r is not O, B-<type> or I-<type> (IOB1/IOB2 tags)"
                       % (where, tag))


def to_iob2(tags: Sequence[str]) -> List[str]:
    """IOB1 (or IOB2) tags -> IOB2: an ``I-X`` that does not continue a chunk of type X (after
    ``O`` or a different type) becomes ``B-X``, as ``conlleval`` starts a chunk there.

    Args:
        tags: one sentence's tags.

    Returns:
        The IOB2 tags.
    """
    out = []
    previous = OUTSIDE
    for tag in tags:
        prefix, kind = split_tag(tag)
        if prefix == "I" and split_tag(previous)[1] != kind:
            tag = "B-" + kind
        out.append(tag)
        previous = tag
    return out


def _read_lines(path: str) -> List[str]:
    text = files.read_utf8(path, NerDataError)
    # Lines end at "\n" only (as conlleval reads them): str.splitlines would also break at
    # form feeds, U+0085, U+2028... inside a line and misnumber every line after.
    return [line[:-1] if line.endswith("\r") else line for line in files.split_lines(text)]


def read_conll(path: str, labelled: bool = True) -> List[Sentence]:
    """The sentences of the CoNLL file ``path`` (see the module docstring), in file order.

    ``labelled``: the last column must be a tag (False: a one-column file of words is also
    accepted, its sentences have ``tags`` None). Raises ``NerDataError`` naming the file and
    line for a column count that differs from the first line's, a bad tag, a file without a
    sentence.

    Args:
        path: the CoNLL file (local or ``gs://``).
        labelled: the file must have tags.

    Returns:
        The ``Sentence`` s.

    Raises:
        NerDataError: as above.
    """
    sentences: List[Sentence] = []
    columns = None
    document = -1
    pending_docstart: Optional[str] = None
    current: Optional[Sentence] = None

    def close():
        nonlocal current
        if current is not None:
            sentences.append(current)
            current = None

    for number, line in enumerate(_read_lines(path), start=1):
        fields = line.split()
        where = "%s:%d" % (path, number)
        if not fields:
            close()
            continue
        if columns is None:
            columns = len(fields)
            if columns < 2 and labelled:
                raise NerDataError("%s: 1 column; a labelled CoNLL file has the word first and "
                                   "its tag last" % where)
        elif len(fields) != columns:
            raise NerDataError("%s: %d columns, but the file's first line has %d"
                               % (where, len(fields), columns))
        if fields[0] == DOCSTART:
            close()
            document += 1
            pending_docstart = " ".join(fields)
            continue
        if current is None:
            if document < 0:
                document = 0  # a file without -DOCSTART- lines is one document
            current = Sentence(words=[], tags=[] if columns > 1 else None, lines=[],
                               line_numbers=[], document=document, path=path,
                               starts_document=pending_docstart)
            pending_docstart = None
        current.words.append(fields[0])
        if columns > 1:
            check_tag(fields[-1], where)
            current.tags.append(fields[-1])
        current.lines.append(" ".join(fields))
        current.line_numbers.append(number)
    close()
    if not sentences:
        raise NerDataError("%s: no sentence (an empty file, or only -DOCSTART- lines)" % path)
    return sentences


def documents(sentences: Sequence[Sentence]) -> List[List[int]]:
    """Sentence indexes grouped by document, in order.

    Args:
        sentences: the file's sentences.

    Returns:
        Per document, the indexes of its sentences.
    """
    groups: Dict[int, List[int]] = {}
    for index, sentence in enumerate(sentences):
        groups.setdefault(sentence.document, []).append(index)
    return [groups[key] for key in sorted(groups)]


def label_list(sentences: Iterable[Sentence]) -> List[str]:
    """``O`` then ``B-X``, ``I-X`` for every entity type X in ``sentences`` (sorted): the label
    set of a training file (both prefixes of a type, so that any IOB2 tag of it fits).

    Args:
        sentences: the training sentences.

    Returns:
        The labels, ``O`` first.
    """
    kinds = set()
    for sentence in sentences:
        for tag in sentence.tags or ():
            if tag != OUTSIDE:
                kinds.add(split_tag(tag)[1])
    return [OUTSIDE] + [prefix + "-" + kind for kind in sorted(kinds) for prefix in ("B", "I")]


def check_labels(sentences: Sequence[Sentence], labels: Sequence[str], flag_hint: str) -> None:
    """``NerDataError`` at the first tag of ``sentences`` (after IOB2) outside ``labels``.

    Args:
        sentences: the sentences to check.
        labels: the model's label list.
        flag_hint: what to name in the message (the flag giving the labels).

    Raises:
        NerDataError: a tag outside ``labels``.
    """
    known = set(labels)
    for sentence in sentences:
        if sentence.tags is None:
            continue
        for tag, number in zip(sentence.iob2_tags, sentence.line_numbers):
            if tag not in known:
                raise NerDataError("%s:%d: tag %s is not in the label set of %s (%s)"
                                   % (sentence.path, number, tag, flag_hint, " ".join(labels)))


def prediction_lines(sentences: Sequence[Sentence],
                     predictions: Sequence[Sequence[str]]) -> Iterable[str]:
    """The CoNLL file with one more column, the predicted tag: each word's line, then a blank
    line after every sentence; a ``-DOCSTART-`` line (predicted ``O``) and a blank line before
    a document's first sentence. ``conlleval`` reads it as it is.

    Args:
        sentences: the file's sentences.
        predictions: one predicted tag per word, per sentence.

    Returns:
        The lines, without newlines.

    Raises:
        ValueError: a sentence whose number of predictions differs from its words.
    """
    for sentence, tags in zip(sentences, predictions):
        if len(tags) != len(sentence.words):
            raise ValueError("%s: %d predictions for %d words"
                             % (sentence.origin, len(tags), len(sentence.words)))
        if sentence.starts_document is not None:
            yield "%s %s\n" % (sentence.starts_document, OUTSIDE)
            yield "\n"
        for line, tag in zip(sentence.lines, tags):
            yield "%s %s\n" % (line, tag)
        yield "\n"


def write_predictions(path: str, sentences: Sequence[Sentence],
                      predictions: Sequence[Sequence[str]]) -> None:
    """``prediction_lines`` written to ``path`` atomically (the file appears complete).

    Args:
        path: the file to write.
        sentences: the file's sentences.
        predictions: one predicted tag per word, per sentence.
    """
    with atomic.atomic_open(path) as writer:
        writer.writelines(prediction_lines(sentences, predictions))
