"""run_classifier's data processors: one per ``--task_name``, files -> ``InputExample`` lists.

Public names are the original's: ``InputExample``, ``PaddingInputExample``, ``InputFeatures``,
``DataProcessor`` (``get_train_examples(data_dir)``, ``get_dev_examples``, ``get_test_examples``,
``get_labels``) and the four processors the original has, which behave exactly like it:

* ``ColaProcessor``: ``train.tsv``/``dev.tsv`` have NO header (every line is an example: sentence
  = column 3, label = column 1); ``test.tsv`` has one (sentence = column 1).
* ``MrpcProcessor``: first line skipped by index (it starts with a BOM in the real files);
  text_a/text_b = columns 3/4, label = column 0; guid ``<split>-<line index>``.
* ``MnliProcessor``: ``dev_matched.tsv``/``test_matched.tsv``; text = columns 8/9, label = last
  column, guid ``<split>-<column 0>``. ``MnliMismatchedProcessor`` reads the ``*_mismatched`` files.
* ``XnliProcessor``: ``multinli/multinli.train.<lang>.tsv`` (``contradictory`` is renamed
  ``contradiction``) and ``xnli.dev.tsv`` filtered on the language column.

Every file is read as the original reads it: UTF-8 (strict), lines split on ``\\n`` only, then
``csv.reader(delimiter="\\t", quotechar=None)``, so quote characters stay in the text.

The other GLUE tasks (``sst-2``, ``qqp``, ``sts-b``, ``qnli``, ``rte``, ``wnli``) find their
columns by header name, which covers both GLUE's TSV layout (``index sentence1 sentence2 label``)
and the Hugging Face ``datasets`` export (``sentence1 sentence2 label idx``, integer labels in HF's
class order, ``-1`` = unlabelled): the layout is detected from the header. ``sts-b`` is a
regression task (``get_labels()`` is ``[]``, labels are floats). ``tsv`` is a generic task for
your own data: a header naming ``text_a``, optional ``text_b`` and ``label`` (labels are the
sorted distinct labels of ``train.tsv``).

QQP skips (with a warning) lines too short for its columns, as other loaders do for GLUE's few
broken QQP lines; every other task fails on them. Test examples get the original's dummy label
(the first label, ``0.0`` for regression) and keep the file's id column in
``InputExample.index`` (for a GLUE submission file). Every example also records ``origin``
(``path:line``), so that an error about it can name the file and line. Bad input raises
``ClassifierDataError`` (a ``ValueError``) with one line naming the file and line.
"""

from __future__ import annotations

import csv
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

from absl import logging

from bert_common import files
from bert_common.errors import InputError

Label = Union[str, float]


class ClassifierDataError(InputError):
    """Unusable classifier input; the one-line message names the task, file and line."""


class InputExample:
    """A single train/dev/test example for sequence (pair) classification or regression.

    Args:
        guid: unique id.
        text_a: the first sequence (untokenized).
        text_b: the second sequence for pair tasks, else None.
        label: a string from ``get_labels()`` (float for regression).
        index: the test file's id column (GLUE submission), else None.
        origin: ``"path:line"`` where the example was read, else None.
    """

    def __init__(self, guid: str, text_a: str, text_b: Optional[str] = None,
                 label: Optional[Label] = None, index: Optional[str] = None,
                 origin: Optional[str] = None):
        self.guid = guid
        self.text_a = text_a
        self.text_b = text_b
        self.label = label
        self.index = index
        self.origin = origin

    def __repr__(self) -> str:
        return "InputExample(guid=%r, text_a=%r, text_b=%r, label=%r)" % (
            self.guid, self.text_a, self.text_b, self.label)


class PaddingInputExample:
    """A fake example that pads a batch to a fixed size; it becomes all-zero features with
    ``is_real_example = 0`` (so metrics ignore it), as the original's TPU path does."""


class InputFeatures:
    """One example as fixed-length model input: int lists of length ``max_seq_length``.

    Args:
        input_ids: WordPiece ids, 0-padded.
        input_mask: 1 for real tokens, 0 for padding.
        segment_ids: 0 for ``[CLS] a [SEP]``, 1 for ``b [SEP]``.
        label_id: int class index (float for regression).
        is_real_example: False for ``PaddingInputExample``.
    """

    def __init__(self, input_ids: List[int], input_mask: List[int], segment_ids: List[int],
                 label_id: Union[int, float], is_real_example: bool = True):
        self.input_ids = input_ids
        self.input_mask = input_mask
        self.segment_ids = segment_ids
        self.label_id = label_id
        self.is_real_example = is_real_example


