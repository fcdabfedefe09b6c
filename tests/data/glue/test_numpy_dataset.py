"""data/glue/numpy_dataset.py: ``NumpyDataset``, the TensorFlow-free twin of
``data.glue.dataset.make_dataset``, against the tf.data pipeline on records the task writers
wrote (MRPC classifier, STS-B regression, SWAG, CoNLL NER, the golden SQuAD features): the same
batches (every key, values and dtype, batch by batch) for eval sorted/trimmed or not, with a
remainder kept or dropped, and for training without shuffling across epochs; its own shuffle
(a function of the seed, resumable with ``batches_after``); ``map``; ``make_dataset`` /
``task_dataset`` returning it where TensorFlow is not installed; damaged and mismatched
records named by file."""

import itertools
import os

import numpy as np
import pytest

import data.glue.dataset
import data.squad.dataset
from bert_common.errors import InputError
from bert_tasks import ner as ner_task
from data import swag
from data.records import numpy_reader, tf_example
from data.glue import dataset as glue_dataset
from data.glue import features as cf
from data.glue import numpy_dataset
from data.glue import processors
from data.glue.numpy_dataset import NumpyDataset
from data.ner import conll
from data.ner import features as ner_features
from data.squad import schema as squad_schema
from data.tokenization import wordpiece as tokenization
from tests import paths

S = 128
N_MRPC = 46  # 45 MRPC dev pairs and a very short one
NER_S = 64
SQUAD_EVAL = os.path.join(paths.GOLDEN, "squad", "v2.0_short", "eval_features.tfrecord")


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)


@pytest.fixture(scope="module")
def records(tmp_path_factory, tokenizer):
    """Record files written by the task writers: name -> path."""
    out = tmp_path_factory.mktemp("records")
    files = {}
    mrpc = processors.get_processor("mrpc").get_dev_examples(
        os.path.join(paths.DATA, "glue", "MRPC"))[:N_MRPC - 1]
    mrpc += [processors.InputExample("s", "Short.", None, "0")]
    files["mrpc"] = str(out / "mrpc.tf_record")
    assert cf.file_based_convert_examples_to_features(mrpc, ["0", "1"], S, tokenizer,
                                                      files["mrpc"]) == N_MRPC
    stsb = processors.get_processor("sts-b").get_dev_examples(
        os.path.join(paths.DATA, "glue", "STS-B"))[:21]
    files["stsb"] = str(out / "stsb.tf_record")
    assert cf.file_based_convert_examples_to_features(stsb, [], 64, tokenizer,
                                                      files["stsb"]) == 21
    examples = swag.read_swag_examples(os.path.join(paths.DATA, "swag", "val.first91rows.csv"))
    files["swag"] = str(out / "swag.tf_record")
    assert swag.write_tf_records(examples[:30], 48, tokenizer, files["swag"]) == 30
    with open(os.path.join(paths.DATA, "conll2003", "valid.txt"), encoding="utf-8") as f:
        head = list(itertools.islice(f, 1000))
    cut = max(i for i, line in enumerate(head) if not line.strip())  # end at a sentence break
    conll_path = out / "valid_head.txt"
    conll_path.write_text("".join(head[:cut + 1]), encoding="utf-8")
    sentences = conll.read_conll(str(conll_path))
    windows = ner_features.convert_sentences(sentences, conll.label_list(sentences), NER_S,
                                             tokenizer, document_context=False)  # short ones
    assert len(windows) > 20
    files["ner"] = str(out / "ner.tf_record")
    ner_features.write_tf_records(windows, files["ner"])
    return files


def _tf_batches(dataset, n=None):
    if n is not None:
        dataset = dataset.take(n)
    return [{k: v.numpy() for k, v in b.items()} for b in dataset]


def _np_batches(dataset, n=None):
    return list(itertools.islice(iter(dataset), n))


