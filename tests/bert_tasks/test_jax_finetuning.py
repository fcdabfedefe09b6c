"""The fine-tuning tools with KERAS_BACKEND=jax (the JAX part of bert_tasks/driver.py), as processes
on two host devices (data-parallel, XLA's flag): run_classifier trains, evaluates, predicts and
exports (TF1 and HF); TensorFlow evaluating that export gives the JAX run's metrics and
probabilities; kill -9 after a checkpoint then resume is bit for bit the uninterrupted run;
SQuAD, SWAG and NER run end to end without TensorFlow (tests/bert_tasks/jax_tools.py), and
without it the classifier's evaluation is the tf.data run's; --export_dir (TensorFlow's
SavedModel) stops the run with one line, nothing written.

The killed classifier run is a process of its own; its resume (the first run of the next
process, as a rerun after the kill would be) and the uninterrupted run share one process
(jax_tools.run_in_one_process: one import of TensorFlow and JAX)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import paths
from tests.bert_tasks.jax_tools import (CLASSIFIER_TRAINING, compilation_cache_env,
                                        kill_one_then_rerun, run_in_one_process)
from tests.support.slices import glue_slice
from tests.support.tools import KilledAfterFirstCheckpoint, run_tool

pytest.importorskip("jax", reason="jax is in requirements-dev.txt")

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
MRPC = os.path.join(paths.DATA, "glue", "MRPC")
ENV = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3",
           XLA_FLAGS="--xla_force_host_platform_device_count=2", PYTHONPATH=paths.PYTHONPATH)
# The process as if TensorFlow were not installed (tests/support/no_tensorflow).
NO_TENSORFLOW = dict(ENV, PYTHONPATH=os.pathsep.join(
    [os.path.join(paths.ROOT, "tests", "support", "no_tensorflow"), paths.ROOT]))
STEPS = 16  # 32 pairs, batch 4, 2 epochs; a checkpoint every 2 steps (CLASSIFIER_TRAINING)


def _flags(data_dir, out, *extra):
    return ["--task_name=mrpc", "--data_dir=%s" % data_dir,
            "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--output_dir=%s" % out, "--max_seq_length=64", *extra]


def _training(data_dir, out, *extra):
    return _flags(data_dir, out, "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"),
                  "--do_train", *CLASSIFIER_TRAINING, *extra)


@pytest.fixture(scope="module")
def jax_env(tmp_path_factory):
    """ENV and NO_TENSORFLOW with the session's JAX compilation cache (jax_tools): the
    processes of one tiny model compile its steps once."""
    cache = compilation_cache_env(tmp_path_factory)
    return {"jax": dict(ENV, **cache), "no_tensorflow": dict(NO_TENSORFLOW, **cache)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, jax_env):
    """A classifier run killed with SIGKILL after its first checkpoint (``killed``; its stderr
    lines, the checkpoints it left); then in one process: that run resumed, and the
    uninterrupted run with --do_eval, --do_predict and the HF export (``out``, ``hf``)
    (jax_tools.run_in_one_process's results, by name)."""
    tmp = tmp_path_factory.mktemp("jax_classifier")
    data_dir = glue_slice(MRPC, tmp / "mrpc", {"train": 32, "dev": 24, "test": 20})
    killed = tmp / "killed"
    lines = KilledAfterFirstCheckpoint(
        [sys.executable, os.path.join(paths.ROOT, "run_classifier.py")]
        + _training(data_dir, killed), cwd=paths.ROOT, env=jax_env["jax"]).wait()
    from modeling.training.backends.jax import checkpoints

    left = [step for step, _ in checkpoints.checkpoints_in(str(killed))]
    results = run_in_one_process([
        ("resumed", "bert_cli.run_classifier", _training(data_dir, killed)),
        ("trained", "bert_cli.run_classifier", _training(
            data_dir, tmp / "out", "--do_eval", "--do_predict",
            "--export_hf_dir=%s" % (tmp / "hf")))], tmp, jax_env["jax"])
    return {"data_dir": data_dir, "out": tmp / "out", "hf": tmp / "hf", "killed": killed,
            "killed_lines": lines, "left": left, **results}


@pytest.fixture(scope="module")
def trained(runs):
    assert runs["trained"]["code"] == 0, runs["trained"]["stderr"][-3000:]
    return {"data_dir": runs["data_dir"], "out": runs["out"], "hf": runs["hf"],
            "stderr": runs["trained"]["stderr"]}


def _results(path):
    return dict(line.split(" = ") for line in path.read_text().splitlines())


def _steps(out):
    from modeling.training import step_log

    return step_log.read_step_log(str(out))


def _assert_same_evaluation(out, reference, tolerance):
    """``out``'s accuracy, F1 and step are ``reference``'s; its eval loss and test
    probabilities within ``tolerance`` (relative / absolute)."""
    ours, theirs = _results(reference / "eval_results.txt"), _results(out / "eval_results.txt")
    for key in ("eval_accuracy", "eval_f1", "global_step"):
        assert float(theirs[key]) == float(ours[key]), key
    assert float(theirs["eval_loss"]) == pytest.approx(float(ours["eval_loss"]), rel=tolerance)
    np.testing.assert_allclose(np.loadtxt(out / "test_results.tsv", delimiter="\t"),
                               np.loadtxt(reference / "test_results.tsv", delimiter="\t"),
                               atol=tolerance)


def test_classifier_trains_evaluates_predicts_and_exports(trained):
    out = trained["out"]
    assert "devices cpu:0, cpu:1" in trained["stderr"]  # the batch split over both
    log = _steps(out)
    assert [r["step"] for r in log] == list(range(1, STEPS + 1))
    # (The tiny model does not learn MRPC in 16 steps, on TensorFlow either: NER's loss
    # falls below, MiniLM's in tests/modeling/jax_checks.py.)
    assert all(np.isfinite(r["loss"]) and r["global_norm"] > 0 for r in log)
    assert log[-1]["learning_rate"] == 0.0
    results = _results(out / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_f1", "eval_acc_and_f1", "eval_loss",
                            "global_step", "loss"}
    assert results["global_step"] == str(STEPS)
    probabilities = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    assert probabilities.shape == (20, 2)
    np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-5)
    assert (out / "MRPC.tsv").exists()
    assert sorted(os.listdir(out / "jax_checkpoints"), key=int) == ["8", "10", "12", "14", "16"]
    assert sorted(os.listdir(out / "jax_input")) == sorted(
        "%d.%s" % (s, suffix) for s in (8, 10, 12, 14, 16)
        for suffix in ("index", "data-00000-of-00001"))
    assert {"bert_model.ckpt.index", "bert_config.json"} <= set(os.listdir(out / "export"))
    assert {"model.safetensors", "config.json", "vocab.txt"} <= set(os.listdir(trained["hf"]))
    for folder in ("train", "eval"):
        assert any(n.startswith("events.out.tfevents") for n in os.listdir(out / folder))