# ------------------------------------------------------------------------------------ reading


def _column(row: Sequence[str], col: int, input_file: str, line_index: int, what: str) -> str:
    """``row[col]`` (negative allowed) or a ClassifierDataError naming the file and line."""
    if -len(row) <= col < len(row):
        return row[col]
    shown = col if col >= 0 else len(row) + col
    raise ClassifierDataError(
        "%s:%d: missing column %s (%s): the line has %d tab-separated column%s"
        % (input_file, line_index + 1, shown if shown >= 0 else col, what, len(row),
           "" if len(row) == 1 else "s"))


def _origin(input_file: str, line_index: int) -> str:
    return "%s:%d" % (input_file, line_index + 1)


# --------------------------------------------------------------------------------- processors


_GLUE_FILE_NAMES: Mapping[str, str] = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}


class DataProcessor:
    """Base class for data converters of sequence classification data sets.

    ``get_train_examples``, ``get_dev_examples``, ``get_test_examples`` (each
    ``data_dir -> List[InputExample]``) and ``get_labels`` (``[]`` for regression) are the API.
    A subclass either overrides the ``get_<split>_examples`` methods, or sets ``file_names``
    (split -> file name in ``data_dir``) and implements ``_create_examples(path, set_type)``:
    ``get_<split>_examples`` then checks that the file exists and reads it with
    ``set_type = set_types.get(split, split)`` (the guid prefix). A split that is absent from
    ``file_names`` raises ``NotImplementedError``, as does ``get_labels`` unless overridden.
    """

    #: The GLUE submission file name (``<name>.tsv``), or None when there is none.
    submission_name: Optional[str] = None
    #: Whether the task is a regression (float labels, a single output).
    is_regression: bool = False
    #: Split (``train``/``dev``/``test``) -> its file name in ``data_dir``.
    file_names: Mapping[str, str] = {}
    #: Split -> the ``set_type`` given to ``_create_examples``, where it is not the split name.
    set_types: Mapping[str, str] = {}

    def get_train_examples(self, data_dir: str) -> List[InputExample]:
        """The training examples.

        Args:
            data_dir: the task's folder.

        Returns:
            The examples, in file order.

        Raises:
            ClassifierDataError: a missing or unreadable file, a bad line (file and line named).
        """
        return self._split_examples(data_dir, "train")

    def get_dev_examples(self, data_dir: str) -> List[InputExample]:
        """The dev examples (as ``get_train_examples``).

        Args:
            data_dir: the task's folder.

        Returns:
            The examples, in file order.
        """
        return self._split_examples(data_dir, "dev")

    def get_test_examples(self, data_dir: str) -> List[InputExample]:
        """The test examples (labels may be absent; as ``get_train_examples``).

        Args:
            data_dir: the task's folder.

        Returns:
            The examples, in file order.
        """
        return self._split_examples(data_dir, "test")

    def get_labels(self) -> List[str]:
        """The label strings, in class-index order (``[]`` for regression)."""
        raise NotImplementedError()

    def _split_examples(self, data_dir: str, split: str) -> List[InputExample]:
        """The examples of ``split``: ``file_names[split]`` in ``data_dir``, read by
        ``_create_examples``."""
        if split not in self.file_names:
            raise NotImplementedError()
        path = self._split_file(data_dir, self.file_names[split], split)
        return self._create_examples(path, self.set_types.get(split, split))

    def _create_examples(self, path: str, set_type: str) -> List[InputExample]:
        """The examples of the file ``path``; ``set_type`` is the guid prefix."""
        raise NotImplementedError()

    @classmethod
    def _read_tsv(cls, input_file: str, quotechar: Optional[str] = None) -> List[List[str]]:
        """Reads a tab separated value file: all its rows, read like the original's
        ``_read_tsv``.

        UTF-8 (strict), split on ``\\n`` only (``\\r`` before it is dropped by ``csv``), then
        ``csv.reader(delimiter="\\t", quotechar=quotechar)``. Raises ``ClassifierDataError`` for
        a missing, unreadable, non-UTF-8 or empty file.

        Args:
            input_file: local path or ``gs://`` URL.
            quotechar: ``csv``'s quote character (None: quotes are text, as GLUE files need).

        Returns:
            The rows, each a list of column strings.

        Raises:
            ClassifierDataError: a missing, unreadable, non-UTF-8 or empty file.
        """
        text = files.read_utf8(input_file, ClassifierDataError, strip_bom=False,
                               require_text=True)
        lines = files.split_lines(text)  # the final newline does not start a row
        try:
            return list(csv.reader([line + "\n" for line in lines], delimiter="\t",
                                   quotechar=quotechar))
        except csv.Error as e:
            raise ClassifierDataError("%s: not a readable TSV (%s)" % (input_file, e)) from None

    def _split_file(self, data_dir: str, file_name: str, split: str) -> str:
        path = os.path.join(data_dir, file_name)
        if not files.isdir(data_dir):
            raise ClassifierDataError("--data_dir %s: no such directory" % data_dir)
        if files.isdir(path):
            raise ClassifierDataError("%s is a folder, not the %s split's file" % (path, split))
        if not files.isfile(path):
            raise ClassifierDataError("%s: no %s split in --data_dir (expected file %s)"
                                      % (path, split, file_name))
        return path

    def _check_label(self, label: Label, input_file: str, line_index: int) -> Label:
        labels = self.get_labels()
        if labels and label not in labels:
            raise ClassifierDataError("%s:%d: label %r is not one of the task's labels %s"
                                      % (input_file, line_index + 1, label, labels))
        return label


