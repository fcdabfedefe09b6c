"""data/glue/features.py against ../shared/golden/classifier_features (README section 5):
every record of every job, the two trailing PaddingInputExample records included, and the
TFRecords compared parsed (feature by feature), never as bytes."""

import json
import os
from unittest import mock

import pytest
import tensorflow as tf

from bert_common.errors import InputError
from data.glue import processors as classifier
from data.glue import features as cf
from data.records import tf_example
from data.tokenization import wordpiece as tokenization
from tests import paths

GOLD_DIR = os.path.join(paths.GOLDEN, "classifier_features")
SUMMARY = json.load(open(os.path.join(GOLD_DIR, "summary.json"), encoding="utf-8"))
JOBS = SUMMARY["jobs"]


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)


def _job_examples(job):
    data_dir = os.path.join(paths.SHARED, job["data_dir"].split("shared/", 1)[1])
    processor = classifier.get_processor(job["task"])
    examples = processor.get_dev_examples(data_dir)
    assert len(examples) == job["processor_examples"]
    assert processor.get_labels() == job["label_list"]
    lo, hi = job["slice"]
    return processor, examples[lo:hi] + [classifier.PaddingInputExample()] * job[
        "padding_examples_appended"]


def _parse_records(path):
    out = []
    for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
        example = tf.train.Example.FromString(raw)
        out.append({k: list(v.int64_list.value) or list(v.float_list.value)
                    for k, v in example.features.feature.items()})
    return out


@pytest.mark.parametrize("job", JOBS, ids=[j["file"] for j in JOBS])
def test_jsonl_records(job, tokenizer):
    processor, examples = _job_examples(job)
    with open(os.path.join(GOLD_DIR, job["file"] + ".jsonl"), encoding="utf-8") as f:
        gold = [json.loads(line) for line in f]
    assert len(gold) == len(examples) == job["records"]
    truncated = 0
    for example, g in zip(examples, gold):
        features, tokens, was_cut = cf.convert_example_with_tokens(
            example, processor.get_labels(), job["max_seq_length"], tokenizer)
        assert features.input_ids == g["input_ids"], g["guid"]
        assert features.input_mask == g["input_mask"], g["guid"]
        assert features.segment_ids == g["segment_ids"], g["guid"]
        assert features.label_id == g["label_id"], g["guid"]
        assert features.is_real_example == g["is_real_example"]
        assert tokens == g["tokens"], g["guid"]
        if g["is_real_example"]:
            assert (example.guid, example.text_a, example.text_b, example.label) == (
                g["guid"], g["text_a"], g["text_b"], g["label"])
            assert was_cut == g["truncated"], g["guid"]
            truncated += was_cut
        else:
            assert isinstance(example, classifier.PaddingInputExample) and g["guid"] is None
    assert truncated == job["truncated_examples"]


@pytest.mark.parametrize("job", JOBS, ids=[j["file"] for j in JOBS])
def test_tfrecord_parsed_equal(job, tokenizer, tmp_path):
    processor, examples = _job_examples(job)
    out = str(tmp_path / "eval.tf_record")
    n = cf.file_based_convert_examples_to_features(
        examples, processor.get_labels(), job["max_seq_length"], tokenizer, out)
    assert n == job["records"]
    ours = _parse_records(out)
    gold = _parse_records(os.path.join(GOLD_DIR, job["file"] + ".tfrecord"))
    assert len(ours) == len(gold) == job["records"]
    assert set(gold[0]) == set(cf.FEATURE_NAMES)
    for i, (a, b) in enumerate(zip(ours, gold)):
        assert a == b, "record %d differs" % i
    assert [r["is_real_example"] for r in ours[-2:]] == [[0], [0]]


def test_parse_spec_reads_the_records(tokenizer, tmp_path):
    processor, examples = _job_examples(JOBS[-1])
    out = str(tmp_path / "x.tf_record")
    cf.file_based_convert_examples_to_features(examples[:3], processor.get_labels(), 32,
                                               tokenizer, out)
    spec = cf.record_spec(32)
    parsed = [tf_example.decode_tf(r, spec) for r in tf.data.TFRecordDataset(out)]
    assert parsed[0]["input_ids"].shape == (32,) and parsed[0]["label_ids"].shape == ()
    assert int(parsed[0]["label_ids"]) == 1  # MRPC dev-1 is a paraphrase


def test_truncate_seq_pair_pops_longer_then_b_on_ties():
    a, b = list("abcde"), list("xyz")
    cf._truncate_seq_pair(a, b, 6)
    assert a == list("abc") and b == list("xyz")
    a, b = list("abc"), list("xyz")
    cf._truncate_seq_pair(a, b, 4)
    assert a == list("ab") and b == list("xy")
    a, b = list("abc"), list("xyz")
    cf._truncate_seq_pair(a, b, 5)
    assert a == list("abc") and b == list("xy")


def test_single_text_cut_and_empty_text_b(tokenizer):
    ex = classifier.InputExample("g", "one two three four five six", text_b="", label="1")
    f = cf.convert_single_example(0, ex, ["0", "1"], 5, tokenizer)
    assert f.input_ids == [101, 2028, 2048, 2093, 102] and f.segment_ids == [0] * 5
    assert f.label_id == 1


def test_max_seq_length_below_3_is_an_input_error(tokenizer):
    ex = classifier.InputExample("g", "a", label="1")
    with pytest.raises(InputError, match="max_seq_length must be at least 3, got 2"):
        cf.convert_single_example(0, ex, ["0", "1"], 2, tokenizer)


def test_writing_progress_goes_to_the_log_with_a_final_line(tokenizer, tmp_path):
    examples = [classifier.InputExample("g%d" % i, "a b", label="1") for i in range(3)]
    with mock.patch("bert_common.progress.logging.info") as info:
        cf.file_based_convert_examples_to_features(examples, ["0", "1"], 8, tokenizer,
                                                   str(tmp_path / "t.tf_record"))
    # absl's logging module is shared: keep the reporter's calls (``info("%s", line)``)
    lines = [call.args[1] for call in info.call_args_list if call.args[0] == "%s"]
    assert len(lines) == 1  # fewer than 10000 examples: only the final line
    assert lines[0].startswith("writing t.tf_record: 3/3 examples, ")
    assert lines[0].endswith(" examples/s, ETA 0m00s")


def test_regression_label_is_a_float_feature(tokenizer, tmp_path):
    ex = classifier.InputExample("g", "a man", "a woman", label=3.25)
    out = str(tmp_path / "r.tf_record")
    cf.file_based_convert_examples_to_features([ex, classifier.PaddingInputExample()], [], 8,
                                               tokenizer, out)
    spec = cf.record_spec(8, regression=True)
    rows = [tf_example.decode_tf(r, spec) for r in tf.data.TFRecordDataset(out)]
    assert float(rows[0]["label_ids"]) == pytest.approx(3.25)
    assert int(rows[1]["is_real_example"]) == 0


def test_unknown_label_error_names_origin_and_writes_nothing(tokenizer, tmp_path):
    good = classifier.InputExample("dev-1", "a", "b", label="0", origin="x/dev.tsv:2")
    bad = classifier.InputExample("dev-2", "a", "b", label="-", origin="x/dev.tsv:3")
    out = tmp_path / "eval.tf_record"
    with pytest.raises(cf.LabelError) as err:
        cf.file_based_convert_examples_to_features([good, bad], ["0", "1"], 16, tokenizer,
                                                   str(out))
    assert str(err.value).startswith("x/dev.tsv:3: label '-' is not in the label list")
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)
    assert not out.exists() and os.listdir(tmp_path) == []
