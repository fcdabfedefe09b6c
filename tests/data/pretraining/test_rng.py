"""data/pretraining/rng.py: WordStream replays random.Random exactly; the regex scans consume
exactly the words of a shuffle + masking decisions, and refuse undecidable words."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.pretraining import rng as R


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 64), ops=st.lists(
    st.tuples(st.sampled_from(["random", "randint", "bits", "shuffle"]), st.integers(0, 10 ** 6)),
    min_size=1, max_size=300), block=st.sampled_from([7, 64, 4096]))
def test_word_stream_replays_random_random(seed, ops, block):
    stream = R.WordStream(seed, block_words=block)
    rng = random.Random(seed)
    for i, (op, arg) in enumerate(ops):
        if op == "random":
            assert stream.random() == rng.random()
        elif op == "randint":
            lo = arg % 7 - 3
            hi = lo + arg % (1 << (arg % 40)) if arg % 5 else lo  # includes randint(x, x)
            assert stream.randint(lo, hi) == rng.randint(lo, hi)
        elif op == "bits":
            k = arg % 100
            assert stream.getrandbits(k) == rng.getrandbits(k)
        else:
            x = list(range(arg % 300))
            y = list(x)
            stream.shuffle(x)
            rng.shuffle(y)
            assert x == y
        if i % 17 == 0:
            stream.release(stream.pos)  # dropping consumed words changes nothing


def test_word_stream_seeds_from_a_random_instance_and_windows_stay_consistent():
    stream = R.WordStream(random.Random("a/1"), block_words=100)
    rng = random.Random("a/1")
    want = [rng.getrandbits(32) for _ in range(1000)]
    got = []
    for i in range(1000):
        stream.ensure(1)
        w = stream.word_view(stream.pos, stream.pos + 1)[0]
        assert stream.hi8[stream.pos - stream.base] == w >> 24
        hi16 = stream.hi16[2 * (stream.pos - stream.base):][:2]
        assert int.from_bytes(hi16, "big") == w >> 16
        assert stream.low_half[stream.pos - stream.base] == (1 if w < 2 ** 31 else 0)
        got.append(stream.getrandbits(32))
        if i % 50 == 0:
            stream.release(stream.pos)
    assert got == want
    with pytest.raises(ValueError):
        stream.randint(3, 2)


def test_random_below_threshold_is_exact():
    lo, hi, exact = R.random_below_threshold(0.8)
    assert (lo, hi, exact) == (52428, 52429, False)
    assert R.random_below_threshold(0.5) == (32768, 32768, True)
    # Around the ambiguous value, random() < 0.8 needs the low bits of the first word.
    for a_hi, b, want in [(52427, 0, True), (52429, 0, False)]:
        a = (a_hi << 16) | 0xFFFF
        x = ((a >> 5) * 67108864.0 + (b >> 6)) / 9007199254740992.0
        assert (x < 0.8) == want


def _exact_masking_end(stream, k, vocab_size):
    for _ in range(k):
        if stream.random() < 0.8:
            continue
        if stream.random() < 0.5:
            continue
        stream.randint(0, vocab_size - 1)
    return stream.pos


@pytest.mark.parametrize("n", [2, 3, 4, 5, 64, 65, 125, 128, 255, 256, 300])
def test_scan_consumes_exactly_the_shuffle_and_masking_words(n):
    vocab_size = 30522
    scanner = R.MaskedLmScanner(vocab_size)
    rng = random.Random(n)
    refused = 0
    for trial in range(40):
        seed = rng.randrange(1 << 32)
        k = 1 + trial % 20
        stream = R.WordStream(seed, block_words=8 * n + 40 * k + 4096)
        stream.ensure(8 * n + 40 * k + 4096)
        found = scanner.scan(stream.hi8, stream.hi16, 0, n, k)
        exact = R.WordStream(seed, block_words=4096)
        exact.shuffle(list(range(n)))
        mid = exact.pos
        end = _exact_masking_end(exact, k, vocab_size)
        if found is None:
            refused += 1
            continue
        assert found == (mid, end)
    assert refused <= 2


def test_scan_refuses_the_ambiguous_word():
    scanner = R.MaskedLmScanner(30522)
    lo8, _, _ = R.random_below_threshold(0.8)
    # shuffle of 2 items: one word with top byte 0 (accepted), then a decision word == lo8
    words = np.array([0, lo8 << 16, 0], np.uint32)
    hi8 = (words >> 24).astype(np.uint8).tobytes()
    hi16 = (words >> 16).astype(">u2").tobytes()
    assert scanner.scan(hi8, hi16, 0, 2, 1) is None
    words[1] = (lo8 - 1) << 16  # certainly < 0.8: [MASK]
    hi16 = (words >> 16).astype(">u2").tobytes()
    assert scanner.scan(hi8, hi16, 0, 2, 1) == (1, 3)


def test_scanner_is_unusable_for_vocabularies_of_65536_words_or_more():
    assert not R.MaskedLmScanner(70000).usable
    assert R.MaskedLmScanner(65535).usable
    with pytest.raises(ValueError):
        R.masking_pattern(3, 70000)
