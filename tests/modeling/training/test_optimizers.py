"""modeling/training/optimizers.py and modeling/training/schedules.py against ../shared/golden/optimization/.

The golden files (README section 4) hold 20 steps of the original ``create_optimizer`` on two
experiments: ``model`` (a tiny gather + dense + LayerNorm model: the embedding gradient is an
IndexedSlices) and ``fixed_grads`` (the gradients are fed). We rebuild the same variables as
Keras variables whose paths carry the original names, run our optimizer and compare the learning
rate, the global norm, every parameter and both Adam slots after every step.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from modeling.training import schedules
from modeling.training import optimizers
from tests import paths
from tests.support import noise

OPT_DIR = os.path.join(paths.GOLDEN, "optimization")
VAR_NAMES = ["tiny/word_embeddings", "tiny/dense/kernel", "tiny/dense/bias", "tiny/output/kernel",
             "tiny/layer_norm_scale", "tiny/unbiased_weight", "tiny/LayerNorm/beta",
             "tiny/LayerNorm/gamma"]
RTOL, ATOL = 1e-6, 1e-9
# The ``model`` experiment's gradients come from this test's own forward pass, whose matmuls
# (Eigen's contractions call oneDNN's sgemm, whatever TF_ENABLE_ONEDNN_OPTS says) follow the
# CPU's instruction set. On AVX-512 they are the golden's bits and so is every step; on AVX2
# (capped, and on an AVX2-only AMD EPYC) they are ~1e-7 relative off, and Adam carries that
# into a slot element whose gradient is near zero at far more than 1e-6 of its own size. So
# that experiment is held per variable to MODEL_RTOL of the variable's largest value: worst
# measured 2.26e-6 (adam_m, AVX2; 0 on AVX-512 with 1 thread or 2), twice that.
MODEL_RTOL = 2 * 2.26e-6


def _summary():
    with open(os.path.join(OPT_DIR, "summary.json")) as f:
        return json.load(f)


def _golden(experiment):
    return dict(np.load(os.path.join(OPT_DIR, experiment + ".npz")))


def _make_variables(golden):
    """Keras variables named like the golden ones (``variable.path`` == the TF1 name)."""
    variables = {}
    for name in VAR_NAMES:
        *scopes, leaf = name.split("/")

        def create(scopes=scopes, leaf=leaf, name=name):
            if not scopes:
                return keras.Variable(golden["init/" + name], name=leaf)
            with keras.name_scope(scopes[0]):
                return create(scopes[1:], leaf, name)

        variables[name] = create()
        assert variables[name].path == name
    return variables


def _misfit(actual, expected, what, check, rtol=RTOL, normwise=False):
    """Why |actual - expected| <= rtol |expected| + ATOL fails somewhere (``normwise``: rtol
    max|expected| + ATOL), or None; records (tests/support/noise.py) the smallest rtol that
    would pass under ``check``."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    diff = np.abs(actual - expected)
    scale = np.max(np.abs(expected)) if normwise else np.abs(expected)
    needed = np.max(np.maximum(diff - ATOL, 0.0) / np.maximum(scale, 1e-30))
    noise.record(check, needed, rtol)
    excess = diff - (rtol * scale + ATOL)
    if np.all(excess <= 0):
        return None
    return "%s: max |diff| %.3g (worst excess %.3g)" % (what, np.max(diff), np.max(excess))


def _model_loss(v, ids, x, y, scale):
    """The golden ``model`` experiment's forward pass (README section 4)."""
    h = tf.gather(v["tiny/word_embeddings"], ids) + x  # [B, 4]
    h = tf.matmul(h, v["tiny/dense/kernel"]) + v["tiny/dense/bias"]  # [B, 3]
    mean, variance = tf.nn.moments(h, axes=[-1], keepdims=True)  # [B, 1]
    h = tf.nn.batch_normalization(h, mean, variance, v["tiny/LayerNorm/beta"],
                                  v["tiny/LayerNorm/gamma"], 1e-12)  # [B, 3]
    out = (tf.matmul(h, v["tiny/output/kernel"]) * v["tiny/layer_norm_scale"]
           + v["tiny/unbiased_weight"])  # [B, 2]
    return scale * tf.reduce_mean(tf.square(out - y))