def test_tensorflow_takes_over_from_the_export(trained, tmp_path):
    """run_classifier on TensorFlow, from the JAX run's TF1 export: its metrics and test
    probabilities are the JAX run's (float rounding of two compilers apart)."""
    from bert_cli import run_classifier

    out = tmp_path / "tf"
    run = run_tool(run_classifier, _flags(
        trained["data_dir"], out, "--init_checkpoint=%s" % (trained["out"] / "export"
                                                              / "bert_model.ckpt"),
        "--do_eval", "--do_predict"))
    assert run.code == 0, run.stderr[-3000:]
    _assert_same_evaluation(out, trained["out"], 1e-5)


def test_kill_9_after_a_checkpoint_then_resume_is_exact(runs, trained):
    """Dropout on (the tiny config's 0.1): the checkpoint holds the seed generators and the
    tf.data iterator's state beside it, so the resumed run ends with the uninterrupted run's
    bits. Its state is restored placed as a fresh run's: it runs one compiled step, as the
    uninterrupted run does."""
    lines = runs["killed_lines"]
    assert any("Saved checkpoint for step 2" in line for line in lines), "".join(lines[-20:])
    assert max(runs["left"]) < STEPS
    out = runs["killed"]
    run = runs["resumed"]
    assert run["code"] == 0, run["stderr"][-3000:]
    assert "Resuming from" in run["stderr"]
    assert run["step_programs"] == runs["trained"]["step_programs"] == 1
    assert _steps(out) == _steps(trained["out"])
    whole, resumed = _checkpoint(trained["out"], STEPS), _checkpoint(out, STEPS)
    assert sorted(whole) == sorted(resumed) and len(whole) > 100
    for key in whole:
        np.testing.assert_array_equal(resumed[key], whole[key], err_msg=key)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, jax_env, runs):
    """The uninterrupted run's flags (train, eval, predict, HF export) as two processes of one
    CPU device each (gloo on 127.0.0.1): process 1 killed with SIGKILL after the checkpoint
    of step 4, then both started again (jax_tools.kill_one_then_rerun)."""
    tmp = tmp_path_factory.mktemp("jax_classifier_processes")
    out = tmp / "out"

    def command(*flags):
        return ([sys.executable, os.path.join(paths.ROOT, "run_classifier.py")]
                + _training(runs["data_dir"], out, "--do_eval", "--do_predict",
                            "--export_hf_dir=%s" % (tmp / "hf"), *flags))

    return dict(kill_one_then_rerun(command, str(out), jax_env["jax"], str(tmp), "4"),
                out=out, hf=tmp / "hf")


