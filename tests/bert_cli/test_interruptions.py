"""kill -9 at several points of create_pretraining_data, run_classifier and run_squad: never a
partial output under a final name (each output is absent, or equal to an uninterrupted run's),
and a rerun into the same folder removes the killed run's temporaries and gives the same outputs
as the uninterrupted run. (Resuming a killed training run is tested in test_run_classifier.py.)

The killed runs are processes. For create_pretraining_data (no TensorFlow: a process is cheap)
the uninterrupted run is a process too, and the kill points are fractions of its wall time. For
run_classifier and run_squad the kill points are what the killed process is seen doing: loading
its modules (its first line on stderr), writing an output (a temporary in its folder: the
features' records), running the model (an output under its final name, the predictions still
to come); their uninterrupted run is the tool's ``main`` in this process (a process would only
add an ``import tensorflow``, and the later fractions of its wall time fell in its exit, after
every output was written). The reruns run the tool's ``main`` in this process (another pid: the
killed process's temporaries are those of a dead process, as for a rerun from a shell)."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from bert_cli import create_pretraining_data, run_classifier, run_squad
from tests import paths
from tests.bert_cli.test_run_classifier import MRPC
from tests.bert_cli.test_run_squad import SQUAD
from tests.support.slices import glue_slice, squad_slice
from tests.support.tools import run_tool

ROOT = paths.ROOT
TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH)
# Kill points, as fractions of the uninterrupted run's wall time: start-up, reading/features,
# the model, writing the outputs.
FRACTIONS = (0.5, 0.85, 0.97)


def _started(said, names):
    """Loading its modules: its first line on stderr (or, first, anything in its folder)."""
    return said or bool(names)


def _writing(said, names):
    """Writing its first output: a temporary (or, if that went unseen, anything) in its
    folder."""
    return bool(names)


def _written(said, names):
    """An output under its final name, the run still going (the model's run follows the
    features' records)."""
    return any(not name.startswith(".") for name in names)


# Kill points, as what the process is seen doing (``_kill_when``).
EVENTS = (_started, _writing, _written)


class Tool:
    """One tool's command: ``command(out)`` (argv of a process) and ``rerun(out)`` (its
    ``main`` in this process, on the same flags)."""

    def __init__(self, script, module, make_argv):
        self.script, self.module, self.make_argv = script, module, make_argv

    def command(self, out):
        return [sys.executable, os.path.join(ROOT, self.script)] + list(self.make_argv(out))

    def rerun(self, out):
        result = run_tool(self.module, self.make_argv(out))
        assert result.code == 0, result.stderr[-3000:]


def _run(command):
    start = time.time()
    done = subprocess.run(command, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return time.time() - start


def _kill_after(command, seconds):
    proc = subprocess.Popen(command, env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _kill_when(command, out, point):
    """Starts ``command`` (its output folder ``out``) and kills it with SIGKILL as soon as
    ``point(said, names)`` holds: ``said``, whether it has written a line on stderr; ``names``,
    what is in ``out`` (its write probe left out). A run that ends first is not killed."""
    proc = subprocess.Popen(command, env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    said = threading.Event()

    def drain():  # read on: a full pipe would stop the process
        for _ in proc.stderr:
            said.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        while proc.poll() is None:
            names = [n for n in os.listdir(out) if not n.startswith(".write_probe.")]
            if point(said.is_set(), names):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
    finally:
        proc.wait()
        reader.join(timeout=60)
        proc.stderr.close()


def _read(path):
    """A file's content: its bytes, or for TFRecords the parsed examples, each in its canonical
    serialization (a proto map's serialized order is not fixed from one process to the next;
    parsed and written again deterministically, map entries sorted by key, two examples are
    equal exactly when these bytes are; a truncated file fails here). Records are read in
    batches: one eager step per record, and a text form of each example, took seconds a file."""
    path = str(path)
    if not path.endswith((".tf_record", ".tfrecord")):
        with open(path, "rb") as f:
            return f.read()
    import tensorflow as tf

    out = []
    for batch in tf.data.TFRecordDataset(path).batch(4096):
        out.extend(tf.train.Example.FromString(record).SerializeToString(deterministic=True)
                   for record in batch.numpy())
    return out


def _temporaries(folder):
    return [n for n in os.listdir(folder) if n.startswith(".") and n.endswith(".tmp")]


def _check_interrupted_then_rerun(tool, outputs, tmp_path, events=False):
    """``tool``: a ``Tool``; ``outputs``: file names (relative to out_dir) a run writes. Kill
    points: ``FRACTIONS`` of an uninterrupted process's wall time, or with ``events`` the
    ``EVENTS`` (the uninterrupted run then in this process)."""
    reference = tmp_path / "reference"
    reference.mkdir()
    if events:
        tool.rerun(str(reference))
        kills = [lambda command, out, point=point: _kill_when(command, out, point)
                 for point in EVENTS]
        points = [point.__name__ for point in EVENTS]
    else:
        seconds = _run(tool.command(str(reference)))
        kills = [lambda command, out, f=fraction: _kill_after(command, seconds * f)
                 for fraction in FRACTIONS]
        points = list(FRACTIONS)
    expected = {name: _read(reference / name) for name in outputs}
    for i, (kill, point) in enumerate(zip(kills, points)):
        out = tmp_path / ("killed_%d" % i)
        out.mkdir()
        kill(tool.command(str(out)), out)
        for name in outputs:  # absent, or complete: never partial under the final name
            if (out / name).exists():
                assert _read(out / name) == expected[name], (point, name)
        tool.rerun(str(out))
        assert {name: _read(out / name) for name in outputs} == expected, point
        assert _temporaries(out) == [], (point, _temporaries(out))


def test_create_pretraining_data(tmp_path):
    corpus = os.path.join(paths.DATA, "pretrain", "derived_pretrain_corpus.txt")

    def argv(out):
        return [
            "--input_file=" + corpus, "--output_file=%s/a.tfrecord,%s/b.tfrecord" % (out, out),
            "--vocab_file=" + paths.GOLDEN_VOCAB, "--max_seq_length=128",
            "--max_predictions_per_seq=20", "--dupe_factor=2", "--random_seed=7",
                "--show_progress=false"]

    tool = Tool("create_pretraining_data.py", create_pretraining_data, argv)
    _check_interrupted_then_rerun(tool, ["a.tfrecord", "b.tfrecord"], tmp_path)


def test_run_classifier_eval_and_predict(tmp_path):
    data_dir = glue_slice(MRPC, tmp_path / "mrpc", {"dev": 24, "test": 24})

    def argv(out):
        return [
            "--task_name=mrpc", "--data_dir=" + data_dir, "--vocab_file=" + paths.GOLDEN_VOCAB,
            "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
            "--init_checkpoint=" + os.path.join(TINY, "bert_model.ckpt"), "--output_dir=" + out,
            "--max_seq_length=64", "--do_eval", "--do_predict"]

    _check_interrupted_then_rerun(
        Tool("run_classifier.py", run_classifier, argv), ["eval.tf_record", "predict.tf_record", "eval_results.txt", "test_results.tsv",
                  "MRPC.tsv"], tmp_path, events=True)


@pytest.mark.parametrize("version", ["v2.0_short"])
def test_run_squad_predict(tmp_path, version):
    predict = squad_slice(os.path.join(SQUAD, version, "input_dev_slice.json"),
                          tmp_path / "dev.json", 12)

    def argv(out):
        return [
            "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
            "--vocab_file=" + paths.GOLDEN_VOCAB, "--output_dir=" + out,
            "--init_checkpoint=" + os.path.join(TINY, "bert_model.ckpt"),
            "--max_seq_length=64", "--doc_stride=24", "--max_query_length=16",
            "--do_predict", "--predict_file=" + predict, "--version_2_with_negative"]

    _check_interrupted_then_rerun(
        Tool("run_squad.py", run_squad, argv), ["predictions.json", "nbest_predictions.json", "null_odds.json"], tmp_path, events=True)
