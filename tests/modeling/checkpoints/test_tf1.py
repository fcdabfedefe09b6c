"""Checkpoint name mapping, TF1 load/save, errors and reports."""

import numpy as np
import pytest

from modeling import checkpoints
from modeling.encoder import BertModel
from modeling.checkpoints.tf1 import CheckpointError
from modeling.config import BertConfig
from modeling.heads.pretraining import BertPretrainingModel
from tests.modeling.golden_utils import golden_dir, load_outputs, max_abs_diff, pretraining_inputs
from tests.support import noise

NAME = "tiny_wide_init"


def _config(**changes):
    config = BertConfig.from_json_file(golden_dir(NAME) + "/bert_config.json")
    return config.replace(**changes) if changes else config


def test_every_variable_maps_to_a_golden_name():
    model = BertPretrainingModel(_config())
    mapping = checkpoints.tf1_variable_map(model)
    source = checkpoints.tf1_checkpoint_source(golden_dir(NAME) + "/bert_model.ckpt")
    assert sorted(mapping) == sorted(source.shapes)
    assert checkpoints.tf1_name_for_path("seq_relationship/kernel") == (
        "cls/seq_relationship/output_weights", True)
    assert checkpoints.tf1_name_for_path("layer_3/attention/self/query/kernel") == (
        "bert/encoder/layer_3/attention/self/query/kernel", False)
    assert checkpoints.tf1_name_for_path("squad/output_weights") == (
        "cls/squad/output_weights", False)
    assert checkpoints.tf1_name_for_path("classifier/kernel") == ("output_weights", True)
    assert checkpoints.tf1_name_for_path("some_head/kernel") is None


def test_registered_head_hook():
    checkpoints.register_tf1_head("my_tagger", "cls/tagger/")
    assert checkpoints.tf1_name_for_path("my_tagger/bias") == ("cls/tagger/output_bias", False)
    assert checkpoints.tf1_name_for_path("my_tagger/kernel") == (
        "cls/tagger/output_weights", True)


def test_save_and_reload_round_trip_with_slots_skipped(tmp_path):
    model = BertPretrainingModel(_config())
    checkpoints.load_tf1_checkpoint(model, golden_dir(NAME) + "/bert_model.ckpt")
    arrays = checkpoints.model_tf1_arrays(model)
    original = checkpoints.read_tf1_checkpoint(golden_dir(NAME) + "/bert_model.ckpt")
    assert arrays["cls/seq_relationship/output_weights"].shape == (2, 32)
    for name, value in original.items():
        assert np.array_equal(arrays[name], value), name
    # Add Adam slots and a global step, as a training checkpoint of the original has.
    arrays["bert/pooler/dense/kernel/adam_m"] = np.zeros((32, 32), np.float32)
    arrays["bert/pooler/dense/kernel/adam_v"] = np.zeros((32, 32), np.float32)
    arrays["global_step"] = np.asarray(7, np.int64)
    prefix = checkpoints.write_tf1_arrays(arrays, str(tmp_path / "model.ckpt"))
    fresh = BertPretrainingModel(_config())
    report = checkpoints.load_tf1_checkpoint(fresh, str(tmp_path))  # folder -> latest
    assert report.source == prefix and len(report.loaded) == 46 and not report.unused
    assert sorted(report.skipped) == ["bert/pooler/dense/kernel/adam_m",
                                      "bert/pooler/dense/kernel/adam_v", "global_step"]
    golden = load_outputs(NAME)
    noise.within("tf1_checkpoint/%s/total_loss" % NAME, max_abs_diff(
        fresh(pretraining_inputs(golden))["total_loss"], golden["total_loss"]), 1e-5)
    # save_tf1_checkpoint writes what the original would read back.
    again = checkpoints.save_tf1_checkpoint(fresh, str(tmp_path / "again.ckpt"), global_step=3)
    written = checkpoints.read_tf1_checkpoint(again)
    assert int(written.pop("global_step")) == 3
    assert sorted(written) == sorted(original)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_encoder_from_pretraining_checkpoint_reports_missing_heads(tmp_path):
    encoder = BertModel(_config())
    prefix = checkpoints.save_tf1_checkpoint(encoder, str(tmp_path / "enc.ckpt"))
    full = BertPretrainingModel(_config())
    report = checkpoints.load_tf1_checkpoint(full, prefix)
    assert len(report.loaded) == 39
    assert report.missing == sorted(report.missing) and len(report.missing) == 7
    assert all(name.startswith("cls/") for name in report.missing)
    assert "missing (fresh init)" in report.summary()


