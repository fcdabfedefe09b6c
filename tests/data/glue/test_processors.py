"""data/glue/processors.py: every processor on real GLUE files (or a tiny file in the documented
layout where none is staged), layout detection, and one-line errors on bad input."""

import os

import pytest

from data.glue import processors as classifier
from data.glue.processors import ClassifierDataError
from tests import paths

GLUE = os.path.join(paths.DATA, "glue")


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


# ----------------------------------------------------------------------- the original's four


def test_mrpc_dev_and_test_layout():
    p = classifier.get_processor("MRPC")
    dev = p.get_dev_examples(os.path.join(GLUE, "MRPC"))
    assert len(dev) == 408
    assert dev[0].guid == "dev-1" and dev[0].label == "1"
    assert dev[0].text_b.startswith('"The foodservice')  # quotechar=None keeps the quote
    assert dev[0].origin.endswith("MRPC/dev.tsv:2")
    test = p.get_test_examples(os.path.join(GLUE, "MRPC"))
    assert len(test) == 1725
    assert {e.label for e in test} == {"0"}
    assert [e.index for e in test[:3]] == ["0", "1", "2"]


def test_cola_headerless_train_and_dev_test_with_header():
    p = classifier.get_processor("cola")
    assert len(p.get_train_examples(os.path.join(GLUE, "CoLA"))) == 8551
    dev = p.get_dev_examples(os.path.join(GLUE, "CoLA"))
    assert len(dev) == 1043 and dev[0].guid == "dev-0" and dev[0].text_b is None
    test = p.get_test_examples(os.path.join(GLUE, "CoLA"))
    assert len(test) == 1063 and test[0].guid == "test-1" and test[0].index == "0"


def test_mnli_matched_and_mismatched(tmp_path):
    header = "\t".join(["index", "promptID", "pairID", "genre", "s1b", "s2b", "s1p", "s2p",
                        "sentence1", "sentence2", "label1", "gold_label"])
    row = "\t".join(["7", "1", "1e", "g", "-", "-", "-", "-", "A man.", "A person.",
                     "entailment", "entailment"])
    test_header = "\t".join(header.split("\t")[:10])
    test_row = "\t".join(row.split("\t")[:10])
    _write(tmp_path / "dev_mismatched.tsv", header + "\n" + row + "\n")
    _write(tmp_path / "test_mismatched.tsv", test_header + "\n" + test_row + "\n")
    p = classifier.get_processor("mnli-mm")
    (ex,) = p.get_dev_examples(str(tmp_path))
    assert (ex.guid, ex.text_a, ex.text_b, ex.label) == ("dev_mismatched-7", "A man.",
                                                         "A person.", "entailment")
    (t,) = p.get_test_examples(str(tmp_path))
    assert (t.guid, t.label, t.index) == ("test-7", "contradiction", "7")
    with pytest.raises(ClassifierDataError, match="dev_matched.tsv"):
        classifier.get_processor("mnli").get_dev_examples(str(tmp_path))


def test_xnli_language_filter_and_contradictory(tmp_path):
    _write(tmp_path / "multinli" / "multinli.train.de.tsv",
           "premise\thypo\tlabel\nEin Hund.\tEin Tier.\tcontradictory\n")
    cols = ["language", "gold_label", "a", "b", "c", "d", "sentence1", "sentence2"]
    _write(tmp_path / "xnli.dev.tsv", "\t".join(cols) + "\n"
           + "\t".join(["zh", "neutral", "", "", "", "", "甲", "乙"]) + "\n"
           + "\t".join(["de", "entailment", "", "", "", "", "Ja.", "Nein."]) + "\n")
    (train,) = classifier.get_processor("xnli", xnli_language="de").get_train_examples(
        str(tmp_path))
    assert train.label == "contradiction" and train.guid == "train-1"
    dev_zh = classifier.get_processor("xnli").get_dev_examples(str(tmp_path))
    assert [(e.guid, e.text_a, e.label) for e in dev_zh] == [("dev-1", "甲", "neutral")]
    dev_de = classifier.get_processor("xnli", xnli_language="de").get_dev_examples(str(tmp_path))
    assert [e.guid for e in dev_de] == ["dev-2"]