def assert_same_batches(ours, theirs):
    """The same number of batches, each with the same keys, dtypes, shapes and values."""
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert set(a) == set(b), i
        for name in b:
            assert isinstance(a[name], np.ndarray), (i, name)
            assert a[name].dtype == b[name].dtype, (i, name, a[name].dtype, b[name].dtype)
            assert a[name].shape == b[name].shape, (i, name, a[name].shape, b[name].shape)
            np.testing.assert_array_equal(a[name], b[name], err_msg="batch %d %s" % (i, name))


def _both(path, spec, batch_size, is_training, n=None, **kwargs):
    """(NumpyDataset's batches, make_dataset's tf.data batches) with the same arguments."""
    ours = _np_batches(NumpyDataset(path, spec, batch_size, is_training, **kwargs), n)
    theirs = _tf_batches(glue_dataset.make_dataset(path, spec, batch_size, is_training,
                                                   **kwargs), n)
    return ours, theirs


@pytest.mark.parametrize("batch_size, kwargs", [
    (8, dict(sort_by_length=True, trim=True)),
    (8, dict(sort_by_length=False, trim=False)),
    (5, dict(sort_by_length=True, trim=True)),
    (5, dict(sort_by_length=True, trim=True, drop_remainder=True)),
    (8, dict(sort_by_length=False, trim=True, drop_remainder=True)),
    (8, dict(sort_by_length=True, trim=True, trim_multiple=1)),
])
def test_classifier_eval_batches_equal_tf_data(records, batch_size, kwargs):
    ours, theirs = _both(records["mrpc"], cf.record_spec(S), batch_size, False, **kwargs)
    assert_same_batches(ours, theirs)
    expected = N_MRPC // batch_size + (0 if kwargs.get("drop_remainder") else 1)
    assert len(ours) == expected  # 46 % 8 and 46 % 5 leave a remainder
    indices = np.concatenate([b[glue_dataset.EXAMPLE_INDEX] for b in ours]).tolist()
    if not kwargs.get("drop_remainder"):
        assert sorted(indices) == list(range(N_MRPC))
    elif kwargs["sort_by_length"]:  # the longest examples of the window are dropped
        assert len(set(indices)) == len(indices) and set(indices) < set(range(N_MRPC))
        assert indices != sorted(indices)
    else:
        assert indices == list(range(len(indices)))
    widths = {b[cf.INPUT_IDS].shape[1] for b in ours}
    assert (max(widths) < S) == kwargs["trim"]


def test_sorted_eval_over_several_windows_equals_tf_data(records, monkeypatch):
    """Windows of 2 batches (make_dataset passes data.glue.dataset's SORT_WINDOW_BATCHES to
    either pipeline): sorted per window."""
    monkeypatch.setattr(glue_dataset, "SORT_WINDOW_BATCHES", 2)
    monkeypatch.setattr(glue_dataset, "tensorflow_installed", lambda: False)
    ours = _np_batches(glue_dataset.make_dataset(records["mrpc"], cf.record_spec(S), 4, False,
                                                 sort_by_length=True))
    monkeypatch.undo()
    monkeypatch.setattr(glue_dataset, "SORT_WINDOW_BATCHES", 2)
    theirs = _tf_batches(glue_dataset.make_dataset(records["mrpc"], cf.record_spec(S), 4, False,
                                                   sort_by_length=True))
    assert_same_batches(ours, theirs)
    assert len(ours) == 12
    first_window = np.concatenate([b[glue_dataset.EXAMPLE_INDEX] for b in ours[:2]])
    assert sorted(first_window.tolist()) == list(range(8))
    assert first_window.tolist() != list(range(8))  # reordered by length


@pytest.mark.parametrize("is_training", [False, True])
def test_several_files_equal_tf_data(records, is_training):
    """Files read in the order given, example indices running on across them."""
    files = [records["mrpc"], records["mrpc"]]
    ours, theirs = _both(files, cf.record_spec(S), 8, is_training, n=14, sort_by_length=True,
                         shuffle_buffer=1, seed=0)
    assert_same_batches(ours, theirs)
    if not is_training:
        assert len(ours) == 12
        indices = np.concatenate([b[glue_dataset.EXAMPLE_INDEX] for b in ours])
        assert sorted(indices.tolist()) == list(range(2 * N_MRPC))


