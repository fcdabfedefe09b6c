"""``--export_dir`` of run_classifier / run_squad / run_ner is TF Serving's model base path: each
export adds the next version folder (1, 2, ... side by side, each loadable); a folder holding
anything else (or the run's --output_dir) is refused with one line before any work and left
byte for byte; the leftover of a killed export does not block the next one; a failed export
(a full disk) is one line and leaves the earlier versions and no temporary. The classifier's
ids signature, loaded from the export, rejects inconsistent requests with a message naming the
input and answers an empty batch with empty outputs."""

import errno
import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the raw-text signatures' ops)

from bert_cli import run_classifier, run_ner, run_squad
from bert_common import atomic
from tests import paths
from tests.support.tools import assert_one_error_line, dead_pid, run_tool, snapshot

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
MRPC = os.path.join(paths.DATA, "glue", "MRPC")
SEQ = 32
TEXTS = ["A man sleeps.", "", "Ünïcödé 中文 ☃ \x00 text " * 40]


def _flags(output_dir, export_dir, *extra):
    return ["--task_name=mrpc", "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"),
            "--output_dir=%s" % output_dir, "--max_seq_length=%d" % SEQ,
            "--export_dir=%s" % export_dir] + list(extra)


def _export(output_dir, export_dir, *extra):
    """run_classifier.py in this process: export only (the tiny checkpoint, a seeded head)."""
    return run_tool(run_classifier, _flags(output_dir, export_dir, *extra))


def _state(root):
    """Everything under ``root``, folders too, with each entry's bytes, mode and mtime."""
    return snapshot(root, folders=True, stat=True)


def _one_error_line(run, tool="run_classifier.py"):
    """The run failed with one error line and wrote nothing else to stderr."""
    line = assert_one_error_line(run, tool)
    assert run.stderr.strip() == line, run.stderr[-3000:]
    return line


def _probabilities(version_dir_or_loaded):
    loaded = version_dir_or_loaded
    if not hasattr(loaded, "signatures"):
        loaded = tf.saved_model.load(str(loaded))
    return loaded.signatures["text"](text_a=tf.constant(TEXTS))["probabilities"].numpy()


@pytest.fixture(scope="module")
def version_1(tmp_path_factory):
    """A base path holding version 1 (copied by the tests that need one)."""
    tmp = tmp_path_factory.mktemp("exports")
    base = tmp / "models" / "mrpc"
    run = _export(tmp / "out", base)
    assert run.code == 0, run.stderr[-3000:]
    assert os.listdir(base) == ["1"]
    return base


@pytest.fixture(scope="module")
def loaded_version_1(version_1):
    """Version 1 loaded once (a load takes seconds), for the tests that only read it."""
    return tf.saved_model.load(str(version_1 / "1"))


def _copy(base, tmp_path):
    target = tmp_path / "models" / "mrpc"
    shutil.copytree(base, target)
    return target


# ------------------------------------------------------------------------------- refusals


def test_a_folder_holding_other_files_is_refused_before_any_work(tmp_path):
    base = tmp_path / "models"
    (base / "train").mkdir(parents=True)
    (base / "model.ckpt-4.index").write_bytes(b"\x00\x01checkpoint index")
    (base / "notes.txt").write_text("mine\n")
    (base / "train" / "events.out.tfevents.1").write_bytes(b"\x00" * 100)
    (base / "1").mkdir()
    (base / "1" / "saved_model.pb").write_bytes(b"an earlier export")
    before = _state(tmp_path)
    out = tmp_path / "out"
    line = _one_error_line(_export(out, base, "--do_train", "--data_dir=%s" % MRPC))
    assert ("--export_dir=%s holds other files than SavedModel versions "
            "(model.ckpt-4.index, notes.txt, train)" % base) in line
    assert _state(tmp_path) == before  # byte for byte, and no --output_dir made
    assert not out.exists()


