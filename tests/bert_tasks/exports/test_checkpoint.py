"""bert_tasks/exports/checkpoint.py: the checkpoint a training run leaves for the fine-tuning
tools, TF1 names where TensorFlow is installed, a Keras weights file where it is not; each
read back by ``load_checkpoint`` into a fresh model, every value equal."""

import os

import numpy as np
import pytest

import modeling
from bert_tasks.exports import checkpoint
from tests import paths

CONFIG = os.path.join(paths.GOLDEN, "modeling", "tiny", "bert_config.json")


def _model(seed):
    import keras

    keras.utils.set_random_seed(seed)
    return modeling.BertPretrainingModel(modeling.BertConfig.from_json_file(CONFIG))


@pytest.mark.parametrize("tensorflow", [True, False])
def test_the_export_reads_back_into_a_fresh_model(tmp_path, monkeypatch, tensorflow):
    monkeypatch.setattr(checkpoint, "tensorflow_checkpoints", lambda: tensorflow)
    trained, fresh = _model(1), _model(2)
    written = checkpoint.export_for_finetuning(trained, str(tmp_path), CONFIG, global_step=7)
    names = sorted(os.listdir(tmp_path / "export"))
    if tensorflow:
        assert written == str(tmp_path / "export" / "bert_model.ckpt")
        assert "bert_model.ckpt.index" in names
    else:
        assert names == ["bert_config.json", "model.weights.h5"]  # no staging left
    assert (tmp_path / "export" / "bert_config.json").read_text() == open(CONFIG).read()
    assert any(not np.array_equal(a.numpy(), b.numpy())
               for a, b in zip(fresh.weights, trained.weights))  # other values before
    report = modeling.load_checkpoint(fresh, written, log=False)
    assert report.loaded
    for ours, theirs in zip(fresh.weights, trained.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)
