"""data/swag.py on the staged swagaf CSV and JSONL files: reading, 4-choice features, records."""

import os

import pytest
import tensorflow as tf

from data import swag
from data.records import tf_example
from data.tokenization import special_tokens
from data.tokenization import wordpiece as tokenization
from tests import paths

CSV = os.path.join(paths.DATA, "swag", "val.first91rows.csv")
JSONL = os.path.join(paths.DATA, "swag", "hf-transformers-tests-sample.jsonl")


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)


def test_read_original_csv_with_quoted_commas():
    examples = swag.read_swag_examples(CSV)
    assert len(examples) == 91
    first = examples[0]
    assert first.swag_id == "swag-0"
    assert first.context_sentence == "Students lower their eyes nervously."
    assert first.start_ending == "She"
    assert first.endings[0] == "pats her shoulder, then saunters toward someone."  # quoted comma
    assert first.label == 2 and first.origin.endswith("val.first91rows.csv:2")
    assert all(len(e.endings) == 4 and e.label in range(4) for e in examples)


def test_read_jsonl():
    examples = swag.read_swag_examples(JSONL)
    assert len(examples) == 10
    assert examples[1].label == 3 and examples[1].start_ending == "Members of the procession"
    assert examples[0].endings[2] == "arrives and they're outside dancing and asleep."


def test_features_cls_context_sep_ending_sep(tokenizer):
    example = swag.read_swag_examples(CSV)[0]
    features = swag.convert_example(example, 32, tokenizer)
    assert len(features.input_ids) == 4 and all(len(r) == 32 for r in features.input_ids)
    context = tokenizer.tokenize(example.context_sentence)
    for choice in range(4):
        ending = tokenizer.tokenize("She " + example.endings[choice])
        expected = ([special_tokens.CLS] + context + [special_tokens.SEP] + ending
                    + [special_tokens.SEP])
        n = len(expected)
        assert features.input_ids[choice][:n] == tokenizer.convert_tokens_to_ids(expected)
        assert features.input_ids[choice][n:] == [0] * (32 - n)
        assert features.input_mask[choice] == [1] * n + [0] * (32 - n)
        assert features.segment_ids[choice] == ([0] * (len(context) + 2) + [1] * (len(ending) + 1)
                                                + [0] * (32 - n))
    assert features.label == 2


def test_truncation_keeps_both_parts(tokenizer):
    example = swag.SwagExample("x", "one two three four five six seven", "She",
                               ["a b c d e f g h", "x", "y", "z"], label=1)
    features = swag.convert_example(example, 10, tokenizer)
    ids = features.input_ids[0]
    assert ids[0] == 101 and ids[9] == 102 and sum(features.input_mask[0]) == 10
    # 7 context + 9 ending tokens cut to 7: longer side pops first, b on ties -> 4 + 3
    assert ids.index(102) == 5  # [CLS] + 4 context tokens
    # 7 + 2 ("she x") cut to 7: the context loses its last two tokens
    assert features.input_ids[1] == [101, 2028, 2048, 2093, 2176, 2274, 102, 2016, 1060, 102]


def test_records_round_trip(tokenizer, tmp_path):
    examples = swag.read_swag_examples(JSONL)
    out = str(tmp_path / "train.tf_record")
    assert swag.write_tf_records(examples, 24, tokenizer, out) == 10
    parsed = [tf_example.decode_tf(r, swag.record_spec(24)) for r in tf.data.TFRecordDataset(out)]
    assert parsed[1]["input_ids"].shape == (4, 24)
    assert int(parsed[1]["label_ids"]) == 3
    expected = swag.convert_example(examples[1], 24, tokenizer)
    assert parsed[1]["input_ids"].numpy().tolist() == expected.input_ids
    assert parsed[1]["segment_ids"].numpy().tolist() == expected.segment_ids


def test_unlabelled_csv_gets_none(tmp_path):
    path = tmp_path / "test.csv"
    path.write_text(",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,"
                    "ending2,ending3\n0,v,1,A b,A.,b,gen,\"x, y\",z,w,v\n", encoding="utf-8")
    (example,) = swag.read_swag_examples(str(path))
    assert example.label is None and example.endings[0] == "x, y"


def test_bad_inputs(tmp_path):
    missing = tmp_path / "bad.csv"
    missing.write_text(",sent1,sent2,ending0,ending1,ending2,label\n0,a,b,c,d,e,1\n")
    with pytest.raises(swag.SwagDataError, match=r"bad.csv:1: header lacks the column ending3"):
        swag.read_swag_examples(str(missing))
    label = tmp_path / "label.jsonl"
    label.write_text('{"sent1": "a", "sent2": "b", "ending0": "c", "ending1": "d", '
                     '"ending2": "e", "ending3": "f", "label": 7}\n')
    with pytest.raises(swag.SwagDataError, match=r"label.jsonl:1: label 7 is outside 0..3"):
        swag.read_swag_examples(str(label))
    fields = tmp_path / "fields.jsonl"
    fields.write_text('\n{"sent1": "a", "ending0": "c"}\n')
    with pytest.raises(swag.SwagDataError, match=r"fields.jsonl:2: missing fields sent2, ending1"):
        swag.read_swag_examples(str(fields))
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(swag.SwagDataError, match=r"empty.csv: the file is empty"):
        swag.read_swag_examples(str(empty))
    with pytest.raises(swag.SwagDataError, match=r"nope.csv: no such file"):
        swag.read_swag_examples(str(tmp_path / "nope.csv"))
