"""run_classifier.py end to end on the tiny config and a slice of MRPC: records, checkpoints,
eval_results.txt, test_results.tsv, the GLUE submission file, and a SavedModel that a fresh
process (``import tensorflow_text`` first) serves through all three signatures with the
in-process model's probabilities. Bad input: one line on stderr, exit 1, nothing written."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bert_cli import run_classifier
from tests import paths
from tests.bert_cli.fp16_config import with_one_layer
from tests.support.slices import glue_slice
from tests.support.tools import (KilledAfterFirstCheckpoint, check_fp16_training,
                                 run_tool)

ROOT = paths.ROOT
TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
MRPC = os.path.join(paths.DATA, "glue", "MRPC")
SEQ = 64
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH)


def _base_flags(data_dir, output_dir):
    return ["--task_name=mrpc", "--data_dir=%s" % data_dir, "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--output_dir=%s" % output_dir, "--max_seq_length=%d" % SEQ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One CLI run (``main`` in this process, fresh flags): train (4 steps) + eval + predict +
    export."""
    tmp = tmp_path_factory.mktemp("run_classifier")
    data_dir = glue_slice(MRPC, tmp / "mrpc", {"train": 32, "dev": 24, "test": 20})
    out = tmp / "out"
    base = tmp / "models" / "mrpc"  # TF Serving's model base path: the export is version 1
    code, err = _run_in_process(_base_flags(data_dir, out) + [
        "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"), "--do_train", "--do_eval",
        "--do_predict", "--train_batch_size=8", "--num_train_epochs=1", "--save_checkpoints_steps=2",
        "--export_dir=%s" % base])
    assert code == 0, err[-3000:]
    assert os.listdir(base) == ["1"]
    return {"data_dir": data_dir, "out": str(out), "export": str(base / "1"), "stderr": err,
            "eval_results": _read_results(os.path.join(out, "eval_results.txt"))}


def _read_results(path):
    with open(path, encoding="utf-8") as f:
        return dict(line.split(" = ") for line in f.read().splitlines())


def _count_records(path):
    import tensorflow as tf

    return sum(1 for _ in tf.data.TFRecordDataset(path))


def test_outputs_written(trained):
    out = trained["out"]
    assert _count_records(os.path.join(out, "train.tf_record")) == 32
    assert _count_records(os.path.join(out, "eval.tf_record")) == 24
    assert _count_records(os.path.join(out, "predict.tf_record")) == 20
    assert os.path.exists(os.path.join(out, "model.ckpt-2.index"))
    assert os.path.exists(os.path.join(out, "model.ckpt-4.index"))
    assert "step 4/4 loss" in trained["stderr"]  # progress on stderr
    results = dict(line.split(" = ") for line in
                   open(os.path.join(out, "eval_results.txt")).read().splitlines())
    assert set(results) == {"eval_accuracy", "eval_f1", "eval_acc_and_f1", "eval_loss",
                            "global_step", "loss"}
    assert results["global_step"] == "4"
    assert 0.0 <= float(results["eval_accuracy"]) <= 1.0 and float(results["eval_loss"]) > 0
    probs = np.loadtxt(os.path.join(out, "test_results.tsv"), delimiter="\t")
    assert probs.shape == (20, 2)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    submission = open(os.path.join(out, "MRPC.tsv")).read().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 21
    for i, line in enumerate(submission[1:]):
        index, label = line.split("\t")
        assert index == str(i) and label == str(int(np.argmax(probs[i])))
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


