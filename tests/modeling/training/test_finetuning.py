"""modeling/training/finetuning.py: fine-tuning runs on the one trainer (mean-of-examples loss,
checkpoints with the optimizer state, resume), and Predictor keeps dataset order."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from modeling import BertClassifier, BertConfig, BertModel, create_optimizer
from modeling.heads.classifier import per_example_classifier_loss
from modeling.training import finetuning
from modeling.training.backends.tensorflow import predict as tf_predict
from modeling.training import evaluation, step_log

SEQ, BATCH, VOCAB = 16, 4, 60


def _config():
    return BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _model(seed=3):
    keras.utils.set_random_seed(seed)
    return BertClassifier(BertModel(_config()), num_labels=2, dropout_rate=0.0)


def _examples(n=24, seed=0):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 2, size=n).astype(np.int32)
    # Label 1: every token from the upper half of the vocab; 0: the lower half (easy to learn).
    half = (VOCAB - 5) // 2
    ids = (5 + labels[:, None] * half + rng.randint(0, half, size=(n, SEQ))).astype(np.int32)
    lengths = rng.randint(4, SEQ + 1, size=n)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": np.zeros_like(ids),
            "label_ids": labels}


def _train(model_dir, steps, model=None, save_every=2, **kwargs):
    model = model or _model()
    dataset = tf.data.Dataset.from_tensor_slices(_examples()).repeat().batch(
        BATCH, drop_remainder=True)
    optimizer = create_optimizer(5e-3, steps, 1)
    result = finetuning.finetune(model, optimizer, dataset, per_example_classifier_loss,
                                 model_dir=str(model_dir), num_train_steps=steps,
                                 steps_per_loop=2, save_checkpoints_steps=save_every,
                                 **kwargs)
    return model, result


def _weights(model):
    return [v.numpy() for v in model.weights]


def test_loss_is_the_mean_per_example_loss_and_falls(tmp_path):
    model = _model()
    data = _examples()

    def mean_loss(batch):
        outputs = model({k: batch[k] for k in finetuning.MODEL_INPUT_NAMES})
        return float(tf.reduce_mean(per_example_classifier_loss(outputs, batch)))

    first_batch = mean_loss({k: v[:BATCH] for k, v in data.items()})
    before = mean_loss(data)
    _, result = _train(tmp_path, 40, model=model, save_every=10)
    assert result.global_step == 40 and len(result.step_losses) == 40
    assert result.step_losses[0] == pytest.approx(first_batch, rel=1e-5)  # the batch mean
    assert mean_loss(data) < 0.7 * before  # it learns (the training set's loss)
    # The trainer's outputs: model.ckpt-<step> with the optimizer, summaries, the step log.
    names = os.listdir(tmp_path)
    assert {"model.ckpt-10.index", "model.ckpt-40.index", "train", step_log.STEP_LOG_NAME
            } <= set(names)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-40")
    saved = {name for name, _ in tf.train.list_variables(str(tmp_path / "model.ckpt-40"))}
    assert any(name.startswith("optimizer/") for name in saved)


def test_resume_after_a_crash_ends_with_the_same_weights(tmp_path):
    straight, _ = _train(tmp_path / "straight", 6)
    _train(tmp_path / "crashed", 6)
    # A crash after step 4: the newest checkpoint is model.ckpt-4.
    crashed = tmp_path / "crashed"
    for name in os.listdir(crashed):
        if name.startswith("model.ckpt-6"):
            os.remove(crashed / name)
    (crashed / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-4"\n')
    resumed, result = _train(crashed, 6)
    assert result.global_step == 6 and len(result.step_losses) == 2  # steps 5 and 6 only
    for a, b in zip(_weights(straight), _weights(resumed)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_finished_run_trains_no_more(tmp_path):
    first, _ = _train(tmp_path, 4)
    again, result = _train(tmp_path, 4)
    assert result.step_losses == [] and result.global_step == 4
    for a, b in zip(_weights(first), _weights(again)):
        np.testing.assert_array_equal(a, b)


def test_a_checkpoint_of_another_model_is_one_clear_error(tmp_path):
    _train(tmp_path, 2)
    keras.utils.set_random_seed(3)
    other = BertClassifier(BertModel(_config()), num_labels=3, dropout_rate=0.0)
    with pytest.raises(ValueError, match="cannot resume from this checkpoint"):
        _train(tmp_path, 4, model=other)


def test_predictor_returns_dataset_order_and_extra_features():
    model = _model()
    data = dict(_examples(10), example_index=np.arange(10, dtype=np.int32))
    dataset = tf.data.Dataset.from_tensor_slices(data).batch(4)  # last batch of 2
    out = finetuning.predict(model, dataset, ["probabilities"], total=10)
    assert out["probabilities"].shape == (10, 2)
    np.testing.assert_array_equal(out["example_index"], np.arange(10))
    np.testing.assert_array_equal(out["label_ids"], data["label_ids"])
    # one CPU replica: traced with the fused LayerNorm kernel; the plain call keeps TF's ops
    predictor = tf_predict._PREDICTORS[model][(("probabilities",), id(tf.distribute.get_strategy()),
                                                True)]
    assert predictor.fused_kernels
    graph = next(iter(predictor._steps.values())).get_concrete_function().graph
    assert "BertLayerNorm" in {op.type for op in graph.get_operations()}
    direct = model({k: data[k] for k in finetuning.MODEL_INPUT_NAMES})["probabilities"]
    np.testing.assert_allclose(out["probabilities"], direct, atol=1e-6)


def _saved_op_types(path):
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    graph = saved.meta_graphs[0].graph_def
    types = {node.op for node in graph.node}
    for function in graph.library.function:
        types |= {node.op for node in function.node_def}
    return types


def test_kernels_off_in_the_context_and_never_in_an_export(tmp_path):
    """``fused_inference_kernels(False)`` around predict (a tool's --noxla_kernels): TensorFlow's
    ops; a SavedModel exported after predicting holds no op of the kernel library (a serving
    binary could not load it)."""
    from modeling.kernels import switch

    model = _model()
    data = dict(_examples(8), example_index=np.arange(8, dtype=np.int32))
    dataset = tf.data.Dataset.from_tensor_slices(data).batch(4)
    fused = finetuning.predict(model, dataset, ["logits"])
    with switch.fused_inference_kernels(False):
        plain = finetuning.predict(model, dataset, ["logits"])
    key = (("logits",), id(tf.distribute.get_strategy()))
    predictors = tf_predict._PREDICTORS[model]
    assert predictors[key + (True,)].fused_kernels and not predictors[key + (False,)].fused_kernels
    for allowed, uses_kernel in ((True, True), (False, False)):
        step = next(iter(predictors[key + (allowed,)]._steps.values()))
        graph = step.get_concrete_function().graph
        assert ("BertLayerNorm" in {op.type for op in graph.get_operations()}) == uses_kernel
    np.testing.assert_allclose(fused["logits"], plain["logits"], rtol=1e-5, atol=1e-5)
    model.export(str(tmp_path / "export"), format="tf_saved_model", verbose=False)
    types = _saved_op_types(str(tmp_path / "export"))
    assert "MatMul" in types or "BatchMatMulV2" in types
    assert not {t for t in types if t.startswith("Bert")}


def test_evaluate_uses_the_layer_norm_kernel_unless_turned_off(monkeypatch):
    from modeling.kernels import switch

    seen = []
    real = switch.kernels_of

    def spy(layer):  # only LayerNorm asks in a forward pass without training
        seen.append(real(layer).inference)
        return real(layer)

    model = _model()  # built before the spy: building calls the layers symbolically
    monkeypatch.setattr(switch, "kernels_of", spy)
    dataset = tf.data.Dataset.from_tensor_slices(_examples(8)).batch(4)

    def metrics(outputs, batch):
        return {"logit_sum": (tf.reduce_sum(outputs["logits"]), tf.constant(1.0))}

    def inputs(batch):
        return tf_predict.model_inputs(batch)

    fused = evaluation.evaluate(model, dataset, metrics, 2, model_inputs=inputs, progress=False)
    assert seen and all(seen)
    seen.clear()
    with switch.fused_inference_kernels(False):
        plain = evaluation.evaluate(model, dataset, metrics, 2, model_inputs=inputs,
                                    progress=False)
    assert seen and not any(seen)
    assert fused["logit_sum"] == pytest.approx(plain["logit_sum"], rel=1e-5, abs=1e-5)


def test_predict_traces_once_per_model_and_does_not_keep_the_model_alive():
    import gc
    import weakref

    model = _model()
    data = dict(_examples(10), example_index=np.arange(10, dtype=np.int32))
    short = tf.data.Dataset.from_tensor_slices(data).batch(4)
    longer = short.map(lambda b: dict(b, **{k: tf.pad(b[k], [[0, 0], [0, 8]])
                                            for k in finetuning.MODEL_INPUT_NAMES}))
    first = finetuning.predict(model, short, ["probabilities"])
    predictor = tf_predict._PREDICTORS[model][(("probabilities",), id(tf.distribute.get_strategy()),
                                                True)]
    again = finetuning.predict(model, longer, ["probabilities"])  # other lengths, same trace
    np.testing.assert_allclose(again["probabilities"], first["probabilities"], atol=1e-6)
    step = next(iter(predictor._steps.values()))
    assert len(predictor._steps) == 1 and step.experimental_get_tracing_count() == 1
    finetuning.predict(model, short, ["logits"])  # other outputs: their own step
    assert len(tf_predict._PREDICTORS[model]) == 2
    ref = weakref.ref(model)
    del model, predictor, step
    gc.collect()
    assert ref() is None  # the cache let the model go


def test_load_checkpoint_reads_the_model_out_of_a_finetuning_checkpoint(tmp_path):
    from modeling import checkpoints

    trained, _ = _train(tmp_path, 4)
    fresh = _model(seed=11)
    assert not np.allclose(_weights(fresh)[0], _weights(trained)[0])
    assert checkpoints.is_training_checkpoint(str(tmp_path))
    assert checkpoints.checkpoint_step(str(tmp_path / "model.ckpt-4")) == 4
    report = checkpoints.load_checkpoint(fresh, str(tmp_path / "model.ckpt-4"))
    assert len(report.loaded) == len(fresh.weights)
    for a, b in zip(_weights(trained), _weights(fresh)):
        np.testing.assert_array_equal(a, b)


def test_fused_path_follows_the_op_by_op_steps(tmp_path, monkeypatch):
    """``finetune(fused_kernels=True, fuse_optimizer=True)`` on one CPU replica (the tools'
    default): the fused kernels are on while the step is traced, and the losses and weights
    equal the op-by-op run's up to float32 rounding (dropout 0: the same masks)."""
    from modeling.kernels import switch

    seen = []
    real = switch.kernels_of

    def spy(layer):
        seen.append(real(layer).training)
        return real(layer)

    monkeypatch.setattr(switch, "kernels_of", spy)
    plain_model, plain = _train(tmp_path / "plain", 6)
    assert seen and not any(seen)
    seen.clear()
    fused_model, fused = _train(tmp_path / "fused", 6, fused_kernels=True, fuse_optimizer=True)
    assert any(seen)
    np.testing.assert_allclose(fused.step_losses, plain.step_losses, rtol=1e-5)
    for a, b in zip(_weights(fused_model), _weights(plain_model)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_damaged_checkpoint_is_one_line_and_the_one_before_resumes(tmp_path):
    """The newest checkpoint's data file cut short (on disk; saves themselves are put in place
    whole): resuming is one InputError naming it; with its files removed, the run resumes
    from the checkpoint before (TensorFlow's latest_checkpoint would find none)."""
    import glob

    from bert_common.errors import InputError

    _train(tmp_path, 4)
    data = glob.glob(str(tmp_path / "model.ckpt-4.data-*"))[0]
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    with pytest.raises(InputError, match=r"model\.ckpt-4: cannot resume from this checkpoint: "
                                         r"its data file is damaged or truncated") as info:
        _train(tmp_path, 6)
    assert "\n" not in str(info.value)
    for name in glob.glob(str(tmp_path / "model.ckpt-4.*")):
        os.remove(name)
    _, result = _train(tmp_path, 6)
    assert result.global_step == 6 and len(result.step_losses) == 4  # steps 3..6: from ckpt-2
