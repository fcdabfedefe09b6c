"""Checks run under KERAS_BACKEND=jax in their own process (tests/modeling/test_jax_backend.py).

``python -m tests.modeling.jax_checks NAME...`` prints one line per check, ``JAX_CHECK NAME``
and its measurements as JSON; the test asserts on them. NAME: ``goldens`` (encoder goldens
from TF1 checkpoints, MiniLM from its safetensors), ``trajectory`` (the original's 40-step
dropout-free pre-training run), ``finetuning_golden`` (the original's classifier fine-tuning
step), ``finetuning`` (a classifier on MRPC pairs), ``bf16`` (steps under ``mixed_bfloat16``),
``no_tensorflow`` (model, optimizer and a step with TensorFlow imports blocked).
"""

import contextlib
import json
import os
import sys

import numpy as np

from tests import paths


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@contextlib.contextmanager
def _values_from_checkpoint():
    """Models built within start from zeros where their initializer draws a truncated normal
    (every BERT weight): for a model whose every variable is then read from a checkpoint, which
    its check shows (``_unloaded``). On JAX each draw is a program compiled for its weight's
    shape, then scaled and shifted by two more: most of a check's time, for values that the
    checkpoint replaces."""
    import keras

    def zeros(self, shape, dtype=None):
        return np.zeros(shape, np.dtype(dtype or keras.config.floatx()))

    draw = keras.initializers.TruncatedNormal.__call__
    keras.initializers.TruncatedNormal.__call__ = zeros
    try:
        yield
    finally:
        keras.initializers.TruncatedNormal.__call__ = draw


def _unloaded(report) -> list:
    """The model variables a load (its ``LoadReport``) left at their initial values: those the
    checkpoint lacks and those without a TF1 name."""
    return sorted(report.missing) + sorted(report.unmapped)


def _forward(model, inputs) -> dict:
    """``model(inputs)`` (inference) compiled as one program, as this project's JAX paths run
    it (``backends.jax.predict.Predictor``), the variables' values passed in."""
    import jax

    def forward(trainable, non_trainable, inputs):
        return model.stateless_call(trainable, non_trainable, inputs, training=False)[0]

    return jax.jit(forward)([v.value for v in model.trainable_variables],
                            [v.value for v in model.non_trainable_variables], inputs)


def goldens() -> dict:
    import modeling
    from tests.modeling.golden_utils import encoder_inputs, golden_dir, load_outputs

    out, unloaded = {}, []
    for name in ("tiny", "tiny_wide_init"):
        with _values_from_checkpoint():
            model = modeling.BertModel(
                modeling.BertConfig.from_json_file(golden_dir(name) + "/bert_config.json"))
        unloaded += _unloaded(modeling.load_tf1_checkpoint(
            model, golden_dir(name) + "/bert_model.ckpt", log=False))
        golden = load_outputs(name)
        result = _forward(model, encoder_inputs(golden))
        out[name] = {k: _max_diff(result[k], golden[k])
                     for k in ("sequence_output", "pooled_output", "embedding_output")}
    minilm = os.path.join(paths.DATA, "minilm")
    config = modeling.checkpoints.hf.read_hf_config(minilm)
    config.hidden_act = "gelu"  # the golden's (the original's tanh GELU on MiniLM's weights)
    with _values_from_checkpoint():
        model = modeling.BertModel(config)
    unloaded += _unloaded(modeling.load_checkpoint(model, minilm, log=False))
    golden = load_outputs("minilm")
    result = _forward(model, encoder_inputs(golden))
    out["minilm"] = {k: _max_diff(result[k], golden[k])
                     for k in ("sequence_output", "pooled_output", "embedding_output")}
    return {"diffs": out, "unloaded": unloaded}


def trajectory() -> dict:
    import modeling
    from data.records import numpy_reader
    from data.pretraining import schema
    from modeling.checkpoints import tf1
    from modeling.training.backends.jax import steps as jax_steps

    traj_dir = os.path.join(paths.GOLDEN, "pretraining_trajectory")
    with _values_from_checkpoint():
        model = modeling.BertPretrainingModel(modeling.BertConfig.from_json_file(
            os.path.join(traj_dir, "init", "bert_config.json")))
    unloaded = _unloaded(modeling.load_checkpoint(
        model, os.path.join(traj_dir, "init", "bert_model.ckpt"), log=False))
    optimizer = modeling.create_optimizer(1e-3, 40, 4)
    optimizer.build(model.trainable_variables)
    step = jax_steps.make_train_step(model, optimizer)
    state = jax_steps.TrainState.from_model(model, optimizer)
    records = os.path.join(traj_dir, "seq64_seed12345_dupe1.tfrecord")
    logs = []
    for index, batch in enumerate(numpy_reader.batches([records], 8, schema.FEATURE_NAMES)):
        if index == 40:
            break
        state, step_logs = step(state, batch)
        logs.append({k: float(step_logs[k]) for k in ("loss", "global_norm", "learning_rate")})
    state.assign_to(model, optimizer)
    reference = np.load(os.path.join(traj_dir, "trajectory.npz"))
    final = tf1.read_tf1_checkpoint(os.path.join(traj_dir, "after_step_40", "bert_model.ckpt"))
    ours = tf1.model_tf1_arrays(model)

    def rel(key, ref_key):
        values = np.array([r[key] for r in logs])
        return float(np.max(np.abs(values - reference[ref_key]) / np.abs(reference[ref_key])))

    return {"steps": len(logs), "loss_rel": rel("loss", "total_loss"),
            "global_norm_rel": rel("global_norm", "global_norm"),
            "lr_abs": _max_diff([r["learning_rate"] for r in logs], reference["lr_used"]),
            "params_abs": max(_max_diff(ours[name], value) for name, value in final.items()),
            "params_missing": sorted(set(final) - set(ours)),
            "iterations": int(optimizer.iterations.value), "unloaded": unloaded}


