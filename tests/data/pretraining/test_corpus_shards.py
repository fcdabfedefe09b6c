"""data/pretraining/corpus_shards.py as a module: the placement rule as a fixed data format
(document bytes, key, shard, seed), --shard_range parsing, shard names, the record count
from length headers, iter_documents + tokenize_documents reading exactly what read_corpus
reads, each shard being the single-stream generator over its own documents in key order,
the scratch folder removed after success and failure, a failure mid-way keeping the shards
done, and no TensorFlow import."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from bert_common import atomic
from data.pretraining import corpus as pretraining_corpus
from data.pretraining import instances_fast
from data.pretraining import instances as pretraining
from data.pretraining import corpus_shards
from data.pretraining.instances import PretrainingDataError
from data.tokenization.wordpiece import FastFullTokenizer
from data.records import numpy_reader
from tests import paths

DERIVED = os.path.join(paths.DATA, "pretrain", "derived_pretrain_corpus.txt")
TRAJECTORY = os.path.join(paths.GOLDEN, "inputs", "pretrain_trajectory_corpus.txt")
VOCAB = paths.GOLDEN_VOCAB
SETTINGS = dict(max_seq_length=64, max_predictions_per_seq=10, masked_lm_prob=0.15,
                short_seq_prob=0.1, dupe_factor=1, do_whole_word_mask=False,
                random_seed=12345)


@pytest.fixture(scope="module")
def tokenizer():
    return FastFullTokenizer(VOCAB, do_lower_case=True)


def _write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _run(input_files, prefix, num_shards, shard_range=None, num_workers=1, **overrides):
    settings = dict(SETTINGS, **overrides)
    return corpus_shards.run_sharded(list(input_files), prefix, num_shards,
                               shard_range or (0, num_shards), num_workers, VOCAB, True,
                               settings)


def _shard_bytes(prefix, num_shards):
    out = []
    for s in range(num_shards):
        with open(corpus_shards.shard_path(prefix, s, num_shards), "rb") as f:
            out.append(f.read())
    return out


# ------------------------------------------------------------------------------------------
# The rule: a data format that must never change.
# ------------------------------------------------------------------------------------------


def test_the_placement_rule_is_a_fixed_data_format():
    # Shards made today must be continued (--shard_range, resume) and merged with shards made
    # by any later version: these values were computed once and are part of the format.
    data = corpus_shards.document_bytes(["The first line .", "The second line ."])
    assert data == b"The first line .\nThe second line ."
    key = corpus_shards.document_key(data)
    assert key == hashlib.blake2b(data, digest_size=16).digest()
    assert key.hex() == "8197b484153fb34ed93446a54a98fa3e"
    assert [corpus_shards.shard_of(key, n) for n in (1, 2, 8, 512, 99999)] == [0, 0, 6, 334, 31791]
    # the shard's generator: a string seed (hashed with SHA-512, stable across versions)
    assert corpus_shards.shard_seed(12345, 3, 8).random() == 0.8799434369400663
    assert corpus_shards.shard_seed(12345, 3, 8).random() != corpus_shards.shard_seed(12345, 3, 9).random()
    assert corpus_shards.document_bytes(["caf\u00e9"]) == b"caf\xc3\xa9"


def test_shard_of_spreads_documents_evenly():
    counts = np.zeros(8, int)
    for i in range(4000):
        key = corpus_shards.document_key(corpus_shards.document_bytes(["document number %d" % i]))
        counts[corpus_shards.shard_of(key, 8)] += 1
    assert counts.sum() == 4000 and counts.min() > 400 and counts.max() < 600, counts


def test_shard_and_manifest_names():
    assert corpus_shards.shard_path("out/records", 3, 512) == "out/records-00003-of-00512"
    assert corpus_shards.shard_path("gs://b/r", 99998, 99999) == "gs://b/r-99998-of-99999"
    assert corpus_shards.manifest_path("out/records") == "out/records.shards.json"


@pytest.mark.parametrize("text,num_shards,want", [
    (None, 8, (0, 8)), ("0:8", 8, (0, 8)), ("0:3", 8, (0, 3)), ("3:8", 8, (3, 8)),
    (" 2 : 5 ", 8, (2, 5)), ("0:1", 1, (0, 1)), ("7:8", 8, (7, 8)),
])
def test_parse_shard_range(text, num_shards, want):
    assert corpus_shards.parse_shard_range(text, num_shards) == want


@pytest.mark.parametrize("text", ["5", "3:9", "4:4", "5:3", "-1:2", "a:b", "1:2:3", "", ":",
                                  "0:", "1,3"])
def test_parse_shard_range_rejects(text):
    with pytest.raises(PretrainingDataError, match=r"^--shard_range=.*(expected i:j|0 <= i < j "
                                                   r"<= --num_shards=8)"):
        corpus_shards.parse_shard_range(text, 8)


def test_count_records_equals_read_records(tmp_path, tokenizer):
    corpus = pretraining_corpus.read_corpus([TRAJECTORY], tokenizer)
    vocab = pretraining.PretrainingVocab(tokenizer.vocab, VOCAB)
    path = str(tmp_path / "x.tfrecord")
    written = instances_fast.write_records(corpus, vocab, [path], helper=False, **SETTINGS)
    assert written > 100
    assert numpy_reader.count_records(path) == len(list(numpy_reader.read_records(path))) == written
    empty = _write(tmp_path / "empty.tfrecord", b"")
    assert numpy_reader.count_records(empty) == 0
    with open(path, "rb") as f:
        data = f.read()
    length = int.from_bytes(data[:8], "little")
    one = _write(tmp_path / "one.tfrecord", data[:16 + length])
    assert numpy_reader.count_records(one) == 1 == len(list(numpy_reader.read_records(one)))
    assert numpy_reader.count_records("gs://bucket/x-00000-of-00001") is None


# ------------------------------------------------------------------------------------------
# Reading: iter_documents + tokenize_documents == read_corpus.
# ------------------------------------------------------------------------------------------


def _assert_same_corpus(got, want):
    assert got.num_documents == want.num_documents
    assert np.array_equal(got.tokens, want.tokens)
    assert np.array_equal(got.sentence_starts, want.sentence_starts)
    assert np.array_equal(got.document_starts, want.document_starts)
    assert got.tokens.dtype == np.int32 and got.sentence_starts.dtype == np.int64


def test_iter_documents_tokenized_is_read_corpus_on_the_real_corpus(tokenizer):
    docs = list(pretraining_corpus.iter_documents([DERIVED]))
    assert len(docs) == 158 and all(docs) and all(line == line.strip() and line
                                                   for doc in docs for line in doc)
    want = pretraining_corpus.read_corpus([DERIVED], tokenizer)
    _assert_same_corpus(pretraining_corpus.tokenize_documents(docs, tokenizer), want)
    # and as the split pass reads it: runs of pieces cut at document boundaries
    runs = pretraining_corpus.split_at_documents([DERIVED], 5)
    assert len(runs) == 5
    pieces = [d for run in runs for d in pretraining_corpus.iter_documents(run)]
    assert pieces == docs


TRICKY = {
    "crlf": [b"the cat\r\nsat on\r\n\r\nthe mat\r\n\r\n"],
    "continues_across_files": [b"\n\none\ntwo", b"three\n\n\n\nfour\n\r", b"five\n"],
    "whitespace_only_lines": [b"a b\n \t \n c d \n\xe2\x80\xa8\n\x0b\x0c\ne f\n\x1c\ng\n"],
    "line_without_tokens": [b"first\n\x00\x01\nsecond\n\n\x00\n\n\x07\n\nthird\n"],
    "only_tokenless_documents": [b"\x00\n\n\x01\x02\n"],
    "cr_inside_and_no_final_newline": [b"a\rb\n\nc d\r"],
    "empty_files_between": [b"x y\n", b"", b"z\n\n", b"", b"w"],
    "non_breaking_and_unicode": ["caf\u00e9 na\u00efve\n\u00a0\nSt\u00e4dte \u2028 gro\u00df\n"
                                 .encode("utf-8")],
}


@pytest.mark.parametrize("case", sorted(TRICKY))
def test_iter_documents_tokenized_is_read_corpus_on_tricky_input(case, tmp_path, tokenizer):
    files = [_write(tmp_path / ("f%d.txt" % i), data) for i, data in enumerate(TRICKY[case])]
    docs = list(pretraining_corpus.iter_documents(files))
    assert all(doc and all(line and line == line.strip() for line in doc) for doc in docs)
    got = pretraining_corpus.tokenize_documents(docs, tokenizer)
    _assert_same_corpus(got, pretraining_corpus.read_corpus(files, tokenizer))
    # a document's bytes never hold a blank line: the scratch files' separator is safe
    assert all(b"\n\n" not in corpus_shards.document_bytes(doc) for doc in docs)


def test_iter_documents_details(tmp_path):
    a = _write(tmp_path / "a.txt", b"\n\none\ntwo")
    b = _write(tmp_path / "b.txt", b"three\r\n \n\x00\n\nfour\n")
    assert list(pretraining_corpus.iter_documents([a, b])) == [
        ["one", "two", "three"], ["\x00"], ["four"]]  # a tokenless line is kept here
    # a's leading blank lines end b's last document
    assert list(pretraining_corpus.iter_documents([b, a])) == [
        ["three"], ["\x00"], ["four"], ["one", "two"]]
    bad = _write(tmp_path / "bad.txt", b"ok\n\nbad \xff\n")
    with pytest.raises(pretraining_corpus.CorpusError, match=r"bad.txt, line 3: invalid UTF-8"):
        list(pretraining_corpus.iter_documents([bad]))


def test_expand_input_patterns_sorted(tmp_path):
    for name in ("c.txt", "a.txt", "b.txt"):
        _write(tmp_path / name, b"x\n")
    pattern = str(tmp_path / "*.txt")
    assert pretraining_corpus.expand_input_patterns(pattern, sort=True) == [
        str(tmp_path / n) for n in ("a.txt", "b.txt", "c.txt")]
    # sorted per pattern, the patterns themselves in the given order
    assert pretraining_corpus.expand_input_patterns(
        [str(tmp_path / "c.txt"), pattern], sort=True)[0] == str(tmp_path / "c.txt")


# ------------------------------------------------------------------------------------------
# A shard is the single-stream generator over its documents, in key order, with its seed.
# ------------------------------------------------------------------------------------------


def _expected_shards(files, num_shards, tokenizer, folder):
    """The rule, written out independently of the module's split and generate passes."""
    by_shard = {s: [] for s in range(num_shards)}
    for lines in pretraining_corpus.iter_documents(files):
        data = "\n".join(lines).encode("utf-8")
        key = hashlib.blake2b(data, digest_size=16).digest()
        by_shard[int.from_bytes(key[:8], "big") % num_shards].append((key, lines))
    vocab = pretraining.PretrainingVocab(tokenizer.vocab, VOCAB)
    out = []
    for s in range(num_shards):
        docs = [lines for _, lines in sorted(by_shard[s])]
        corpus = pretraining_corpus.tokenize_documents(docs, tokenizer)
        if corpus.num_documents == 0:
            out.append(b"")
            continue
        path = os.path.join(folder, "expected-%d" % s)
        seeded = dict(SETTINGS, random_seed=corpus_shards.shard_seed(12345, s, num_shards))
        instances_fast.write_records(corpus, vocab, [path], helper=False, **seeded)
        with open(path, "rb") as f:
            out.append(f.read())
    return out


