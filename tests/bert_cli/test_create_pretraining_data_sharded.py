"""create_pretraining_data.py --num_shards end to end: the shards' bytes do not depend on
--num_workers, on --shard_range runs or on the order of the input files; a run killed with
SIGKILL and run again ends with the bytes of an uninterrupted run and no temporaries; the
records' statistics match the single stream's; bad flags and input are one line on stderr,
exit code 1 and nothing written."""

from __future__ import annotations

import glob
import hashlib
import math
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from bert_cli import create_pretraining_data as cli
from data.pretraining import corpus as pretraining_corpus
from data.pretraining import corpus_shards
from data.records import numpy_reader
from tests import paths
from tests.support.tools import run_tool

ROOT = paths.ROOT
DERIVED = os.path.join(paths.DATA, "pretrain", "derived_pretrain_corpus.txt")
TRAJECTORY = os.path.join(paths.GOLDEN, "inputs", "pretrain_trajectory_corpus.txt")
VOCAB = paths.GOLDEN_VOCAB
SHARDS = 8
SMALL = ["--vocab_file=%s" % VOCAB, "--max_seq_length=64", "--max_predictions_per_seq=10",
         "--dupe_factor=1"]
SUMMARY_RE = re.compile(r"^(?P<prefix>.*)-\*-of-(?P<of>\d{5}): wrote (?P<wrote>\d+) shards?"
                        r"(?: \((?P<names>[-0-9, ]+)\), (?P<instances>\d+) instances from "
                        r"(?P<documents>\d+) documents)?"
                        r"(?:; skipped (?P<skipped>\d+) complete \((?P<skipped_names>[-0-9, ]+)"
                        r"\), (?P<skipped_instances>\d+) instances)?; [0-9.]+s$")


def _run(args):
    """The CLI in this process with fresh flags: (exit code, stderr)."""
    run = run_tool(cli, list(args))
    return run.code, run.stderr


def _summary(err):
    lines = [line for line in err.strip().split("\n") if ": wrote " in line]
    match = SUMMARY_RE.match(lines[-1] if lines else "")
    assert match, err[-2000:]
    return match


