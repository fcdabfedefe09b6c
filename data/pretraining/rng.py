"""``random.Random(seed)``'s draws, replayed from its raw 32-bit outputs read ahead in bulk.

The original create_pretraining_data consumes one ``random.Random`` with ``random()``,
``randint()`` and ``shuffle()``. All three are pure functions of the Mersenne Twister's 32-bit
output words (CPython 3.11, the version the golden files were made with):

* ``random()`` takes two words ``a, b``: ``((a >> 5) * 2**26 + (b >> 6)) / 2**53``;
* ``_randbelow(n)`` takes ``k = n.bit_length()`` and draws ``getrandbits(k)`` (one word
  ``w >> (32 - k)`` when ``k <= 32``, else ``ceil(k / 32)`` words, little end first, the last
  one shifted) until the value is ``< n``; ``randint(a, b) = a + _randbelow(b - a + 1)``;
* ``shuffle(x)`` is Fisher-Yates from the end: for ``i = len(x)-1 .. 1``,
  ``j = _randbelow(i + 1)`` and ``x[i], x[j]`` are swapped.

``WordStream`` takes the generator's state and produces its words in big blocks with numpy's
``MT19937`` (same algorithm, same 32-bit outputs), keeps a window of them as numpy ``uint32`` plus derived byte views, and replays the draws
exactly with a read position ``pos``:

* ``hi8``: byte ``i`` is ``word_i >> 24``; ``hi16``: bytes ``2i, 2i+1`` are ``word_i >> 16``
  (big endian), for ``re`` to scan;
* ``low_half``: ``bytes`` with 1 where ``word_i < 2**31``, i.e. where a ``random()`` starting
  at that word is ``< 0.5``.

``MaskedLmScanner`` matches two regular expressions that consume exactly the words of one
``shuffle`` of ``n`` items (over ``hi8`` when ``n < 256``: ``_randbelow(m)`` then needs at most
8 bits) and of ``k`` 80/10/10 masking decisions (over ``hi16``, with a random word drawn below
``vocab_size < 2**16``): ``re`` runs those scans in C, which is what makes the fast generator
fast. Patterns use byte classes only (``re`` compiles 256-wide classes quickly). The one
16-bit value where ``random() < 0.8`` needs more bits is in neither branch, so the match fails
there and the caller replays that instance draw by draw instead.
"""

from __future__ import annotations

import array
import math
import random
import re
from typing import Dict, List, MutableSequence, Optional, Tuple

import numpy as np

_TWO_POW_53 = float(1 << 53)
MAX_SCAN_BITS = 16  # the regex scan decides from the top 16 bits of each word


def _shift_table(limit: int) -> List[int]:
    """``[32 - m.bit_length() for m in range(limit)]`` (index 0 unused)."""
    return [32 - m.bit_length() for m in range(limit)]


