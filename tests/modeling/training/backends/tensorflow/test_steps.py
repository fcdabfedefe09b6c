"""modeling/training/backends/tensorflow/steps.py and job.py (with objectives, step_log,
evaluation) and strategies.py on a tiny Keras model (fast)."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from modeling.training import strategies
from modeling.training import optimizers
from tests.support.summaries import read_scalars
from modeling.training import evaluation, objectives, step_log
from modeling.training.job import TrainerConfig, loop_steps
from modeling.training.backends.tensorflow.steps import Trainer

DIM = 6


class RegressionObjective(objectives.Objective):
    """Weighted squared error: loss = Σ w·e² / Σ w over the global batch (a weighted mean, so
    the global-totals contract matters) plus an unweighted metric."""

    log_names = ("weighted_error",)

    def model_inputs(self, batch):
        return batch["x"]

    def totals(self, batch):
        return {"weight": tf.reduce_sum(batch["w"])}

    def __call__(self, outputs, batch, totals):
        err = tf.reduce_sum(tf.square(tf.cast(outputs, tf.float32) - batch["y"]), axis=-1)  # [b]
        num = tf.reduce_sum(batch["w"] * err)
        return num / totals["weight"], {"weighted_error": (num, tf.reduce_sum(batch["w"]))}


def _data(n=64, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, DIM).astype(np.float32)
    y = (x @ rng.randn(DIM, 2)).astype(np.float32) + 0.1
    w = rng.randint(0, 4, size=n).astype(np.float32)
    w[0] = 1.0
    return {"x": x, "y": y, "w": w}


def _dataset(batch_size=8):
    return tf.data.Dataset.from_tensor_slices(_data()).repeat().batch(batch_size,
                                                                       drop_remainder=True)


def _model(seed=1):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((DIM,))
    hidden = keras.layers.Dense(8, activation="tanh", name="dense")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, name="out")(hidden))


def _trainer(model_dir, steps, accumulation=1, save_every=3, loop=2, optimizer=None,
             model=None, **config_kwargs):
    model = model or _model()
    optimizer = optimizer or optimizers.create_optimizer(0.05, steps, 2)
    config = TrainerConfig(str(model_dir), steps, steps_per_loop=loop,
                           save_checkpoints_steps=save_every,
                           num_accumulation_steps=accumulation, **config_kwargs)
    return Trainer(model, optimizer, RegressionObjective(), None, config)


def _weights(trainer):
    return [v.numpy() for v in trainer.model.trainable_variables]


def test_train_progress_checkpoints_summaries(tmp_path, capsys):
    trainer = _trainer(tmp_path, 7)
    result = trainer.train(_dataset())
    assert result.global_step == 7 == trainer.global_step
    assert len(result.step_losses) == 7
    assert result.step_losses[-1] < result.step_losses[0]
    err = capsys.readouterr().err
    assert "step 7/7 loss" in err and "examples/s ETA" in err and "weighted_error" in err
    # Checkpoints at 3, 6 and the end; the step log has one line per step.
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-7")
    assert {"ckpt-3.index", "ckpt-6.index", "ckpt-7.index"} <= set(os.listdir(tmp_path))
    log = step_log.read_step_log(str(tmp_path))
    assert [r["step"] for r in log] == list(range(1, 8))
    np.testing.assert_allclose([r["loss"] for r in log], result.step_losses)
    assert log[0]["learning_rate"] == pytest.approx(0.025)  # schedule(1): one step ahead
    # TensorBoard: every log at the end of each host loop (its length timed; a loop ends at
    # each checkpoint: 3, 6, 7), with the rate the step log has, the norm and the throughput.
    scalars = read_scalars(str(tmp_path / "train"))
    assert {"loss", "learning_rate", "global_norm", "examples_per_sec",
            "weighted_error"} <= set(scalars)
    steps = [step for step, _ in scalars["learning_rate"]]
    assert steps == sorted(set(steps)) and {3, 6, 7} <= set(steps) and steps[-1] == 7
    rates = {r["step"]: r["learning_rate"] for r in log}
    for step, value in scalars["learning_rate"]:
        assert value == pytest.approx(rates[step])
    assert all(value > 0 for _, value in scalars["examples_per_sec"])
    # A second train() at the same num_train_steps does nothing.
    assert _trainer(tmp_path, 7).train(_dataset()).step_losses == []



def test_train_frees_its_input_iterator_when_it_returns(tmp_path):
    # Kept in the trainer's checkpoint, the iterator lived in a reference cycle until a later
    # garbage collection (which a restored tf.data iterator could block for a minute).
    import gc
    import weakref

    from tensorflow.python.data.ops import iterator_ops

    trainer = _trainer(tmp_path, 4)
    gc.collect()
    gc.disable()  # freed by reference counting, not by a collection
    try:
        before = {id(o) for o in gc.get_objects() if isinstance(o, iterator_ops.OwnedIterator)}
        trainer.train(_dataset())
        left = [weakref.ref(o) for o in gc.get_objects()
                if isinstance(o, iterator_ops.OwnedIterator) and id(o) not in before]
    finally:
        gc.enable()
    assert left == []
    # The trainer still saves (its checkpoint without the iterator).
    assert trainer.save().endswith("ckpt-4")

def test_resume_from_checkpoint_equals_uninterrupted(tmp_path):
    full = _trainer(tmp_path / "full", 6)
    full.train(_dataset())
    # Interrupted after the step-3 checkpoint: remove what came later, as if killed there. A
    # fresh trainer continues from it, including the data position (the iterator state).
    part_dir = tmp_path / "part"
    _trainer(part_dir, 6).train(_dataset())
    for name in os.listdir(part_dir):
        if name.startswith("ckpt-6"):
            os.remove(part_dir / name)
    tf.compat.v1.train.update_checkpoint_state(str(part_dir), str(part_dir / "ckpt-3"))
    resumed = _trainer(part_dir, 6, model=_model(seed=99))  # different init: must be restored
    result = resumed.train(_dataset())
    assert len(result.step_losses) == 3
    for a, b in zip(_weights(full), _weights(resumed)):
        np.testing.assert_array_equal(a, b)
    full_log = step_log.read_step_log(str(tmp_path / "full"))
    part_log = step_log.read_step_log(str(part_dir))
    assert [r["loss"] for r in full_log] == [r["loss"] for r in part_log]


def test_gradient_accumulation_matches_whole_batch(tmp_path):
    whole = _trainer(tmp_path / "a", 4, accumulation=1)
    whole.train(_dataset())
    accumulated = _trainer(tmp_path / "b", 4, accumulation=4)
    accumulated.train(_dataset())
    for a, b in zip(_weights(whole), _weights(accumulated)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # Each micro-batch alone would give a different update (the weighted mean matters).
    log_a = step_log.read_step_log(str(tmp_path / "a"))
    log_b = step_log.read_step_log(str(tmp_path / "b"))
    np.testing.assert_allclose([r["loss"] for r in log_a], [r["loss"] for r in log_b],
                               rtol=1e-5)


@pytest.mark.parametrize("name", optimizers.OPTIMIZERS)
def test_xla_step_and_fused_update_match_op_by_op(tmp_path, name):
    """use_xla (the whole replica step compiled, micro-batch loop included) and fuse_optimizer
    (clipping + update compiled) give the op-by-op step's losses and weights up to XLA's float
    rounding (fused arithmetic, reduction order), with 2 micro-batches per update."""

    def train(folder, **kwargs):
        optimizer = optimizers.create_optimizer(0.05, 4, 2, optimizer=name)
        trainer = _trainer(tmp_path / folder, 4, accumulation=2, optimizer=optimizer,
                           save_every=4, loop=4, **kwargs)
        result = trainer.train(_dataset())
        return result.step_losses, _weights(trainer)

    losses, weights = train("op_by_op")
    for folder, kwargs in (("xla", {"use_xla": True}), ("fused", {"fuse_optimizer": True})):
        other_losses, other_weights = train(folder, **kwargs)
        np.testing.assert_allclose(other_losses, losses, rtol=1e-5, err_msg=folder)
        for a, b in zip(other_weights, weights):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=folder)
    initial = [v.numpy() for v in _model().trainable_variables]
    assert all(np.abs(a - b).max() > 1e-3 for a, b in zip(weights, initial))  # it trained


def test_fp16_loss_scaling_and_bf16_policy(tmp_path):
    try:
        precision = strategies.set_precision("fp16")
        assert precision.loss_scale == "dynamic" and precision.compute_dtype == "float16"
        model = _model()
        assert model.layers[1].compute_dtype == "float16"
        optimizer = optimizers.create_optimizer(0.05, 5, 1, loss_scale=precision.loss_scale)
        trainer = _trainer(tmp_path / "fp16", 5, optimizer=optimizer, model=model)
        result = trainer.train(_dataset())
        assert np.all(np.isfinite(result.step_losses))
        # Dynamic scale: starts at 2^15, halves on an fp16 overflow (that update is skipped).
        assert float(optimizer.loss_scale) in [2.0 ** e for e in range(10, 16)]
        assert result.step_losses[-1] < result.step_losses[0]
        precision = strategies.set_precision("bf16")
        assert precision.loss_scale is None and precision.compute_dtype == "bfloat16"
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    finally:
        strategies.set_precision(None)
    assert keras.mixed_precision.global_policy().name == "float32"


def test_evaluate_streaming_means():
    model = _model()
    data = _data()

    def metrics_fn(outputs, batch):
        err = tf.reduce_sum(tf.square(outputs - batch["y"]), axis=-1)
        return {"wmse": (tf.reduce_sum(batch["w"] * err), tf.reduce_sum(batch["w"])),
                "batches": (tf.constant(1.0), tf.constant(1.0))}

    result = evaluation.evaluate(model, _dataset(), metrics_fn, 3,
                                 model_inputs=lambda b: b["x"], progress=False)
    pred = model.predict(data["x"][:24], verbose=0)
    err = ((pred - data["y"][:24]) ** 2).sum(-1)
    assert result["wmse"] == pytest.approx((data["w"][:24] * err).sum() / data["w"][:24].sum(),
                                           rel=1e-5)
    assert result["batches"] == 1.0


def test_objective_must_declare_its_logs(tmp_path):
    class Undeclared(RegressionObjective):
        log_names = ()

    config = TrainerConfig(str(tmp_path), 2, steps_per_loop=1)
    trainer = Trainer(_model(), optimizers.create_optimizer(0.1, 2, 0),
                      Undeclared(), None, config)
    with pytest.raises(ValueError, match="log_names"):
        trainer.train(_dataset())


def _dropout_model(seed=1):
    from modeling.layers.dropout import Dropout

    keras.utils.set_random_seed(seed)
    inputs = keras.Input((DIM,))
    hidden = Dropout(0.1)(keras.layers.Dense(8, activation="tanh", name="dense")(inputs))
    return keras.Model(inputs, keras.layers.Dense(2, name="out")(Dropout(0.1)(hidden)))


def test_resume_without_an_input_state_skips_the_batches_consumed(tmp_path, monkeypatch):
    """Where the input's state is not saved (a TPU's per-host input; a checkpoint of another
    worker count or an older run), the resumed run skips the global batches consumed: the same
    bits as an uninterrupted run on a deterministic pipeline."""
    from modeling.training.backends.tensorflow import steps

    full = _trainer(tmp_path / "full", 6)
    full.train(_dataset())
    monkeypatch.setattr(steps.Trainer, "_can_save_iterator", lambda self: False)
    part_dir = tmp_path / "part"
    _trainer(part_dir, 6).train(_dataset())
    names = tf.train.load_checkpoint(str(part_dir / "ckpt-3")).get_variable_to_shape_map()
    assert not any(name.startswith("iterator/") for name in names)
    _forget_checkpoints_after(part_dir, 3)
    resumed = _trainer(part_dir, 6, model=_model(seed=99))
    said = []  # its log lines (not caplog: an earlier test's absl handler may keep them)
    monkeypatch.setattr(steps.logging, "info", lambda msg, *args: said.append(msg % args))
    result = resumed.train(_dataset())
    assert len(result.step_losses) == 3
    assert any("skipping the 3 global batches consumed" in line for line in said), said
    for a, b in zip(_weights(full), _weights(resumed)):
        np.testing.assert_array_equal(a, b)


def test_iterator_input_skips_records_by_the_global_batch(tmp_path):
    """``IteratorInput.open`` by the input contract's record count (no saved state): whole
    global batches skipped; batches of no static size cannot be skipped by records."""
    from bert_common.errors import InputError
    from modeling.training.backends.tensorflow.steps import IteratorInput

    trainer = _trainer(tmp_path, 4)
    first = next(IteratorInput(trainer, _dataset()).open(None, records=0))
    third = next(IteratorInput(trainer, _dataset()).open(None, records=16))
    np.testing.assert_array_equal(third["x"], _data()["x"][16:24])
    assert not np.array_equal(first["x"], third["x"])
    ragged = tf.data.Dataset.from_tensor_slices(_data()).repeat().batch(8)  # no static size
    data = IteratorInput(trainer, ragged)
    data.saves_state = False  # as on a TPU: the checkpoint holds no input state to read
    with pytest.raises(InputError, match="no static size"):
        data.open(str(tmp_path / "ckpt-2"), records=16)


def _forget_checkpoints_after(model_dir, step, prefix="ckpt"):
    """As if the run was killed right after its step-``step`` checkpoint."""
    for name in os.listdir(model_dir):
        if name.startswith("%s-" % prefix) and int(name.split("-")[1].split(".")[0]) > step:
            os.remove(os.path.join(model_dir, name))
    newest = os.path.join(str(model_dir), "%s-%d" % (prefix, step))
    tf.compat.v1.train.update_checkpoint_state(str(model_dir), newest)


@pytest.mark.parametrize("fused_kernels", [False, True], ids=["tf_ops", "fused_kernels"])
def test_resume_with_dropout_is_bit_exact(tmp_path, fused_kernels):
    """Dropout 0.1: the dropout layers' seed-generator states are in the checkpoint, so a run
    resumed after its step-3 checkpoint draws the masks of steps 4-6 that the uninterrupted run
    drew (restored over a model whose generators were seeded differently) and ends with the
    same bits; on the fused CPU dropout kernel (keyed by the same seeds) too."""

    def trainer(folder, seed=1):
        return _trainer(tmp_path / folder, 6, model=_dropout_model(seed),
                        fused_kernels=fused_kernels)

    full = trainer("full")
    full.train(_dataset())
    part = trainer("part")
    part.train(_dataset())
    _forget_checkpoints_after(tmp_path / "part", 3)
    resumed = trainer("part", seed=99)  # other weights and dropout seeds: must be restored
    assert len(resumed.train(_dataset()).step_losses) == 3
    for a, b in zip(_weights(full), _weights(resumed)):
        np.testing.assert_array_equal(a, b)
    full_log = step_log.read_step_log(str(tmp_path / "full"))
    part_log = step_log.read_step_log(str(tmp_path / "part"))
    assert [r["loss"] for r in full_log] == [r["loss"] for r in part_log]
    # Dropout was on (the weights differ from a run without it) and advanced per step.
    plain = _trainer(tmp_path / "plain", 6, model=_model())
    plain.train(_dataset())
    assert any(np.abs(a - b).max() > 1e-4 for a, b in zip(_weights(full), _weights(plain)))


def test_checkpoint_without_dropout_seeds_still_resumes(tmp_path, caplog):
    """A checkpoint written before the seed states were saved restores (weights, optimizer,
    data position) with a warning; dropout goes on from the new run's seeds, and the next
    checkpoints hold them."""
    old = _trainer(tmp_path, 4, model=_dropout_model())
    old._rng = None  # as the previous version wrote checkpoints
    old.train(_dataset())
    _forget_checkpoints_after(tmp_path, 3)
    assert not [n for n, _ in tf.train.list_variables(str(tmp_path / "ckpt-3"))
                if n.startswith("rng/")]
    resumed = _trainer(tmp_path, 4, model=_dropout_model(seed=99))
    with caplog.at_level("WARNING"):
        assert len(resumed.train(_dataset()).step_losses) == 1
    assert "holds no dropout RNG state" in caplog.text
    assert resumed.global_step == 4
    names = [n for n, _ in tf.train.list_variables(str(tmp_path / "ckpt-4"))]
    assert "rng/seed_states/1/.ATTRIBUTES/VARIABLE_VALUE" in names


def test_loop_lengths_follow_the_clock_on_one_host_and_are_fixed_across_workers():
    config = TrainerConfig("unused", 100, steps_per_loop=20, save_checkpoints_steps=30,
                           progress_every_s=30.0)
    assert loop_steps(0, config, 0.0) == 1  # the loop that traces the step
    assert loop_steps(1, config, 0.5) == 20  # 20 steps in 10 s: a line well within 30 s
    assert loop_steps(1, config, 3.0) == 10  # cut to a progress line every 30 s
    assert loop_steps(21, config, 0.5) == 9  # ends at the checkpoint (step 30)
    assert loop_steps(95, config, 0.5) == 5  # and at num_train_steps
    # Workers (clock None): the fixed lengths, whatever each one's own time per step.
    assert [loop_steps(s, config, None) for s in (0, 20, 30, 50, 60, 90)] == [20, 10, 20, 10,
                                                                              20, 10]
