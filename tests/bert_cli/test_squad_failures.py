"""run_squad.py failures: one line naming the file / flag, exit status 1, no traceback, nothing
written (the output folder as it was); prediction files written together or not at all.

Predict-only runs on the tiny golden checkpoint (no training); a few questions each."""

import errno
import json
import os

import pytest

from bert_cli import run_squad
from bert_common import atomic
from data.squad import postprocess
from tests import paths
from tests.support.tools import assert_one_error_line, run_tool, snapshot

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
CKPT = os.path.join(TINY, "bert_model.ckpt")
SQUAD = os.path.join(paths.GOLDEN, "squad")
TOOL = run_squad.TOOL


def _squad(version_dir: str, num_questions: int) -> dict:
    """The first paragraph of a golden SQuAD slice with its first ``num_questions`` questions."""
    with open(os.path.join(SQUAD, version_dir, "input_dev_slice.json"), encoding="utf-8") as f:
        root = json.load(f)
    paragraph = root["data"][0]["paragraphs"][0]
    paragraph["qas"] = paragraph["qas"][:num_questions]
    return {"version": root.get("version", "1.1"),
            "data": [{"title": root["data"][0].get("title", "t"), "paragraphs": [paragraph]}]}


def _v1():
    return _squad("v1.1_short", 3)


def _argv(out, *extra):
    return ["--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--output_dir=%s" % out,
            "--max_seq_length=64", "--doc_stride=24", "--max_query_length=16",
            "--predict_batch_size=64", "--init_checkpoint=%s" % CKPT, *extra]


def _write(path, content) -> str:
    if content is _DIRECTORY:
        os.makedirs(path)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
    return str(path)


_DIRECTORY = object()


def _no_qas():
    root = _v1()
    del root["data"][0]["paragraphs"][0]["qas"]
    return root


def _empty_qas():
    root = _v1()
    root["data"][0]["paragraphs"][0]["qas"] = []
    return root


def _v1_without_answers(train=False):
    """_v1() with no answer to its second question (for training: one answer to the others)."""
    root = _v1()
    qas = root["data"][0]["paragraphs"][0]["qas"]
    for qa in qas:
        qa["answers"] = qa["answers"][:1] if train else qa["answers"]
    qas[1]["answers"] = []
    return root


@pytest.mark.parametrize("mode,content,expected", [
    ("predict", lambda: {"version": "1.1", "data": []},
     ["--predict_file=", "no question to predict"]),
    ("predict", lambda: {"version": "1.1"}, ["not a SQuAD file: no top-level 'data' list"]),
    ("predict", _no_qas, ["article 0 paragraph 0 has no 'qas'"]),
    ("predict", _empty_qas, ["--predict_file=", "no question to predict"]),
    ("predict", lambda: "this is not JSON\n", ["not valid JSON"]),
    ("predict", lambda: _DIRECTORY, ["--predict_file=", "is a directory"]),
    ("train", lambda: _v1_without_answers(train=True),
     [lambda: "question '%s'" % _v1()["data"][0]["paragraphs"][0]["qas"][1]["id"],
      "exactly 1 answer (it has 0)"]),
    ("train", lambda: {"version": "1.1", "data": []},
     ["--train_file=", "no usable training question"]),
], ids=["empty_data", "no_data_key", "paragraph_without_qas", "no_question", "not_json",
        "directory", "train_v1_question_without_answers", "train_empty_data"])
def test_bad_squad_file_is_one_line_and_writes_nothing(tmp_path, mode, content, expected):
    path = _write(tmp_path / "input.json", content())
    expected = [text() if callable(text) else text for text in expected]
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("an earlier file\n")
    before = snapshot(out)
    if mode == "predict":
        extra = ["--do_predict", "--predict_file=%s" % path]
    else:  # --do_train --do_predict: the train file is checked before anything is written
        extra = ["--do_train", "--train_file=%s" % path, "--do_predict",
                 "--predict_file=%s" % _write(tmp_path / "dev.json", _v1())]
    line = assert_one_error_line(run_tool(run_squad, _argv(out, *extra)), TOOL, *expected)
    assert path in line  # names the file
    assert snapshot(out) == before


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """A successful predict-only v1.1 run (with scores): its folder and a snapshot of it."""
    base = tmp_path_factory.mktemp("predicted")
    predict = _write(base / "dev.json", _v1())
    out = base / "out"
    run = run_tool(run_squad, _argv(out, "--do_predict", "--predict_file=%s" % predict))
    assert run.code == 0, run.stderr[-3000:]
    assert {"predictions.json", "nbest_predictions.json", "eval_results.json",
            "eval.tf_record"} <= set(os.listdir(out))
    return predict, out


def _copy_outputs(src, dst):
    dst.mkdir()
    for name in os.listdir(src):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


@pytest.mark.parametrize("step,failing", [
    ("write", "nbest_predictions.json"), ("write", "eval_results.json"),
    ("commit", "nbest_predictions.json"), ("commit", "eval_results.json")])