class XnliProcessor(DataProcessor):
    """XNLI (the original's layout; ``language`` defaults to ``zh`` like the original).

    Args:
        language: the XNLI language of the training file (``multinli.train.<language>.tsv``).
    """

    file_names = {"dev": "xnli.dev.tsv", "test": "xnli.test.tsv"}

    def __init__(self, language: str = "zh"):
        self.language = language

    def get_train_examples(self, data_dir: str) -> List[InputExample]:
        """The training examples of ``self.language``.

        Args:
            data_dir: the XNLI folder (holding ``multinli/``).

        Returns:
            The examples, in file order.
        """
        path = self._split_file(data_dir, os.path.join(
            "multinli", "multinli.train.%s.tsv" % self.language), "train")
        examples = []
        for i, line in enumerate(self._read_tsv(path)):
            if i == 0 or not line:
                continue
            label = _column(line, 2, path, i, "label")
            if label == "contradictory":
                label = "contradiction"
            examples.append(InputExample(
                guid="train-%d" % i, text_a=_column(line, 0, path, i, "premise"),
                text_b=_column(line, 1, path, i, "hypo"),
                label=self._check_label(label, path, i), origin=_origin(path, i)))
        return examples

    def get_labels(self) -> List[str]:
        return ["contradiction", "entailment", "neutral"]

    def _create_examples(self, path: str, set_type: str) -> List[InputExample]:
        """``xnli.dev.tsv``/``xnli.test.tsv``: the rows of ``self.language``."""
        examples = []
        for i, line in enumerate(self._read_tsv(path)):
            if i == 0 or not line:
                continue
            if _column(line, 0, path, i, "language") != self.language:
                continue
            text_a = _column(line, 6, path, i, "sentence1")
            text_b = _column(line, 7, path, i, "sentence2")
            if set_type == "test":
                label = self.get_labels()[0]
            else:
                label = self._check_label(_column(line, 1, path, i, "gold_label"), path, i)
            examples.append(InputExample(
                guid="%s-%d" % (set_type, i), text_a=text_a, text_b=text_b, label=label,
                index=str(i - 1) if set_type == "test" else None, origin=_origin(path, i)))
        return examples


