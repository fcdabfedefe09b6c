"""data/glue/dataset.py: length-aware batching trims padding and regroups eval batches by
length, without changing a single prediction (labels equal, probabilities to float noise)."""

import os

import numpy as np
import pytest
import tensorflow as tf

from data.glue import processors as classifier
from data.glue import features as cf
from data.glue import dataset as classifier_input
from data.records import tf_example
from data.tokenization import wordpiece as tokenization
from modeling import checkpoints
from modeling.heads import classifier as classifier_head
from modeling.training import finetuning
from modeling.config import BertConfig
from tests import paths

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")


def test_trim_batch_cuts_to_longest_rounded():
    mask = np.zeros((2, 32), np.int32)
    mask[0, :5] = 1
    mask[1, :11] = 1
    batch = {"input_ids": tf.constant(mask * 7), "input_mask": tf.constant(mask),
             "segment_ids": tf.constant(mask * 0), "label_ids": tf.constant([0, 1])}
    trimmed = classifier_input.trim_batch(batch, multiple=8)
    assert trimmed["input_ids"].shape == (2, 16) and trimmed["label_ids"].shape == (2,)
    assert classifier_input.trim_batch(batch, multiple=1)["input_mask"].shape == (2, 11)
    swag_like = {k: tf.reshape(tf.tile(v, [1, 4]), [2, 4, 32]) if v.shape.rank == 2 else v
                 for k, v in batch.items()}
    assert classifier_input.trim_batch(swag_like, 8)["input_ids"].shape == (2, 4, 16)


def test_restore_order():
    values = np.array([[10], [30], [20]])
    np.testing.assert_array_equal(classifier_input.restore_order([0, 2, 1], values),
                                  [[10], [20], [30]])
    with pytest.raises(ValueError, match="not a permutation"):
        classifier_input.restore_order([0, 0, 1], values)


def test_length_sorted_predictions_identical(tmp_path):
    examples = classifier.get_processor("mrpc").get_dev_examples(
        os.path.join(paths.DATA, "glue", "MRPC"))[:45]
    examples += [classifier.InputExample("s", "Short.", None, "0")]  # a very short one
    tokenizer = tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    record = str(tmp_path / "eval.tf_record")
    cf.file_based_convert_examples_to_features(examples, ["0", "1"], 128, tokenizer, record)
    config = BertConfig.from_json_file(os.path.join(TINY, "bert_config.json"))
    tf.keras.utils.set_random_seed(1)
    model = classifier_head.build_classifier_model(config, 2)
    checkpoints.load_checkpoint(model, os.path.join(TINY, "bert_model.ckpt"), log=False)
    decode = lambda r: tf_example.decode_tf(r, cf.record_spec(128))  # noqa: E731

    def run(**kw):
        ds = classifier_input.make_dataset(record, decode, 8, False, **kw)
        out = finetuning.predict(model, ds, ["probabilities"])
        return {k: classifier_input.restore_order(out["example_index"], v)
                for k, v in out.items()}, ds

    plain, _ = run(trim=False, sort_by_length=False)
    sorted_, ds = run(trim=True, sort_by_length=True)
    widths = [b["input_ids"].shape[1] for b in ds]
    assert max(widths) < 128 and widths[0] < widths[-1]  # padding was cut
    assert widths == sorted(widths)  # one window (46 < 64 batches): sorted by length
    assert [len(b["input_ids"]) for b in ds] == [8, 8, 8, 8, 8, 6]  # full batches but the last
    np.testing.assert_array_equal(plain["example_index"], np.arange(len(examples)))
    np.testing.assert_array_equal(sorted_["label_ids"], plain["label_ids"])
    np.testing.assert_allclose(sorted_["probabilities"], plain["probabilities"], atol=2e-6)
    np.testing.assert_array_equal(np.argmax(sorted_["probabilities"], 1),
                                  np.argmax(plain["probabilities"], 1))


def _mrpc_dev_records(path, n):
    """The first ``n`` MRPC dev pairs as classifier records at 128 (golden vocab); returns
    the record file and its decoder."""
    examples = classifier.get_processor("mrpc").get_dev_examples(
        os.path.join(paths.DATA, "glue", "MRPC"))[:n]
    tokenizer = tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    cf.file_based_convert_examples_to_features(examples, ["0", "1"], 128, tokenizer, str(path))
    return str(path), lambda r: tf_example.decode_tf(r, cf.record_spec(128))


def test_eval_examples_are_sorted_by_length_within_windows(tmp_path, monkeypatch):
    record, decode = _mrpc_dev_records(tmp_path / "eval.tf_record", 40)
    monkeypatch.setattr(classifier_input, "SORT_WINDOW_BATCHES", 3)  # windows of 12 examples
    batches = list(classifier_input.make_dataset(record, decode, 4, False, trim=False,
                                                 sort_by_length=True))
    assert [len(b["input_ids"]) for b in batches] == [4] * 10
    for w in range(4):  # windows of 3, 3, 3 and 1 batches
        window = batches[3 * w:3 * w + 3]
        index = np.concatenate([b["example_index"] for b in window])
        assert sorted(index.tolist()) == list(range(12 * w, min(40, 12 * w + 12)))
        lengths = np.concatenate([b["input_mask"].numpy().sum(1) for b in window])
        assert lengths.tolist() == sorted(lengths.tolist())
        expected = [sum(x) for x in np.asarray([b["input_mask"] for b in batches]).reshape(
            -1, 128)[12 * w:12 * w + 12]]
        assert sorted(expected) == lengths.tolist()
    all_lengths = np.concatenate([b["input_mask"].numpy().sum(1) for b in batches])
    assert all_lengths.tolist() != sorted(all_lengths.tolist())  # sorted per window only


def test_eval_pipelines_are_not_autotuned_training_ones_are(tmp_path):
    record = str(tmp_path / "r.tf_record")
    cf.file_based_convert_examples_to_features(
        [classifier.InputExample("a", "Short.", None, "0")], ["0", "1"], 16,
        tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True), record)
    decode = lambda r: tf_example.decode_tf(r, cf.record_spec(16))  # noqa: E731
    for is_training in (False, True):
        ds = classifier_input.make_dataset(record, decode, 1, is_training)
        assert ds.options().autotune.enabled is (None if is_training else False)  # default: on
    assert len(list(classifier_input.make_dataset(record, decode, 1, False))) == 1


def test_training_batches_keep_composition(tmp_path):
    record, decode = _mrpc_dev_records(tmp_path / "train.tf_record", 20)
    a = classifier_input.make_dataset(record, decode, 4, True, True, trim=False, seed=3)
    b = classifier_input.make_dataset(record, decode, 4, True, True, trim=True, seed=3)
    for x, y in zip(a.take(6), b.take(6)):
        width = y["input_ids"].shape[1]
        assert width < 128 and width % 8 == 0
        np.testing.assert_array_equal(x["input_ids"][:, :width], y["input_ids"])
        assert int(tf.reduce_sum(x["input_mask"][:, width:])) == 0  # only padding was cut
        np.testing.assert_array_equal(x["label_ids"], y["label_ids"])