def finetuning_golden() -> dict:
    """The original's classifier fine-tuning run (``finetuning_trajectory``: 20 dropout-free
    steps, 7 of them clipped) with the JAX step, the norm counting the word table's rows per
    occurrence as the original's: losses and norms of every step, parameters at the
    snapshots."""
    import modeling
    from data.records import numpy_reader
    from modeling.checkpoints import tf1
    from modeling.encoder import INPUT_NAMES
    from modeling.heads.classifier import per_example_classifier_loss
    from modeling.layers import embeddings
    from modeling.training import objectives
    from modeling.training.backends.jax import steps as jax_steps

    folder = os.path.join(paths.GOLDEN, "finetuning_trajectory")
    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(folder, "trajectory.jsonl")) as f:
        golden = [json.loads(line) for line in f if line.strip()]
    config = modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    with _values_from_checkpoint():
        model = modeling.BertClassifier(
            modeling.BertModel(config, seq_length=summary["seq_length"]),
            num_labels=summary["num_labels"], dropout_rate=0.0)
    unloaded = _unloaded(modeling.load_checkpoint(
        model, os.path.join(folder, summary["init_checkpoint"]), log=False))
    steps = summary["num_train_steps"]
    optimizer = modeling.create_optimizer(summary["learning_rate"], steps,
                                          summary["num_warmup_steps"])
    optimizer.build(model.trainable_variables)
    step = jax_steps.make_train_step(
        model, optimizer, objectives.mean_loss_objective(per_example_classifier_loss),
        occurrence_norm=embeddings.sparse_gradient_tables(model))
    state = jax_steps.TrainState.from_model(model, optimizer)
    batches = numpy_reader.batches([os.path.join(folder, summary["features"])] * steps,
                                    summary["batch_size"], list(INPUT_NAMES) + ["label_ids"])
    logs, params = [], {}
    for number, batch in zip(range(1, steps + 1), batches):
        state, step_logs = step(state, batch)
        logs.append({k: float(step_logs[k]) for k in ("loss", "global_norm")})
        snapshot = os.path.join(folder, "params_after_step_%d.npz" % number)
        if os.path.exists(snapshot):
            state.assign_to(model, optimizer)
            ours, want = tf1.model_tf1_arrays(model), dict(np.load(snapshot))
            rows = want.pop("word_embeddings_rows", None)
            worst = 0.0
            for key, value in want.items():
                mine = ours[key.replace("__", "/")]
                if "word_embeddings" in key and rows is not None and len(value) == len(rows):
                    mine = mine[rows]
                worst = max(worst, _max_diff(mine, value))
            params[os.path.basename(snapshot)] = worst

    def rel(key):
        return max(abs(ours[key] - g[key]) / abs(g[key]) for ours, g in zip(logs, golden))

    return {"steps": len(logs), "loss_rel": rel("loss"), "global_norm_rel": rel("global_norm"),
            "clipped_differ": [g["step"] for ours, g in zip(logs, golden)
                               if (ours["global_norm"] > 1.0) != bool(g["clipped"])],
            "params_abs": params, "unloaded": unloaded}


