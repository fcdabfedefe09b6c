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

from bert_common import files as io_utils
from data.glue.features import _truncate_seq_pair
from data.tokenization import special_tokens
from data.tokenization import wordpiece as tokenization

_PAIR_RE = re.compile(r"^(.*) \|\|\| (.*)$")


@dataclasses.dataclass
class InputExample:
    unique_id: int
    text_a: str
    text_b: Optional[str] = None


@dataclasses.dataclass
class InputFeatures:
    """One example as model input: ``tokens`` (real tokens only) and padded int lists."""

    unique_id: int
    tokens: List[str]
    input_ids: List[int]
    input_mask: List[int]
    input_type_ids: List[int]


def read_examples(input_file: str) -> List[InputExample]:
    """Reads every line (bytes, UTF-8 with errors ignored) as one example."""
    examples = []
    with io_utils.open(input_file, "rb") as reader:
        for unique_id, raw in enumerate(reader):
            line = tokenization.convert_to_unicode(raw).strip()
            match = _PAIR_RE.match(line)
            if match is None:
                examples.append(InputExample(unique_id, line))
            else:
                examples.append(InputExample(unique_id, match.group(1), match.group(2)))
    return examples


def convert_examples_to_features(examples: List[InputExample], seq_length: int,
                                 tokenizer) -> Iterator[InputFeatures]:
    """Yields one ``InputFeatures`` per example (see the module docstring)."""
    for example in examples:
        tokens_a = tokenizer.tokenize(example.text_a)
        tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
        if tokens_b:
            _truncate_seq_pair(tokens_a, tokens_b, seq_length - 3)
        elif len(tokens_a) > seq_length - 2:
            tokens_a = tokens_a[:seq_length - 2]
        tokens = [special_tokens.CLS] + tokens_a + [special_tokens.SEP]
        type_ids = [0] * len(tokens)
        if tokens_b:
            tokens += tokens_b + [special_tokens.SEP]
            type_ids += [1] * (len(tokens_b) + 1)
        input_ids = tokenizer.convert_tokens_to_ids(tokens)
        padding = [0] * (seq_length - len(input_ids))
        yield InputFeatures(example.unique_id, tokens, input_ids + padding,
                            [1] * len(input_ids) + padding, type_ids + padding)
