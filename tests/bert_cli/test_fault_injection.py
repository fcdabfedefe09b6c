"""A disk that fills during each kind of output, injected through the file layer
(``bert_common.atomic.inject_faults``): TFRecords (create_pretraining_data), a training
checkpoint, a TF1 export and predictions (run_classifier, run_pretraining). Each run fails with
one line naming the output and exit 1, the previous output stays as it was, no temporary is
left, and a rerun without the fault completes."""

import errno
import os

import pytest

from bert_cli import create_pretraining_data, run_classifier
from bert_common import atomic
from tests import paths
from tests.bert_cli.test_run_classifier import MRPC, TINY, _base_flags
from tests.support.slices import glue_slice
from tests.support.tools import assert_one_error_line, run_tool, snapshot

SAMPLE = os.path.join(paths.GOLDEN, "inputs", "sample_text.txt")


class DiskFull:
    """A hook that fails like a full disk at the ``nth`` ``event`` whose path ends in
    ``suffix`` (and at every later one: a full disk stays full)."""

    def __init__(self, event, suffix, nth=1):
        self.event, self.suffix, self.nth, self.seen = event, suffix, nth, 0

    def __call__(self, event, path):
        if event == self.event and path.endswith(self.suffix):
            self.seen += 1
            if self.seen >= self.nth:
                raise OSError(errno.ENOSPC, "No space left on device", path)


def _no_temporaries(folder):
    leftovers = [p for p in snapshot(folder) if ".tmp" in p or "_temp" in p]
    assert not leftovers, leftovers


def test_tfrecords_disk_full_mid_stream_keeps_the_previous_file(tmp_path):
    out = tmp_path / "pretraining.tfrecord"
    argv = ["--input_file=%s" % SAMPLE, "--output_file=%s" % out,
            "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--dupe_factor=2", "--random_seed=1"]
    first = run_tool(create_pretraining_data, argv)
    assert first.code == 0, first.stderr
    before = snapshot(tmp_path)
    with atomic.inject_faults(DiskFull("write", "pretraining.tfrecord")):
        failed = run_tool(create_pretraining_data, argv[:-1] + ["--random_seed=2"])
    assert_one_error_line(failed, "create_pretraining_data.py", "No space left on device",
                          "pretraining.tfrecord")
    assert snapshot(tmp_path) == before
    again = run_tool(create_pretraining_data, argv[:-1] + ["--random_seed=2"])
    assert again.code == 0 and snapshot(tmp_path) != before
    _no_temporaries(tmp_path)


@pytest.fixture(scope="module")
def mrpc(tmp_path_factory):
    return glue_slice(MRPC, tmp_path_factory.mktemp("mrpc"), {"train": 32, "dev": 8, "test": 8})


def test_checkpoint_save_fails_then_the_rerun_resumes(mrpc, tmp_path):
    out = tmp_path / "out"
    argv = _base_flags(mrpc, out) + [
        "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"), "--do_train",
        "--train_batch_size=8", "--num_train_epochs=1", "--save_checkpoints_steps=2"]
    with atomic.inject_faults(DiskFull("checkpoint", "model.ckpt-4")):
        failed = run_tool(run_classifier, argv)
    assert_one_error_line(failed, "run_classifier.py", "No space left on device", "model.ckpt-4")
    names = sorted(os.listdir(out))
    assert "model.ckpt-2.index" in names and not any(n.startswith("model.ckpt-4") for n in names)
    with open(out / "checkpoint") as f:
        assert 'model_checkpoint_path: "model.ckpt-2"' in f.read()
    _no_temporaries(out)
    again = run_tool(run_classifier, argv)
    assert again.code == 0, again.stderr
    assert "model.ckpt-4.index" in os.listdir(out)


def test_predictions_disk_full_keeps_both_previous_files(mrpc, tmp_path):
    out = tmp_path / "out"
    argv = _base_flags(mrpc, out) + [
        "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"), "--do_predict"]
    first = run_tool(run_classifier, argv)
    assert first.code == 0, first.stderr
    for name in ("test_results.tsv", "MRPC.tsv"):  # marked, so a rewrite would show
        with open(out / name, "a") as f:
            f.write("# from the previous run\n")
    before = {k: v for k, v in snapshot(out).items() if k.endswith(".tsv")}
    assert sorted(before) == ["MRPC.tsv", "test_results.tsv"]
    # The second of the two files fails: the first must not be left new beside an old second.
    with atomic.inject_faults(DiskFull("commit", "MRPC.tsv")):
        failed = run_tool(run_classifier, argv)
    assert_one_error_line(failed, "run_classifier.py", "No space left on device", "MRPC.tsv")
    assert {k: v for k, v in snapshot(out).items() if k.endswith(".tsv")} == before
    _no_temporaries(out)


def test_tf1_checkpoint_export_is_all_new_or_all_old(tmp_path):
    """convert_checkpoint's TF1 output (run_pretraining's export writes the same way): the
    ``.index`` rename fails after the ``.data`` one succeeded: the old pair comes back."""
    from bert_cli import convert_checkpoint

    out = tmp_path / "export"
    out.mkdir()
    argv = ["--input=%s" % os.path.join(TINY, "bert_model.ckpt"),
            "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--output=%s" % (out / "bert_model.ckpt")]
    assert run_tool(convert_checkpoint, argv).code == 0
    with open(out / "bert_model.ckpt.index", "ab") as f:
        f.write(b"marker of the previous export")  # a rewrite would show
    before = snapshot(out)
    with atomic.inject_faults(DiskFull("commit", "bert_model.ckpt.index")):
        failed = run_tool(convert_checkpoint, argv)
    assert_one_error_line(failed, "convert_checkpoint.py", "No space left on device",
                          "bert_model.ckpt.index")
    assert snapshot(out) == before
    _no_temporaries(out)