@pytest.fixture(scope="module")
def fresh_process(trained, tmp_path_factory):
    """One fresh process (``import tensorflow_text`` first) that serves the export through its
    three signatures, then runs ``saved_model_cli show --dir <export> --all`` (the console
    command's own ``main``): one ``import tensorflow`` for both checks."""
    from data.glue import processors as classifier
    from data.glue import features as classifier_features
    from data.tokenization import wordpiece as tokenization

    tmp_path = tmp_path_factory.mktemp("fresh")
    tokenizer = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    test = classifier.get_processor("mrpc").get_test_examples(trained["data_dir"])
    singles = [classifier.InputExample("s%d" % i, e.text_a, None, "0") for i, e in enumerate(test)]
    host = classifier_features.convert_examples_to_features(singles, ["0", "1"], SEQ, tokenizer)
    np.savez(tmp_path / "inputs.npz",
             text_a=np.array([e.text_a for e in test]), text_b=np.array([e.text_b for e in test]),
             **{k: np.array([getattr(f, k) for f in host], np.int32)
                for k in ("input_ids", "input_mask", "segment_ids")})
    script = textwrap.dedent("""
        import contextlib, io, sys
        import tensorflow_text  # registers the TF Text ops of the raw-text signatures
        import tensorflow as tf
        import numpy as np
        export, record, inputs, out, seq = sys.argv[1:6]
        model = tf.saved_model.load(export)
        spec = {k: tf.io.FixedLenFeature([int(seq)], tf.int64)
                for k in ("input_ids", "input_mask", "segment_ids")}
        rows = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(record)]
        ids = {k: tf.cast(tf.stack([r[k] for r in rows]), tf.int32) for k in spec}
        x = np.load(inputs)
        default = model.signatures["serving_default"](**ids)
        pair = model.signatures["text_pair"](text_a=tf.constant(x["text_a"]),
                                             text_b=tf.constant(x["text_b"]))
        single = model.signatures["text"](text_a=tf.constant(x["text_a"]))
        single_ids = model.signatures["serving_default"](
            **{k: tf.constant(x[k]) for k in spec})
        np.savez(out, default=default["probabilities"].numpy(),
                 pair=pair["probabilities"].numpy(), pair_label=np.array([s.decode() for s in pair["label"].numpy()]),
                 single=single["probabilities"].numpy(),
                 single_ids=single_ids["probabilities"].numpy(),
                 signatures=np.array(sorted(model.signatures)))

        from tensorflow.python.tools import saved_model_cli  # the saved_model_cli command
        sys.argv = ["saved_model_cli", "show", "--dir", export, "--all"]
        shown, code = io.StringIO(), 0
        with contextlib.redirect_stdout(shown):
            try:
                saved_model_cli.main()
            except SystemExit as e:
                code = e.code or 0
        print("saved_model_cli exit %r" % code)
        print(shown.getvalue())
    """)
    out = tmp_path / "served.npz"
    proc = subprocess.run([sys.executable, "-c", script, trained["export"],
                           os.path.join(trained["out"], "predict.tf_record"),
                           str(tmp_path / "inputs.npz"), str(out), str(SEQ)],
                          capture_output=True, text=True, env=ENV, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"served": out, "stdout": proc.stdout, "stderr": proc.stderr}


def test_saved_model_in_fresh_process_matches(trained, fresh_process):
    served = np.load(fresh_process["served"])
    assert list(served["signatures"]) == ["serving_default", "text", "text_pair"]
    in_process = np.loadtxt(os.path.join(trained["out"], "test_results.tsv"), delimiter="\t")
    np.testing.assert_allclose(served["default"], in_process, atol=1e-5)
    np.testing.assert_allclose(served["pair"], in_process, atol=1e-5)
    assert list(served["pair_label"]) == [
        str(int(i)) for i in np.argmax(in_process, axis=1)]
    np.testing.assert_allclose(served["single"], served["single_ids"], atol=1e-5)


def test_saved_model_cli_lists_signatures(fresh_process):
    first, _, text = fresh_process["stdout"].partition("\n")
    assert first == "saved_model_cli exit 0", (first, fresh_process["stderr"][-2000:])
    for signature in ("serving_default", "text", "text_pair"):
        assert "signature_def['%s']" % signature in text
    assert "inputs['input_ids'] tensor_info:" in text and "DT_INT32" in text
    assert "inputs['text_b'] tensor_info:" in text and "DT_STRING" in text
    assert "outputs['probabilities'] tensor_info:" in text


