"""The original tokenization module's functions convert_tokens_to_ids / convert_ids_to_tokens:
vocab lookups in order, KeyError for an unknown key (no [UNK] fallback)."""

import collections

import pytest

from data import tokenization
from data.tokenization import wordpiece


def test_convert_tokens_to_ids_and_back():
    vocab_tokens = ["[UNK]", "[CLS]", "[SEP]", "play", "##play", "##ed", "pl", "re", "jump",
                    "##ing"]
    vocab = collections.OrderedDict((token, i) for i, token in enumerate(vocab_tokens))
    inv_vocab = {i: token for token, i in vocab.items()}
    assert tokenization.convert_tokens_to_ids(vocab, ["re", "##play", "##ed", "jump",
                                                      "##ing"]) == [7, 4, 5, 8, 9]
    assert tokenization.convert_ids_to_tokens(inv_vocab, [7, 4, 5, 8, 9]) == [
        "re", "##play", "##ed", "jump", "##ing"]
    assert wordpiece.convert_tokens_to_ids is tokenization.convert_tokens_to_ids
    with pytest.raises(KeyError):
        tokenization.convert_tokens_to_ids(vocab, ["unknown"])  # as the original: no [UNK]
    with pytest.raises(KeyError):
        tokenization.convert_ids_to_tokens(inv_vocab, [99])
