"""run_swag.py end to end (``main`` in this process, fresh flags) on the tiny config: train on a slice of the swagaf CSV, evaluate and
predict on the JSONL sample; bad input is one line on stderr with nothing written."""

import os
import re

import numpy as np
import pytest

from bert_cli import run_swag
from tests import paths
from tests.bert_cli.fp16_config import with_one_layer
from tests.support.tools import check_fp16_training, run_tool

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
SWAG = os.path.join(paths.DATA, "swag")


def _base(output_dir):
    return ["--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--output_dir=%s" % output_dir, "--max_seq_length=48"]


def test_train_eval_predict(tmp_path):
    data_dir = tmp_path / "swag"
    data_dir.mkdir()
    with open(os.path.join(SWAG, "val.first91rows.csv"), encoding="utf-8") as f:
        (data_dir / "train.csv").write_text("".join(f.readlines()[:25]), encoding="utf-8")
    out = tmp_path / "out"
    jsonl = os.path.join(SWAG, "hf-transformers-tests-sample.jsonl")
    code, err = _run_in_process(_base(out) + [
        "--data_dir=%s" % data_dir, "--eval_file=%s" % jsonl, "--predict_file=%s" % jsonl,
        "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"), "--do_train", "--do_eval",
        "--do_predict", "--train_batch_size=8", "--num_train_epochs=1", "--eval_batch_size=4"])
    assert code == 0, err[-3000:]
    assert "train step 3/3" in err
    for name in ("train.tf_record", "eval.tf_record", "predict.tf_record", "model.ckpt-3.index"):
        assert (out / name).exists(), name
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
    assert set(results) == {"eval_accuracy", "eval_loss", "global_step", "loss"}
    assert results["global_step"] == "3"
    accuracy = float(results["eval_accuracy"])
    probs = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    assert probs.shape == (10, 4)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
    labels = _jsonl_labels(jsonl)
    assert labels[:2] == [0, 3]
    assert accuracy * 10 == pytest.approx(sum(int(np.argmax(p)) == l for p, l in zip(probs, labels)))


def _jsonl_labels(path):
    import json

    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["label"] for line in f if line.strip()]


def _run_in_process(argv):
    run = run_tool(run_swag, argv)
    return run.code, run.stderr


@pytest.mark.parametrize("extra,pattern", [
    (["--do_eval"], r"--do_eval needs --eval_file or --data_dir"),
    (["--do_train", "--data_dir=%s" % SWAG], r"has no train split \(expected train.csv or "
                                             r"train.jsonl\)"),
    (["--do_eval", "--eval_file=/nonexistent/val.csv"], r"--eval_file=/nonexistent/val.csv: no "
                                                         r"such file"),
    ([], r"At least one of `do_train`, `do_eval` or `do_predict`"),
])
def test_bad_flags(tmp_path, extra, pattern):
    out = tmp_path / "out"
    code, err = _run_in_process(_base(out) + extra)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("run_swag.py: error: ")
    assert re.search(pattern, lines[0]), lines[0]
    assert not out.exists()


def test_bad_file_and_unlabelled_eval(tmp_path):
    bad = tmp_path / "val.csv"
    bad.write_text(",video-id,sent1,sent2,ending0,ending1,ending2,ending3,label\n"
                   "0,v,A.,B,c,d,e,f,9\n", encoding="utf-8")
    out = tmp_path / "out"
    code, err = _run_in_process(_base(out) + ["--do_eval", "--eval_file=%s" % bad])
    assert code == 1 and re.search(r"val.csv:2: label 9 is outside 0..3", err)
    bad.write_text(",video-id,sent1,sent2,ending0,ending1,ending2,ending3\n0,v,A.,B,c,d,e,f\n",
                   encoding="utf-8")
    code, err = _run_in_process(_base(out) + ["--do_eval", "--eval_file=%s" % bad])
    assert code == 1 and re.search(r"val.csv:2: no label, but the eval split needs labels", err)
    assert not out.exists()


def test_fp16_trains_with_dynamic_loss_scaling(tmp_path):
    """--mixed_precision=fp16 (once crashed on the first step): two steps, exit 0, finite
    losses, the loss scale in the checkpoint (a one-layer cut of the tiny model:
    tests/bert_cli/fp16_config.py)."""
    data_dir = tmp_path / "swag"
    data_dir.mkdir()
    with open(os.path.join(SWAG, "val.first91rows.csv"), encoding="utf-8") as f:
        (data_dir / "train.csv").write_text("".join(f.readlines()[:17]), encoding="utf-8")
    out = tmp_path / "out"
    check_fp16_training(run_swag, with_one_layer(_base(out) + [
        "--data_dir=%s" % data_dir, "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"),
        "--do_train", "--train_batch_size=8", "--num_train_epochs=1"], tmp_path / "config"),
        str(out))
