"""run_pretraining's check of its input files at scale (data/pretraining/dataset.py): with
2,000 shard files it reads the first record of a fixed sample only, in parallel, on the local
disk and on the loopback GCS (counted: record reads, and GETs of the emulator); a bad file in
the sample is still the error, one outside it is named once the input reaches it
(``find_bad_file``); the shards' manifest is not taken for a record file."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from bert_common import record_framing
from data.pretraining import dataset as pd
from data.pretraining import corpus_shards
from data.records import numpy_reader
from tests import paths

PRE = os.path.join(paths.GOLDEN, "pretraining_data")
WWM_FALSE = os.path.join(PRE, "seq128_seed12345_dupe5_wwmfalse.tfrecord")
TRAJ = os.path.join(paths.GOLDEN, "pretraining_trajectory", "seq64_seed12345_dupe1.tfrecord")
FILES = 2000


def _record(path):
    return record_framing.frame_record(list(numpy_reader.read_records(path))[0])


@pytest.fixture(scope="module")
def shard_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    good = _record(WWM_FALSE)
    for i in range(FILES):
        (folder / ("records-%05d-of-%05d" % (i, FILES))).write_bytes(good)
    (folder / "records.shards.json").write_text("{}")
    return folder


def _counting(monkeypatch):
    read = []
    original = pd._first_example

    def counted(path):
        read.append(path)
        return original(path)

    monkeypatch.setattr(pd, "_first_example", counted)
    return read


def test_the_check_of_2000_files_reads_a_sample(shard_folder, monkeypatch):
    files = corpus_shards.input_files(str(shard_folder / "records-*"))
    assert len(files) == FILES
    assert corpus_shards.input_files(str(shard_folder / "*")) == files  # the manifest is skipped
    read = _counting(monkeypatch)
    pd.check_input_files(files, 128, 20)
    assert len(read) == pd.CHECK_SAMPLE and len(set(read)) == pd.CHECK_SAMPLE
    assert files[0] in read and files[-1] in read
    assert read[0] != read[1] and sorted(read) == pd.check_sample(files)


def test_a_bad_file_in_the_sample_is_the_error_and_one_outside_is_found_later(
        shard_folder, tmp_path):
    files = corpus_shards.input_files(str(shard_folder / "records-*"))
    sampled = set(pd.check_sample(files))
    outside = next(i for i, f in enumerate(files) if f not in sampled)
    inside = sorted(files.index(f) for f in sampled)[5]
    bad = _record(TRAJ)  # seq 64 records: input_ids has 64 values, the flags say 128
    for index in (inside, outside):
        path = files[index]
        saved = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write(bad)
        try:
            if index == inside:
                with pytest.raises(pd.PretrainingDataError,
                                   match=r"records-%05d-of-.*input_ids has 64 values per "
                                         r"record but --max_seq_length=128" % index):
                    pd.check_input_files(files, 128, 20)
            else:
                pd.check_input_files(files, 128, 20)  # not in the sample: not read yet
                original = ValueError("a parse error of the input")
                found = pd.find_bad_file(files, 128, 20, original)
                assert isinstance(found, pd.PretrainingDataError)
                assert "records-%05d-of-%05d" % (index, FILES) in str(found)
        finally:
            with open(path, "wb") as f:
                f.write(saved)
    error = ValueError("not about the files")
    assert pd.find_bad_file(files, 128, 20, error) is error


def test_files_without_records_in_the_sample_send_the_check_to_the_others(tmp_path):
    empty = []
    for i in range(pd.CHECK_SAMPLE + 10):
        path = tmp_path / ("r-%03d" % i)
        path.write_bytes(b"")
        empty.append(str(path))
    with pytest.raises(pd.PretrainingDataError, match="no records in the input files"):
        pd.check_input_files(empty, 128, 20)
    unsampled = next(p for p in empty if p not in set(pd.check_sample(empty)))
    with open(unsampled, "wb") as f:
        f.write(_record(WWM_FALSE))
    pd.check_input_files(empty, 128, 20)


def test_the_check_on_gcs_reads_a_sample(gcs):
    prefix = gcs.unique_prefix("checks")
    good = _record(WWM_FALSE)
    with ThreadPoolExecutor(8) as pool:  # the uploads, not the check, are this test's time
        list(pool.map(lambda i: gcs.write_object(
            "%s/records-%05d-of-%05d" % (prefix, i, FILES), good), range(FILES)))
    files = corpus_shards.input_files(gcs.url(prefix, "records-*"))
    assert len(files) == FILES
    before = len(gcs.requests)
    pd.check_input_files(files, 128, 20)
    gets = [r for r in gcs.requests[before:] if r.method == "GET"]
    # Metadata (exists, isdir) and a ranged read per sampled file, none for the others.
    assert len(gets) <= 4 * pd.CHECK_SAMPLE, len(gets)
    named = {r.path.split("?")[0].rsplit("records-", 1)[-1] for r in gets
             if "records-" in r.path.split("?")[0]}  # not the listing (?prefix=...)
    assert 1 < len(named) <= pd.CHECK_SAMPLE, sorted(r.path for r in gets)[:5]