def test_regression_eval_batches_equal_tf_data(records):
    spec = cf.record_spec(64, regression=True)
    ours, theirs = _both(records["stsb"], spec, 4, False, sort_by_length=True)
    assert_same_batches(ours, theirs)
    assert len(ours) == 6 and ours[0][cf.LABEL_IDS].dtype == np.float32
    labels = np.concatenate([b[cf.LABEL_IDS] for b in ours])
    assert len(set(labels.tolist())) > 5 and (labels != labels.round()).any()  # real scores


def test_swag_eval_batches_equal_tf_data(records):
    ours, theirs = _both(records["swag"], swag.record_spec(48), 8, False,
                         sort_by_length=True, trim=True)
    assert_same_batches(ours, theirs)
    assert [b[cf.INPUT_IDS].shape[:2] for b in ours] == [(8, 4)] * 3 + [(6, 4)]
    assert min(b[cf.INPUT_IDS].shape[2] for b in ours) < 48  # the short ones were cut


@pytest.mark.parametrize("is_training", [False, True])
def test_ner_batches_equal_tf_data(records, monkeypatch, is_training):
    """bert_tasks.ner.dataset (task_dataset with the NER spec, label ids and float weights
    trimmed too) read with numpy equals its tf.data batches; training without shuffling."""
    kwargs = dict(length_aware=True, seed=4, shuffle_buffer=1)
    theirs = _tf_batches(ner_task.dataset(records["ner"], NER_S, 8, is_training, **kwargs), 12)
    monkeypatch.setattr(data.glue.dataset, "tensorflow_installed", lambda: False)
    dataset = ner_task.dataset(records["ner"], NER_S, 8, is_training, **kwargs)
    assert isinstance(dataset, NumpyDataset)
    ours = _np_batches(dataset, 12)
    assert_same_batches(ours, theirs)
    weights = ours[0][ner_features.LABEL_WEIGHTS]
    assert weights.dtype == np.float32 and set(np.unique(weights).tolist()) == {0.0, 1.0}
    assert weights.shape == ours[0][cf.LABEL_IDS].shape == ours[0][cf.INPUT_IDS].shape
    assert min(b[cf.INPUT_IDS].shape[1] for b in ours) < NER_S  # label ids/weights cut too


@pytest.mark.parametrize("length_aware", [False, True])
def test_squad_eval_batches_equal_tf_data(monkeypatch, length_aware):
    spec = squad_schema.record_spec(96, is_training=False)
    theirs = _tf_batches(data.squad.dataset.make_dataset(
        SQUAD_EVAL, 96, False, 16, drop_remainder=False, length_aware=length_aware))
    ours = _np_batches(NumpyDataset(SQUAD_EVAL, spec, 16, False, trim=length_aware,
                                    sort_by_length=length_aware))
    assert_same_batches(ours, theirs)
    monkeypatch.setattr(data.glue.dataset, "tensorflow_installed", lambda: False)
    patched = data.squad.dataset.make_dataset(SQUAD_EVAL, 96, False, 16, drop_remainder=False,
                                              length_aware=length_aware)
    assert isinstance(patched, NumpyDataset)
    assert_same_batches(_np_batches(patched), theirs)
    assert set(ours[0]) == set(squad_schema.EVAL_FEATURES) | {glue_dataset.EXAMPLE_INDEX}


