"""run_ner.py end to end on the tiny config (``main`` in this process, fresh flags): a few
hundred words of CoNLL-2003, training lowers the loss, eval_results are conlleval's scores of the
written predictions file, the SavedModel tags raw text as run_ner does, the feature-based tagger
leaves BERT untouched; bad input is one line on stderr with nothing written."""

import json
import os
import re

import numpy as np
import pytest

from bert_cli import run_ner
from bert_common.results import read_eval_results
from data.ner import conll, conlleval
from tests import paths
from tests.support.slices import conll_sentences
from tests.support.tools import run_tool

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
CONLL = os.path.join(paths.DATA, "conll2003")
TINY_CKPT = os.path.join(TINY, "bert_model.ckpt")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conll")
    conll_sentences(os.path.join(CONLL, "train.txt"), folder / "train.txt", 60)
    conll_sentences(os.path.join(CONLL, "valid.txt"), folder / "valid.txt", 40)
    conll_sentences(os.path.join(CONLL, "train.txt"), folder / "test.txt", 30)  # seen
    return folder


def _base(output_dir, *extra):
    return ["--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--output_dir=%s" % output_dir, "--max_seq_length=64"] + list(extra)


def _run(argv):
    result = run_tool(run_ner, argv)
    return result.code, result.stderr


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ner") / "out"
    export = out.parent / "export"
    code, err = _run(_base(out, "--data_dir=%s" % data_dir, "--init_checkpoint=%s" % TINY_CKPT,
                           "--do_train", "--do_eval", "--do_predict", "--train_batch_size=8",
                           "--num_train_epochs=15", "--learning_rate=3e-4",
                           "--eval_batch_size=16", "--iterations_per_loop=5",
                           "--export_dir=%s" % export))
    assert code == 0, err[-3000:]
    assert os.listdir(export) == ["1"]  # TF Serving's layout: the export is version 1
    return out, export / "1", err


