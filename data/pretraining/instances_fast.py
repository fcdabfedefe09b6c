"""The original create_pretraining_data's records, produced fast: same seed, same records.

``generate_records`` gives exactly what ``data.pretraining.instances.create_training_instances`` +
``write_instance_to_example_files`` give (the tests compare them, and both with the original's
golden records), in two phases per batch of instances:

1. *Sequential* (Python, one ``WordStream`` replaying ``random.Random(seed)``): documents are
   token-offset ranges of a ``Corpus``; chunking, A/B split, the random-next document and
   sentence (``bisect`` on sentence offsets), truncation (how many tokens go from the front of
   each side is a count of ``random() < 0.5`` outcomes, read from ``WordStream.low_half``) are
   decided with the same draws as the original. The masked-LM draws of an instance (shuffle of
   its candidates + 80/10/10 decisions) are not replayed one by one: one regular-expression
   match (``MaskedLmScanner``) finds where they end. Each instance becomes a recipe: token
   ranges of A and B, label, and the word positions of its masked-LM draws.
2. *Vectorized* (numpy, all recipes of the batch at once): the shuffles are replayed in lock
   step over the batch (one numpy step per word), then Fisher-Yates swaps, the 80/10/10
   decisions, the padded features, and the serialized, framed records
   (``data.pretraining.records``).

Whole-word masking, and the rare instance whose masked-LM words the 16-bit scan cannot decide
(``random() < 0.8`` on the one ambiguous 16-bit value; vocabularies of 65536+ words), are
replayed exactly in phase 1 with ``data.pretraining.instances.create_masked_lm_predictions`` on the
stream. The final shuffle of all instances is replayed exactly, and the records are written in
that order, round-robin over the output files.
"""

from __future__ import annotations

import bisect
from array import array
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_common import fork_safety
from bert_common.progress import Progress
from data.pretraining import instances as pretraining
from data.pretraining.corpus import Corpus
from data.pretraining.records import FramedRecords, RecordEncoder
from data.pretraining.rng import MaskedLmScanner, WordStream

_FIELDS = 9  # a_start, a_len, b_start, b_len, label, shuffle_pos, mask_pos, end_pos, k
_BITLEN = np.array([m.bit_length() for m in range(1 << 16)], np.int32)
# _randbelow(m) accepts a word iff its top 8 (16) bits are below LIM8[m] (LIM16[m]).
_LIM8 = np.array([m << (8 - m.bit_length()) if 2 <= m < 256 else 0 for m in range(256)],
                 np.uint8)
_LIM16 = np.array([m << (16 - m.bit_length()) if m >= 2 else 0 for m in range(1 << 16)],
                  np.int32)


def _instances_progress(dupes: int, docs: int, enabled: bool) -> Progress:
    """Progress over the ``dupes * docs`` document passes of phase 1 (what its ETA is about);
    the instance count and rate go into each line's ``extra`` (``_instance_counts``)."""
    return Progress("creating instances", dupes * docs, unit="documents", enabled=enabled)


def _instance_counts(progress: Progress, dupe: int, dupes: int, doc: int, docs: int,
                     instances: int) -> Callable[[], str]:
    """The ``extra`` of a line: pass, document in the pass, instances and their rate; made
    only when a line is printed."""
    return lambda: "pass %d/%d document %d/%d, %d instances (%.0f/s)" % (
        dupe, dupes, doc, docs, instances, instances / max(progress.elapsed, 1e-9))