@pytest.mark.parametrize("name, spec, batch_size", [
    ("mrpc", cf.record_spec(S), 8),
    ("swag", swag.record_spec(48), 7),
    ("stsb", cf.record_spec(64, regression=True), 4),
])
def test_unshuffled_training_equals_tf_data_across_epochs(records, name, spec, batch_size):
    """shuffle_buffer=1 shuffles nothing: three epochs' worth of full, trimmed batches (the
    file repeating mid-batch) equal tf.data's."""
    count = sum(1 for _ in numpy_reader.read_records(records[name]))
    n = 3 * count // batch_size
    ours, theirs = _both(records[name], spec, batch_size, True, n=n, drop_remainder=True,
                         trim=True, shuffle_buffer=1, seed=7)
    assert len(ours) == n
    assert_same_batches(ours, theirs)
    assert all(len(b[cf.LABEL_IDS]) == batch_size for b in ours)
    assert glue_dataset.EXAMPLE_INDEX not in ours[0]


def _labels_and_lengths(batches):
    return [(b[cf.LABEL_IDS].tolist(), b[cf.INPUT_MASK].sum(-1).tolist()) for b in batches]


def test_training_shuffle_is_a_function_of_the_seed(records):
    spec = cf.record_spec(S)

    def first(seed, n=6):
        return _np_batches(NumpyDataset(records["mrpc"], spec, 8, True, drop_remainder=True,
                                        seed=seed), n)

    a, b, c = first(1), first(1), first(2)
    assert_same_batches(a, b)
    assert _labels_and_lengths(a) != _labels_and_lengths(c)
    unshuffled = _np_batches(NumpyDataset(records["mrpc"], spec, 8, True, seed=1,
                                          shuffle_buffer=1), 6)
    assert _labels_and_lengths(a) != _labels_and_lengths(unshuffled)
    # every row is one of the file's records
    plain = _np_batches(NumpyDataset(records["mrpc"], spec, N_MRPC, False, trim=False))[0]
    known = {tuple(row) for row in plain[cf.INPUT_IDS]}
    full = _np_batches(NumpyDataset(records["mrpc"], spec, 8, True, seed=1, trim=False), 6)
    assert all(tuple(row) in known for batch in full for row in batch[cf.INPUT_IDS])


@pytest.mark.parametrize("k", [1, 4, 7])
def test_batches_after_resumes_the_stream(records, k):
    """batches_after(k * B) is the stream from batch k on (7 * 8 > 46: past an epoch)."""
    dataset = NumpyDataset(records["mrpc"], cf.record_spec(S), 8, True, drop_remainder=True,
                           seed=11)
    stream = _np_batches(dataset, k + 4)
    resumed = list(itertools.islice(dataset.batches_after(k * 8), 4))
    assert_same_batches(resumed, stream[k:])


def test_eval_dataset_iterates_again_the_same(records):
    dataset = NumpyDataset(records["mrpc"], cf.record_spec(S), 8, False, sort_by_length=True)
    assert_same_batches(_np_batches(dataset), _np_batches(dataset))
    assert_same_batches(list(dataset.as_numpy_iterator()), _np_batches(dataset))


def test_map_applies_fn_to_each_batch(records):
    dataset = NumpyDataset(records["mrpc"], cf.record_spec(S), 8, False, sort_by_length=True)

    def fn(batch):
        out = {k: v for k, v in batch.items() if k != cf.SEGMENT_IDS}
        out["twice"] = batch[cf.INPUT_IDS] * 2
        return out

    mapped = dataset.map(fn)
    plain = _np_batches(dataset)
    assert_same_batches(_np_batches(mapped), [fn(b) for b in plain])
    assert cf.SEGMENT_IDS in _np_batches(dataset)[0]  # the original is unchanged
    twice = _np_batches(mapped.map(lambda b: {"n": np.array(len(b["twice"]))}))
    assert [int(b["n"]) for b in twice] == [len(b[cf.INPUT_IDS]) for b in plain]