class WordStream:
    """Exact replay of a ``random.Random``'s draws from a read-ahead window of its words.

    The wrapped generator is advanced in blocks, so after the first draw it is ahead of the
    replay; only this object's methods may be used from then on. ``pos`` is the global index
    of the next unread word. Words before ``release(upto)`` may be discarded.

    Args:
        seed_or_rng: a ``random.Random`` to wrap, or a seed for a new one.
        block_words: the most words drawn at once.
    """

    def __init__(self, seed_or_rng, block_words: int = 1 << 20):
        """``block_words``: the most words drawn at once (blocks start at 64K and double)."""
        self._rng = seed_or_rng if isinstance(seed_or_rng, random.Random) \
            else random.Random(seed_or_rng)
        self._block = int(block_words)
        self._bitgen: Optional[np.random.MT19937] = None
        self.base = 0            # global index of words[0]
        self.pos = 0             # global index of the next unread word
        self._keep_from = 0      # words before this global index may be dropped
        self.words = np.empty(0, np.uint32)
        self._arr = array.array("I")  # the same words, for fast scalar reads
        self.hi8 = b""
        self.hi16 = b""
        self.low_half = b""
        self._shift = _shift_table(1 << 12)

    # -- window ----------------------------------------------------------------------

    @property
    def end(self) -> int:
        """Global index one past the last word in the window."""
        return self.base + len(self._arr)

    def ensure(self, count: int) -> None:
        """Makes words ``[pos, pos + count)`` available in the window.

        Args:
            count: the number of words needed from ``pos``.
        """
        if self.pos + count > self.end:
            self._extend(self.pos + count)

    def release(self, upto: int) -> None:
        """Words before global index ``upto`` are no longer needed.

        Args:
            upto: a global word index.
        """
        self._keep_from = max(self._keep_from, min(upto, self.pos))

    def _draw_block(self, n: int) -> np.ndarray:
        """The next ``n`` words of the generator: numpy's MT19937 (the same algorithm and
        output function) continued from the ``random.Random``'s state, so it is C speed."""
        if self._bitgen is None:
            version, internal, _ = self._rng.getstate()
            bitgen = np.random.MT19937()
            bitgen.state = {"bit_generator": "MT19937",
                            "state": {"key": np.array(internal[:624], np.uint32),
                                      "pos": internal[624]}}
            self._bitgen = bitgen
        return self._bitgen.random_raw(n).astype(np.uint32)

    def _extend(self, need_end: int) -> None:
        n_new = max(min(self._block, max(1 << 16, 2 * len(self._arr))), need_end - self.end)
        new = self._draw_block(n_new)
        drop = self._keep_from - self.base
        if drop > 0:
            self.words = self.words[drop:]
            del self._arr[:drop]
            self.hi8 = self.hi8[drop:]
            self.hi16 = self.hi16[2 * drop:]
            self.low_half = self.low_half[drop:]
            self.base = self._keep_from
        self.words = np.concatenate([self.words, new])
        self._arr.frombytes(new.astype("<u4", copy=False).tobytes())
        self.hi8 += (new >> 24).astype(np.uint8).tobytes()
        self.hi16 += (new >> 16).astype(">u2").tobytes()
        self.low_half += (new < np.uint32(1 << 31)).view(np.uint8).tobytes()

    def word_view(self, start: int, stop: int) -> np.ndarray:
        """Words with global indexes ``[start, stop)`` (must be in the window).

        Args:
            start: the first global index.
            stop: the end global index (exclusive).

        Returns:
            A uint32 view [stop - start] of the window.

        Raises:
            IndexError: the range is not in the window.
        """
        if start < self.base or stop > self.end:
            raise IndexError("words %d..%d are not in the window %d..%d"
                             % (start, stop, self.base, self.end))
        return self.words[start - self.base:stop - self.base]

    # -- exact draws -------------------------------------------------------------------

    def random(self) -> float:
        """``random.Random.random()``."""
        if self.pos + 2 > self.end:
            self._extend(self.pos + 2)
        i = self.pos - self.base
        a = self._arr[i] >> 5
        b = self._arr[i + 1] >> 6
        self.pos += 2
        return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)

    def getrandbits(self, k: int) -> int:
        """``random.Random.getrandbits(k)``.

        Args:
            k: the number of bits (>= 0).

        Returns:
            A random int of ``k`` bits.

        Raises:
            ValueError: ``k`` is negative.
        """
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        if k == 0:
            return 0
        words = (k - 1) // 32 + 1
        self.ensure(words)
        i = self.pos - self.base
        self.pos += words
        if words == 1:
            return self._arr[i] >> (32 - k)
        value = 0
        for n in range(words):
            w = self._arr[i + n]
            if k < 32:
                w >>= 32 - k
            value |= w << (32 * n)
            k -= 32
        return value

    def randbelow(self, n: int) -> int:
        """``random.Random._randbelow(n)`` for ``n >= 1`` (rejection sampling on ``k`` bits).

        Args:
            n: the bound (>= 1).

        Returns:
            A random int in ``[0, n)``.
        """
        k = n.bit_length()
        if k > 32:
            r = self.getrandbits(k)
            while r >= n:
                r = self.getrandbits(k)
            return r
        shift = 32 - k
        arr = self._arr
        i = self.pos - self.base
        end = len(arr)
        while True:
            if i >= end:
                self.pos = self.base + i
                self._extend(self.pos + 64)
                arr, i, end = self._arr, self.pos - self.base, len(self._arr)
            r = arr[i] >> shift
            i += 1
            if r < n:
                self.pos = self.base + i
                return r

    def randint(self, a: int, b: int) -> int:
        """``random.Random.randint(a, b)``; ValueError for an empty range, as the original.

        Args:
            a: the lower bound.
            b: the upper bound (inclusive).

        Returns:
            A random int in ``[a, b]``.

        Raises:
            ValueError: ``b < a``.
        """
        width = b - a + 1
        if width <= 0:
            raise ValueError("empty range for randint(%d, %d)" % (a, b))
        return a + self.randbelow(width)

    def shuffle(self, x: MutableSequence) -> None:
        """``random.Random.shuffle(x)`` in place.

        Args:
            x: the sequence to shuffle.
        """
        n = len(x)
        if n < 2:
            return
        while True:
            self.ensure(4 * n + 1024)  # enough but for a ~2**-1000 chance; retried below
            try:
                self.pos = _fisher_yates(x, self._arr, self.pos - self.base, self._shift_for(n)) \
                    + self.base
                return
            except IndexError:
                self._extend(self.end + 4 * n + (1 << 16))

    def permutation(self, n: int) -> List[int]:
        """``x = list(range(n)); shuffle(x); return x``.

        Args:
            n: the number of items.

        Returns:
            A shuffled ``list(range(n))``.
        """
        x = list(range(n))
        self.shuffle(x)
        return x

    def _shift_for(self, n: int) -> List[int]:
        if n > len(self._shift):
            self._shift = _shift_table(max(n + 1, 2 * len(self._shift)))
        return self._shift


