"""The sharded records as an Apache Beam pipeline (data/pretraining/beam.py), on Beam's local
runner in its multi-process mode with 2 workers (no network, no runner binary): the same bytes
as the process pool, locally and from gs:// text to gs:// records (the loopback GCS); complete
shards skipped; nothing left in the temporary folder; an empty corpus leaves nothing; a missing
Beam is one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from data.pretraining import beam as pretraining_beam
from data.pretraining import corpus_shards
from data.pretraining.instances import PretrainingDataError
from tests import paths

CORPUS = os.path.join(paths.DATA, "pretrain", "derived_pretrain_corpus.txt")
VOCAB = os.path.join(paths.DATA, "vocab", "bert-base-uncased-vocab.txt")
SHARDS = 6
LOCAL_BEAM = ("--runner=DirectRunner --direct_running_mode=multi_processing "
              "--direct_num_workers=2")


def _tool(args, env=None, cwd=None):
    proc = subprocess.run(
        [sys.executable, os.path.join(paths.ROOT, "create_pretraining_data.py"),
         "--vocab_file=%s" % VOCAB, "--num_shards=%d" % SHARDS, "--max_seq_length=64",
         "--max_predictions_per_seq=10", "--dupe_factor=2"] + list(args),
        env=dict(env or os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH),
        cwd=cwd or paths.ROOT, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stderr


def _shard_bytes(read, prefix):
    return [read(corpus_shards.shard_path(prefix, s, SHARDS)) for s in range(SHARDS)]


def _read_local(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def pool_output(tmp_path_factory):
    """The process pool's shards of the corpus (the reference bytes)."""
    prefix = str(tmp_path_factory.mktemp("pool") / "records")
    code, err = _tool(["--input_file=%s" % CORPUS, "--output_file=%s" % prefix,
                       "--num_workers=2", "--show_progress=false"])
    assert code == 0, err
    return _shard_bytes(_read_local, prefix)


def test_beam_writes_the_pools_bytes_and_skips_complete_shards(pool_output, tmp_path,
                                                                tmp_path_factory):
    prefix = str(tmp_path / "records")
    # The runs' temporary folder: Beam's local job server leaves a beam-temp* folder there
    # unless the tool removes it.
    env = dict(os.environ, TMPDIR=str(tmp_path_factory.mktemp("system_tmp")))
    code, err = _tool(["--input_file=%s" % CORPUS, "--output_file=%s" % prefix,
                       "--beam_options=%s" % LOCAL_BEAM, "--shard_range=0:2"], env=env)
    assert code == 0, err
    assert "wrote 2 shards (00000-00001)" in err.splitlines()[-1]
    code, err = _tool(["--input_file=%s" % CORPUS, "--output_file=%s" % prefix,
                       "--beam_options=%s" % LOCAL_BEAM], env=env)
    assert code == 0, err
    assert os.listdir(env["TMPDIR"]) == []  # nothing left in the temporary folder
    last = err.splitlines()[-1]
    assert "wrote 4 shards (00002-00005)" in last and "skipped 2 complete (00000-00001)" in last
    assert _shard_bytes(_read_local, prefix) == pool_output
    assert sum(len(b) for b in pool_output) > 100000 and all(pool_output)
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(corpus_shards.shard_path(prefix, s, SHARDS)) for s in range(SHARDS)]
        + ["records.shards.json"])


def test_beam_reads_gs_text_and_writes_gs_records(pool_output, gcs, tmp_path):
    prefix = gcs.unique_prefix("beam")
    with open(CORPUS, "rb") as f:
        gcs.write_object(prefix + "/text/corpus.txt", f.read())
    out = gcs.url(prefix, "records", "wiki")
    code, err = _tool(["--input_file=%s" % gcs.url(prefix, "text", "*.txt"),
                       "--output_file=%s" % out, "--beam_options=%s" % LOCAL_BEAM],
                      cwd=str(tmp_path))
    assert code == 0, err
    got = _shard_bytes(lambda p: gcs.read_object(p[len(gcs.bucket_url) + 1:]),
                       "%s/records/wiki" % gcs.url(prefix))
    assert got == pool_output
    names = gcs.list_objects(prefix + "/records/")
    assert sorted(n.rsplit("/", 1)[1] for n in names if not n.endswith("/")) == sorted(
        ["wiki-%05d-of-%05d" % (s, SHARDS) for s in range(SHARDS)] + ["wiki.shards.json"])
    assert os.listdir(tmp_path) == []  # nothing under ./gs:


def test_beam_on_an_empty_corpus_leaves_nothing(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"\n  \n\n")
    out = tmp_path / "out"
    out.mkdir()
    code, err = _tool(["--input_file=%s" % empty, "--output_file=%s" % (out / "records"),
                       "--beam_options=%s" % LOCAL_BEAM])
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("create_pretraining_data.py: error: ")
    assert "no text" in err.strip().splitlines()[-1]
    assert os.listdir(out) == []


def test_without_beam_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # import apache_beam -> ImportError
    with pytest.raises(PretrainingDataError, match=r"pip install '\.\[beam\]'"):
        pretraining_beam.import_beam()


def test_pipeline_options_default_to_the_local_runner():
    options = pretraining_beam.pipeline_options("--direct_num_workers=2").get_all_options()
    assert options["runner"] == "DirectRunner" and options["direct_num_workers"] == 2
    options = pretraining_beam.pipeline_options("--runner=DataflowRunner").get_all_options()
    assert options["runner"] == "DataflowRunner"