def test_full_disk_leaves_the_previous_prediction_files(tmp_path, predicted, monkeypatch, step,
                                                         failing):
    """A file of the group fails (ENOSPC) while it is written, or while it is renamed into
    place after others were: none of the new files is left, the previous ones are as they
    were, no temporary is left, one error line."""
    predict, previous = predicted
    out = _copy_outputs(previous, tmp_path / "out")
    # Different previous contents, so that any new file under an old name would show.
    (out / "predictions.json").write_text('{"old": "prediction"}\n')
    (out / "eval_results.json").write_text('{"exact_match": -1}\n')
    before = snapshot(out)
    done = []
    real_write = postprocess._write_text

    def full_disk():  # as a write() reports it: no file name
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write_text(path, text):
        if step == "write" and os.path.basename(path) == failing:
            raise full_disk()
        real_write(path, text)
        done.append(os.path.basename(path))

    def commit_fault(event, path):
        if event == "commit" and os.path.basename(path) in ("predictions.json", failing):
            done.append(os.path.basename(path))
            if step == "commit" and os.path.basename(path) == failing:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(postprocess, "_write_text", write_text)
    with atomic.inject_faults(commit_fault):
        run = run_tool(run_squad, _argv(out, "--do_predict", "--predict_file=%s" % predict))
    line = assert_one_error_line(run, TOOL, os.strerror(errno.ENOSPC), str(out / failing))
    assert ".tmp" not in line  # the output, not an internal temporary
    assert "predictions.json" in done  # the failure came after a file of the group
    assert snapshot(out) == before  # same names (no temporary), same bytes


def test_v2_null_odds_written_with_the_predictions(tmp_path, monkeypatch):
    """--version_2_with_negative: null_odds.json belongs to the same group."""
    predict = _write(tmp_path / "dev.json", _squad("v2.0_short", 3))
    out = tmp_path / "out"
    out.mkdir()
    for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
        (out / name).write_text('{"old": 1}\n')
    before = snapshot(out)
    real_write = postprocess._write_text

    def write_text(path, text):
        if os.path.basename(path) == "null_odds.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(path, text)

    monkeypatch.setattr(postprocess, "_write_text", write_text)
    run = run_tool(run_squad, _argv(out, "--do_predict", "--version_2_with_negative",
                                    "--predict_file=%s" % predict))
    assert_one_error_line(run, TOOL, os.strerror(errno.ENOSPC), str(out / "null_odds.json"))
    after = snapshot(out)
    after.pop("eval.tf_record")  # the features file of this run (written before the group)
    assert after == before


def test_v1_predict_file_question_without_answers_is_predicted_not_scored(tmp_path, predicted):
    """As the original, prediction ignores answers: the question is predicted; the official
    v1.1 scorer cannot score a question without answers, so the run says so (a warning naming
    the file and the question) before writing anything, and writes no eval_results.json (the
    previous run's is kept, as every tool keeps older results: run_outputs.json names it as
    earlier and a warning says so)."""
    _, previous = predicted
    out = _copy_outputs(previous, tmp_path / "out")
    root = _v1_without_answers()
    predict = _write(tmp_path / "dev.json", root)
    run = run_tool(run_squad, _argv(out, "--do_predict", "--predict_file=%s" % predict))
    assert run.code == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    qid = root["data"][0]["paragraphs"][0]["qas"][1]["id"]
    warnings = [line for line in run.stderr.splitlines()
                if line.startswith("run_squad.py: warning:")]
    assert len(warnings) == 2 and predict in warnings[0] and qid in warnings[0], run.stderr[-3000:]
    assert "eval_results.json" in warnings[1] and "earlier run" in warnings[1]
    predictions = json.loads((out / "predictions.json").read_text())
    assert list(predictions) == [qa["id"] for qa in root["data"][0]["paragraphs"][0]["qas"]]
    assert (out / "eval_results.json").read_bytes() == (previous / "eval_results.json").read_bytes()
    record = json.loads((out / "run_outputs.json").read_text())
    assert "eval_results.json" in record["earlier"]
    assert "predictions.json" in record["written"] and "eval_results.json" not in record["written"]
    assert sorted(n for n in os.listdir(out) if n.startswith(".")) == []


@pytest.mark.parametrize("token", ["[CLS]", "[SEP]"])
def test_vocab_without_cls_or_sep_is_one_line(tmp_path, token):
    vocab = tmp_path / "vocab.txt"
    with open(paths.GOLDEN_VOCAB, encoding="utf-8") as f:
        vocab.write_text("".join(line for line in f if line.strip() != token), encoding="utf-8")
    predict = _write(tmp_path / "dev.json", _v1())
    out = tmp_path / "out"
    out.mkdir()
    before = snapshot(out)
    argv = [a for a in _argv(out, "--do_predict", "--predict_file=%s" % predict)
            if not a.startswith("--vocab_file=")] + ["--vocab_file=%s" % vocab]
    assert_one_error_line(run_tool(run_squad, argv), TOOL, str(vocab), token)
    assert snapshot(out) == before


def test_scorer_v1_question_without_answers_is_one_line(tmp_path, capsys):
    """The official v1.1 scorer crashes on a question without answers (max of nothing); the
    built-in one says which question, in one line, exit status 1."""
    from data.squad import evaluate as squad_eval

    root = _v1_without_answers()
    dataset = _write(tmp_path / "dev.json", root)
    qids = [qa["id"] for qa in root["data"][0]["paragraphs"][0]["qas"]]
    predictions = _write(tmp_path / "predictions.json", {qid: "x" for qid in qids})
    assert squad_eval.main([dataset, predictions]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("squad_eval: error: %s: question %r"
                                               % (dataset, qids[1])), err