def test_export_dir_equal_to_output_dir_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.ckpt-4.index").write_bytes(b"checkpoint")
    (out / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-4"\n')
    before = _state(tmp_path)
    for base in (out, tmp_path):  # the output folder, or a folder holding it
        line = _one_error_line(_export(out, base))
        assert "--export_dir=%s is --output_dir=%s or holds it" % (base, out) in line, line
        assert _state(tmp_path) == before


def test_export_dir_that_is_a_file_is_refused(tmp_path):
    base = tmp_path / "mrpc"
    base.write_bytes(b"\x89PNG not a folder")
    before = _state(tmp_path)
    line = _one_error_line(_export(tmp_path / "out", base))
    assert "--export_dir=%s is a file" % base in line
    assert _state(tmp_path) == before


@pytest.mark.parametrize("module,tool,extra", [
    (run_squad, "run_squad.py", ["--max_query_length=16"]), (run_ner, "run_ner.py", [])])
def test_squad_and_ner_refuse_before_any_work(tmp_path, module, tool, extra):
    base = tmp_path / "models"
    base.mkdir()
    (base / "predictions.json").write_text("{}")
    before = _state(tmp_path)
    out = tmp_path / "out"
    run = run_tool(module, ["--vocab_file=%s" % paths.GOLDEN_VOCAB,
                            "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
                            "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"),
                            "--output_dir=%s" % out, "--max_seq_length=64",
                            "--export_dir=%s" % base] + extra)
    line = _one_error_line(run, tool)
    assert ("--export_dir=%s holds other files than SavedModel versions (predictions.json)"
            % base) in line
    assert _state(tmp_path) == before and not out.exists()


# ------------------------------------------------------------------------------- versions


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def version_2(version_1, tmp_path_factory):
    """A second export into a copy of the base path holding version 1 and two leftovers of
    exports of version 2: a killed run's (its pid dead) and a running one's (this process's
    parent). One export serves the two tests below (an export takes seconds): the dead leftover
    must not block it, and version 2 goes beside version 1."""
    tmp = tmp_path_factory.mktemp("version_2")
    base = _copy(version_1, tmp)
    first = _state(base / "1")
    dead = base / (".2.%s-%d.x.tmp" % (atomic._HOST, dead_pid()))
    live = base / (".2.%s-%d.y.tmp" % (atomic._HOST, os.getppid()))  # a run still exporting
    for leftover in (dead, live):
        (leftover / "variables").mkdir(parents=True)
        (leftover / "saved_model.pb").write_bytes(b"half-written")
    records, root = _Records(), logging.getLogger()
    level = root.level
    root.addHandler(records)
    root.setLevel(logging.INFO)  # as caplog.at_level(logging.INFO)
    try:
        run = _export(tmp / "out", base)
    finally:
        root.removeHandler(records)
        root.setLevel(level)
    loaded = []

    def load():  # version 2, loaded once for both tests
        if not loaded:
            loaded.append(tf.saved_model.load(str(base / "2")))
        return loaded[0]

    return {"base": base, "run": run, "log": "\n".join(records.messages), "first": first,
            "live": live, "load": load}


def test_two_exports_are_versions_1_and_2_side_by_side(version_2, loaded_version_1):
    base, run = version_2["base"], version_2["run"]
    assert run.code == 0, run.stderr[-3000:]
    # Version folders 1 and 2 (the hidden leftover of a run still exporting stays beside them).
    assert sorted(n for n in os.listdir(base) if not n.startswith(".")) == ["1", "2"]
    assert "exported SavedModel version 2 to %s" % (base / "2") in version_2["log"]
    assert _state(base / "1") == version_2["first"]  # version 1 untouched
    # Both load and serve; the same checkpoint and seed give the same model.
    np.testing.assert_allclose(_probabilities(loaded_version_1),
                               _probabilities(version_2["load"]()), atol=1e-6)


def test_leftover_of_a_killed_export_does_not_block_the_next(version_2):
    base, run, live = version_2["base"], version_2["run"], version_2["live"]
    assert run.code == 0, run.stderr[-3000:]
    assert sorted(os.listdir(base)) == [live.name, "1", "2"]  # the dead one removed
    assert (live / "saved_model.pb").read_bytes() == b"half-written"
    assert _probabilities(version_2["load"]()).shape == (len(TEXTS), 2)