# --------------------------------------------------------------------- header-located tasks


def test_rte_hf_export_layout_is_detected():
    p = classifier.get_processor("rte")
    dev = p.get_dev_examples(os.path.join(GLUE, "RTE"))
    assert len(dev) == 277
    assert dev[0].text_a.startswith("Dana Reeve") and dev[0].label == "not_entailment"
    assert {e.label for e in dev} == {"entailment", "not_entailment"}
    test = p.get_test_examples(os.path.join(GLUE, "RTE"))
    assert len(test) == 3000 and {e.label for e in test} == {"entailment"}
    assert test[0].index == "0"


def test_rte_glue_layout(tmp_path):
    _write(tmp_path / "dev.tsv", "index\tsentence1\tsentence2\tlabel\n"
           "0\tA.\tB.\tnot_entailment\n1\tC.\tD.\tentailment\n")
    dev = classifier.get_processor("rte").get_dev_examples(str(tmp_path))
    assert [(e.text_a, e.text_b, e.label) for e in dev] == [
        ("A.", "B.", "not_entailment"), ("C.", "D.", "entailment")]


def test_stsb_regression_sst2_qnli_wnli_real_files():
    stsb = classifier.get_processor("STS-B")
    assert stsb.is_regression and stsb.get_labels() == []
    dev = stsb.get_dev_examples(os.path.join(GLUE, "STS-B"))
    assert len(dev) == 1500 and dev[0].label == 5.0
    assert dev[0].text_a == "A man with a hard hat is dancing."
    test = stsb.get_test_examples(os.path.join(GLUE, "STS-B"))
    assert len(test) == 1379 and test[0].label == 0.0

    sst = classifier.get_processor("sst-2").get_dev_examples(os.path.join(GLUE, "SST-2"))
    assert len(sst) == 872 and sst[0].label == "1" and sst[0].text_b is None

    qnli = classifier.get_processor("qnli").get_dev_examples(os.path.join(GLUE, "QNLI"))
    assert len(qnli) == 5463 and qnli[0].label == "entailment"
    assert qnli[0].text_a.startswith("What came into force")

    wnli = classifier.get_processor("wnli")
    assert len(wnli.get_train_examples(os.path.join(GLUE, "WNLI"))) == 635
    assert len(wnli.get_dev_examples(os.path.join(GLUE, "WNLI"))) == 71


def test_qqp_layouts(tmp_path):
    _write(tmp_path / "train.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
           "5\t1\t2\tWhy?\tHow?\t1\n6\t3\t4\tbroken line\n")  # broken lines are skipped
    _write(tmp_path / "test.tsv", "id\tquestion1\tquestion2\n9\tWhat?\tWho?\n")
    p = classifier.get_processor("qqp")
    (ex,) = p.get_train_examples(str(tmp_path))
    assert (ex.text_a, ex.text_b, ex.label) == ("Why?", "How?", "1")
    (t,) = p.get_test_examples(str(tmp_path))
    assert (t.text_a, t.text_b, t.index, t.label) == ("What?", "Who?", "9", "0")


def test_generic_tsv_task_labels_from_train(tmp_path):
    _write(tmp_path / "train.tsv", "text_a\tlabel\nGood soup.\tpositive\nBad tea.\tnegative\n"
           "Fine.\tpositive\n")
    _write(tmp_path / "test.tsv", "text_a\nSome text.\n")
    p = classifier.get_processor("tsv", data_dir=str(tmp_path))
    assert p.get_labels() == ["negative", "positive"]
    train = p.get_train_examples(str(tmp_path))
    assert [e.label for e in train] == ["positive", "negative", "positive"]
    (t,) = p.get_test_examples(str(tmp_path))
    assert t.label == "negative" and t.text_b is None and t.index == "0"

    pair_dir = tmp_path / "pair"
    _write(pair_dir / "train.tsv", "text_a\ttext_b\tlabel\nA.\tB.\t2\nC.\tD.\t10\n")
    q = classifier.get_processor("tsv", data_dir=str(pair_dir))
    assert q.get_labels() == ["2", "10"]  # integer labels sort numerically
    assert q.get_train_examples(str(pair_dir))[0].text_b == "B."