def _fisher_yates(x: MutableSequence, arr, i: int, shift: List[int]) -> int:
    """Shuffles ``x`` with the words ``arr[i:]``; returns the index after the last word used.

    Raises IndexError (leaving ``x`` partly shuffled) when the words run out: the caller
    must then retry on a fresh copy. Only for ``len(x) < 2**32``.
    """
    backup = list(x)
    try:
        for m in range(len(x), 1, -1):  # m = i + 1 of the original loop
            s = shift[m]
            r = arr[i] >> s
            i += 1
            while r >= m:
                r = arr[i] >> s
                i += 1
            t = m - 1
            x[t], x[r] = x[r], x[t]
        return i
    except IndexError:
        x[:] = backup
        raise


# ------------------------------------------------------------------------------------------
# The masked-LM draws as regular expressions over the words' top bytes.
# ------------------------------------------------------------------------------------------


def random_below_threshold(p: float) -> Tuple[int, int, bool]:
    """How ``random() < p`` reads from the top 16 bits ``A`` of the first of its two words.

    Returns ``(lo, hi, exact)``: ``A < lo`` means certainly true, ``A >= hi`` certainly false;
    when ``exact`` is False the single value ``A == lo`` (``hi == lo + 1``) needs more bits.

    Args:
        p: the threshold.

    Returns:
        ``(lo, hi, exact)`` as above.
    """
    t = math.ceil(p * _TWO_POW_53)  # random() < p  <=>  ((a >> 5) << 26 | b >> 6) < t
    t = max(0, min(t, 1 << 53))
    lo, rem = divmod(t, 1 << 37)  # a >> 16 == (x >> 37)
    return (lo, lo, True) if rem == 0 else (lo, lo + 1, False)


def _byte_class(lo: int, hi: int) -> bytes:
    """A class for the byte values ``lo .. hi - 1`` (b'' when empty)."""
    if hi <= lo:
        return b""
    if hi - lo == 1:
        return b"\\x%02x" % lo
    return b"[\\x%02x-\\x%02x]" % (lo, hi - 1)