@pytest.mark.parametrize("corpus,num_shards", [(DERIVED, 4), (TRAJECTORY, 8)],
                         ids=["derived-4", "trajectory-8"])
def test_each_shard_is_the_generator_over_its_own_documents(corpus, num_shards, tmp_path,
                                                             tokenizer):
    out = tmp_path / "out"
    out.mkdir()
    prefix = str(out / "records")
    summary = _run([corpus], prefix, num_shards)
    got = _shard_bytes(prefix, num_shards)
    want = _expected_shards([corpus], num_shards, tokenizer, str(tmp_path))
    assert got == want
    total = pretraining_corpus.read_corpus([corpus], tokenizer).num_documents
    assert summary.documents == total and sorted(summary.written) == list(range(num_shards))
    assert summary.instances == sum(numpy_reader.count_records(
        corpus_shards.shard_path(prefix, s, num_shards)) for s in range(num_shards))
    if corpus == TRAJECTORY:  # 6 documents in 8 shards: some shards are empty, valid files
        assert b"" in got and summary.instances > 100
    with open(corpus_shards.manifest_path(prefix)) as f:
        manifest = json.load(f)
    assert manifest["num_shards"] == num_shards and manifest["dupe_factor"] == 1
    assert manifest["input_bytes"] == os.path.getsize(corpus)
    assert sorted(os.listdir(out)) == sorted(
        ["records.shards.json"] + [os.path.basename(corpus_shards.shard_path(prefix, s, num_shards))
                                   for s in range(num_shards)])