def _shard_bytes(prefix, num_shards=SHARDS):
    out = []
    for s in range(num_shards):
        with open(corpus_shards.shard_path(prefix, s, num_shards), "rb") as f:
            out.append(f.read())
    return out


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _listing(folder):
    """name -> (sha256 of the bytes, mtime) of every entry of ``folder`` (hidden included)."""
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            out[name] = ("folder", tuple(sorted(os.listdir(path))))
        else:
            out[name] = (hashlib.sha256(_read(path)).hexdigest(), os.stat(path).st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The 8 shards of the derived corpus (seq 64, dupe 1), one process: the bytes to match."""
    prefix = str(tmp_path_factory.mktemp("reference") / "records")
    code, err = _run(SMALL + ["--input_file=%s" % DERIVED, "--output_file=%s" % prefix,
                              "--num_shards=%d" % SHARDS])
    assert code == 0, err
    summary = _summary(err)
    assert summary["wrote"] == str(SHARDS) and summary["names"] == "00000-00007"
    assert summary["documents"] == "158" and summary["skipped"] is None
    shards = _shard_bytes(prefix)
    assert int(summary["instances"]) == sum(numpy_reader.count_records(
        corpus_shards.shard_path(prefix, s, SHARDS)) for s in range(SHARDS)) > 5000
    assert all(shards) and len(set(shards)) == SHARDS
    return {"prefix": prefix, "shards": shards, "instances": int(summary["instances"]),
            "manifest": _read(corpus_shards.manifest_path(prefix))}


# ------------------------------------------------------------------------------------------
# The bytes depend on the corpus, flags, seed and --num_shards only.
# ------------------------------------------------------------------------------------------


def test_num_workers_do_not_change_the_bytes(reference, tmp_path):
    prefix = str(tmp_path / "records")
    code, err = _run(SMALL + ["--input_file=%s" % DERIVED, "--output_file=%s" % prefix,
                              "--num_shards=%d" % SHARDS, "--num_workers=2"])
    assert code == 0, err
    assert _summary(err)["instances"] == str(reference["instances"])
    assert _shard_bytes(prefix) == reference["shards"]
    assert _read(corpus_shards.manifest_path(prefix)) == reference["manifest"]
    assert len(os.listdir(tmp_path)) == SHARDS + 1


def test_shard_ranges_run_one_after_the_other_make_the_same_bytes(reference, tmp_path):
    prefix = str(tmp_path / "records")
    base = SMALL + ["--input_file=%s" % DERIVED, "--output_file=%s" % prefix,
                    "--num_shards=%d" % SHARDS]
    code, err = _run(base + ["--shard_range=0:3"])
    assert code == 0, err
    first = _summary(err)
    assert (first["wrote"], first["names"], first["skipped"]) == ("3", "00000-00002", None)
    assert sorted(os.listdir(tmp_path)) == ["records-0000%d-of-00008" % s for s in range(3)] + [
        "records.shards.json"]
    code, err = _run(base + ["--shard_range=3:8", "--num_workers=2"])
    assert code == 0, err
    second = _summary(err)
    assert (second["wrote"], second["names"], second["skipped"]) == ("5", "00003-00007", None)
    assert int(first["instances"]) + int(second["instances"]) == reference["instances"]
    assert _shard_bytes(prefix) == reference["shards"]
    assert _read(corpus_shards.manifest_path(prefix)) == reference["manifest"]

    # everything there: a run of all of them, or of a part, writes nothing
    before = _listing(tmp_path)
    code, err = _run(base)
    assert code == 0, err
    again = _summary(err)
    assert (again["wrote"], again["skipped"], again["skipped_names"]) == ("0", "8",
                                                                         "00000-00007")
    assert int(again["skipped_instances"]) == reference["instances"]
    code, err = _run(base + ["--shard_range=2:5"])
    assert code == 0 and _summary(err)["skipped_names"] == "00002-00004", err
    assert _listing(tmp_path) == before


def _split_corpus(folder):
    """The derived corpus as two files cut right after a blank line near its middle; the
    second ends with a blank line too, so either order reads the same documents."""
    text = _read(DERIVED)
    cut = text.index(b"\n\n", len(text) // 2) + 2
    a, b = folder / "a.txt", folder / "b.txt"
    a.write_bytes(text[:cut])
    b.write_bytes(text[cut:].rstrip(b"\n") + b"\n\n")
    assert a.stat().st_size > 1e6 and b.stat().st_size > 1e6
    return str(a), str(b)


def test_the_order_of_input_files_does_not_matter(reference, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    a, b = _split_corpus(corpus)
    outputs = {}
    for name, inputs in (("ab", "%s,%s" % (a, b)), ("ba", "%s,%s" % (b, a)),
                         ("glob", str(corpus / "*.txt"))):
        folder = tmp_path / name
        folder.mkdir()
        prefix = str(folder / "records")
        code, err = _run(SMALL + ["--input_file=%s" % inputs, "--output_file=%s" % prefix,
                                  "--num_shards=%d" % SHARDS])
        assert code == 0, err
        assert _summary(err)["documents"] == "158"
        outputs[name] = (_shard_bytes(prefix), _read(corpus_shards.manifest_path(prefix)))
    assert outputs["ab"] == outputs["ba"] == outputs["glob"]
    # the same documents as the corpus in one file: the same shards
    assert outputs["ab"][0] == reference["shards"]


# ------------------------------------------------------------------------------------------
# SIGKILL, then run again.
# ------------------------------------------------------------------------------------------


def _final_shards(folder):
    return sorted(os.path.basename(p) for p in glob.glob(
        os.path.join(folder, "records-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]")))


def test_sigkill_mid_run_then_rerun_ends_with_the_uninterrupted_bytes(tmp_path):
    num_shards = 64
    flag_args = ["--vocab_file=%s" % VOCAB, "--input_file=%s" % DERIVED,
                 "--num_shards=%d" % num_shards, "--max_seq_length=128", "--dupe_factor=3"]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH, TMPDIR=str(scratch))
    env.pop("BERT_TRACEBACK", None)
    out = tmp_path / "out"
    out.mkdir()
    prefix = str(out / "records")
    command = [sys.executable, "create_pretraining_data.py"] + flag_args + [
        "--output_file=%s" % prefix]
    with open(tmp_path / "killed.err", "wb") as err:
        proc = subprocess.Popen(command + ["--num_workers=1", "--show_progress=false"],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 120
            while not _final_shards(out):
                assert proc.poll() is None, "the run ended before a shard appeared: %s" % (
                    (tmp_path / "killed.err").read_text()[-2000:])
                assert time.monotonic() < deadline, "no shard after 120 s"
                time.sleep(0.002)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL  # killed, not finished before the signal
    at_kill = _final_shards(out)
    assert 0 < len(at_kill) < num_shards, at_kill
    assert "records.shards.json" in os.listdir(out)
    left = os.listdir(scratch)  # the killed run's scratch folder, with the split documents
    assert len(left) == 1 and left[0].startswith(".bert-shards.") and left[0].endswith(".tmp")

    # uninterrupted, into another folder
    ref = tmp_path / "reference"
    ref.mkdir()
    code, err = _run(flag_args + ["--output_file=%s" % (ref / "records"),
                                  "--show_progress=false"])
    assert code == 0, err

    rerun = subprocess.run(command + ["--num_workers=2"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    summary = _summary(rerun.stderr)
    assert int(summary["skipped"]) == len(at_kill)
    assert int(summary["wrote"]) == num_shards - len(at_kill)
    assert int(summary["skipped_instances"]) == sum(
        numpy_reader.count_records(str(out / name)) for name in at_kill)
    assert _shard_bytes(prefix, num_shards) == _shard_bytes(str(ref / "records"), num_shards)
    assert _read(corpus_shards.manifest_path(prefix)) == _read(
        corpus_shards.manifest_path(str(ref / "records")))
    names = os.listdir(out)
    assert not [n for n in names if n.endswith(".tmp") or n.startswith(".")], names
    assert len(names) == num_shards + 1
    assert os.listdir(scratch) == []  # the killed run's scratch was removed too


# ------------------------------------------------------------------------------------------
# Statistics: the shards are records like the single stream's.
# ------------------------------------------------------------------------------------------


def _chunked_corpus(path, lines_per_document=20):
    """The derived corpus with each document cut into documents of at most 20 lines.

    The generator draws a document's target length (short_seq_prob) once per document and
    pass, and the derived corpus has one document of 4064 lines (12% of its tokens): its
    instances share that draw, so their statistics move together and one draw moves the
    corpus's means by many times the independent-instance standard error. With documents of
    at most 20 lines (~3 instances per pass), the sampling noise is close to that of
    independent instances (see ``DESIGN``)."""
    docs = list(pretraining_corpus.iter_documents([DERIVED]))
    out = []
    for doc in docs:
        out.extend("\n".join(doc[i:i + lines_per_document])
                   for i in range(0, len(doc), lines_per_document))
    path.write_text("\n\n".join(out) + "\n", encoding="utf-8")
    return str(path), len(out)


def _payloads(path):
    """The records of a TFRecord file (framing only; read_records also checks the CRCs)."""
    data = _read(path)
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 8], "little")
        yield data[pos + 12:pos + 12 + length]
        pos += 16 + length


def _varint(data, pos):
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _packed(record, name):
    """The packed payload of feature ``name`` of a serialized Example (key, Feature, list)."""
    key = b"\x0a" + bytes([len(name)]) + name.encode("ascii") + b"\x12"
    pos = record.index(key) + len(key)
    _, pos = _varint(record, pos)  # the Feature's length
    pos += 1  # int64_list (0x1a) or float_list (0x12)
    _, pos = _varint(record, pos)  # the list's length
    assert record[pos] == 0x0A  # its packed values
    length, pos = _varint(record, pos + 1)
    return record[pos:pos + length]


def _stats(files):
    """Per-instance statistics, read straight from the serialized records (decode_example is
    ~100 us a record; the results are checked against it on a sample)."""
    records = [r for f in files for r in _payloads(f)]
    real = np.array([_packed(r, "input_mask").count(1) for r in records], float)
    stats = {
        "random_next": np.array([_packed(r, "next_sentence_labels")[0] for r in records],
                                float),
        "real_tokens": real,
        "masked": np.array([np.frombuffer(_packed(r, "masked_lm_weights"), "<f4").sum()
                            for r in records], float),
        "short": (real < 128 * 0.9).astype(float),
    }
    for i in range(0, len(records), max(1, len(records) // 200)):
        decoded = numpy_reader.decode_example(records[i])
        assert decoded["next_sentence_labels"] == [stats["random_next"][i]]
        assert sum(decoded["input_mask"]) == real[i] and set(decoded["input_mask"]) <= {0, 1}
        assert sum(decoded["masked_lm_weights"]) == stats["masked"][i]
    return stats


# Measured once over 30 seeds (this corpus, these flags, 8 shards vs the single stream): the
# difference of the means had a standard deviation of 1.0-1.2 (random_next) to 2.4-2.5
# (real_tokens, masked, short) times sqrt(2) independent-instance standard errors, since the
# instances of one document and pass share its target length. The tolerance is 4 of the
# larger spread; at the default seed the differences are under 0.3 of it, while
# --short_seq_prob=0 or 0.2 in the shards moves real_tokens/masked/short by ~2 tolerances,
# --masked_lm_prob=0.13 moves masked by 4, and broken NSP negatives (all 0 or all 1) by 8+.
DESIGN = 2.5


def test_statistics_match_the_single_stream(tmp_path):
    corpus, num_documents = _chunked_corpus(tmp_path / "chunked.txt")
    flag_args = ["--vocab_file=%s" % VOCAB, "--input_file=%s" % corpus,
                 "--max_seq_length=128", "--max_predictions_per_seq=20", "--dupe_factor=2"]
    single = str(tmp_path / "single.tfrecord")
    code, err = _run(flag_args + ["--output_file=%s" % single])
    assert code == 0, err
    match = re.search(r"wrote (\d+) instances \((\d+) documents", err)
    assert match and int(match.group(2)) == num_documents, err[-2000:]
    prefix = str(tmp_path / "records")
    code, err = _run(flag_args + ["--output_file=%s" % prefix, "--num_shards=%d" % SHARDS])
    assert code == 0, err
    summary = _summary(err)
    assert int(summary["documents"]) == num_documents  # every document in one shard

    want = _stats([single])
    got = _stats([corpus_shards.shard_path(prefix, s, SHARDS) for s in range(SHARDS)])
    n_want, n_got = len(want["real_tokens"]), len(got["real_tokens"])
    assert n_got == int(summary["instances"]) and n_want == int(match.group(1))
    for name in ("random_next", "real_tokens", "masked", "short"):
        se = want[name].std() / math.sqrt(n_want)  # as if instances were independent
        tolerance = 4 * DESIGN * math.sqrt(2) * se  # two samples of that size, clustered
        diff = got[name].mean() - want[name].mean()
        assert abs(diff) <= tolerance, "%s: %.4f sharded vs %.4f single (tolerance %.4f)" % (
            name, got[name].mean(), want[name].mean(), tolerance)
    # sanity: the statistics measure something (NSP negatives ~half, a short tail exists)
    assert 0.4 < got["random_next"].mean() < 0.7 and 0.1 < got["short"].mean() < 0.5
    # Instances per document: the count of one document and pass depends on its target
    # length and on how many random-next segments go back, so it is not a sum of independent
    # instances either; over 30 seeds the sharded/single ratio stayed within 2.6% (sd ~0.8%).
    # 5% is ~6 sd, and a run losing one shard's documents (1/8) would be 12% short.
    per_doc_want, per_doc_got = n_want / num_documents, n_got / num_documents
    assert abs(per_doc_got / per_doc_want - 1) < 0.05, (per_doc_got, per_doc_want)


# ------------------------------------------------------------------------------------------
# Bad flags and input: one line, exit code 1, nothing written.
# ------------------------------------------------------------------------------------------


def _previous_run(out_dir, *extra):
    code, err = _run(SMALL + ["--input_file=%s" % TRAJECTORY, "--num_shards=4",
                              "--output_file=%s" % (out_dir / "records"),
                              "--show_progress=false"] + list(extra))
    assert code == 0, err
    assert len(os.listdir(out_dir)) == 5


BAD = {
    # case: (extra flags, expected text of the error line)
    "num_shards_zero": (["--num_shards=0"], "--num_shards=0 must be at least 1"),
    "num_shards_negative": (["--num_shards=-3"], "--num_shards=-3 must be at least 1"),
    "num_shards_too_many": (["--num_shards=100000"], "--num_shards=100000: at most 99999"),
    "shard_range_malformed": (["--num_shards=8", "--shard_range=5"],
                              "--shard_range=5: expected i:j"),
    "shard_range_beyond": (["--num_shards=8", "--shard_range=3:9"],
                           "--shard_range=3:9: needs 0 <= i < j <= --num_shards=8"),
    "shard_range_empty": (["--num_shards=8", "--shard_range=4:4"],
                          "--shard_range=4:4: needs 0 <= i < j <= --num_shards=8"),
    "shard_range_without_num_shards": (["--shard_range=0:2"],
                                       "--shard_range=0:2 needs --num_shards"),
    "comma_outputs": (["--num_shards=4"], "not a comma list"),
    "other_num_shards": (["--num_shards=8"], "holds the shards of another run (-of-00004) "
                                             "and this one writes -of-00008"),
    "other_dupe_factor": (["--num_shards=4", "--dupe_factor=2"],
                          "made with --dupe_factor=1, this run has --dupe_factor=2"),
    "other_seed": (["--num_shards=4", "--random_seed=7"],
                   "made with --random_seed=12345, this run has --random_seed=7"),
    "other_vocab": (["--num_shards=4"], "made with a --vocab_file of SHA-256"),
    "other_input": (["--num_shards=4"], "bytes of input, this run has"),
    "shards_without_manifest": (["--num_shards=4"], "-of-00004 exists but"),
    "prefix_is_folder": (["--num_shards=4"], "is a folder: with --num_shards it is the "
                                             "shards' name prefix"),
    "missing_output_folder": (["--num_shards=4"], "does not exist"),
    "invalid_utf8": (["--num_shards=4"], "bad.txt, line 2: invalid UTF-8"),
    "invalid_utf8_two_workers": (["--num_shards=4", "--num_workers=2"],
                                 "bad.txt, line 2: invalid UTF-8"),
    "empty_corpus": (["--num_shards=4"], "no text"),
    "empty_file_two_workers": (["--num_shards=4", "--num_workers=2"], "no text"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_and_exit_1_with_nothing_written(case, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    output = str(out_dir / "records")
    corpus = TRAJECTORY
    vocab = VOCAB
    extra, expect = BAD[case]
    if case == "comma_outputs":
        output = "%s,%s" % (out_dir / "a", out_dir / "b")
    elif case in ("other_num_shards", "other_dupe_factor", "other_seed", "other_input"):
        _previous_run(out_dir)
        if case == "other_input":
            corpus = str(tmp_path / "other.txt")
            shutil.copyfile(TRAJECTORY, corpus)
            with open(corpus, "a", encoding="utf-8") as f:
                f.write("\none more document .\n")
    elif case == "other_vocab":
        _previous_run(out_dir)
        vocab = str(tmp_path / "vocab.txt")
        with open(vocab, "wb") as f:
            f.write(_read(VOCAB).rstrip(b"\n") + b"\nzzzextratoken\n")
    elif case == "shards_without_manifest":
        _previous_run(out_dir)
        os.remove(corpus_shards.manifest_path(output))
    elif case == "prefix_is_folder":
        output = str(out_dir / "sub")
        os.mkdir(output)
    elif case == "missing_output_folder":
        output = str(out_dir / "nope" / "records")
    elif case.startswith("invalid_utf8"):
        corpus = str(tmp_path / "bad.txt")
        with open(corpus, "wb") as f:
            f.write(b"a fine line .\nbad \xc3\x28 line\n\n" + b"more text .\n\n" * 100)
    elif case == "empty_corpus":
        corpus = str(tmp_path / "empty.txt")
        with open(corpus, "wb") as f:
            f.write(b"\n \n\t\r\n\xe2\x80\xa8\n")
    elif case == "empty_file_two_workers":
        corpus = str(tmp_path / "empty.txt")
        open(corpus, "wb").close()
    before = _listing(out_dir)
    code, err = _run(["--input_file=%s" % corpus, "--output_file=%s" % output,
                      "--vocab_file=%s" % vocab, "--max_seq_length=64",
                      "--max_predictions_per_seq=10", "--dupe_factor=1",
                      "--show_progress=false"] + extra)
    assert code == 1, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("create_pretraining_data.py: error: "), err
    assert expect in lines[0]
    assert _listing(out_dir) == before  # no shard, no manifest, no temporary, nothing changed


def test_a_corpus_without_tokens_is_an_error_as_in_the_single_stream(tmp_path):
    corpus = tmp_path / "control.txt"
    corpus.write_bytes(b"\x00\n\n\x01\x02\n\n\x07\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    base = ["--input_file=%s" % corpus, "--vocab_file=%s" % VOCAB, "--show_progress=false"]
    code, err = _run(base + ["--output_file=%s" % (out_dir / "single.tfrecord")])
    assert code == 1 and "no text" in err  # the single stream's answer
    code, err = _run(base + ["--output_file=%s" % (out_dir / "records"), "--num_shards=4"])
    assert code == 1 and "no text" in err
    assert os.listdir(out_dir) == []


@pytest.mark.parametrize("name", ["records[1]", "rec*", "what?"])
def test_a_prefix_with_glob_characters_is_refused(tmp_path, name):
    """Its shards could not be found again by a glob (here, and by run_pretraining's
    --input_file): shards of other flags or without a manifest would pass as complete."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, err = _run(SMALL[:-1] + ["--input_file=%s" % TRAJECTORY, "--num_shards=4",
                                   "--output_file=%s" % (out_dir / name),
                                   "--show_progress=false"])
    assert code == 1 and "must not hold * ? [" in err, err
    assert err.strip().splitlines()[-1].startswith("create_pretraining_data.py: error: ")
    assert os.listdir(out_dir) == []


def test_a_manifest_without_shards_takes_the_next_runs_flags(tmp_path):
    """A run killed before its first shard leaves only the manifest: it protects nothing, so
    a rerun with corrected flags is not refused; it rewrites it."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    _previous_run(out_dir)
    for name in os.listdir(out_dir):
        if not name.endswith(".shards.json"):
            os.remove(out_dir / name)
    code, err = _run(SMALL[:-1] + ["--dupe_factor=2", "--input_file=%s" % TRAJECTORY,
                                   "--num_shards=4", "--output_file=%s" % (out_dir / "records"),
                                   "--show_progress=false"])
    assert code == 0, err
    with open(corpus_shards.manifest_path(str(out_dir / "records"))) as f:
        assert json.load(f)["dupe_factor"] == 2
    assert len(os.listdir(out_dir)) == 5
