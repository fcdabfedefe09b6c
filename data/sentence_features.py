"""Input side of ``extract_features.py``: lines -> examples -> fixed-length features.

As the original: one example per line (``text_a ||| text_b`` for a pair, split by the regex
``^(.*) \\|\\|\\| (.*)$`` after ``strip()``); ``unique_id`` is the line number from 0. Features are
``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` (type ids 0 for the first part, 1 for b and its
[SEP]), pairs truncated to ``seq_length - 3`` tokens by the project's one pair-truncation rule
(``data.glue.features._truncate_seq_pair``), singles cut to ``seq_length - 2``; ids, mask and type ids zero-padded to ``seq_length``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterator, List, Optional

from bert_common import files
from bert_common.errors import InputError
from data.glue.features import pad_features, pair_tokens

_PAIR_RE = re.compile(r"^(.*) \|\|\| (.*)$")


class SentenceFileError(InputError):
    """An input file of ``extract_features.py`` that cannot be read (the message names it)."""


@dataclasses.dataclass
class InputExample:
    """One line of an input file of ``extract_features.py``.

    Args:
        unique_id: the line's number (0-based), matched in the output.
        text_a: the text, or its first part (``text_a ||| text_b``).
        text_b: the second part, or None.
    """
    unique_id: int
    text_a: str
    text_b: Optional[str] = None


@dataclasses.dataclass
class InputFeatures:
    """One example as model input: ``tokens`` (real tokens only) and padded int lists.

    Args:
        unique_id: the example's ``unique_id``.
        tokens: ``[CLS] a [SEP] (b [SEP])``, unpadded.
        input_ids: [seq_length] token ids, 0-padded.
        input_mask: [seq_length], 1 on real tokens.
        input_type_ids: [seq_length] segment ids.
    """

    unique_id: int
    tokens: List[str]
    input_ids: List[int]
    input_mask: List[int]
    input_type_ids: List[int]


def read_examples(input_file: str) -> List[InputExample]:
    """Reads every line as one example. The text must be UTF-8: the original (Python 3) stops
    with a ``UnicodeDecodeError`` traceback on other bytes; here it is a ``SentenceFileError``
    naming the file and line.

    Args:
        input_file: the text file (local or URL), one example per line.

    Returns:
        The examples, in file order.

    Raises:
        SentenceFileError: the file is missing or not UTF-8.
    """
    text = files.read_utf8(input_file, SentenceFileError, strip_bom=False)
    lines = files.split_lines(text)  # lines end at "\n" only, as the original's readline
    examples = []
    for unique_id, line in enumerate(lines):
        match = _PAIR_RE.match(line.strip())
        if match is None:
            examples.append(InputExample(unique_id, line.strip()))
        else:
            examples.append(InputExample(unique_id, match.group(1), match.group(2)))
    return examples


def convert_examples_to_features(examples: List[InputExample], seq_length: int,
                                 tokenizer) -> Iterator[InputFeatures]:
    """Yields one ``InputFeatures`` per example (see the module docstring).

    Args:
        examples: the examples.
        seq_length: S, the padded length.
        tokenizer: a ``FullTokenizer`` / ``FastFullTokenizer``.

    Yields:
        ``InputFeatures``, in example order.
    """
    for example in examples:
        tokens_a = tokenizer.tokenize(example.text_a)
        tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
        tokens, type_ids, _ = pair_tokens(tokens_a, tokens_b, seq_length)
        yield InputFeatures(example.unique_id, tokens, *pad_features(
            tokenizer.convert_tokens_to_ids(tokens), type_ids, seq_length))
