"""Hugging Face export: MiniLM round trips exactly, every head's names invert the import map,
classifier labels, GELU names, and errors that leave nothing behind. (transformers itself loads
the exports in bench/checks/hf_export.py: the PyTorch venv is not a test dependency.)"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

from bert_tasks.exports import hf as hf_export
from bert_tasks.exports.convert import convert
from modeling import checkpoints
from modeling.checkpoints import hf as hf_import
from modeling.config import BertConfig
from modeling.encoder import BertModel
from modeling.heads.classifier import build_classifier_model
from modeling.heads.pretraining import BertPretrainingModel
from modeling.heads.squad import build_squad_model
from tests import paths
from tests.modeling.golden_utils import golden_dir

MINILM = os.path.join(paths.DATA, "minilm")
TINY = golden_dir("tiny")
TINY_CONFIG = os.path.join(TINY, "bert_config.json")
# Provenance that a fresh export cannot know (and a key transformers no longer writes).
PROVENANCE = {"_name_or_path", "transformers_version", "gradient_checkpointing", "use_cache"}


def _json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _same_tensors(folder):
    source = load_file(os.path.join(MINILM, "model.safetensors"))
    written = load_file(os.path.join(folder, "model.safetensors"))
    # The one tensor not written is the int64 position_ids buffer transformers rebuilds itself.
    assert sorted(written) == sorted(set(source) - {"embeddings.position_ids"})
    for name, value in written.items():
        assert value.dtype == np.float32 and np.array_equal(value, source[name]), name


def test_minilm_hf_to_hf_round_trip_is_exact(tmp_path):
    out = str(tmp_path / "minilm_hf")
    summary = convert(MINILM, out, output_format="hf", do_lower_case=True)
    assert "BertModel, 103 tensors, hidden_act gelu" in summary
    _same_tensors(out)
    assert _json(os.path.join(out, "config.json")) == _json(os.path.join(MINILM, "config.json"))
    with open(os.path.join(out, "vocab.txt"), "rb") as f, \
            open(os.path.join(MINILM, "vocab.txt"), "rb") as g:
        assert f.read() == g.read()
    tokenizer_config = _json(os.path.join(out, "tokenizer_config.json"))
    assert tokenizer_config["do_lower_case"] is True
    assert tokenizer_config["tokenizer_class"] == "BertTokenizer"


def test_minilm_through_a_google_folder_and_back(tmp_path):
    google = tmp_path / "google"
    google.mkdir()
    convert(MINILM, str(google / "bert_model.ckpt"))
    assert sorted(os.listdir(google)) == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001",
                                          "bert_model.ckpt.index", "checkpoint", "vocab.txt"]
    out = str(tmp_path / "again")
    convert(str(google / "bert_model.ckpt"), out, config_file=str(google / "bert_config.json"),
            output_format="hf", do_lower_case=True)
    _same_tensors(out)
    source, written = _json(os.path.join(MINILM, "config.json")), _json(os.path.join(out, "config.json"))
    assert set(source) - set(written) == PROVENANCE and set(written) <= set(source)
    assert {k: source[k] for k in written} == written


def test_every_exported_name_inverts_the_import_map():
    config = BertConfig.from_json_file(TINY_CONFIG)
    models = {"BertForPreTraining": BertPretrainingModel(config),
              "BertForSequenceClassification": build_classifier_model(config, 3),
              "BertForQuestionAnswering": build_squad_model(config),
              "BertModel": BertModel(config)}
    for architecture, model in models.items():
        names = checkpoints.model_tf1_arrays(model)
        assert hf_export.hf_architecture(names) == architecture
        prefix = "" if architecture == "BertModel" else "bert."
        for name in names:
            hf_name, transpose = hf_export.tf1_to_hf_name(name, prefix)
            assert hf_import.hf_to_tf1_name(hf_name) == (name, transpose)
            assert hf_name.startswith(prefix) or hf_name.startswith(("cls.", "classifier.",
                                                                     "qa_outputs."))
    assert hf_export.tf1_to_hf_name("bert/encoder/layer_3/attention/self/query/kernel",
                                    "bert.") == (
        "bert.encoder.layer.3.attention.self.query.weight", True)
    assert hf_export.tf1_to_hf_name("output_weights") == ("classifier.weight", False)
    assert hf_export.tf1_to_hf_name("global_step") is None


def test_config_names_google_gelu_as_transformers_does():
    config = BertConfig.from_json_file(TINY_CONFIG)
    assert config.hidden_act == "gelu" and config.to_hf_dict()["hidden_act"] == "gelu_new"
    exact = config.replace(hidden_act="gelu_exact")
    assert exact.to_hf_dict()["hidden_act"] == "gelu"
    for c in (config, exact):
        assert BertConfig.from_hf_dict(c.to_hf_dict()) == c


@pytest.fixture(scope="module")
def classifier_checkpoints(tmp_path_factory):
    """A 3-class classifier with non-zero head weights, as a TF1 checkpoint and as a checkpoint
    of the trainer (object-based, ``model`` at the root)."""
    folder = tmp_path_factory.mktemp("classifier")
    model = build_classifier_model(BertConfig.from_json_file(TINY_CONFIG), 3)
    checkpoints.load_checkpoint(model, os.path.join(TINY, "bert_model.ckpt"), log=False)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        if "classifier" in variable.path:
            variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    (folder / "tf1").mkdir()
    tf1 = checkpoints.save_tf1_checkpoint(model, str(folder / "tf1" / "model.ckpt"))
    trainer = tf.train.Checkpoint(model=model).save(str(folder / "trainer" / "model.ckpt"))
    return model, tf1, trainer


def test_classifier_export_with_labels(classifier_checkpoints, tmp_path):
    model, tf1, trainer = classifier_checkpoints
    arrays = checkpoints.model_tf1_arrays(model)
    for source, kind in ((tf1, "auto"), (trainer, "classifier")):
        out = str(tmp_path / os.path.basename(os.path.dirname(source)))
        summary = convert(source, out, TINY_CONFIG, kind, output_format="hf",
                          vocab_file=paths.GOLDEN_VOCAB, labels=["contradiction", "entailment",
                                                                 "neutral"])
        assert "BertForSequenceClassification" in summary
        config = _json(os.path.join(out, "config.json"))
        assert config["architectures"] == ["BertForSequenceClassification"]
        assert config["id2label"] == {"0": "contradiction", "1": "entailment", "2": "neutral"}
        assert config["label2id"] == {"contradiction": 0, "entailment": 1, "neutral": 2}
        tensors = load_file(os.path.join(out, "model.safetensors"))
        assert np.array_equal(tensors["classifier.weight"], arrays["output_weights"])
        assert np.array_equal(tensors["bert.pooler.dense.weight"],
                              arrays["bert/pooler/dense/kernel"].T)
    # A 3-class checkpoint read as regression (STS-B: one output) is refused.
    with pytest.raises(checkpoints.CheckpointError, match=r"has shape \[3\] in the checkpoint"):
        convert(tf1, str(tmp_path / "regression"), TINY_CONFIG, "classifier", output_format="hf",
                vocab_file=paths.GOLDEN_VOCAB, regression=True)
    regression = hf_export.hf_config_dict(BertConfig.from_json_file(TINY_CONFIG),
                                          "BertForSequenceClassification", regression=True)
    assert regression["problem_type"] == "regression" and regression["id2label"] == {"0": "LABEL_0"}


def test_fine_tuned_trainer_checkpoint_without_labels_says_what_to_pass(classifier_checkpoints,
                                                                        tmp_path):
    _, _, trainer = classifier_checkpoints
    with pytest.raises(checkpoints.CheckpointError, match="--model=classifier with --task_name"):
        convert(trainer, str(tmp_path / "out"), TINY_CONFIG, output_format="hf",
                vocab_file=paths.GOLDEN_VOCAB)
    assert not (tmp_path / "out").exists()


def test_errors_leave_nothing(tmp_path):
    prefix = os.path.join(TINY, "bert_model.ckpt")
    with pytest.raises(checkpoints.CheckpointError, match="needs one .--vocab_file"):
        convert(prefix, str(tmp_path / "a"), TINY_CONFIG, output_format="hf")
    short = tmp_path / "vocab.txt"
    short.write_text("\n".join("[unused%d]" % i for i in range(40000)) + "\n")
    with pytest.raises(checkpoints.CheckpointError, match="40000 tokens, more than"):
        convert(prefix, str(tmp_path / "b"), TINY_CONFIG, output_format="hf",
                vocab_file=str(short))
    assert sorted(os.listdir(tmp_path)) == ["vocab.txt"]


def test_cli_hf_output(tmp_path):
    from bert_cli import convert_checkpoint
    from tests.support.tools import run_tool

    out = tmp_path / "hf"
    result = run_tool(convert_checkpoint, ["--input=" + os.path.join(TINY, "bert_model.ckpt"),
                                           "--bert_config_file=" + TINY_CONFIG,
                                           "--vocab_file=" + paths.GOLDEN_VOCAB,
                                           "--output_format=hf", "--do_lower_case=false",
                                           "--output=" + str(out)])
    assert result.code == 0, result.stderr
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors",
                                       "tokenizer_config.json", "vocab.txt"]
    assert _json(out / "tokenizer_config.json")["do_lower_case"] is False
    assert _json(out / "config.json")["architectures"] == ["BertForPreTraining"]
    bad = run_tool(convert_checkpoint, ["--input=" + os.path.join(TINY, "bert_model.ckpt"),
                                        "--output_format=hf", "--output=" + str(tmp_path / "x"),
                                        "--task_name=mrpc", "--labels=a,b"])
    assert bad.code == 1 and "--labels or --task_name" in bad.stderr


def test_keras_file_to_hf_tells_the_model_from_its_tensors(tmp_path):
    encoder = BertModel(BertConfig.from_json_file(TINY_CONFIG))
    checkpoints.load_checkpoint(encoder, os.path.join(TINY, "bert_model.ckpt"), log=False)
    keras_file = str(tmp_path / "encoder.keras")
    encoder.save(keras_file)
    out = str(tmp_path / "hf")
    assert "BertModel" in convert(keras_file, out, TINY_CONFIG, output_format="hf",
                                  vocab_file=paths.GOLDEN_VOCAB)
    tensors = load_file(os.path.join(out, "model.safetensors"))
    assert np.array_equal(tensors["embeddings.word_embeddings.weight"],
                          np.asarray(encoder.get_layer("word_embeddings").weights[0]))