def test_two_processes_killed_and_rerun_end_with_the_bits_of_one_process(two_processes,
                                                                         trained):
    """Process 1 of two killed mid-run: process 0 exits 1 with one line. Both started again,
    they resume and end with the bits of one process on two devices (the uninterrupted run):
    the step log, every value of the last checkpoint, the eval results, the test
    probabilities, the TF1 and HF exports; only process 0 wrote them."""
    from modeling import checkpoints

    code, seconds, stderr = two_processes["survivor"]
    errors = [l for l in stderr.splitlines() if l.startswith("run_classifier.py: error:")]
    assert code == 1 and len(errors) == 1 and seconds < 120, (code, seconds, stderr[-3000:])
    out, reference = two_processes["out"], trained["out"]
    logs = two_processes["logs"]
    assert two_processes["codes"] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    assert "Resuming from" in logs[1] and "process 1 of 2, 2 devices in all" in logs[1]
    assert all("wrote" not in line and "Saved checkpoint" not in line
               for line in logs[1].splitlines()), logs[1][-3000:]
    assert _steps(out) == _steps(reference)
    ours, theirs = _checkpoint(out, STEPS), _checkpoint(reference, STEPS)
    assert sorted(ours) == sorted(theirs) and len(ours) > 100
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    assert _results(out / "eval_results.txt") == _results(reference / "eval_results.txt")
    assert (out / "test_results.tsv").read_text() == (reference / "test_results.tsv").read_text()
    prefix = os.path.join("export", "bert_model.ckpt")
    ours, theirs = (checkpoints.read_tf1_checkpoint(str(o / prefix)) for o in (out, reference))
    for name in theirs:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    for name in ("model.safetensors", "config.json", "vocab.txt"):
        assert (two_processes["hf"] / name).read_bytes() == (trained["hf"] / name).read_bytes()


def _checkpoint(out, step):
    """The values of ``out``'s checkpoint of ``step`` (by name: t<i>, n<i>, o<i>)."""
    from modeling.training.backends.jax import checkpoints

    return checkpoints.read_checkpoint(str(out / "jax_checkpoints" / str(step)))[0]


