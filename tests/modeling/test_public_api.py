"""The public API users port to: ``import modeling`` (keras-hub / Model Garden style names and the
original's), ``data.tokenization``, ``data.squad``, ``python -m data.squad_eval``; model classes
that serialize (``.keras``) and export (SavedModel)."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import modeling
from tests import paths

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
CKPT = os.path.join(TINY, "bert_model.ckpt")


@pytest.fixture(scope="module")
def config():
    return modeling.BertConfig.from_json_file(os.path.join(TINY, "bert_config.json"))


@pytest.fixture(scope="module")
def encoder(config):
    model = modeling.BertModel(config)
    report = modeling.load_checkpoint(model, CKPT, log=False)
    assert len(report.loaded) == 39 and not report.missing
    return model


def _inputs(batch=2, seq=7):
    ids = np.array([[101, 1996, 4248, 2829, 4419, 102, 0]] * batch, np.int32)[:, :seq]
    ids[1, 2] = 3899  # the two rows differ
    return {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32),
            "segment_ids": np.zeros_like(ids)}


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def test_every_public_name_is_exported():
    for name in ("BertConfig", "BertModel", "BertPretrainingModel", "BertClassifier",
                 "BertSpanLabeler", "BertMultipleChoice", "load_checkpoint", "create_optimizer",
                 "load_tf1_checkpoint", "checkpoints", "optimization"):
        assert hasattr(modeling, name), name
        assert name in modeling.__all__, name
    for cls in (modeling.BertModel, modeling.BertPretrainingModel, modeling.BertClassifier,
                modeling.BertSpanLabeler, modeling.BertMultipleChoice):
        assert isinstance(cls, type) and issubclass(cls, keras.Model), cls
    # the names of earlier versions are the same objects
    from modeling.checkpoints import load_tf1_checkpoint
    from modeling.optimization import create_optimizer
    assert modeling.create_optimizer is create_optimizer
    assert modeling.load_tf1_checkpoint is load_tf1_checkpoint


def test_encoder_is_a_class_with_the_original_outputs(config, encoder):
    assert isinstance(encoder, modeling.BertModel) and isinstance(encoder, keras.Model)
    assert encoder.config == config and encoder.name == "bert"
    out = encoder(_inputs())
    assert sorted(out) == ["embedding_output", "encoder_outputs", "pooled_output",
                           "sequence_output"]
    # encoder_outputs stays the original's get_all_encoder_layers() list for Python callers
    assert isinstance(out["encoder_outputs"], list) and len(out["encoder_outputs"]) == 2
    assert _max_diff(out["encoder_outputs"][-1], out["sequence_output"]) == 0.0
    assert out["pooled_output"].shape == (2, 64)


def test_tf1_constructor_call_names_the_tf2_call(config):
    with pytest.raises(TypeError, match=r"BertModel\(config\)\(\{'input_ids'"):
        modeling.BertModel(config, is_training=True, input_ids=np.zeros((1, 4), np.int32))
    with pytest.raises(TypeError, match="original's TF1 call"):
        modeling.BertModel(config, True)  # positional is_training


def test_load_tf1_checkpoint_is_the_checkpoint_loader(config):
    model = modeling.BertModel(config)
    report = modeling.checkpoints.load_tf1_checkpoint(model, CKPT, log=False)
    assert len(report.loaded) == 39 and not report.missing
    assert "cls/seq_relationship/output_weights" in report.unused


def test_task_models_take_an_existing_encoder_and_share_its_variables(encoder):
    classifier = modeling.BertClassifier(encoder, num_labels=3)
    span = modeling.BertSpanLabeler(encoder)
    choice = modeling.BertMultipleChoice(encoder, num_choices=2)
    encoder_vars = {id(v) for v in encoder.weights}
    for model, own in ((classifier, 2), (span, 2), (choice, 2)):
        assert model.encoder is encoder
        ids = [id(v) for v in model.weights]
        assert len(ids) == len(set(ids)), model.name  # each variable once
        shared = set(ids) & encoder_vars
        # the span model does not use (hence does not own) the pooler, as the original
        assert len(shared) == len(encoder_vars) - (2 if model is span else 0), model.name
        assert len(ids) - len(shared) == own, model.name
        assert modeling.checkpoints.unmapped_variables(model) == [], model.name
    # the TF1 names of the heads: run_classifier's top level, cls/squad, cls/multiple_choice
    assert {"output_weights", "output_bias"} <= set(modeling.checkpoints.tf1_variable_map(
        classifier))
    assert "cls/squad/output_weights" in modeling.checkpoints.tf1_variable_map(span)
    assert "cls/multiple_choice/output_weights" in modeling.checkpoints.tf1_variable_map(choice)
    # keras-hub style: the encoder's inputs are the classifier's; its layers are at the top
    assert all(classifier.input[k] is encoder.input[k] for k in encoder.input)
    assert classifier.get_layer("pooler") is encoder.get_layer("pooler")

    x = _inputs()
    pooled = encoder(x)["pooled_output"].numpy()  # [B, H]
    head = classifier.get_layer("classifier")
    logits = classifier(x)["logits"].numpy()  # [B, 3]
    expected = pooled @ head.output_weights.numpy().T + head.output_bias.numpy()
    assert _max_diff(logits, expected) < 1e-5

    sequence = encoder(x)["sequence_output"].numpy()  # [B, S, H]
    w = span.get_layer("squad").output_weights.numpy()  # [2, H]
    out = span(x)
    assert out["start_logits"].shape == (2, 7)
    assert _max_diff(out["start_logits"], sequence @ w[0]) < 1e-5

    two = {k: np.stack([v[0], v[1]])[np.newaxis] for k, v in x.items()}  # [1, C=2, S]
    choice_w = choice.get_layer("multiple_choice").output_weights.numpy()  # [1, H]
    assert _max_diff(choice(two)["logits"], (pooled @ choice_w.T).reshape(1, 2)) < 1e-5

    # one set of variables: changing the encoder changes every task model
    table = encoder.get_layer("word_embeddings").embeddings
    before = classifier(x)["logits"].numpy()
    saved = table.numpy()
    try:
        table.assign(saved * 2.0)
        assert _max_diff(classifier(x)["logits"], before) > 1e-4
    finally:
        table.assign(saved)


def test_build_helpers_return_the_task_models(config):
    from modeling.heads import classifier, squad

    clf = classifier.build_classifier_model(config, 2, seq_length=8)
    assert isinstance(clf, modeling.BertClassifier)
    assert isinstance(clf.encoder, modeling.BertModel)
    assert isinstance(squad.build_squad_model(config), modeling.BertSpanLabeler)
    names = [layer.name for layer in clf.layers]
    assert names[-4:] == ["layer_1", "pooler", "classifier", "probabilities"]


def test_keras_file_round_trip_of_the_encoder(encoder, tmp_path):
    path = str(tmp_path / "bert.keras")
    encoder.save(path)
    again = keras.saving.load_model(path)
    assert isinstance(again, modeling.BertModel) and again.config == encoder.config
    x = _inputs()
    want, got = encoder(x), again(x)
    for key in ("embedding_output", "sequence_output", "pooled_output"):
        assert _max_diff(want[key], got[key]) == 0.0, key
    # and the checkpoint loader reads it by TF1 names
    fresh = modeling.BertModel(encoder.config)
    assert len(modeling.load_checkpoint(fresh, path, log=False).loaded) == 39
    assert _max_diff(fresh(x)["pooled_output"], want["pooled_output"]) == 0.0


def test_keras_file_round_trip_of_task_and_pretraining_models(config, encoder, tmp_path):
    classifier = modeling.BertClassifier(encoder, num_labels=2, name="mrpc")
    path = str(tmp_path / "classifier.keras")
    classifier.save(path)
    again = keras.saving.load_model(path)
    assert isinstance(again, modeling.BertClassifier) and again.name == "mrpc"
    assert isinstance(again.encoder, modeling.BertModel)
    x = _inputs()
    assert _max_diff(again(x)["logits"], classifier(x)["logits"]) == 0.0

    pretraining = modeling.BertPretrainingModel(config, seq_length=7, max_predictions_per_seq=2)
    assert isinstance(pretraining, modeling.BertPretrainingModel)
    clone = modeling.BertPretrainingModel.from_config(pretraining.get_config())
    assert isinstance(clone, modeling.BertPretrainingModel)
    assert [v.path for v in clone.weights] == [v.path for v in pretraining.weights]
    assert clone.max_predictions_per_seq == 2 and clone.seq_length == 7


def test_export_saved_model_serves_the_encoder_outputs(encoder, tmp_path):
    path = str(tmp_path / "export")
    encoder.export(path, format="tf_saved_model", verbose=False)
    reloaded = tf.saved_model.load(path)
    x = _inputs()
    served = reloaded.serve(x)
    # the list is spread into flat tensors: a SavedModel signature takes no nested outputs
    assert sorted(served) == ["embedding_output", "encoder_outputs_0", "encoder_outputs_1",
                              "pooled_output", "sequence_output"]
    graph = tf.function(lambda inputs: encoder(inputs, training=False))(x)
    eager = encoder(x)
    for key in ("embedding_output", "sequence_output", "pooled_output"):
        assert _max_diff(served[key], graph[key]) == 0.0, key
        assert _max_diff(served[key], eager[key]) < 1e-6, key  # eager: unfused ops
    for index in range(2):
        assert _max_diff(served["encoder_outputs_%d" % index],
                         graph["encoder_outputs"][index]) == 0.0
    # the Python model keeps its list output after exporting
    assert isinstance(encoder(x)["encoder_outputs"], list)


def test_create_optimizer_tf2_call_and_tf1_call_error():
    optimizer = modeling.optimization.create_optimizer(1e-3, 10, 1)
    assert isinstance(optimizer, keras.optimizers.Optimizer)
    variable = keras.Variable(np.ones((2,), np.float32), name="w")
    optimizer.apply_gradients([(tf.constant([1.0, -1.0]), variable)])
    assert variable.numpy()[0] < 1.0 < variable.numpy()[1]
    loss = tf.constant(1.0)
    with pytest.raises(TypeError) as excinfo:
        modeling.optimization.create_optimizer(loss, 1e-3, 10, 1, False)
    message = str(excinfo.value)
    assert "create_optimizer(init_lr, num_train_steps, num_warmup_steps" in message
    assert "apply_gradients" in message


def test_tokenization_names():
    from data import tokenization

    vocab = tokenization.load_vocab(paths.GOLDEN_VOCAB)
    assert vocab["[CLS]"] == 101
    text = "The quick brown fox jumped, unaffable!"
    full = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    tokens = full.tokenize(text)
    assert tokens[:3] == ["the", "quick", "brown"] and "##ffa" in tokens
    fast = tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    assert fast.tokenize(text) == tokens
    assert fast.convert_tokens_to_ids(tokens) == full.convert_tokens_to_ids(tokens)
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    assert basic.tokenize("Hello, World") == ["hello", ",", "world"]
    wordpiece = tokenization.WordpieceTokenizer(vocab=vocab)
    assert wordpiece.tokenize("unaffable") == full.tokenize("unaffable")


def test_squad_names(tmp_path):
    from data import squad
    from data import tokenization

    context = "The quick brown fox jumps over the lazy dog."
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
        "context": context,
        "qas": [{"id": "q1", "question": "What jumps?",
                 "answers": [{"text": "brown fox", "answer_start": context.index("brown")}]}],
    }]}]}
    input_file = tmp_path / "dev.json"
    input_file.write_text(json.dumps(data), encoding="utf-8")
    examples = squad.read_squad_examples(str(input_file), is_training=False)
    assert [e.qas_id for e in examples] == ["q1"]
    tokenizer = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    features = []
    count = squad.convert_examples_to_features(examples, tokenizer, max_seq_length=32,
                                               doc_stride=16, max_query_length=8,
                                               is_training=False, output_fn=features.append)
    assert count == len(features) == 1
    tokens = features[0].tokens
    start, end = tokens.index("brown"), tokens.index("fox")
    start_logits = np.zeros(32, np.float32)
    end_logits = np.zeros(32, np.float32)
    start_logits[start] = end_logits[end] = 10.0
    result = squad.RawResult(unique_id=features[0].unique_id, start_logits=start_logits,
                             end_logits=end_logits)
    prediction_file = str(tmp_path / "predictions.json")
    squad.write_predictions(examples, features, [result], n_best_size=5, max_answer_length=10,
                            do_lower_case=True, output_prediction_file=prediction_file,
                            output_nbest_file=str(tmp_path / "nbest.json"),
                            output_null_log_odds_file=None)
    with open(prediction_file, encoding="utf-8") as f:
        assert json.load(f) == {"q1": "brown fox"}


def test_squad_eval_module_runs():
    result = subprocess.run([sys.executable, "-m", "data.squad_eval", "--help"], cwd=paths.ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage" in result.stdout.lower()