def _alternatives(parts: List[bytes]) -> bytes:
    parts = [p for p in parts if p]
    if not parts:
        raise ValueError("empty class")
    return parts[0] if len(parts) == 1 else b"(?:" + b"|".join(parts) + b")"


def below16(lim: int) -> bytes:
    """Two big-endian bytes whose 16-bit value is ``< lim`` (0 < lim <= 65536).

    Args:
        lim: the exclusive upper bound.

    Returns:
        A regex byte class of the 2-byte values below ``lim``.
    """
    h, l = divmod(lim, 256)
    return _alternatives([_byte_class(0, h) + (b"." if h else b""),
                          (b"\\x%02x" % h + _byte_class(0, l)) if l else b""])


def at_least16(lim: int) -> bytes:
    """Two big-endian bytes whose 16-bit value is ``>= lim`` (0 <= lim < 65536).

    Args:
        lim: the inclusive lower bound.

    Returns:
        A regex byte class of the 2-byte values at least ``lim``.
    """
    h, l = divmod(lim, 256)
    return _alternatives([(_byte_class(h + 1, 256) + b".") if h < 255 else b"",
                          b"\\x%02x" % h + _byte_class(l, 256)])


def _below(m: int, bits: int) -> int:
    """``_randbelow(m)`` accepts a word iff its top ``bits`` bits are below this."""
    return m << (bits - m.bit_length())


def _shuffle_steps8(m_hi: int, m_lo: int) -> bytes:
    """Steps ``m = m_hi .. m_lo`` of a shuffle over ``hi8`` (1 byte per word, m < 256)."""
    parts = []
    for m in range(m_hi, m_lo - 1, -1):
        lim = _below(m, 8)
        parts.append(_byte_class(lim, 256) + b"*+" + _byte_class(0, lim))
    return b"".join(parts)


def shuffle_pattern(n: int) -> Tuple[bytes, int]:
    """``(pattern, bytes_per_word)`` for the words ``shuffle`` of ``n`` items consumes (per
    step: rejected* accepted), over ``hi8`` (n < 256) or ``hi16`` (n < 65536).

    Args:
        n: the number of items shuffled (< 65536).

    Returns:
        ``(pattern, bytes_per_word)``: a regex over the word views and 1 or 2.

    Raises:
        ValueError: ``n`` is too large for the 16-bit scan.
    """
    if n < 256:
        return _shuffle_steps8(n, 2), 1
    if n >= 1 << MAX_SCAN_BITS:
        raise ValueError("shuffle of %d items is too long for the 16-bit scan" % n)
    parts = []
    for m in range(n, 1, -1):
        lim = _below(m, 16)
        parts.append(b"(?:" + at_least16(lim) + b")*+" + below16(lim))
    return b"".join(parts), 2


def masking_unit(vocab_size: int) -> bytes:
    """The words (2 bytes each, over ``hi16``) of one decision: random() < 0.8 -> [MASK];
    else random() < 0.5 -> kept; else ``randint(0, vocab_size - 1)``. The ambiguous 16-bit
    value of the 0.8 test matches neither branch.

    Args:
        vocab_size: the vocab size (< 65536).

    Returns:
        A regex over ``hi16``.

    Raises:
        ValueError: the vocab is too large for the 16-bit scan.
    """
    if vocab_size.bit_length() > MAX_SCAN_BITS:
        raise ValueError("vocab of %d words is too large for the 16-bit scan" % vocab_size)
    lo8, hi8, _ = random_below_threshold(0.8)
    lo5, hi5, exact5 = random_below_threshold(0.5)
    assert exact5
    lim_v = _below(vocab_size, 16)
    word = b".."
    pick = b"(?:" + at_least16(lim_v) + b")*+" + below16(lim_v)
    return b"(?:%s%s|%s%s(?:%s%s|%s%s%s))" % (
        below16(lo8), word, at_least16(hi8), word,
        below16(lo5), word, at_least16(hi5), word, pick)