@pytest.fixture(scope="module")
def other_tools(tmp_path_factory, jax_env, trained):
    """SQuAD, SWAG and NER without TensorFlow, from the tiny model converted to a Hugging
    Face folder (here, with TensorFlow: a TF1 checkpoint needs it); and the classifier run's
    last checkpoint evaluated without TensorFlow: the tool runs without TensorFlow, in one
    process (jax_tools)."""
    from bert_cli import convert_checkpoint

    work = tmp_path_factory.mktemp("jax_tools")
    hf = work / "tiny_hf"
    run = run_tool(convert_checkpoint, [
        "--output_format=hf", "--input=%s" % os.path.join(TINY, "bert_model.ckpt"),
        "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
        "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--output=%s" % hf])
    assert run.code == 0, run.stderr[-3000:]
    proc = subprocess.run([sys.executable, "-m", "tests.bert_tasks.jax_tools", str(work),
                           str(hf), trained["data_dir"],
                           str(trained["out"] / "jax_checkpoints" / str(STEPS))],
                          cwd=paths.ROOT, env=jax_env["no_tensorflow"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(work / "runs.json", encoding="utf-8") as f:
        return work, json.load(f)


def test_squad_on_jax(other_tools):
    """SQuAD v2 trained and predicted, its records written and read with numpy."""
    work, runs = other_tools
    assert runs["squad"]["code"] == 0, runs["squad"]["stderr"]
    assert "input read with numpy (no TensorFlow)" in runs["squad"]["stderr"]
    out = work / "squad"
    assert (out / "jax_checkpoints" / "4").is_dir()  # 16 questions / batch 4 x 1 epoch
    # Without TensorFlow the export is a Keras weights file (convert_checkpoint.py makes it TF1).
    assert sorted(os.listdir(out / "export")) == ["bert_config.json", "model.weights.h5"]
    with open(work / "squad_dev.json", encoding="utf-8") as f:
        qids = [qa["id"] for a in json.load(f)["data"] for p in a["paragraphs"]
                for qa in p["qas"]]
    for name in ("predictions.json", "null_odds.json", "nbest_predictions.json"):
        assert list(json.loads((out / name).read_text())) == qids, name


def test_tensorflow_takes_over_from_the_weights_file(other_tools, tmp_path):
    """run_squad on TensorFlow from the no-TensorFlow run's export (``model.weights.h5`` as
    ``--init_checkpoint``): the JAX run's answers, its null odds within float rounding."""
    from bert_cli import run_squad

    work, _ = other_tools
    out = tmp_path / "tf"
    run = run_tool(run_squad, [
        "--vocab_file=%s" % paths.GOLDEN_VOCAB,
        "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
        "--init_checkpoint=%s" % (work / "squad" / "export" / "model.weights.h5"),
        "--output_dir=%s" % out, "--max_seq_length=64", "--doc_stride=24",
        "--max_query_length=16", "--predict_batch_size=64", "--do_predict",
        "--version_2_with_negative", "--predict_file=%s" % (work / "squad_dev.json")])
    assert run.code == 0, run.stderr[-3000:]
    ours = json.loads((work / "squad" / "predictions.json").read_text())
    assert json.loads((out / "predictions.json").read_text()) == ours
    odds = json.loads((work / "squad" / "null_odds.json").read_text())
    theirs = json.loads((out / "null_odds.json").read_text())
    assert list(theirs) == list(odds)
    np.testing.assert_allclose(list(theirs.values()), list(odds.values()), atol=1e-4)


def test_swag_on_jax_in_bfloat16(other_tools):
    """--mixed_precision=bf16 through the tool (mixed_bfloat16: float32 probabilities)."""
    work, runs = other_tools
    assert runs["swag"]["code"] == 0, runs["swag"]["stderr"]
    assert "dtype policy mixed_bfloat16" in runs["swag"]["stderr"]
    out = work / "swag"
    results = _results(out / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_loss", "global_step", "loss"}
    assert results["global_step"] == "3"
    probabilities = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    assert probabilities.shape == (10, 4)
    np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-5)


def test_ner_on_jax(other_tools):
    """The mean over scored tokens (weighted loss): it falls, and conlleval's scores are
    written (float32: the run after SWAG's bf16 one sets its own policy)."""
    work, runs = other_tools
    assert runs["ner"]["code"] == 0, runs["ner"]["stderr"]
    assert "dtype policy float32" in runs["ner"]["stderr"]
    out = work / "ner"
    losses = [r["loss"] for r in _steps(out)]
    assert len(losses) > 60 and np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20]), losses
    results = _results(out / "eval_results.txt")
    assert {"f1", "precision", "recall", "accuracy", "eval_loss"} <= set(results)
    assert (out / "test_predictions.txt").exists()