def test_without_tensorflow_task_dataset_is_numpy(records, monkeypatch):
    spec = cf.record_spec(S)
    expected = {
        is_training: _tf_batches(glue_dataset.task_dataset(records["mrpc"], spec, 8,
                                                           is_training, seed=3,
                                                           shuffle_buffer=1), 10)
        for is_training in (False, True)}
    monkeypatch.setattr(data.glue.dataset, "tensorflow_installed", lambda: False)
    for is_training in (False, True):
        dataset = glue_dataset.task_dataset(records["mrpc"], spec, 8, is_training, seed=3,
                                            shuffle_buffer=1)
        assert isinstance(dataset, NumpyDataset)
        assert dataset.drop_remainder is is_training and dataset.trim
        assert dataset.sort_by_length is not is_training
        assert_same_batches(_np_batches(dataset, 10), expected[is_training])
    static = glue_dataset.task_dataset(records["mrpc"], spec, 8, False, static_shapes=True)
    assert [b[cf.INPUT_IDS].shape for b in static] == [(8, S)] * (N_MRPC // 8)


def test_without_tensorflow_a_decode_function_is_refused(records, monkeypatch):
    monkeypatch.setattr(data.glue.dataset, "tensorflow_installed", lambda: False)
    with pytest.raises(ValueError, match="spec"):
        glue_dataset.make_dataset(records["mrpc"],
                                  lambda r: tf_example.decode_tf(r, cf.record_spec(S)), 8,
                                  False)
    with pytest.raises(ValueError):
        glue_dataset.task_dataset(records["mrpc"], lambda r: r, 8, True)


def test_damaged_record_names_the_file(records, tmp_path):
    """A byte flipped in the middle of record 5's data: iterating raises RecordError naming
    the file (eval and training alike)."""
    raw = bytearray(open(records["mrpc"], "rb").read())
    lengths = [len(r) for r in numpy_reader.read_records(records["mrpc"])]
    offset = sum(16 + n for n in lengths[:5]) + 12 + lengths[5] // 2
    raw[offset] ^= 0x40
    damaged = tmp_path / "damaged.tf_record"
    damaged.write_bytes(bytes(raw))
    for is_training in (False, True):
        dataset = NumpyDataset(str(damaged), cf.record_spec(S), 8, is_training)
        with pytest.raises(numpy_reader.RecordError) as raised:
            _np_batches(dataset, 3)
        assert str(damaged) in str(raised.value)


def test_records_of_another_spec_name_file_and_record(records):
    """Classifier records read with another spec (a missing feature, a float label, another
    length): InputError naming the file and the record."""
    for spec, what in [({**cf.record_spec(S), "label_weights": tf_example.FixedLen((S,), True)},
                        "no feature label_weights"),
                       (ner_features.record_spec(S), "label_ids has 1 int64 values, expected 128"),
                       (cf.record_spec(S, True), "feature label_ids has 1 int64 values"),
                       (cf.record_spec(S + 1), "feature input_ids has 128 int64 values")]:
        with pytest.raises(InputError) as raised:
            _np_batches(NumpyDataset(records["mrpc"], spec, 8, False))
        assert records["mrpc"] in str(raised.value)
        assert "record 0" in str(raised.value) and what in str(raised.value)


def test_trim_batch_numpy_equals_tf():
    import tensorflow as tf

    mask = np.zeros((3, 4, 32), np.int32)
    mask[0, 1, :13] = 1
    mask[2, 0, :3] = 1
    batch = {cf.INPUT_IDS: mask * 5, cf.INPUT_MASK: mask, cf.SEGMENT_IDS: mask * 0,
             cf.LABEL_IDS: np.arange(3, dtype=np.int32)}
    for multiple in (1, 8, 64):
        ours = numpy_dataset.trim_batch(batch, multiple)
        theirs = glue_dataset.trim_batch({k: tf.constant(v) for k, v in batch.items()},
                                         multiple)
        assert_same_batches([ours], [{k: v.numpy() for k, v in theirs.items()}])
    assert numpy_dataset.trim_batch(batch, 8)[cf.INPUT_IDS].shape == (3, 4, 16)
    empty = {k: v * 0 for k, v in batch.items()}
    assert numpy_dataset.trim_batch(empty, 8)[cf.INPUT_MASK].shape == (3, 4, 1)