def test_train_lowers_loss_and_eval_is_conlleval_of_the_predictions(trained, data_dir):
    out, _, err = trained
    steps = [json.loads(line) for line in (out / "train_steps.jsonl").read_text().splitlines()]
    losses = [s["loss"] for s in steps]
    assert len(losses) >= 4 and np.mean(losses[-2:]) < 0.7 * losses[0], losses
    assert (out / "labels.txt").read_text().split() == [
        "O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    results = read_eval_results(str(out / "eval_results.txt"))
    for key in ("f1", "precision", "recall", "accuracy", "eval_loss", "global_step", "PER_f1",
                "LOC_count"):
        assert key in results, key
    scored = conlleval.evaluate_file(str(out / "eval_predictions.txt"))
    assert float(results["f1"]) == pytest.approx(scored.f1, abs=1e-4)
    assert float(results["accuracy"]) == pytest.approx(scored.accuracy, abs=1e-4)
    assert (out / "eval_report.txt").read_text() == scored.report()
    # The predictions file is the eval file plus one column, every word tagged.
    gold = conll.read_conll(str(data_dir / "valid.txt"))
    predicted = conll.read_conll(str(out / "eval_predictions.txt"))
    assert [s.words for s in predicted] == [s.words for s in gold]
    assert [s.lines for s in predicted] == [[l + " " + t for l, t in zip(g.lines, p.tags)]
                                            for g, p in zip(gold, predicted)]
    # On sentences it trained on, the tiny random-init model has learned the entities.
    seen = conlleval.evaluate_file(str(out / "test_predictions.txt"))
    assert seen.f1 > 50, seen.report()
    assert (out / "test_report.txt").read_text() == seen.report()


def test_export_tags_text_as_run_ner_without_document_context(trained, data_dir, tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    out, export, _ = trained
    eval_dir = tmp_path / "eval"
    code, err = _run(_base(eval_dir, "--data_dir=%s" % data_dir, "--do_eval",
                           "--init_checkpoint=%s" % tf.train.latest_checkpoint(str(out)),
                           "--nodocument_context"))
    assert code == 0, err[-3000:]
    expected = conll.read_conll(str(eval_dir / "eval_predictions.txt"))
    loaded = tf.saved_model.load(str(export))
    text = tf.constant([" ".join(s.words) for s in expected])
    got = loaded.signatures["text"](text=text)
    tags = [[t.decode() for t in row[:n]] for row, n in zip(got["tags"].numpy(),
                                                            got["num_words"].numpy())]
    assert tags == [s.tags for s in expected]
    words = tf.ragged.constant([s.words for s in expected]).to_tensor(default_value="")
    by_words = loaded.signatures["serving_default"](words=words)
    np.testing.assert_array_equal(by_words["tags"].numpy(), got["tags"].numpy())


def test_feature_based_trains_only_the_tagger(data_dir, tmp_path):
    import tensorflow as tf

    from modeling import load_checkpoint
    from modeling.checkpoints.tf1 import tf1_variable_map
    from modeling.config import BertConfig
    from modeling.heads.token_classifier import build_token_classifier_model

    out = tmp_path / "out"
    flags = ["--data_dir=%s" % data_dir, "--train_batch_size=8", "--eval_batch_size=16",
             "--feature_mode=concat_last_four_hidden", "--lstm_units=8"]
    code, err = _run(_base(out, "--init_checkpoint=%s" % TINY_CKPT, "--do_train", "--do_eval",
                           "--num_train_epochs=1", "--learning_rate=1e-3", *flags))
    assert code == 0, err[-3000:]
    trained = read_eval_results(str(out / "eval_results.txt"))
    # BERT is frozen: every encoder variable in the checkpoint is the initial checkpoint's.
    model = build_token_classifier_model(BertConfig.from_json_file(
        os.path.join(TINY, "bert_config.json")), 9, feature_mode="concat_last_four_hidden",
        lstm_units=8)
    load_checkpoint(model, tf.train.latest_checkpoint(str(out)))
    init = tf.train.load_checkpoint(TINY_CKPT)
    names = [name for name in tf1_variable_map(model) if name.startswith("bert/")]
    assert len(names) > 30
    for name in names:
        variable, transpose = tf1_variable_map(model)[name]
        value = variable.numpy().T if transpose else variable.numpy()
        np.testing.assert_array_equal(value, init.get_tensor(name), err_msg=name)
    # The BiLSTM and classifier are in the checkpoint: eval from it alone scores the same.
    again = tmp_path / "again"
    code, err = _run(_base(again, "--init_checkpoint=%s" % tf.train.latest_checkpoint(str(out)),
                           "--do_eval", *flags))
    assert code == 0, err[-3000:]
    assert (out / "labels.txt").exists()
    rerun = read_eval_results(str(again / "eval_results.txt"))
    assert rerun["f1"] == trained["f1"] and rerun["eval_loss"] == trained["eval_loss"]


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("case,pattern", [
    ("columns", r"train.txt:3: 3 columns, but the file's first line has 4"),
    ("tag", r"valid.txt:2: tag B-ANIMAL is not in the label set of .*train.txt"),
    ("empty", r"train.txt: no sentence"),
    ("long", r"train.txt:1: a sentence of 40 words is \d+ sub-tokens, longer than the window "
             r"\(--max_seq_length - 2 = 14\)"),
    ("badtag", r"train.txt:2: tag 'X-PER' is not O, B-<type> or I-<type>"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, case, pattern):
    data = tmp_path / "data"
    data.mkdir()
    train = "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n\n"
    valid = "Paris NNP B-NP B-LOC\n\n"
    extra = []
    if case == "columns":
        train = "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-MISC\n\n"
    elif case == "tag":
        valid = "The DT B-NP O\ncat NN I-NP B-ANIMAL\n\n"
    elif case == "empty":
        train = "\n\n"
    elif case == "long":
        train = "".join("word%d NN B-NP O\n" % i for i in range(40)) + "\nParis NNP B-NP B-LOC\n\n"
        extra = ["--max_seq_length=16", "--nosplit_long_sentences"]
    elif case == "badtag":
        train = "EU NNP B-NP B-ORG\nPeter NNP B-NP X-PER\n\n"
    _write(data / "train.txt", train)
    _write(data / "valid.txt", valid)
    out = tmp_path / "out"
    code, err = _run(_base(out, "--data_dir=%s" % data, "--do_train", "--do_eval", *extra))
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("run_ner.py: error: "), err
    assert re.search(pattern, lines[0]), lines[0]
    assert not out.exists()


def test_bad_flags(tmp_path):
    code, err = _run(_base(tmp_path / "out", "--do_eval"))
    assert code == 1 and "--do_eval needs --eval_file or --data_dir" in err
    code, err = _run(_base(tmp_path / "out", "--do_eval", "--data_dir=%s" % tmp_path))
    assert code == 1 and "has no eval split (expected valid.txt)" in err
    assert not (tmp_path / "out").exists()


def test_feature_modes_listed_once():
    from modeling.heads import token_classifier

    assert run_ner.FEATURE_MODES == token_classifier.FEATURE_MODES