def test_export_dir_is_refused_on_jax(other_tools):
    work, runs = other_tools
    run = runs["export_dir"]
    errors = [l for l in run["stderr"].splitlines() if "error:" in l]
    assert run["code"] == 1 and len(errors) == 1 and "--export_dir" in errors[0], run["stderr"]
    assert "Traceback" not in run["stderr"]
    assert not (work / "refused").exists() and not (work / "models").exists()


def test_without_tensorflow_evaluation_is_the_tf_data_runs(trained, other_tools):
    """TensorFlow blocked: the eval and test records written and read with numpy
    (data.glue.numpy_dataset), the JAX run's newest checkpoint evaluated (jax_tools: its first
    run): the metrics and test probabilities of the run that read them with tf.data."""
    work, runs = other_tools
    run = runs["tf_data_eval"]
    out = work / "tf_data_eval"
    assert run["code"] == 0, run["stderr"]
    assert "input read with numpy (no TensorFlow)" in run["stderr"]
    _assert_same_evaluation(out, trained["out"], 1e-6)
    assert any(n.startswith("events.out.tfevents") for n in os.listdir(out / "eval"))


def test_without_tensorflow_a_tf1_checkpoint_stops_with_one_line(other_tools):
    """--init_checkpoint a TF1 checkpoint where TensorFlow is not installed: one line that says
    how to convert it, exit 1, nothing written."""
    work, runs = other_tools
    run = runs["tf1_checkpoint"]
    errors = [l for l in run["stderr"].splitlines() if "error:" in l]
    assert run["code"] == 1 and len(errors) == 1, run["stderr"]
    assert "tensorflow is not installed" in errors[0] and "--output_format=hf" in errors[0]
    assert "Traceback" not in run["stderr"] and not (work / "tf1").exists()


def test_without_tensorflow_evaluation_without_training(other_tools):
    """--do_eval from a Hugging Face --init_checkpoint, TensorFlow blocked: evaluated at step 0
    (only TensorFlow's checkpoints hold a step)."""
    work, runs = other_tools
    assert runs["eval_only"]["code"] == 0, runs["eval_only"]["stderr"]
    results = _results(work / "eval_only" / "eval_results.txt")
    assert results["global_step"] == "0" and 0.0 <= float(results["eval_accuracy"]) <= 1.0


def test_without_tensorflow_resume_is_exact(other_tools):
    """The numpy input re-read up to the checkpoint's position (dropout on): the resumed run's
    step log and last checkpoint are the whole run's, bit for bit; each ran one compiled
    step."""
    work, runs = other_tools
    assert runs["whole"]["code"] == 0, runs["whole"]["stderr"]
    assert runs["resumed"]["code"] == 0, runs["resumed"]["stderr"]
    assert runs["whole"]["step_programs"] == runs["resumed"]["step_programs"] == 1
    # It resumed at step 14 (in its second epoch): it saved step 16 only.
    assert "Saved checkpoint for step 14" in runs["whole"]["stderr"]
    saved = [line for line in runs["resumed"]["stderr"].splitlines() if "Saved checkpoint" in line]
    assert len(saved) == 1 and "step 16" in saved[0], saved
    assert ((work / "resume" / "train_steps.jsonl").read_text()
            == (work / "whole-train_steps.jsonl").read_text())
    from modeling.training.backends.jax import checkpoints

    # (the whole run's last checkpoint, set aside: jax_tools)
    whole, theirs = checkpoints.read_checkpoint(str(work / "resume-whole" / str(STEPS)))
    resumed, ours = checkpoints.read_checkpoint(
        str(work / "resume" / "jax_checkpoints" / str(STEPS)))
    assert sorted(whole) == sorted(resumed) and len(whole) > 100
    assert (ours["step"], ours["records"]) == (16, 64)
    assert ours == theirs  # the variable names too (each run from a cleared Keras session)
    for key in whole:
        np.testing.assert_array_equal(resumed[key], whole[key], err_msg=key)

