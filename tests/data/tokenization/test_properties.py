"""Property tests: the three tokenization paths over arbitrary Unicode and bytes.

For any text: neither host path raises, every token is a vocab entry, every
id is in range, ``FastFullTokenizer`` equals ``FullTokenizer`` (tokens and
ids, str and UTF-8 bytes, line by line and through the batch API), and the in-graph ``BertGraphTokenizer`` gives the
same ids (checked in batches, one graph call per example). Strategies: every
code point except surrogates, ASCII with controls, a pool of the hard classes
(final sigma and its case-ignorable neighbours, dotted I, sharp s, marks
incl. non-Mn combining marks, CJK incl. unassigned ones in the CJK blocks,
Zs/Zl/Zp, Cc/Cf, NUL, U+FFFD, emoji sequences, Hangul, long words) mixed with
English-like words, and raw bytes (invalid UTF-8 included). A last property
draws small vocabularies to exercise greedy longest-match WordPiece.

Example counts are bounded (and derandomized) so the file runs in well under
a minute on 2 cores.
"""

import os
import tempfile

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data.tokenization import graph as graph_tokenization
from data.tokenization import special_tokens
from data.tokenization import wordpiece as tokenization
from tests import paths

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

HARD_CODE_POINTS = [
    0x3A3, 0x3C3, 0x3C2, 0x391, 0x3B1, 0x130, 0x131, 0x49, 0x69, 0xDF, 0x1E9E, 0x1C5, 0x1C8,
    0x345, 0x2B0, 0x27, 0x2E, 0x3A, 0xB7, 0x2019, 0xAD, 0x200D, 0x200C, 0x301, 0x308, 0x323,
    0x1D165, 0x1D16D, 0x1D16E, 0x1D15F, 0x1D160, 0x302E, 0x302F, 0x1715, 0x16FF0, 0x0F73,
    0x20, 0xA0, 0x1680, 0x2000, 0x2001, 0x200A, 0x2028, 0x2029, 0x202F, 0x3000, 0x85, 0x1C,
    0x0, 0x9, 0xA, 0xB, 0xC, 0xD, 0x1F, 0x7F, 0x9F, 0xFFFD, 0xFEFF, 0x180E, 0x61C, 0xE0001,
    0x4E00, 0x9FFF, 0x3400, 0xF900, 0xFADF, 0x2F800, 0x2CEAB, 0x20000, 0x3042, 0x30A2, 0xAC00,
    0xD55C, 0x1100, 0xE31, 0x64B, 0x5B0, 0x93F, 0x94D, 0x1F600, 0x1F1E6, 0xFE0F, 0x1F3FB,
    0xFB01, 0x212A, 0x2126, 0x1E9B, 0x10400, 0x1FBC, 0x1F88, 0x390, 0x3D2, 0x2160, 0x24B6,
    0x3002, 0xFF0C, 0x2C, 0x21, 0x23, 0x5F, 0x7E, 0x60, 0xE000, 0x10FFFF,
]
ANY_CHAR = st.characters(blacklist_categories=("Cs",))
ASCII_CHAR = st.characters(max_codepoint=0x7F)
HARD_CHAR = st.sampled_from([chr(cp) for cp in HARD_CODE_POINTS])
WORD = st.sampled_from(["the", "Running", "unaffable", "ΟΔΟΣ", "İstanbul", "café", "Straße",
                        "ǅemal", "naïve", "中文", "한국어", "x" * 199, "é" * 201, "##", "[UNK]"])

# Marks of several combining classes (Mn and the non-Mn ones NFD reorders) after a base.
MARKS = st.sampled_from([chr(cp) for cp in (0x301, 0x316, 0x345, 0x5B0, 0x94D, 0x1D165, 0x1D16D,
                                            0x1D16E, 0x302E, 0x1715, 0x16FF0, 0x0F71, 0x0F72)])
COMBINING = st.lists(st.tuples(st.sampled_from("aΣΑ\U0001D158x中 "), st.lists(MARKS, max_size=4)),
                     max_size=6).map(lambda seq: "".join(b + "".join(m) for b, m in seq))

TEXTS = st.one_of(
    COMBINING,
    st.text(ANY_CHAR, max_size=30),
    st.text(ASCII_CHAR, max_size=40),
    st.text(st.one_of(HARD_CHAR, ASCII_CHAR), max_size=40),
    st.lists(st.one_of(WORD, st.text(st.one_of(HARD_CHAR, ASCII_CHAR), max_size=3)),
             max_size=10).map("".join),
)
RAW = st.one_of(TEXTS.map(lambda t: t.encode("utf-8")), st.binary(max_size=30))


