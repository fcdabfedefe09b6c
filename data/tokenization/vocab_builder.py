"""Builds a small WordPiece vocabulary from text, for demos and tests.

Not Google's vocabulary-learning algorithm: it keeps the special tokens, every
character seen (alone and as a ``##`` continuation), then the most frequent
whole basic tokens. Every word of the source text is therefore tokenizable
without ``[UNK]``, and frequent words are single pieces.
"""

from __future__ import annotations

import collections
import os
from typing import Iterable, List

from bert_common import files as io_utils
from bert_common.files import atomic_open
from data.tokenization import special_tokens
from data.tokenization.wordpiece import BasicTokenizer


def build_vocab(lines: Iterable[str], do_lower_case: bool = True, max_words: int = 2000) -> List[str]:
    """Returns the vocabulary tokens, in file order ([PAD] first, as Google's)."""
    basic = BasicTokenizer(do_lower_case=do_lower_case)
    word_counts: collections.Counter = collections.Counter()
    chars = set()
    for line in lines:
        for token in basic.tokenize(line):
            word_counts[token] += 1
            chars.update(token)
    vocab = [special_tokens.PAD, special_tokens.UNK, special_tokens.CLS, special_tokens.SEP,
             special_tokens.MASK]
    seen = set(vocab)
    for piece in sorted(chars) + ["##" + c for c in sorted(chars)]:
        if piece not in seen:
            vocab.append(piece)
            seen.add(piece)
    for word, _ in sorted(word_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:max_words]:
        if word not in seen:
            vocab.append(word)
            seen.add(word)
    return vocab


def write_vocab(tokens: List[str], path: str) -> None:
    """Writes one token per line, atomically (temporary name, then rename)."""
    io_utils.makedirs(os.path.dirname(io_utils.abspath(path)))
    with atomic_open(path) as f:
        f.write("\n".join(tokens) + "\n")