def masking_pattern(k: int, vocab_size: int) -> bytes:
    """``k`` decisions (see ``masking_unit``).

    Args:
        k: the number of decisions.
        vocab_size: the vocab size.

    Returns:
        A regex over ``hi16``.
    """
    return b"(?:" + masking_unit(vocab_size) + b"){%d}" % k


class MaskedLmScanner:
    """Compiled scans of ``shuffle(n)`` and of ``k`` masking decisions, cached.

    A shuffle of ``n < 256`` items is matched over ``hi8`` in two parts: steps
    ``m = n .. 2**j + 1`` (a pattern per ``n``) and ``m = 2**j .. 2`` (shared by every ``n`` in
    ``(2**j, 2**(j+1)]``), which keeps compiling cheap; longer ones over ``hi16``.
    ``scan(...)`` works on the stream's views at relative word index ``rel`` and returns
    ``(mask_start, end)`` (relative word indexes), or None when the words cannot be decided
    from their top 16 bits (or the window ends): the caller then replays the draws one by one.

    Args:
        vocab_size: the vocab size of the random replacements.
    """

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.usable = vocab_size.bit_length() <= MAX_SCAN_BITS
        self._runs: Dict[Tuple[int, int], "re.Pattern[bytes]"] = {}
        self._plans: Dict[int, List["re.Pattern[bytes]"]] = {}
        self._wide: Dict[int, "re.Pattern[bytes]"] = {}
        self._maskings: Dict[int, "re.Pattern[bytes]"] = {}

    def _run(self, m_hi: int, m_lo: int) -> "re.Pattern[bytes]":
        pat = self._runs.get((m_hi, m_lo))
        if pat is None:
            pat = self._runs[(m_hi, m_lo)] = re.compile(_shuffle_steps8(m_hi, m_lo), re.DOTALL)
        return pat

    def _plan(self, n: int) -> List["re.Pattern[bytes]"]:
        """Top run ``n .. 2**j + 1`` (``2**j < n <= 2**(j+1)``), then ``2**j .. 2`` (shared)."""
        plan = self._plans.get(n)
        if plan is None:
            if n <= 2:
                plan = [self._run(n, 2)] if n == 2 else []
            else:
                low = 1 << ((n - 1).bit_length() - 1)
                plan = [self._run(n, low + 1)] + ([self._run(low, 2)] if low >= 2 else [])
            self._plans[n] = plan
        return plan

    def _masking(self, k: int) -> "re.Pattern[bytes]":
        pat = self._maskings.get(k)
        if pat is None:
            pat = self._maskings[k] = re.compile(masking_pattern(k, self.vocab_size), re.DOTALL)
        return pat

    def scan(self, hi8: bytes, hi16: bytes, rel: int, n: int, k: int
             ) -> Optional[Tuple[int, int]]:
        """Where a ``shuffle(n)`` then ``k`` masking decisions end in the stream's words.

        Args:
            hi8: the top 8 bits of each word, one byte per word.
            hi16: the top 16 bits of each word, big-endian, two bytes per word.
            rel: the relative word index of the first draw.
            n: the number of items shuffled.
            k: the number of masking decisions.

        Returns:
            ``(mask_start, end)`` relative word indexes, or None when undecidable.
        """
        if not self.usable:
            return None
        if n < 256:
            for pat in self._plan(n):
                m = pat.match(hi8, rel)
                if m is None:
                    return None
                rel = m.end()
        elif n < 1 << MAX_SCAN_BITS:
            pat = self._wide.get(n)
            if pat is None:
                pat = self._wide[n] = re.compile(shuffle_pattern(n)[0], re.DOTALL)
            m = pat.match(hi16, 2 * rel)
            if m is None:
                return None
            rel = m.end() // 2
        else:
            return None
        m = self._masking(k).match(hi16, 2 * rel)
        if m is None:
            return None
        return rel, m.end() // 2