# ------------------------------------------------------------------------------------------
# Scratch and failures.
# ------------------------------------------------------------------------------------------


@pytest.fixture
def scratch_root(tmp_path, monkeypatch):
    """$TMPDIR is a folder of this test (tempfile caches its choice: set it too); yields it
    and the list of scratch folders the runs made."""
    import multiprocessing.util

    # multiprocessing keeps its own temporary folder (the forkserver's socket, when TensorFlow
    # is loaded) for the life of the process, chosen at its first use: choose it now, in the
    # real temporary folder, not in this test's (long, and removed after the test).
    multiprocessing.util.get_temp_dir()
    root = tmp_path / "scratch"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    made = []
    real = atomic.local_scratch_dir

    def recording(name):
        path = real(name)
        made.append(path)
        return path

    monkeypatch.setattr(atomic, "local_scratch_dir", recording)
    return root, made


def test_scratch_is_removed_after_success(tmp_path, scratch_root):
    root, made = scratch_root
    prefix = str(tmp_path / "records")
    _run([TRAJECTORY], prefix, 3)
    assert len(made) == 1 and os.path.dirname(made[0]) == str(root)
    assert os.path.basename(made[0]).startswith(".bert-shards.")
    assert made[0].endswith(".tmp") and os.listdir(root) == []