def _replay(experiment, compiled):
    golden = _golden(experiment)
    rtol = MODEL_RTOL if experiment == "model" else RTOL
    misfits = []  # every step is compared (and recorded) before the test fails

    def close(actual, expected, what, kind):
        misfit = _misfit(actual, expected, what, "optimization/%s/%s" % (experiment, kind), rtol,
                         normwise=experiment == "model")
        if misfit:
            misfits.append(misfit)

    args = _summary()["args"]
    variables = _make_variables(golden)
    var_list = [variables[n] for n in VAR_NAMES]
    opt = optimizers.create_optimizer(args["init_lr"], args["num_train_steps"],
                                        args["num_warmup_steps"])
    opt.build(var_list)

    def model_step(ids, x, y, scale):
        with tf.GradientTape() as tape:
            loss = _model_loss(variables, ids, x, y, scale)
        grads = tape.gradient(loss, var_list)
        assert isinstance(grads[0], tf.IndexedSlices)  # the gather gradient stays sparse
        stats = opt.clip_and_apply(grads, var_list)
        return loss, stats["global_norm"]

    def fixed_step(grads):
        stats = opt.clip_and_apply(grads, var_list)
        return tf.constant(0.0), stats["global_norm"]

    step_fn = model_step if experiment == "model" else fixed_step
    if compiled:
        step_fn = tf.function(step_fn)
    steps = len(golden["lr"])
    for t in range(steps):
        # The rate this update will use, read before apply_gradients.
        assert np.float32(float(opt.learning_rate)) == golden["lr"][t], t
        if experiment == "model":
            loss, norm = step_fn(golden["input/ids"][t], golden["input/x"][t],
                                 golden["input/y"][t], golden["input/scale"][t])
            close(loss, golden["loss"][t], "loss step %d" % t, "loss")
        else:
            _, norm = step_fn([tf.constant(golden["input/" + n][t]) for n in VAR_NAMES])
        close(norm, golden["global_norm"][t], "global norm step %d" % t, "global_norm")
        for name in VAR_NAMES:
            m, v, _ = opt.slots(opt.variable_index(variables[name]))
            close(variables[name].numpy(), golden["param_after/" + name][t],
                  "%s after step %d" % (name, t), "params")
            close(m.numpy(), golden["adam_m_after/" + name][t],
                  "%s adam_m after step %d" % (name, t), "adam_m")
            close(v.numpy(), golden["adam_v_after/" + name][t],
                  "%s adam_v after step %d" % (name, t), "adam_v")
        assert int(opt.iterations) == t + 1
    assert not misfits, "%d misfits, the first: %s" % (len(misfits), misfits[0])
    return golden