def test_shape_mismatch_names_variable_and_shapes():
    model = BertModel(_config(hidden_size=16, intermediate_size=32))
    with pytest.raises(CheckpointError) as info:
        checkpoints.load_tf1_checkpoint(model, golden_dir(NAME) + "/bert_model.ckpt")
    message = str(info.value)
    assert "variable bert/embeddings/LayerNorm/beta has shape [32]" in message
    assert "[16]" in message and golden_dir(NAME) in message
    assert "expects" in message and "\n" not in message


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    model = BertModel(_config())
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        checkpoints.load_tf1_checkpoint(model, str(tmp_path / "nothing.ckpt"))
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        checkpoints.load_tf1_checkpoint(model, str(tmp_path))
    (tmp_path / "broken.ckpt.index").write_bytes(b"not an index")
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        checkpoints.load_tf1_checkpoint(model, str(tmp_path / "broken.ckpt"))


def test_load_checkpoint_accepts_keras_files(tmp_path):
    source = BertPretrainingModel(_config())
    checkpoints.load_tf1_checkpoint(source, golden_dir(NAME) + "/bert_model.ckpt")
    path = str(tmp_path / "pretrained.keras")
    source.save(path)
    encoder = BertModel(_config())
    report = checkpoints.load_checkpoint(encoder, path)
    assert len(report.loaded) == 39 and len(report.unused) == 7
    weights = str(tmp_path / "enc.weights.h5")
    encoder.save_weights(weights)
    other = BertModel(_config())
    checkpoints.load_checkpoint(other, weights)
    golden = load_outputs(NAME)
    inputs = {"input_ids": golden["input_ids"], "input_mask": golden["input_mask"],
              "segment_ids": golden["token_type_ids"]}
    noise.within("weights_h5/%s/sequence_output" % NAME,
                 max_abs_diff(other(inputs)["sequence_output"], golden["sequence_output"]), 1e-5)


def test_checkpoint_step_of_a_tf1_checkpoint_is_its_global_step(tmp_path):
    weights = {"bert/pooler/dense/bias": np.zeros([4], np.float32)}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with_step = checkpoints.write_tf1_arrays(
        dict(weights, global_step=np.asarray(1234, np.int64)), str(tmp_path / "a" / "model.ckpt"))
    without = checkpoints.write_tf1_arrays(weights, str(tmp_path / "b" / "bert_model.ckpt"))
    assert checkpoints.checkpoint_step(with_step) == 1234
    assert checkpoints.checkpoint_step(str(tmp_path / "a")) == 1234  # a folder: its newest
    assert checkpoints.checkpoint_step(without) == 0
    assert checkpoints.checkpoint_step(str(tmp_path / "missing")) == 0


def test_latest_checkpoint_reads_the_state_file_or_names_it(tmp_path):
    from modeling.checkpoints import tf1

    assert tf1.latest_checkpoint(str(tmp_path)) is None  # no state file: no checkpoint
    for step in (1, 2):
        (tmp_path / ("ckpt-%d.index" % step)).write_text("")
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-2"\n'
        'all_model_checkpoint_paths: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-2"\n')
    assert tf1.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")
    (tmp_path / "ckpt-2.index").unlink()  # its files removed: the one before
    assert tf1.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-1")
    (tmp_path / "checkpoint").write_text("")  # an empty state file: one error naming it
    with pytest.raises(CheckpointError, match="checkpoint: cannot read its checkpoint state"):
        tf1.latest_checkpoint(str(tmp_path))