def finetuning() -> dict:
    """MiniLM (its safetensors) + a classifier head on 32 MRPC training pairs (32 tokens), 4
    epochs of batch 8 with the original's optimizer: the mean loss of each epoch."""
    import modeling
    from data.glue import features, processors
    from data.tokenization.wordpiece import FastFullTokenizer
    from modeling.heads.classifier import per_example_classifier_loss
    from modeling.training import objectives
    from modeling.training.backends.jax import steps as jax_steps

    minilm = os.path.join(paths.DATA, "minilm")
    processor = processors.MrpcProcessor()
    examples = processor.get_train_examples(os.path.join(paths.DATA, "glue", "MRPC"))[:32]
    tokenizer = FastFullTokenizer(os.path.join(minilm, "vocab.txt"), do_lower_case=True)
    rows = features.convert_examples_to_features(examples, processor.get_labels(), 32,
                                                 tokenizer)
    data = {"input_ids": np.array([f.input_ids for f in rows], np.int32),
            "input_mask": np.array([f.input_mask for f in rows], np.int32),
            "segment_ids": np.array([f.segment_ids for f in rows], np.int32),
            "label_ids": np.array([f.label_id for f in rows], np.int32)}
    with _values_from_checkpoint():
        encoder = modeling.BertModel(modeling.checkpoints.hf.read_hf_config(minilm))
    unloaded = _unloaded(modeling.load_checkpoint(encoder, minilm, log=False))
    model = modeling.BertClassifier(encoder, num_labels=2)  # its head drawn
    optimizer = modeling.create_optimizer(5e-5, 16, 2)
    optimizer.build(model.trainable_variables)
    step = jax_steps.make_train_step(
        model, optimizer, objectives.mean_loss_objective(per_example_classifier_loss))
    state = jax_steps.TrainState.from_model(model, optimizer)
    epochs = []
    for _ in range(4):
        losses = []
        for start in range(0, 32, 8):
            state, logs = step(state, {k: v[start:start + 8] for k, v in data.items()})
            losses.append(float(logs["loss"]))
        epochs.append(sum(losses) / len(losses))
    return {"epoch_losses": epochs, "labels": int(data["label_ids"].sum()),
            "unloaded": unloaded}


TINY = dict(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=16)


def _tiny_batch():
    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(5, 50, (4, 8)).astype(np.int32),
            "input_mask": np.ones((4, 8), np.int32), "segment_ids": np.zeros((4, 8), np.int32),
            "masked_lm_positions": np.tile(np.arange(1, 4, dtype=np.int32), (4, 1)),
            "masked_lm_ids": rng.integers(5, 50, (4, 3)).astype(np.int32),
            "masked_lm_weights": np.ones((4, 3), np.float32),
            "next_sentence_labels": np.zeros((4, 1), np.int32)}


def _tiny_training(steps: int = 5):
    """A tiny pre-training model and its optimizer after ``steps`` steps on one batch (under
    the global dtype policy); (model, optimizer, batch, losses)."""
    import modeling
    from modeling.training.backends.jax import steps as jax_steps

    model = modeling.BertPretrainingModel(modeling.BertConfig(**TINY))
    optimizer = modeling.create_optimizer(1e-2, 10, 2)
    optimizer.build(model.trainable_variables)
    step = jax_steps.make_train_step(model, optimizer)
    state = jax_steps.TrainState.from_model(model, optimizer)
    batch = _tiny_batch()
    losses = []
    for _ in range(steps):
        state, logs = step(state, batch)
        losses.append(float(logs["loss"]))
    state.assign_to(model, optimizer)
    return model, optimizer, batch, losses


def bf16() -> dict:
    """A tiny pre-training model under ``mixed_bfloat16``: five steps on one batch; the
    dtypes of its outputs on that batch (``jax.eval_shape``: the forward traced, the dtypes
    and shapes its run would give, without compiling each op as an eager call does)."""
    import jax
    import keras

    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model, _, batch, losses = _tiny_training()
        outputs = jax.eval_shape(model, batch)
        return {"losses": losses,
                "variable_dtypes": sorted({str(v.dtype) for v in model.trainable_variables}),
                "sequence_output_dtype": str(outputs["sequence_output"].dtype),
                "loss_dtype": str(outputs["total_loss"].dtype)}
    finally:
        keras.config.set_dtype_policy("float32")


def no_tensorflow() -> dict:
    import tempfile

    import jax
    import keras

    import modeling

    model, optimizer, batch, losses = _tiny_training()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.weights.h5")
        model.save_weights(path)
        again = modeling.BertPretrainingModel(modeling.BertConfig(**TINY))
        modeling.load_checkpoint(again, path, log=False)
        reloaded = max(_max_diff(a.value, b.value)
                       for a, b in zip(model.weights, again.weights))
    minilm = os.path.join(paths.DATA, "minilm")
    with _values_from_checkpoint():
        hf_model = modeling.BertModel(modeling.checkpoints.hf.read_hf_config(minilm))
    hf_report = modeling.load_checkpoint(hf_model, minilm, log=False)
    classifier = modeling.BertClassifier(modeling.BertModel(modeling.BertConfig(**TINY)),
                                         num_labels=3)
    # (the logits' shape: the forward traced, as in bf16)
    logits = jax.eval_shape(classifier, {k: batch[k]
                                         for k in ("input_ids", "input_mask", "segment_ids")})
    return {"backend": keras.backend.backend(), "losses": losses, "reloaded_max_diff": reloaded,
            "hf_missing": hf_report.missing, "hf_unmapped": hf_report.unmapped,
            "optimizer": type(optimizer).__module__,
            "classifier_logits": list(np.shape(logits["logits"])),
            "tensorflow_loaded": "tensorflow" in sys.modules}


if __name__ == "__main__":
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    for name in sys.argv[1:]:  # several checks share one process's start-up and compiles
        print("JAX_CHECK %s %s" % (name, json.dumps(globals()[name]())), flush=True)
