"""bert_tasks/classifier.py: the training records' order."""

import os

import tensorflow as tf

from bert_tasks import classifier
from data.glue import features as glue_features
from data.glue.processors import InputExample
from data.tokenization import wordpiece
from tests import paths


def _examples(n=40):
    # sorted by "genre", as STS-B's and CoLA's training files are
    return [InputExample(guid="train-%d" % i, text_a="the %s word %d" % (g, i), text_b=None,
                         label=float(i % 5))
            for i, g in enumerate(["news"] * (n // 2) + ["forum"] * (n - n // 2))]


def _records(path):
    return [r.numpy() for r in tf.data.TFRecordDataset(path)]


def test_train_records_are_the_examples_records_in_a_seeded_shuffled_order(tmp_path):
    tokenizer = wordpiece.FastFullTokenizer(paths.GOLDEN_VOCAB, True)
    examples = _examples()
    before = list(examples)

    def write(name, seed=None, order=None):
        path = os.path.join(str(tmp_path), name)
        if order is None:
            classifier.write_train_records(examples, [], 16, tokenizer, path, seed)
        else:
            glue_features.file_based_convert_examples_to_features(order, [], 16, tokenizer, path)
        return _records(path)

    in_file_order = write("file_order", order=examples)
    shuffled = write("seed1", seed=1)
    assert examples == before  # the caller's list is not reordered
    assert sorted(shuffled) == sorted(in_file_order)  # the same records, each once
    assert shuffled != in_file_order
    assert write("seed1_again", seed=1) == shuffled  # reproducible from the seed
    assert write("seed2", seed=2) != shuffled
    # both genres within the first quarter of the file (file order: news only)
    first = set(shuffled[:10])
    assert first & set(in_file_order[:20]) and first & set(in_file_order[20:])