def test_eval_from_output_dir_checkpoint_without_bucketing(trained, tmp_path):
    """--do_eval alone picks the latest checkpoint of --output_dir; predictions with and
    without length-aware batching agree."""
    code, err = _run_in_process(
        _base_flags(trained["data_dir"], trained["out"])
        + ["--do_eval", "--nolength_aware_batching", "--eval_batch_size=5"])
    assert code == 0, err
    results = _read_results(os.path.join(trained["out"], "eval_results.txt"))
    assert results["global_step"] == "4"
    bucketed = trained["eval_results"]  # batch 8, bucketed and trimmed
    assert set(results) == set(bucketed)
    for key in ("eval_accuracy", "eval_f1"):
        assert results[key] == bucketed[key], key
    np.testing.assert_allclose(float(results["eval_loss"]), float(bucketed["eval_loss"]),
                               rtol=1e-5)



def test_kill_9_after_a_checkpoint_then_resume_equals_uninterrupted(tmp_path):
    """Dropout 0.1 (the tiny config's): a run killed with SIGKILL after a checkpoint, then run
    again, ends with the bits of an uninterrupted run (weights, Adam slots, each step's loss).
    The checkpoints hold the data position (the shuffled pipeline's iterator state) and the
    dropout layers' seed states; the uninterrupted run goes on in this process meanwhile."""
    import tensorflow as tf

    from modeling.training import step_log

    data_dir = glue_slice(MRPC, tmp_path / "mrpc", {"train": 32})

    def argv(out):  # 16 steps of 4 examples (2 epochs of 8), a checkpoint every 4
        return _base_flags(data_dir, out) + [
            "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"), "--do_train",
            "--train_batch_size=4", "--num_train_epochs=2", "--save_checkpoints_steps=4",
            "--iterations_per_loop=2"]

    killed = tmp_path / "killed"
    victim = KilledAfterFirstCheckpoint(
        [sys.executable, os.path.join(ROOT, "run_classifier.py")] + argv(killed), cwd=ROOT,
        env=ENV)
    code, err = _run_in_process(argv(tmp_path / "full"))  # the uninterrupted run, meanwhile
    assert code == 0, err[-3000:]
    victim.wait(timeout=300)
    step_at_kill = int(tf.train.latest_checkpoint(str(killed)).rsplit("-", 1)[-1])
    assert 4 <= step_at_kill < 16

    code, err = _run_in_process(argv(killed))  # the same command again: resumes, finishes
    assert code == 0, err[-3000:]
    assert "train step %d/16" % step_at_kill not in err and "train step 16/16" in err
    full = tf.train.load_checkpoint(str(tmp_path / "full" / "model.ckpt-16"))
    resumed = tf.train.load_checkpoint(str(killed / "model.ckpt-16"))
    names = [n for n in full.get_variable_to_shape_map()
             if n.startswith(("model/", "optimizer/", "rng/"))]
    for name in names:
        np.testing.assert_array_equal(resumed.get_tensor(name), full.get_tensor(name),
                                      err_msg=name)
    assert any(n.startswith("rng/") for n in names) and len(names) > 100
    assert ([r["loss"] for r in step_log.read_step_log(str(killed))]
            == [r["loss"] for r in step_log.read_step_log(str(tmp_path / "full"))])


# ------------------------------------------------------------------------------- bad input


def _run_in_process(argv):
    """Runs run_classifier.main with fresh flags; returns (exit code, stderr)."""
    run = run_tool(run_classifier, argv)
    return run.code, run.stderr


def _expect_error(argv, pattern, output_dir):
    import re

    code, err = _run_in_process(argv)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_classifier.py: error: "), err
    assert re.search(pattern, lines[0]), lines[0]
    assert not os.path.exists(output_dir)


def test_bad_task_name(tmp_path):
    out = str(tmp_path / "out")
    argv = _base_flags(MRPC, out) + ["--do_eval"]
    argv[0] = "--task_name=glue-nope"
    _expect_error(argv, r"--task_name=glue-nope: unknown task \(known: cola", out)