# ------------------------------------------------------------------------------- bad input


def test_unknown_task_name():
    with pytest.raises(ClassifierDataError, match=r"--task_name=nope: unknown task \(known: cola"):
        classifier.get_processor("nope")


def test_missing_column_names_file_and_line(tmp_path):
    _write(tmp_path / "dev.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
           "1\t1\t2\tA.\tB.\n0\t3\t4\tonly four columns\n")
    with pytest.raises(ClassifierDataError) as err:
        classifier.get_processor("mrpc").get_dev_examples(str(tmp_path))
    msg = str(err.value)
    assert "dev.tsv:3:" in msg and "missing column 4" in msg and "\n" not in msg


def test_header_without_expected_column(tmp_path):
    _write(tmp_path / "train.tsv", "sentence1\tlabel\nA.\t0\n")
    with pytest.raises(ClassifierDataError, match=r"train.tsv:1: header .* lacks the column sentence2"):
        classifier.get_processor("wnli").get_train_examples(str(tmp_path))


def test_label_outside_list_names_file_and_line(tmp_path):
    _write(tmp_path / "dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\t1\n"
           "1\tC.\tD.\tmaybe\n")
    with pytest.raises(ClassifierDataError, match=r"dev.tsv:3: label 'maybe' is not one of"):
        classifier.get_processor("wnli").get_dev_examples(str(tmp_path))
    with pytest.raises(ClassifierDataError, match=r"dev.tsv:3: label 'maybe'"):
        classifier.get_processor("rte").get_dev_examples(str(tmp_path))


def test_unlabelled_row_outside_test_split(tmp_path):
    _write(tmp_path / "train.tsv", "sentence1\tsentence2\tlabel\tidx\nA.\tB.\t-1\t0\n")
    with pytest.raises(ClassifierDataError, match=r"train.tsv:2: unlabelled"):
        classifier.get_processor("rte").get_train_examples(str(tmp_path))


def test_empty_file_and_header_only(tmp_path):
    _write(tmp_path / "dev.tsv", "")
    with pytest.raises(ClassifierDataError, match=r"dev.tsv: the file is empty"):
        classifier.get_processor("mrpc").get_dev_examples(str(tmp_path))
    _write(tmp_path / "train.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    with pytest.raises(ClassifierDataError, match=r"the train split has no examples"):
        classifier.get_examples(classifier.get_processor("mrpc"), "train", str(tmp_path))


def test_missing_split_and_missing_dir(tmp_path):
    with pytest.raises(ClassifierDataError, match=r"no dev split in --data_dir \(expected file dev.tsv\)"):
        classifier.get_processor("cola").get_dev_examples(str(tmp_path))
    with pytest.raises(ClassifierDataError, match=r"--data_dir .*nowhere: no such directory"):
        classifier.get_processor("cola").get_dev_examples(str(tmp_path / "nowhere"))


def test_not_utf8(tmp_path):
    (tmp_path / "train.tsv").write_bytes(b"a\tb\n\xff\xfe\tx\n")
    with pytest.raises(ClassifierDataError, match=r"train.tsv:2: not valid UTF-8"):
        classifier.get_processor("cola").get_train_examples(str(tmp_path))


def test_tsv_task_without_train_for_labels(tmp_path):
    _write(tmp_path / "test.tsv", "text_a\nA.\n")
    with pytest.raises(ClassifierDataError, match=r"no train split"):
        classifier.get_processor("tsv", data_dir=str(tmp_path)).get_test_examples(str(tmp_path))
