"""run_squad.py end to end on the tiny golden checkpoint and small SQuAD slices (main in-process)."""

import json
import os

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the exported signature uses)


from bert_cli import run_squad
from data.squad import features as squad
from tests import paths
from tests.bert_cli.fp16_config import with_one_layer
from tests.support.slices import squad_slice
from tests.support.tools import check_fp16_training, run_tool

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
SQUAD = os.path.join(paths.GOLDEN, "squad")


class _Proc:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _argv(tmp_path, *extra, out="out"):
    return ["--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--output_dir=%s" % (tmp_path / out),
            "--max_seq_length=64", "--doc_stride=24", "--max_query_length=16",
            "--predict_batch_size=64", *extra]


def _run(tmp_path, *extra, out="out"):
    """Runs run_squad.main in this process on fresh flags; returns code, stdout, stderr."""
    run = run_tool(run_squad, _argv(tmp_path, *extra, out=out))
    return _Proc(run.code, run.stdout, run.stderr)


def test_train_predict_export_v2(tmp_path):
    train = squad_slice(os.path.join(SQUAD, "v2.0_short", "input_train_style_slice.json"),
                   tmp_path / "train.json", 16)
    predict = squad_slice(os.path.join(SQUAD, "v2.0_short", "input_dev_slice.json"),
                     tmp_path / "dev.json", 12)
    export = tmp_path / "export"
    proc = _run(tmp_path, "--do_train", "--do_predict", "--version_2_with_negative",
                "--train_file=%s" % train, "--predict_file=%s" % predict,
                "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"),
                "--train_batch_size=4", "--num_train_epochs=1", "--learning_rate=1e-4",
                "--export_dir=%s" % export)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    assert (out / "model.ckpt-4.index").exists()  # 16 questions / batch 4 x 1 epoch
    assert "train step 4/4" in proc.stderr
    with open(predict, encoding="utf-8") as f:
        qids = [qa["id"] for a in json.load(f)["data"] for p in a["paragraphs"] for qa in p["qas"]]
    predictions = json.loads((out / "predictions.json").read_text())
    null_odds = json.loads((out / "null_odds.json").read_text())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    assert list(predictions) == qids == list(null_odds) == list(nbest)
    for qid, text in predictions.items():  # "" exactly when the null wins (threshold 0.0)
        assert (text == "") == (null_odds[qid] > 0.0)
    scores = json.loads((out / "eval_results.json").read_text())
    assert scores["total"] == len(qids) and "best_f1_thresh" in scores
    assert json.loads(proc.stdout.splitlines()[0]) == scores
    assert "best null_score_diff_threshold" in proc.stdout

    assert os.listdir(export) == ["1"]  # TF Serving's layout: version 1, no temporary left
    serve = tf.saved_model.load(str(export / "1")).signatures["serving_default"]
    contexts = ["Caf\u00e9 owners in   Paris\u202fsold 1,000 cups (in 2019).", ""]
    result = serve(question=tf.constant(["How many cups?", "Anything?"]), context=tf.constant(contexts))
    text = result["answer_text"].numpy()[0].decode("utf-8")
    start, end = int(result["answer_start"][0]), int(result["answer_end"][0])
    if text:  # a span of whole words (character offsets into the context)
        assert contexts[0][start:end] == text
        words, _ = squad.split_doc_tokens(contexts[0])
        assert text.split()[0] in words and text.split()[-1] in words
    else:  # the null answer won
        assert (start, end) == (-1, -1)
    assert result["answer_text"].numpy()[1] == b"" and int(result["answer_start"][1]) == -1


def test_predict_only_from_checkpoint_v1(tmp_path):
    predict = squad_slice(os.path.join(SQUAD, "v1.1_short", "input_dev_slice.json"),
                     tmp_path / "dev.json", 8)
    proc = _run(tmp_path, "--do_predict", "--predict_file=%s" % predict,
                "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    assert not (out / "null_odds.json").exists()
    scores = json.loads((out / "eval_results.json").read_text())
    assert list(scores) == ["exact_match", "f1"]
    assert len(json.loads((out / "predictions.json").read_text())) == 8


@pytest.mark.parametrize("case,expected", [
    ("no_data", "'data'"),
    ("query_too_long", "max_seq_length (20) must be greater than max_query_length (17) + 3"),
])
def test_bad_input_is_one_line_error_and_writes_nothing(tmp_path, case, expected):
    predict = tmp_path / "dev.json"
    if case == "no_data":
        predict.write_text(json.dumps({"version": "1.1"}))
        extra = []
    else:
        squad_slice(os.path.join(SQUAD, "v1.1_short", "input_dev_slice.json"), predict, 2)
        extra = ["--max_seq_length=20", "--max_query_length=17"]
    proc = _run(tmp_path, "--do_predict", "--predict_file=%s" % predict,
                "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"), *extra)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("run_squad.py: error:")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    out = tmp_path / "out"
    assert not out.exists() or not any(n.endswith(".json") or n.endswith(".tf_record")
                                       for n in os.listdir(out))


def test_script_entry_point_reports_flag_errors(tmp_path):
    # The real `python run_squad.py` path (flags defined under __main__, absl app.run).
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "run_squad.py", "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
         "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--output_dir=%s" % (tmp_path / "out"), "--do_predict"],
        cwd=paths.ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 1
    assert "run_squad.py: error: If `do_predict` is True, then `predict_file` must be specified." in proc.stderr
    assert not (tmp_path / "out").exists()


def test_fp16_trains_with_dynamic_loss_scaling(tmp_path):
    """--mixed_precision=fp16 (once crashed on the first step): two steps, exit 0, finite
    losses, the loss scale in the checkpoint (a one-layer cut of the tiny model:
    tests/bert_cli/fp16_config.py)."""
    train = squad_slice(os.path.join(SQUAD, "v2.0_short", "input_train_style_slice.json"),
                   tmp_path / "train.json", 8)
    check_fp16_training(run_squad, with_one_layer(_argv(
        tmp_path, "--do_train", "--version_2_with_negative", "--train_file=%s" % train,
        "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"),
        "--train_batch_size=4", "--num_train_epochs=1"), tmp_path / "config"),
        str(tmp_path / "out"))