def test_missing_split(tmp_path):
    data_dir = glue_slice(MRPC, tmp_path / "d", {"train": 3})
    out = str(tmp_path / "out")
    _expect_error(_base_flags(data_dir, out) + ["--do_eval"],
                  r"dev.tsv: no dev split in --data_dir", out)


def test_label_outside_list_and_missing_columns(tmp_path):
    data_dir = glue_slice(MRPC, tmp_path / "d", {"train": 3})
    with open(os.path.join(data_dir, "train.tsv"), "a", encoding="utf-8") as f:
        f.write("7\t1\t2\tA sentence.\tAnother one.\n")
    out = str(tmp_path / "out")
    _expect_error(_base_flags(data_dir, out) + ["--do_train"],
                  r"train.tsv:5: label '7' is not one of the task's labels \['0', '1'\]", out)
    with open(os.path.join(data_dir, "train.tsv"), "w", encoding="utf-8") as f:
        f.write("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t2\t3\tonly a\n")
    _expect_error(_base_flags(data_dir, out) + ["--do_train"],
                  r"train.tsv:2: missing column 4 \(#2 String\)", out)


def test_empty_file(tmp_path):
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    (data_dir / "dev.tsv").write_text("")
    out = str(tmp_path / "out")
    _expect_error(_base_flags(str(data_dir), out) + ["--do_eval"], r"dev.tsv: the file is empty",
                  out)


def test_bad_flags(tmp_path):
    out = str(tmp_path / "out")
    _expect_error(_base_flags(MRPC, out), r"At least one of `do_train`", out)
    argv = _base_flags(MRPC, out) + ["--do_eval"]
    argv[-2] = "--max_seq_length=512"
    _expect_error(argv, r"Cannot use sequence length 512 because the BERT model was only "
                        r"trained up to sequence length 128", out)




def test_fp16_trains_with_dynamic_loss_scaling(tmp_path):
    """--mixed_precision=fp16 (once crashed on the first step): two steps, exit 0, finite
    losses, the loss scale in the checkpoint (a one-layer cut of the tiny model:
    tests/bert_cli/fp16_config.py)."""
    data_dir = glue_slice(MRPC, tmp_path / "mrpc", {"train": 16})
    out = tmp_path / "out"
    check_fp16_training(run_classifier, with_one_layer(_base_flags(data_dir, out) + [
        "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"), "--do_train",
        "--train_batch_size=8", "--num_train_epochs=1"], tmp_path / "config"), str(out))


def test_export_hf_dir_equals_convert_checkpoint_of_the_same_checkpoint(trained, tmp_path):
    """--export_hf_dir (no training: the newest checkpoint of --output_dir) writes the
    BertForSequenceClassification folder convert_checkpoint.py writes from that checkpoint."""
    from safetensors.numpy import load_file

    from bert_cli import convert_checkpoint
    from tests.support.tools import run_tool as run

    code, err = _run_in_process(_base_flags(trained["data_dir"], trained["out"])
                                + ["--export_hf_dir=%s" % (tmp_path / "hf")])
    assert code == 0, err
    converted = run(convert_checkpoint, [
        "--input=%s" % os.path.join(trained["out"], "model.ckpt-4"), "--model=classifier",
        "--task_name=mrpc", "--output_format=hf", "--output=%s" % (tmp_path / "converted"),
        "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
        "--vocab_file=%s" % paths.GOLDEN_VOCAB])
    assert converted.code == 0, converted.stderr
    ours, theirs = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("hf", "converted"))
    assert sorted(ours) == sorted(theirs) and "classifier.weight" in ours
    assert all(np.array_equal(ours[k], theirs[k]) for k in ours)
    import json

    for name in ("config.json", "tokenizer_config.json", "vocab.txt"):
        with open(tmp_path / "hf" / name, "rb") as f, open(tmp_path / "converted" / name, "rb") as g:
            assert f.read() == g.read(), name
    with open(tmp_path / "hf" / "config.json") as f:
        assert json.load(f)["id2label"] == {"0": "0", "1": "1"}