class MnliProcessor(DataProcessor):
    """MultiNLI matched (GLUE layout, as the original)."""

    submission_name = "MNLI-m"
    file_names = {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"}
    set_types = {"dev": "dev_matched"}

    def get_labels(self) -> List[str]:
        return ["contradiction", "entailment", "neutral"]

    def _create_examples(self, path: str, set_type: str) -> List[InputExample]:
        examples = []
        for i, line in enumerate(self._read_tsv(path)):
            if i == 0 or not line:
                continue
            index = _column(line, 0, path, i, "index")
            text_a = _column(line, 8, path, i, "sentence1")
            text_b = _column(line, 9, path, i, "sentence2")
            if set_type == "test":
                label = "contradiction"
            else:
                label = self._check_label(_column(line, -1, path, i, "gold_label"), path, i)
            examples.append(InputExample(
                guid="%s-%s" % (set_type, index), text_a=text_a, text_b=text_b, label=label,
                index=index if set_type == "test" else None, origin=_origin(path, i)))
        return examples


class MnliMismatchedProcessor(MnliProcessor):
    """MultiNLI mismatched (``dev_mismatched.tsv``, ``test_mismatched.tsv``)."""

    submission_name = "MNLI-mm"
    file_names = {"train": "train.tsv", "dev": "dev_mismatched.tsv",
                  "test": "test_mismatched.tsv"}
    set_types = {"dev": "dev_mismatched"}


class MrpcProcessor(DataProcessor):
    """MRPC (GLUE layout, as the original: the header line is skipped by index)."""

    submission_name = "MRPC"
    file_names = _GLUE_FILE_NAMES

    def get_labels(self) -> List[str]:
        return ["0", "1"]

    def _create_examples(self, path: str, set_type: str) -> List[InputExample]:
        examples = []
        for i, line in enumerate(self._read_tsv(path)):
            if i == 0 or not line:
                continue
            text_a = _column(line, 3, path, i, "#1 String")
            text_b = _column(line, 4, path, i, "#2 String")
            if set_type == "test":
                label = "0"
            else:
                label = self._check_label(_column(line, 0, path, i, "Quality"), path, i)
            examples.append(InputExample(
                guid="%s-%s" % (set_type, i), text_a=text_a, text_b=text_b, label=label,
                index=line[0] if set_type == "test" else None, origin=_origin(path, i)))
        return examples


class ColaProcessor(DataProcessor):
    """CoLA (GLUE layout, as the original: only the test file has a header)."""

    submission_name = "CoLA"
    file_names = _GLUE_FILE_NAMES

    def get_labels(self) -> List[str]:
        return ["0", "1"]

    def _create_examples(self, path: str, set_type: str) -> List[InputExample]:
        examples = []
        for i, line in enumerate(self._read_tsv(path)):
            # Only the test set has a header.
            if (set_type == "test" and i == 0) or not line:
                continue
            guid = "%s-%s" % (set_type, i)
            if set_type == "test":
                examples.append(InputExample(
                    guid=guid, text_a=_column(line, 1, path, i, "sentence"), label="0",
                    index=line[0], origin=_origin(path, i)))
            else:
                text_a = _column(line, 3, path, i, "sentence")
                label = self._check_label(_column(line, 1, path, i, "label"), path, i)
                examples.append(InputExample(guid=guid, text_a=text_a, label=label,
                                             origin=_origin(path, i)))
        return examples


class HeaderTsvProcessor(DataProcessor):
    """A GLUE task whose columns are found by header name (GLUE or HF-datasets export layout).

    Subclasses set ``text_a_names`` / ``text_b_names`` / ``label_names`` / ``index_names``
    (accepted header names, first match wins), ``labels`` and ``hf_label_names`` (the HF class
    order of integer labels; ``-1`` means unlabelled). File names: ``train.tsv``, ``dev.tsv``,
    ``test.tsv``.
    """

    text_a_names: Sequence[str] = ()
    text_b_names: Sequence[str] = ()
    label_names: Sequence[str] = ("label",)
    index_names: Sequence[str] = ("index", "idx", "id")
    labels: Sequence[str] = ()
    hf_label_names: Sequence[str] = ()
    file_names = _GLUE_FILE_NAMES
    #: Skip (with a warning) rows too short to hold the needed columns instead of failing:
    #: GLUE's QQP train file has a few broken lines, which other loaders skip too.
    skip_short_rows = False

    def get_labels(self) -> List[str]:
        return list(self.labels)

    def _dummy_label(self) -> Label:
        return 0.0 if self.is_regression else self.get_labels()[0]

    @staticmethod
    def _find(header: Sequence[str], names: Sequence[str]) -> Optional[int]:
        stripped = [h.strip().lstrip("\ufeff") for h in header]
        for name in names:
            if name in stripped:
                return stripped.index(name)
        return None

    def _convert_label(self, raw: str, path: str, line_index: int) -> Optional[Label]:
        """File label -> task label; None for an unlabelled row (HF's ``-1``)."""
        raw = raw.strip()
        if self.is_regression:
            try:
                return float(raw)
            except ValueError:
                raise ClassifierDataError("%s:%d: label %r is not a number"
                                          % (path, line_index + 1, raw)) from None
        if raw not in self.get_labels() and self.hf_label_names:
            try:
                k = int(raw)
            except ValueError:
                k = None
            if k == -1:
                return None
            if k is not None and 0 <= k < len(self.hf_label_names):
                raw = self.hf_label_names[k]
        return self._check_label(raw, path, line_index)

    def _create_examples(self, path: str, set_type: str) -> List[InputExample]:
        rows = self._read_tsv(path)
        header = rows[0]
        col_a = self._find(header, self.text_a_names)
        col_b = self._find(header, self.text_b_names) if self.text_b_names else None
        col_label = self._find(header, self.label_names)
        col_index = self._find(header, self.index_names)
        missing = [names[0] for names, col in ((self.text_a_names, col_a),
                                               (self.text_b_names, col_b)) if names and col is None]
        if set_type != "test" and col_label is None:
            missing.append(self.label_names[0])
        if missing:
            raise ClassifierDataError("%s:1: header %s lacks the column%s %s"
                                      % (path, "\t".join(header), "s" if len(missing) > 1 else "",
                                         ", ".join(missing)))
        examples = []
        needed = max(c for c in (col_a, col_b, col_label if set_type != "test" else None)
                     if c is not None)
        skipped = []
        for i, line in enumerate(rows):
            if i == 0 or not line:
                continue
            if self.skip_short_rows and len(line) <= needed:
                skipped.append(_origin(path, i))
                continue
            text_a = _column(line, col_a, path, i, header[col_a])
            text_b = _column(line, col_b, path, i, header[col_b]) if col_b is not None else None
            if set_type == "test":
                label: Optional[Label] = self._dummy_label()  # test labels are never read
            else:
                label = self._convert_label(_column(line, col_label, path, i, header[col_label]),
                                            path, i)
                if label is None:
                    raise ClassifierDataError("%s:%d: unlabelled example (label -1) in the %s split"
                                              % (path, i + 1, set_type))
            index = None
            if set_type == "test":
                index = line[col_index] if col_index is not None and col_index < len(line) \
                    else str(i - 1)
            examples.append(InputExample(guid="%s-%s" % (set_type, i), text_a=text_a,
                                         text_b=text_b, label=label, index=index,
                                         origin=_origin(path, i)))
        if skipped:
            logging.warning("%s: skipped %d line(s) with missing columns (first: %s)",
                            path, len(skipped), skipped[0])
        return examples


class Sst2Processor(HeaderTsvProcessor):
    submission_name = "SST-2"
    text_a_names = ("sentence",)
    labels = ("0", "1")
    hf_label_names = ("0", "1")


class QqpProcessor(HeaderTsvProcessor):
    submission_name = "QQP"
    skip_short_rows = True
    text_a_names = ("question1",)
    text_b_names = ("question2",)
    label_names = ("is_duplicate", "label")
    labels = ("0", "1")
    hf_label_names = ("0", "1")


class StsbProcessor(HeaderTsvProcessor):
    """STS-B: a regression on the ``score`` column (0..5)."""

    submission_name = "STS-B"
    is_regression = True
    text_a_names = ("sentence1",)
    text_b_names = ("sentence2",)
    label_names = ("score", "label")


class QnliProcessor(HeaderTsvProcessor):
    submission_name = "QNLI"
    text_a_names = ("question",)
    text_b_names = ("sentence",)
    labels = ("entailment", "not_entailment")
    hf_label_names = ("entailment", "not_entailment")


class RteProcessor(HeaderTsvProcessor):
    """RTE: GLUE layout (``index sentence1 sentence2 label``) or the HF export
    (``sentence1 sentence2 label idx``, 0 = entailment, 1 = not_entailment, -1 = unlabelled)."""

    submission_name = "RTE"
    text_a_names = ("sentence1",)
    text_b_names = ("sentence2",)
    labels = ("entailment", "not_entailment")
    hf_label_names = ("entailment", "not_entailment")


class WnliProcessor(HeaderTsvProcessor):
    submission_name = "WNLI"
    text_a_names = ("sentence1",)
    text_b_names = ("sentence2",)
    labels = ("0", "1")
    hf_label_names = ("0", "1")


class TsvProcessor(HeaderTsvProcessor):
    """Your own task: ``train.tsv``/``dev.tsv``/``test.tsv`` with a header naming ``text_a``,
    optional ``text_b``, and ``label`` (optional in ``test.tsv``). The label list is the sorted
    set of ``train.tsv``'s labels (numerically sorted when they are all integers).

    Args:
        data_dir: the folder whose ``train.tsv`` gives the label list.
    """

    text_a_names = ("text_a",)
    text_b_names = ()
    label_names = ("label",)

    def __init__(self, data_dir: Optional[str] = None):
        self.data_dir = data_dir
        self._labels: Optional[List[str]] = None

    def get_labels(self) -> List[str]:
        if self._labels is None:
            if self.data_dir is None:
                raise ClassifierDataError("task tsv: the label list comes from train.tsv, "
                                          "but no --data_dir was given")
            path = self._split_file(self.data_dir, self.file_names["train"], "train")
            rows = self._read_tsv(path)
            col = self._find(rows[0], self.label_names)
            if col is None:
                raise ClassifierDataError("%s:1: header %s lacks the column label"
                                          % (path, "\t".join(rows[0])))
            found = {_column(row, col, path, i, "label").strip()
                     for i, row in enumerate(rows) if i > 0 and row}
            if not found:
                raise ClassifierDataError("%s: no labelled example after the header" % path)
            if all(label.lstrip("-").isdigit() for label in found):
                self._labels = sorted(found, key=int)
            else:
                self._labels = sorted(found)
        return list(self._labels)

    def _split_examples(self, data_dir: str, split: str) -> List[InputExample]:
        if self.data_dir is None:
            self.data_dir = data_dir
        return super()._split_examples(data_dir, split)

    def _create_examples(self, path: str, set_type: str) -> List[InputExample]:
        header = self._read_tsv(path)[0]
        self.text_b_names = ("text_b",) if self._find(header, ("text_b",)) is not None else ()
        return super()._create_examples(path, set_type)


# ------------------------------------------------------------------------------ task registry

# ``--task_name`` (lower case) -> processor factory. Factories take (data_dir, xnli_language).
PROCESSORS: Dict[str, Callable[[Optional[str], str], DataProcessor]] = {
    "cola": lambda data_dir, lang: ColaProcessor(),
    "sst-2": lambda data_dir, lang: Sst2Processor(),
    "mrpc": lambda data_dir, lang: MrpcProcessor(),
    "qqp": lambda data_dir, lang: QqpProcessor(),
    "sts-b": lambda data_dir, lang: StsbProcessor(),
    "mnli": lambda data_dir, lang: MnliProcessor(),
    "mnli-mm": lambda data_dir, lang: MnliMismatchedProcessor(),
    "qnli": lambda data_dir, lang: QnliProcessor(),
    "rte": lambda data_dir, lang: RteProcessor(),
    "wnli": lambda data_dir, lang: WnliProcessor(),
    "xnli": lambda data_dir, lang: XnliProcessor(lang),
    "tsv": lambda data_dir, lang: TsvProcessor(data_dir),
}
# Spellings also accepted (HF's names).
_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b", "mnli_mm": "mnli-mm",
            "mnli-mismatched": "mnli-mm", "mnlimm": "mnli-mm"}