@pytest.mark.parametrize("num_workers", [1, 2])
def test_scratch_is_removed_after_failure(tmp_path, scratch_root, num_workers):
    root, made = scratch_root
    good = _write(tmp_path / "good.txt", b"one line .\ntwo lines .\n\n" * 50)
    bad = _write(tmp_path / "bad.txt", b"fine\n\nbad \xc3\x28 here\n")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(pretraining_corpus.CorpusError, match=r"bad.txt, line 3: invalid UTF-8"):
        _run([good, bad], str(out / "records"), 4, num_workers=num_workers)
    assert len(made) == 1 and os.listdir(root) == []
    assert os.listdir(out) == []  # the manifest it wrote is gone too: no shard was made


def test_a_failure_mid_way_keeps_the_shards_done_and_a_rerun_finishes(tmp_path, scratch_root,
                                                                      monkeypatch):
    root, made = scratch_root
    reference = str(tmp_path / "reference")
    _run([DERIVED], reference, 6)
    out = tmp_path / "out"
    out.mkdir()
    prefix = str(out / "records")
    real = corpus_shards.generate_shard
    calls = []

    def failing(shard, *args, **kwargs):
        calls.append(shard)
        if len(calls) == 3:
            raise MemoryError("injected")
        return real(shard, *args, **kwargs)

    monkeypatch.setattr(corpus_shards, "generate_shard", failing)
    with pytest.raises(MemoryError):
        _run([DERIVED], prefix, 6)
    monkeypatch.setattr(corpus_shards, "generate_shard", real)
    done = calls[:2]
    assert sorted(os.listdir(out)) == sorted(
        ["records.shards.json"] + ["records-%05d-of-00006" % s for s in done])
    assert os.listdir(root) == []  # scratch gone (both runs' so far)
    summary = _run([DERIVED], prefix, 6)
    assert sorted(summary.skipped) == sorted(done)
    assert sorted(summary.written) == sorted(set(range(6)) - set(done))
    assert _shard_bytes(prefix, 6) == _shard_bytes(reference, 6)
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]
    assert os.listdir(root) == [] and len(made) == 3


def test_import_and_run_without_tensorflow(tmp_path):
    prefix = str(tmp_path / "records")
    probe = ("import sys\nfrom data.pretraining import corpus_shards\n"
             "assert 'tensorflow' not in sys.modules, 'import'\n"
             "s = corpus_shards.run_sharded([%r], %r, 2, (0, 2), 1, %r, True, %r)\n"
             "print('TF_LOADED' if 'tensorflow' in sys.modules else 'NO_TF', s.instances)\n"
             % (TRAJECTORY, prefix, VOCAB, SETTINGS))
    r = subprocess.run([sys.executable, "-c", probe], cwd=paths.ROOT,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    word, count = r.stdout.split()
    assert word == "NO_TF" and int(count) > 100


def test_a_rerun_sweeps_what_killed_runs_left_beside_complete_shards(tmp_path):
    """A run killed in a shard's commit, its file already in place, leaves the commit's empty
    staging folder; the rerun skips that shard, and removes the folder when it plans: a dead
    writer's only (a live one's, and those of shards still to make, stay for their writers)."""
    prefix = str(tmp_path / "records")
    for s in (0, 1):
        with open(corpus_shards.shard_path(prefix, s, 4), "wb") as f:
            f.write(b"x")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    host = atomic._HOST  # noqa: SLF001 - this machine's tag in atomic's temporaries' names

    def staging(shard, pid):
        name = ".%s.%s-%s.abc123.tmp" % (
            os.path.basename(corpus_shards.shard_path(prefix, shard, 4)), host, pid)
        (tmp_path / name).mkdir()
        return name
    gone = staging(0, dead)
    kept = [staging(1, os.getpid()), staging(2, dead)]  # live writer; a shard still to make
    corpus_shards._sweep_skipped(prefix, 4, [0, 1])  # noqa: SLF001
    names = os.listdir(tmp_path)
    assert gone not in names and all(name in names for name in kept), names