def test_model_experiment_matches_golden():
    """Run in a fresh process with oneDNN off, as the golden run: on an AVX-512 CPU the
    harness's own matmul and LayerNorm gradients (not the optimizer) then match the original bit
    for bit; on AVX2 they are off by MODEL_RTOL's noise. With oneDNN on, the *harness* gradients
    differ by more float noise (~1e-6 relative, on every step)."""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="3")
    code = ("from tests.modeling.training.test_optimizers import _replay; "
            "g = _replay('model', compiled=True); "
            "assert (g['global_norm'] > 1).any() and (g['global_norm'] < 1).any(); print('OK')")
    # (a long timeout: in make test's AVX2 pass this file runs beside the suite at the lowest
    # CPU priority, and its process may wait for a core for most of the suite's time)
    proc = subprocess.run([sys.executable, "-c", code], cwd=paths.ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_indexed_slices_norm_counts_each_occurrence():
    """The clip norm of a gather gradient counts repeated ids separately (as the original)."""
    table = keras.Variable(np.zeros([4, 2], np.float32), name="word_embeddings")
    opt = optimizers.create_optimizer(1e-3, 10, 0)
    opt.build([table])
    values = tf.constant([[3.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    grad = tf.IndexedSlices(values, tf.constant([1, 1, 2]), tf.constant([4, 2]))
    stats = opt.clip_and_apply([grad], [table])
    assert float(stats["global_norm"]) == pytest.approx(np.sqrt(9 + 9 + 16))  # not sqrt(36+16)
    # Densified after clipping: row 1 got both occurrences, clipped by the per-occurrence norm.
    scale = 1.0 / np.sqrt(34.0)
    np.testing.assert_allclose(opt.slots(0)[0].numpy()[1], [0.1 * 6.0 * scale, 0.0], rtol=1e-6)


def test_fixed_grads_experiment_matches_golden():
    _replay("fixed_grads", compiled=True)


def test_weight_decay_exclusions_match_golden_names():
    expected = _summary()["model"]["weight_decay_applied"]
    for name, applied in expected.items():
        assert optimizers.uses_weight_decay(name) == applied, name
    # Anywhere in the name, as re.search: "unbiased_weight" contains "bias".
    assert not optimizers.uses_weight_decay("encoder/layer_0/output/dense/bias")
    assert optimizers.uses_weight_decay("encoder/layer_0/output/dense/kernel")
    assert not optimizers.uses_weight_decay("kernel", weight_decay_rate=0.0)


def test_decay_flags_read_variable_path():
    golden = _golden("model")
    variables = _make_variables(golden)
    opt = optimizers.create_optimizer(1e-3, 10, 1)
    opt.build(list(variables.values()))
    expected = _summary()["model"]["weight_decay_applied"]
    assert {n: opt.decays(v) for n, v in variables.items()} == expected


def test_schedule_one_step_ahead_and_corrected():
    golden = _golden("model")
    args = _summary()["args"]
    ahead = schedules.BertSchedule(args["init_lr"], args["num_train_steps"],
                                      args["num_warmup_steps"])
    corrected = schedules.BertSchedule(args["init_lr"], args["num_train_steps"],
                                          args["num_warmup_steps"], one_step_ahead=False)
    for t in range(len(golden["lr"])):
        assert np.float32(ahead(t)) == golden["lr"][t]
        assert np.float32(corrected(t)) == golden["lr_schedule_at_global_step_before"][t]
    # Past the end the rate stays 0; the config round-trips.
    assert float(ahead(1000)) == 0.0
    again = schedules.BertSchedule.from_config(corrected.get_config())
    assert not again.one_step_ahead and float(again(3)) == float(corrected(3))


def test_corrected_schedule_first_update_is_noop_for_params():
    """With one_step_ahead=False the first update uses lr 0: params unchanged, slots filled."""
    var = keras.Variable(np.ones([3], np.float32), name="kernel")
    opt = optimizers.create_optimizer(1e-3, 10, 2, one_step_ahead=False)
    opt.apply_gradients([(tf.constant([0.1, -0.2, 0.3]), var)])
    np.testing.assert_array_equal(var.numpy(), np.ones(3, np.float32))
    assert np.all(opt.slots(0)[0].numpy() != 0)


def test_lamb_trust_ratio_and_exclusion():
    kernel = keras.Variable(np.full([4], 2.0, np.float32), name="kernel")
    bias = keras.Variable(np.full([4], 2.0, np.float32), name="bias")
    opt = optimizers.create_optimizer(0.1, 100, 0, optimizer="lamb", one_step_ahead=False)
    opt.build([kernel, bias])
    opt.iterations.assign(50)
    lr = float(opt.learning_rate)
    g = tf.constant([0.5, -0.5, 0.5, -0.5])
    opt.apply_gradients([(g, kernel), (g, bias)])
    # Bias correction at t = 51 (zero slots before); the decayed kernel adds 0.01 * param.
    t = 51
    m_hat = 0.1 * g.numpy() / (1 - 0.9 ** t)
    v_hat = 0.001 * g.numpy() ** 2 / (1 - 0.999 ** t)
    direction = m_hat / (np.sqrt(v_hat) + 1e-6)
    update_k = direction + 0.01 * 2.0
    ratio = np.linalg.norm(np.full(4, 2.0)) / np.linalg.norm(update_k)
    np.testing.assert_allclose(kernel.numpy(), 2.0 - lr * ratio * update_k, rtol=1e-6)
    np.testing.assert_allclose(bias.numpy(), 2.0 - lr * direction, rtol=1e-6)


def test_dynamic_loss_scale_skips_nonfinite_and_halves():
    var = keras.Variable(np.ones([2], np.float32), name="kernel")
    opt = optimizers.create_optimizer(1e-2, 10, 0, loss_scale="dynamic")
    opt.build([var])
    scale0 = float(opt.loss_scale)
    assert float(opt.scale_loss(tf.constant(2.0))) == 2.0 * scale0
    stats = opt.clip_and_apply([tf.constant([np.inf, 1.0])], [var])
    assert not bool(stats["grads_finite"])
    np.testing.assert_array_equal(var.numpy(), [1.0, 1.0])  # skipped
    assert float(opt.loss_scale) == scale0 / 2
    # A finite, scaled gradient is unscaled before clipping: same result as without scaling.
    ref_var = keras.Variable(np.ones([2], np.float32), name="kernel")
    ref = optimizers.create_optimizer(1e-2, 10, 0)
    ref.build([ref_var])
    ref.iterations.assign(1)
    g = tf.constant([0.3, -0.4])
    opt.apply_gradients([(g * float(opt.loss_scale), var)])
    ref.apply_gradients([(g, ref_var)])
    np.testing.assert_allclose(var.numpy(), ref_var.numpy(), rtol=1e-7)


def test_bad_arguments():
    with pytest.raises(ValueError, match="optimizer"):
        optimizers.create_optimizer(1e-3, 10, 1, optimizer="sgd")
    with pytest.raises(ValueError, match="gradient_reduction"):
        optimizers.AdamWeightDecay(1e-3, gradient_reduction="average")
    with pytest.raises(ValueError, match="num_train_steps"):
        schedules.BertSchedule(1e-3, 0, 0)


def test_schedule_matches_trajectory_lr_used():
    traj = np.load(os.path.join(paths.GOLDEN, "pretraining_trajectory", "trajectory.npz"))
    schedule = schedules.BertSchedule(1e-3, 40, 4)  # README section 7 settings
    used = np.array([np.float32(schedule(t)) for t in range(40)])
    np.testing.assert_array_equal(used, traj["lr_used"])


def _tf1_graph_schedule(init_lr, n, w):
    """The original's schedule ops in a TF1 graph run by a Session (graph optimizer on)."""
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        step = tf1.train.get_or_create_global_step()
        lr = tf1.train.polynomial_decay(tf.constant(init_lr, tf.float32), step, n,
                                        end_learning_rate=0.0, power=1.0, cycle=False)
        if w:
            step_int = tf.cast(step, tf.int32)
            w_int = tf.constant(w, tf.int32)
            warm = init_lr * (tf.cast(step_int, tf.float32) / tf.cast(w_int, tf.float32))
            is_warm = tf.cast(step_int < w_int, tf.float32)
            lr = (1.0 - is_warm) * lr + is_warm * warm
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            values = []
            for t in range(n + 2):
                step.load(t, sess)
                values.append(sess.run(lr))
    return np.float32(values)


def test_schedule_rounds_like_the_tf1_graph():
    """The schedule graph of the original, run in a TF1 session (graph optimizer on), gives
    exactly our float32 values, including configs where naive division rounds differently."""
    configs = [[5e-5, 300, 13], [2e-5, 100, 10], [3e-5, 50, 17], [1e-4, 7, 0], [1e-3, 3, 1]]
    naive_differs = False
    for init_lr, n, w in configs:
        values = _tf1_graph_schedule(init_lr, n, w)
        ours = schedules.BertSchedule(init_lr, n, w, one_step_ahead=False)
        for t, value in enumerate(values):
            assert np.float32(ours(t)) == np.float32(value), (init_lr, n, w, t)
            naive = np.float32(init_lr) * (np.float32(1) - np.float32(min(t, n)) / np.float32(n))
            if t >= w and naive != np.float32(value):
                naive_differs = True
    assert naive_differs  # the test discriminates the rounding