@pytest.mark.parametrize("event", ["write", "commit"])
def test_a_failed_export_is_one_line_and_leaves_version_1(version_1, tmp_path, event):
    base = _copy(version_1, tmp_path)
    before = _state(base)

    def disk_full(ev, path):
        if ev == event and os.path.abspath(path).startswith(str(base)):
            raise OSError(errno.ENOSPC, "No space left on device", path)

    with atomic.inject_faults(disk_full):
        run = _export(tmp_path / "out", base)
    line = _one_error_line(run)
    assert "No space left on device" in line and str(base / "2") in line, line
    assert _state(base) == before  # version 1 as it was, no temporary left
    assert os.listdir(base) == ["1"]


# ------------------------------------------------------------------ the ids signature's checks


@pytest.fixture(scope="module")
def serving_default(loaded_version_1):
    return loaded_version_1.signatures["serving_default"]


def _ids(batch, length, ids=5, mask=1, types=0):
    return {"input_ids": tf.fill([batch, length], ids),
            "input_mask": tf.fill([batch, length], mask),
            "segment_ids": tf.fill([batch, length], types)}


@pytest.mark.parametrize("change,message", [
    ({"input_mask": tf.ones([3, 7], tf.int32)}, "input_mask must have the shape of input_ids"),
    ({"input_mask": tf.ones([2, 6], tf.int32)}, "input_mask must have the shape of input_ids"),
    ({"segment_ids": tf.zeros([1, 7], tf.int32)}, "segment_ids must have the shape of input_ids"),
    ({"input_mask": tf.fill([2, 7], 7)}, r"input_mask values must be 0 or 1"),
    ({"input_mask": tf.fill([2, 7], -1)}, r"input_mask values must be 0 or 1"),
    ({"input_ids": tf.fill([2, 7], 30522)}, r"input_ids values must be in \[0, vocab_size=30522\)"),
    ({"input_ids": tf.fill([2, 7], -3)}, r"input_ids values must be in \[0, vocab_size=30522\)"),
    ({"segment_ids": tf.fill([2, 7], 2)},
     r"segment_ids values must be in \[0, type_vocab_size=2\)"),
])
def test_inconsistent_ids_requests_are_rejected(serving_default, change, message):
    inputs = dict(_ids(2, 7), **change)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        serving_default(**inputs)


def test_lengths_out_of_range_are_rejected(serving_default):
    with pytest.raises(tf.errors.InvalidArgumentError, match="a row needs at least one position"):
        serving_default(**_ids(2, 0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings=128"):
        serving_default(**_ids(1, 129))


@pytest.mark.parametrize("length", [0, 5])
def test_an_empty_batch_gives_empty_outputs(serving_default, loaded_version_1, length):
    out = serving_default(**_ids(0, length))
    assert out["probabilities"].shape == (0, 2) and out["logits"].shape == (0, 2)
    assert out["label_id"].shape == (0,) and out["label"].shape == (0,)
    loaded = loaded_version_1
    empty = tf.constant([], tf.string)
    assert loaded.signatures["text"](text_a=empty)["probabilities"].shape == (0, 2)
    assert loaded.signatures["text_pair"](text_a=empty, text_b=empty)["label"].shape == (0,)


def test_valid_requests_are_served_as_before(serving_default):
    inputs = _ids(2, 7)
    inputs["input_mask"] = tf.constant([[1] * 7, [1] * 3 + [0] * 4])
    out = serving_default(**inputs)
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, atol=1e-5)
    # The padded row is served as its 3 real positions alone (the mask is applied).
    alone = serving_default(**_ids(1, 3))
    np.testing.assert_allclose(out["probabilities"].numpy()[1], alone["probabilities"].numpy()[0],
                               atol=1e-5)
    assert not np.allclose(out["probabilities"].numpy()[0], alone["probabilities"].numpy()[0],
                           atol=1e-6)  # the full row differs: the check can tell