def _host(lower):
    return (tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=lower),
            tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=lower))


HOST = {lower: _host(lower) for lower in (True, False)}


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def graph_fn(request):
    """(do_lower_case, fn): fn maps strings [B] to (basic tokens [B, (T)], ids [B, (P)])."""
    tok = graph_tokenization.BertGraphTokenizer(paths.GOLDEN_VOCAB, do_lower_case=request.param)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def fn(strings):
        return tok.basic_tokenize(strings), tok.tokenize(strings)

    return request.param, fn


def _check_host(lower, text):
    full, fast = HOST[lower]
    tokens = full.tokenize(text)
    ids = full.convert_tokens_to_ids(tokens)
    assert all(t in full.vocab for t in tokens)
    assert all(0 <= i < len(full.vocab) for i in ids)
    assert fast.tokenize(text) == tokens
    assert fast.tokenize_to_ids(text) == ids
    return ids


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
@settings(max_examples=600, **SETTINGS)
@given(text=TEXTS)
def test_host_paths_agree_on_text(lower, text):
    ids = _check_host(lower, text)
    assert _check_host(lower, text.encode("utf-8")) == ids


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
@settings(max_examples=300, **SETTINGS)
@given(raw=st.binary(max_size=40))
def test_host_paths_agree_on_bytes(lower, raw):
    _check_host(lower, raw)


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
@settings(max_examples=200, **SETTINGS)
@given(batch=st.lists(st.one_of(TEXTS, RAW), max_size=12))
def test_host_batch_api_agrees(lower, batch):
    """FastFullTokenizer's batch API equals FullTokenizer line by line (str and bytes lines)."""
    full, fast = HOST[lower]
    tokens = [full.tokenize(line) for line in batch]
    assert fast.tokenize_lines(batch) == tokens
    assert fast.convert_lines_to_ids(batch) == [full.convert_tokens_to_ids(t) for t in tokens]


@settings(max_examples=30, **SETTINGS)
@given(batch=st.lists(RAW, min_size=1, max_size=48))
def test_graph_agrees_with_host_batched(graph_fn, batch):
    lower, fn = graph_fn
    full, _ = HOST[lower]
    basic, ids = fn(tf.constant(batch, tf.string))
    # Basic tokens too: a normalization slip inside an [UNK] word leaves the ids unchanged.
    assert [[t.decode("utf-8") for t in row] for row in basic.to_list()] == [
        full.basic_tokenizer.tokenize(raw) for raw in batch]
    assert ids.to_list() == [full.convert_tokens_to_ids(full.tokenize(raw)) for raw in batch]


# Small vocabularies over a 3-letter alphabet: many multi-piece words, many
# words with no segmentation ([UNK]), and "##" pieces of every length.
_PIECE = st.text(st.sampled_from("abc"), min_size=1, max_size=4)
_VOCAB = st.tuples(st.sets(_PIECE, max_size=12), st.sets(_PIECE, max_size=12))
_SMALL_TEXT = st.text(st.sampled_from("abcABC .,!"), max_size=60)


@settings(max_examples=20, **SETTINGS)
@given(vocab=_VOCAB, texts=st.lists(_SMALL_TEXT, min_size=1, max_size=8))
def test_greedy_wordpiece_agrees_on_small_vocabularies(vocab, texts):
    starts, suffixes = vocab
    entries = (list(special_tokens.ALL) + sorted(starts) + ["##" + s for s in sorted(suffixes)]
               + [".", ",", "!"])
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = os.path.join(tmp, "vocab.txt")
        with open(vocab_file, "w", encoding="utf-8") as f:
            f.write("\n".join(entries) + "\n")
        full = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
        fast = tokenization.FastFullTokenizer(vocab_file, do_lower_case=True)
        graph = graph_tokenization.BertGraphTokenizer(vocab_file, do_lower_case=True)
    want = [full.convert_tokens_to_ids(full.tokenize(t)) for t in texts]
    assert [fast.tokenize_to_ids(t) for t in texts] == want
    assert fast.convert_lines_to_ids(texts) == want
    assert graph.tokenize([t.encode("utf-8") for t in texts]).to_list() == want