class FastGenerator:
    """One faithful stream of pre-training records (see the module docstring).

    Args:
        corpus: the tokenized corpus.
        vocab: the vocab (ids and word starts).
        max_seq_length: S.
        max_predictions_per_seq: P.
        masked_lm_prob: the share of tokens masked.
        short_seq_prob: the probability of a shorter target length.
        dupe_factor: the number of passes over the corpus.
        random_seed: the seed (or a ``random.Random``) of the original's generator.
        do_whole_word_mask: mask whole words.
        batch_size: the instances built per batch in phase 2.
        show_progress: report progress on stderr.
    """

    def __init__(self, corpus: Corpus, vocab: pretraining.PretrainingVocab, max_seq_length: int,
                 max_predictions_per_seq: int, masked_lm_prob: float, short_seq_prob: float,
                 dupe_factor: int, random_seed, do_whole_word_mask: bool = False,
                 batch_size: int = 8192, show_progress: bool = False):
        pretraining.check_settings(max_seq_length, max_predictions_per_seq, dupe_factor,
                                   masked_lm_prob, short_seq_prob)
        self.corpus = corpus
        self.vocab = vocab
        self.max_seq_length = max_seq_length
        self.max_predictions = max_predictions_per_seq
        self.masked_lm_prob = masked_lm_prob
        self.short_seq_prob = short_seq_prob
        self.dupe_factor = dupe_factor
        self.wwm = do_whole_word_mask
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.stream = WordStream(random_seed)
        self.scanner = MaskedLmScanner(vocab.num_words)
        self.encoder = RecordEncoder(max_seq_length, max_predictions_per_seq)
        self.num_exact = 0  # instances whose masked-LM draws were replayed one by one
        # k (number of predictions) by sequence length, candidates capped (no whole words).
        self._k_by_len = [min(pretraining.num_to_predict(n, masked_lm_prob,
                                                         max_predictions_per_seq),
                              max(n - 3, 0)) for n in range(max_seq_length + 1)]

    # -- phase 1 -----------------------------------------------------------------------

    def _phase1_document(self, k: int, recs: array, exact: Dict[int, Tuple[List[int],
                                                                           List[int]]]) -> None:
        """Recipes of one pass over shuffled document ``k`` (``create_instances_from_document``).

        The draws are inlined on the stream's word array (``arr``, relative index ``p``), with
        the same arithmetic as ``WordStream.random/randbelow``; the window is refreshed before
        each instance so that it holds ``self._margin`` words ahead (an instance that still
        runs out raises IndexError and is redone on a bigger window).
        """
        stream = self.stream
        P = self._starts
        doc_lo, doc_hi = self._doc_lo, self._doc_hi
        shift = self._shift32
        lo, hi = doc_lo[k], doc_hi[k]
        max_tokens = self.max_seq_length - 3
        k_by_len = self._k_by_len
        scan = self.scanner.scan
        wwm = self.wwm
        margin = self._margin
        stream.ensure(margin)
        arr, base, p = stream._arr, stream.base, stream.pos - stream.base
        # target_seq_length: random() < short_seq_prob -> randint(2, max_tokens)
        x = ((arr[p] >> 5) * 67108864.0 + (arr[p + 1] >> 6)) * (1.0 / 9007199254740992.0)
        p += 2
        target = max_tokens
        if x < self.short_seq_prob:
            bound = max_tokens - 1
            s = shift[bound]
            r = arr[p] >> s
            p += 1
            while r >= bound:
                r = arr[p] >> s
                p += 1
            target = 2 + r
        i = lo
        chunk_lo = lo
        while i < hi:
            if i == hi - 1 or P[i + 1] - P[chunk_lo] >= target:
                if len(arr) - p < margin:
                    stream.pos = base + p
                    stream.ensure(margin)
                    arr, base, p = stream._arr, stream.base, stream.pos - stream.base
                start_p = p
                while True:
                    try:
                        p, rec, next_i = self._instance(arr, p, i, chunk_lo, k, target)
                        break
                    except IndexError:  # ran past the window: redo on a bigger one
                        stream.pos = base + start_p
                        margin = self._margin = 2 * margin
                        stream.ensure(margin)
                        arr, base, p = stream._arr, stream.base, stream.pos - stream.base
                        start_p = p
                a_s, la, b_s, lb, label = rec
                n = la + lb
                kk = k_by_len[n + 3]
                found = None if wwm else scan(stream.hi8, stream.hi16, p, n, kk)
                if found is not None:
                    recs.extend((a_s, la, b_s, lb, label, base + p, base + found[0],
                                 base + found[1], kk))
                    p = found[1]
                else:
                    stream.pos = base + p
                    positions, replacements = self._mask_exact(a_s, a_s + la, b_s, b_s + lb)
                    exact[len(recs) // _FIELDS] = (positions, replacements)
                    recs.extend((a_s, la, b_s, lb, label, -1, -1, -1, len(positions)))
                    arr, base, p = stream._arr, stream.base, stream.pos - stream.base
                i = next_i
                chunk_lo = i + 1
            i += 1
        stream.pos = base + p

    def _instance(self, arr, p: int, i: int, chunk_lo: int, k: int, target: int):
        """The chunk of sentences ``chunk_lo .. i`` -> ``(p, (a_start, a_len, b_start, b_len,
        label), i)``: A/B split, random next (with put-back: the returned ``i``), truncation."""
        P = self._starts
        shift = self._shift32
        count = i - chunk_lo + 1
        if count < 2:
            a_end = chunk_lo + 1
        else:
            bound = count - 1  # randint(1, count - 1)
            s = shift[bound]
            r = arr[p] >> s
            p += 1
            while r >= bound:
                r = arr[p] >> s
                p += 1
            a_end = chunk_lo + 1 + r
        a_s = P[chunk_lo]
        a_e = P[a_end]
        if count == 1:
            label = 1
        else:
            label = 1 if arr[p] < 0x80000000 else 0  # random() < 0.5
            p += 2
        if label:
            ndocs = len(self._doc_lo)
            s = shift[ndocs]
            for _ in range(pretraining.MAX_RANDOM_DOCUMENT_TRIES):  # randint(0, ndocs - 1)
                r = arr[p] >> s
                p += 1
                while r >= ndocs:
                    r = arr[p] >> s
                    p += 1
                if r != k:
                    break
            r_lo, r_hi = self._doc_lo[r], self._doc_hi[r]
            bound = r_hi - r_lo  # randint(0, sentences - 1)
            s = shift[bound]
            r = arr[p] >> s
            p += 1
            while r >= bound:
                r = arr[p] >> s
                p += 1
            b0 = r_lo + r
            b_s = P[b0]
            b_e = P[bisect.bisect_left(P, b_s + target - (a_e - a_s), b0 + 1, r_hi)]
            i = a_end - 1  # the chunk's unused sentences are put back
        else:
            b_s = a_e
            b_e = P[i + 1]
        excess = (a_e - a_s) + (b_e - b_s) - (self.max_seq_length - 3)
        if excess > 0:
            if p + 2 * excess > len(arr):
                raise IndexError("window too short for the truncation")
            a_s, a_e, b_s, b_e = self._truncate(p, a_s, a_e, b_s, b_e, excess)
            p += 2 * excess
        return p, (a_s, a_e - a_s, b_s, b_e - b_s, label), i

    def _truncate(self, p: int, a_s: int, a_e: int, b_s: int, b_e: int, excess: int):
        """``truncate_seq_pair`` on ranges: ``excess`` pops, each one ``random()`` (2 words
        from relative index ``p``), from the front when it is < 0.5. The side of each pop
        depends only on the lengths: the longer side (B on a tie) until they cross, then
        alternately."""
        half = self.stream.low_half
        la = a_e - a_s
        lb = b_e - b_s
        if la > lb:  # pops on A until equal, then B, A, B, ...
            first = min(excess, la - lb)
        else:  # pops on B until A is longer, then A, B, A, ...
            first = min(excess, lb - la + 1)
        rest = excess - first
        fronts_first = half[p:p + 2 * first:2].count(1)
        fronts_even = half[p + 2 * first:p + 2 * excess:4].count(1)  # the other side
        fronts_odd = half[p + 2 * first + 2:p + 2 * excess:4].count(1)  # the first side again
        pops_first = first + rest // 2
        front_first = fronts_first + fronts_odd
        pops_other = (rest + 1) // 2
        front_other = fronts_even
        if la > lb:
            a_s += front_first
            a_e -= pops_first - front_first
            b_s += front_other
            b_e -= pops_other - front_other
        else:
            b_s += front_first
            b_e -= pops_first - front_first
            a_s += front_other
            a_e -= pops_other - front_other
        return a_s, a_e, b_s, b_e

    def _mask_exact(self, a_s: int, a_e: int, b_s: int, b_e: int) -> Tuple[List[int], List[int]]:
        """``create_masked_lm_predictions`` replayed draw by draw on the stream."""
        self.num_exact += 1
        v = self.vocab
        toks = self.corpus.tokens
        tokens = ([v.cls_id] + toks[a_s:a_e].tolist() + [v.sep_id] + toks[b_s:b_e].tolist()
                  + [v.sep_id])
        output, positions, _ = pretraining.create_masked_lm_predictions(
            tokens, self.masked_lm_prob, self.max_predictions, v, self.stream, self.wwm)
        return positions, [output[p] for p in positions]

    # -- phase 2 -----------------------------------------------------------------------

    def _shuffle_steps(self, sh: np.ndarray, mk: np.ndarray, n: np.ndarray) -> np.ndarray:
        """``j`` of every Fisher-Yates step, replayed in lock step (one numpy step per word)
        from each recipe's words ``[sh, mk)``.

        Returns J [rows, max(n) - 1]: ``J[r, c]`` is the ``j`` of step ``i = max(n) - 1 - c``
        (columns ``c < max(n) - n[r]`` unused). ``_randbelow(m)`` accepts a word iff its top
        bits (8 when every ``n < 256``, else 16) are below ``m << (bits - m.bit_length())``;
        ``j`` is then those bits ``>> (bits - m.bit_length())``.
        """
        stream = self.stream
        b = len(sh)
        cons = (mk - sh).astype(np.int64)
        order = np.argsort(-cons, kind="stable")  # longest first: the live rows are a prefix
        cons_s = cons[order]
        n_s = n[order]
        cmax = int(cons_s[0])
        nmax = int(n.max())
        bits = 8 if nmax < 256 else 16
        if bits == 8:
            view, lim_table, kind = np.frombuffer(stream.hi8, np.uint8), _LIM8, np.int16
        else:
            view = np.frombuffer(stream.hi16, ">u2").astype(np.int32)
            lim_table, kind = _LIM16, np.int32
        rel = sh[order] - stream.base
        if int(rel.max()) + cmax > len(view):  # rows near the window's end: pad (unused)
            view = np.concatenate([view, np.zeros(int(rel.max()) + cmax - len(view), view.dtype)])
        windows = np.lib.stride_tricks.sliding_window_view(view, cmax)
        top = np.ascontiguousarray(windows[rel].T)  # [cmax, b]: top bits of each word
        live = b - np.searchsorted(np.sort(cons), np.arange(cmax), side="right")
        # Every word tested against bound m is stored in column nmax - m of its row: the last
        # one, the accepted word, stays.
        width = nmax - 1
        steps = np.zeros((b, width), top.dtype)
        flat = steps.reshape(-1)
        row_base = np.arange(b, dtype=np.int64) * width + nmax
        hit = np.empty(b, bool)
        m = n_s.astype(kind)  # current bound m = i + 1 of each row
        for u in range(cmax):
            q = int(live[u])
            mm = m[:q]
            word = top[u, :q]
            flat[row_base[:q] - mm] = word
            np.less(word, lim_table[mm], out=hit[:q])
            np.subtract(mm, hit[:q], out=mm, casting="unsafe")
        if not np.array_equal(m, np.ones_like(m)):
            raise AssertionError("shuffle replay out of step with the scan")
        cols = np.arange(width)
        steps = steps.astype(np.int32) >> (bits - _BITLEN[nmax - cols])
        out = np.empty_like(steps)
        out[order] = steps
        return out

    def _masked_prefix(self, steps: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
        """The first ``k[r]`` shuffled candidates: Fisher-Yates on ``range(n[r])`` with the
        ``j`` of ``_shuffle_steps``, in lock step on a [n, rows] layout."""
        b, width = steps.shape
        nmax = width + 1
        order = np.argsort(-n, kind="stable")  # longest first: the live rows are a prefix
        x = np.repeat(np.arange(nmax, dtype=np.int32)[:, None], b, axis=1)  # x[i, row]
        flat = x.reshape(-1)
        j_by_col = np.ascontiguousarray(steps[order].T)  # [width, b]
        cols = np.arange(b, dtype=np.int64)
        live_by_i = b - np.searchsorted(np.sort(n), np.arange(nmax), side="right")
        for i in range(nmax - 1, 0, -1):
            q = int(live_by_i[i])  # rows with n > i
            if q == 0:
                continue
            xi = x[i, :q].copy()
            where = j_by_col[nmax - 1 - i, :q] * b + cols[:q]
            x[i, :q] = flat[where]
            flat[where] = xi
        kmax = int(k.max())
        out = np.empty((b, kmax), np.int32)
        out[order] = x[:kmax].T
        return out

    def _mask_decisions(self, mk: np.ndarray, end: np.ndarray, k: np.ndarray):
        """80/10/10 decisions from each recipe's words at ``mk``: (codes, random word index),
        code 0 = [MASK], 1 = kept, 2 = random word."""
        stream = self.stream
        words = stream.words
        vocab_n = self.vocab.num_words
        kv = vocab_n.bit_length()
        b = len(mk)
        kmax = int(k.max()) if b else 0
        codes = np.zeros((b, kmax), np.int8)
        picks = np.zeros((b, kmax), np.int64)
        q = (mk - stream.base).astype(np.int64)
        t8 = np.uint64(int(np.ceil(0.8 * float(1 << 53))))
        for col in range(kmax):
            live = np.flatnonzero(k > col)
            qa = q[live]
            x = ((words[qa] >> np.uint32(5)).astype(np.uint64) << np.uint64(26)) \
                | (words[qa + 1] >> np.uint32(6)).astype(np.uint64)
            masked = x < t8
            keep = words[qa + 2] < np.uint32(1 << 31)
            code = np.where(masked, 0, np.where(keep, 1, 2)).astype(np.int8)
            nxt = qa + np.where(masked, 2, 4)
            pick_rows = np.flatnonzero(code == 2)
            qr = nxt[pick_rows]
            value = np.zeros(len(pick_rows), np.int64)
            pending = np.arange(len(pick_rows))
            while len(pending):
                if kv <= 32:
                    r = (words[qr[pending]] >> np.uint32(32 - kv)).astype(np.int64)
                    qr[pending] += 1
                else:
                    raise AssertionError("vocabularies of 2**32+ words take the exact path")
                ok = r < vocab_n
                value[pending[ok]] = r[ok]
                pending = pending[~ok]
            nxt[pick_rows] = qr
            codes[live, col] = code
            picks[live[pick_rows], col] = value
            q[live] = nxt
        if not np.array_equal(q + stream.base, end):
            raise AssertionError("masking replay out of step with the scan")
        return codes, picks

    def _materialize(self, recs: np.ndarray, exact: Dict[int, Tuple[List[int], List[int]]],
                     first_index: int) -> Tuple[bytes, np.ndarray]:
        """Framed records of one batch of recipes (rows of ``_FIELDS``)."""
        v = self.vocab
        b = len(recs)
        a_s, la, b_s, lb, label, sh, mk, end, k = (recs[:, c] for c in range(_FIELDS))
        kmax = max(int(k.max()), 1)
        positions = np.zeros((b, kmax), np.int64)
        replace = np.zeros((b, kmax), np.int64)
        code_rows = np.flatnonzero(sh >= 0)
        cols = np.arange(kmax)[None, :]
        if len(code_rows):
            n = (la + lb)[code_rows]
            steps = self._shuffle_steps(sh[code_rows], mk[code_rows], n)
            cand = self._masked_prefix(steps, n, k[code_rows])
            kk = k[code_rows]
            live = cols[:, :cand.shape[1]] < kk[:, None]
            # candidate -> position: skip [CLS], and the middle [SEP] for B
            pos = cand.astype(np.int64) + 1 + (cand >= la[code_rows][:, None])
            pos = np.where(live, pos, np.int64(1) << 40)  # dead slots sort last
            codes, picks = self._mask_decisions(mk[code_rows], end[code_rows], kk)
            order = np.argsort(pos, axis=1, kind="stable")
            pos = np.take_along_axis(pos, order, axis=1)
            codes = np.take_along_axis(codes, order, axis=1)
            picks = np.take_along_axis(picks, order, axis=1)
            width = pos.shape[1]
            positions[code_rows, :width] = np.where(live, pos, 0)
            repl = np.where(codes == 0, v.mask_id, np.where(codes == 2, v.word_ids[picks], -1))
            replace[code_rows, :width] = np.where(live, repl, 0)
        for row in np.flatnonzero(sh < 0):
            pos_list, repl_list = exact[first_index + int(row)]
            positions[row, :len(pos_list)] = pos_list
            replace[row, :len(repl_list)] = repl_list

        s = self.max_seq_length
        c = np.arange(s, dtype=np.int64)[None, :]
        la2, lb2 = la[:, None], lb[:, None]
        seq_len = la2 + lb2 + 3
        kind = np.int32 if len(self.corpus.tokens) < 1 << 31 else np.int64
        c = c.astype(kind)
        src = (a_s - 1).astype(kind)[:, None] + c  # A: token a_s + c - 1 at column c
        src += (c > la2).astype(kind) * (b_s - a_s - 1 - la).astype(kind)[:, None]  # B part
        np.clip(src, 0, max(len(self.corpus.tokens) - 1, 0), out=src)
        ids = self.corpus.tokens.take(src)
        rows1 = np.arange(b)
        ids[:, 0] = v.cls_id
        ids[rows1, la + 1] = v.sep_id
        ids[rows1, la + lb + 2] = v.sep_id
        ids *= c < seq_len
        live = cols < k[:, None]
        rows = np.arange(b)[:, None]
        labels = np.where(live, ids[rows, positions], 0)
        new_ids = np.where(replace >= 0, replace, labels)
        ids[rows[:, :1].repeat(kmax, 1)[live], positions[live]] = new_ids[live]
        p = self.max_predictions
        pad = max(0, p - kmax)
        return self.encoder.encode(
            ids, seq_len[:, 0], la + 2, np.pad(positions, ((0, 0), (0, pad)))[:, :p],
            np.pad(labels, ((0, 0), (0, pad)))[:, :p], k, label)

    # -- driver ------------------------------------------------------------------------

    def _prepare(self) -> None:
        """``rng.shuffle(all_documents)`` and the per-document tables phase 1 reads."""
        corpus = self.corpus
        ndocs = corpus.num_documents
        doc_order = list(range(ndocs))
        self.stream.shuffle(doc_order)
        starts = corpus.document_starts.tolist()
        self._doc_lo = [starts[d] for d in doc_order]
        self._doc_hi = [starts[d + 1] for d in doc_order]
        self._starts = array("q", corpus.sentence_starts.tobytes())
        most = max([ndocs, self.max_seq_length] + [hi - lo for lo, hi in
                                                   zip(self._doc_lo, self._doc_hi)])
        self._shift32 = [32 - m.bit_length() for m in range(most + 2)]
        self._margin = 8 * self.max_seq_length + 4096

    def _phase1(self, sink) -> int:
        """Phase 1 over all passes and documents; batches of recipes go to ``sink``.
        Returns the number of instances."""
        ndocs = self.corpus.num_documents
        recs = array("q")
        exact: Dict[int, Tuple[List[int], List[int]]] = {}
        batch_first = 0
        progress = _instances_progress(self.dupe_factor, ndocs, self.show_progress)
        count = 0
        for dupe in range(self.dupe_factor):
            for k in range(ndocs):
                self._phase1_document(k, recs, exact)
                count = len(recs) // _FIELDS  # in this batch
                if count >= self.batch_size:
                    self._flush(recs, exact, sink)
                    batch_first += count
                    del recs[:]  # recipes (and ``exact``) are numbered within the batch
                progress.update(dupe * ndocs + k + 1, _instance_counts(
                    progress, dupe + 1, self.dupe_factor, k + 1, ndocs,
                    batch_first + len(recs) // _FIELDS))
        total = batch_first + len(recs) // _FIELDS
        self._flush(recs, exact, sink)
        # The counts after the last document were printed already, except for zero documents.
        progress.finish()
        return total

    def _flush(self, recs: array, exact, sink) -> None:
        """Hands the batch of recipes (and its exact replays, by index in the batch) to
        ``sink``; the caller then empties both."""
        count = len(recs) // _FIELDS
        if count:
            rows = np.frombuffer(recs, np.int64).reshape(-1, _FIELDS).copy()
            part = dict(exact)
            exact.clear()
            deferred = rows[:, 5] >= 0
            lo = int(rows[deferred, 5].min()) if deferred.any() else self.stream.pos
            sink.batch(rows, part, lo, self.stream.pos)
            self.stream.release(self.stream.pos)

    def run(self) -> Tuple[FramedRecords, List[int]]:
        """All records (in creation order) and the final order to write them in."""
        self._prepare()
        sink = _LocalSink(self)
        total = self._phase1(sink)
        order = self.stream.permutation(total)  # rng.shuffle(instances)
        return sink.store, order

    def run_and_write(self, output_files: Sequence[str], helper: bool = True) -> int:
        """Generates the records and writes them in the original's order, round-robin over
        ``output_files`` (atomically). With ``helper``, records are built and written by a
        forked helper process while this one goes on with phase 1 (2+ CPUs).

        Args:
            output_files: the TFRecord files.
            helper: build and write in a forked helper process.

        Returns:
            The number of records written.
        """
        self._prepare()
        sink = _HelperSink(self) if helper else _LocalSink(self)
        try:
            total = self._phase1(sink)
            order = self.stream.permutation(total)  # rng.shuffle(instances)
            return sink.finish(order, output_files)
        finally:
            sink.close()

    def _materialize_batch(self, rows: np.ndarray, exact, lo: int, hi: int):
        """``_materialize`` after positioning this generator's stream on words ``[lo, hi)``
        (a helper's copy of the stream lags behind phase 1)."""
        stream = self.stream
        if stream.pos < lo:
            stream.pos = lo
        stream.release(lo)
        stream.ensure(hi - stream.pos + 1024)  # the replays may peek a few words past ``hi``
        return self._materialize(rows, exact, 0)


class _LocalSink:
    """Materializes each batch of recipes in this process."""

    def __init__(self, gen: FastGenerator):
        self.gen = gen
        self.store = FramedRecords()

    def batch(self, rows: np.ndarray, exact, lo: int, hi: int) -> None:
        self.store.add(*self.gen._materialize(rows, exact, 0))

    def finish(self, order: List[int], output_files: Sequence[str]) -> int:
        return self.store.write(output_files, order)

    def close(self) -> None:
        pass


class HelperError(RuntimeError):
    """The helper process failed (the message says how)."""


def _helper_main(gen: FastGenerator, tasks, results) -> None:
    """The helper process: materialize every batch, then write the records in order."""
    store = FramedRecords()
    try:
        while True:
            task = tasks.get()
            if task[0] == "batch":
                _, rows, exact, lo, hi = task
                store.add(*gen._materialize_batch(rows, exact, lo, hi))
            else:
                _, order, output_files = task
                results.send(("ok", store.write(output_files, order)))
                return
    except BaseException as e:  # reported to the parent, which raises it
        results.send(("error", type(e).__name__, str(e), isinstance(e, OSError)))


class _HelperSink:
    """Sends batches of recipes to a forked helper process that materializes and writes them.

    The helper is forked after the document shuffle, so its copy of the word stream is where
    phase 1 starts; it follows behind, positioned on each batch's words."""

    def __init__(self, gen: FastGenerator):
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self._tasks = ctx.Queue(maxsize=4)
        self._results, child_end = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=_helper_main, args=(gen, self._tasks, child_end),
                                    daemon=True)
        self._process.start()
        child_end.close()

    def _check(self) -> None:
        if self._results.poll():
            self._raise(self._results.recv())

    @staticmethod
    def _raise(message) -> None:
        if message[0] == "error":
            _, name, text, is_os = message
            raise (OSError if is_os else HelperError)("%s%s" % (
                "" if is_os else "helper process: %s: " % name, text))

    def batch(self, rows: np.ndarray, exact, lo: int, hi: int) -> None:
        import queue

        while True:  # the queue is bounded: wait for room, but not for a dead helper
            self._check()
            try:
                self._tasks.put(("batch", rows, exact, lo, hi), timeout=1.0)
                return
            except queue.Full:
                if not self._process.is_alive():
                    self._check()
                    raise HelperError("helper process died (exit code %s)"
                                      % self._process.exitcode)

    def finish(self, order: List[int], output_files: Sequence[str]) -> int:
        self._check()
        self._tasks.put(("finish", np.asarray(order, np.int64), list(output_files)))
        try:
            message = self._results.recv()
        except EOFError:
            raise HelperError("helper process died (exit code %s)" % self._process.exitcode)
        self._raise(message)
        return message[1]

    def close(self) -> None:
        self._tasks.close()
        self._process.join(timeout=60)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()


def generate_records(corpus: Corpus, vocab: pretraining.PretrainingVocab, max_seq_length: int,
                     max_predictions_per_seq: int, masked_lm_prob: float, short_seq_prob: float,
                     dupe_factor: int, random_seed, do_whole_word_mask: bool = False,
                     show_progress: bool = False) -> Tuple[FramedRecords, List[int]]:
    """``(records, order)``: the records in creation order, and the original's final shuffle
    (write ``records`` in ``order``).

    Args:
        corpus: the tokenized corpus.
        vocab: the vocab.
        max_seq_length: S.
        max_predictions_per_seq: P.
        masked_lm_prob: the share of tokens masked.
        short_seq_prob: the probability of a shorter target length.
        dupe_factor: the number of passes over the corpus.
        random_seed: the seed of the original's generator.
        do_whole_word_mask: mask whole words.
        show_progress: report progress on stderr.

    Returns:
        ``(records, order)`` as above.
    """
    gen = FastGenerator(corpus, vocab, max_seq_length, max_predictions_per_seq, masked_lm_prob,
                        short_seq_prob, dupe_factor, random_seed, do_whole_word_mask,
                        show_progress=show_progress)
    return gen.run()


def write_records(corpus: Corpus, vocab: pretraining.PretrainingVocab,
                  output_files: Sequence[str], max_seq_length: int,
                  max_predictions_per_seq: int, masked_lm_prob: float, short_seq_prob: float,
                  dupe_factor: int, random_seed, do_whole_word_mask: bool = False,
                  show_progress: bool = False, helper: Optional[bool] = None) -> int:
    """Generates the records and writes them (the original's order, round-robin, atomic).

    ``helper``: build and write the records in a forked helper process, pipelined with the
    sequential phase; default: when forking is safe (``bert_common.fork_safety``: Linux, TensorFlow
    not loaded) and a CPU is idle (load average at least one below the CPU count: on a busy
    machine the helper only adds work); ``helper=True`` forks regardless.
    Returns the number of records.

    Args:
        corpus: the tokenized corpus.
        vocab: the vocab.
        output_files: the TFRecord files.
        max_seq_length: S.
        max_predictions_per_seq: P.
        masked_lm_prob: the share of tokens masked.
        short_seq_prob: the probability of a shorter target length.
        dupe_factor: the number of passes over the corpus.
        random_seed: the seed of the original's generator.
        do_whole_word_mask: mask whole words.
        show_progress: report progress on stderr.
        helper: see above; None for the default.

    Returns:
        The number of records written.
    """
    import os

    if helper is None:
        cpus = os.cpu_count() or 1
        helper = (fork_safety.fork_is_safe() and cpus >= 2
                  and os.getloadavg()[0] <= cpus - 1)
    gen = FastGenerator(corpus, vocab, max_seq_length, max_predictions_per_seq, masked_lm_prob,
                        short_seq_prob, dupe_factor, random_seed, do_whole_word_mask,
                        show_progress=show_progress)
    return gen.run_and_write(output_files, helper)