def canonical_task_name(task_name: str) -> str:
    """``--task_name`` -> its key in ``PROCESSORS``; ClassifierDataError if unknown.

    Args:
        task_name: the name as given (any case; aliases accepted).

    Returns:
        The ``PROCESSORS`` key.

    Raises:
        ClassifierDataError: an unknown task.
    """
    name = task_name.strip().lower()
    name = _ALIASES.get(name, name)
    if name not in PROCESSORS:
        raise ClassifierDataError("--task_name=%s: unknown task (known: %s)"
                                  % (task_name, ", ".join(sorted(PROCESSORS))))
    return name


SPLITS = ("train", "dev", "test")


def get_examples(processor: DataProcessor, split: str, data_dir: str) -> List[InputExample]:
    """``processor.get_<split>_examples(data_dir)``; ClassifierDataError if it yields none.

    Args:
        processor: the task's processor.
        split: "train", "dev" or "test".
        data_dir: the task's folder.

    Returns:
        The examples.

    Raises:
        ValueError: an unknown ``split``.
    """
    if split not in SPLITS:
        raise ValueError("split must be one of %s, got %r" % (SPLITS, split))
    examples = getattr(processor, "get_%s_examples" % split)(data_dir)
    if not examples:
        raise ClassifierDataError("--data_dir %s: the %s split has no examples" % (data_dir, split))
    return examples


def get_processor(task_name: str, data_dir: Optional[str] = None,
                  xnli_language: str = "zh") -> DataProcessor:
    """The processor for ``--task_name`` (see ``PROCESSORS``).

    Args:
        task_name: the task (``canonical_task_name``).
        data_dir: the task's folder (``TsvProcessor`` reads its labels there).
        xnli_language: XNLI's language.

    Returns:
        A ``DataProcessor``.

    Raises:
        ClassifierDataError: an unknown task.
    """
    return PROCESSORS[canonical_task_name(task_name)](data_dir, xnli_language)
