"""modeling.optimization.AdamWeightDecayOptimizer: the original's class name and constructor,
the original's update computed here with numpy (no bias correction, eps outside the sqrt,
decoupled decay skipped by name, no clipping inside the optimizer)."""

import keras
import numpy as np
import tensorflow as tf

from modeling import optimization


def _variables():
    rng = np.random.default_rng(0)
    return [keras.Variable(rng.normal(size=(3, 2)).astype(np.float32), name="dense_kernel"),
            keras.Variable(rng.normal(size=(2,)).astype(np.float32), name="LayerNorm_gamma")]


def _original(params, grads_per_step, lr, rate, excluded):
    """The original AdamWeightDecayOptimizer.apply_gradients, step by step, in float64."""
    params = [p.astype(np.float64) for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for grads in grads_per_step:
        for i, g in enumerate(grads):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            update = m[i] / (np.sqrt(v[i]) + 1e-6)
            if rate and not excluded[i]:
                update = update + rate * params[i]
            params[i] = params[i] - lr * update
    return params


def test_the_original_update_with_decay_excluded_by_name_and_no_clipping():
    variables = _variables()
    start = [v.numpy() for v in variables]
    rng = np.random.default_rng(1)
    steps = [[rng.normal(scale=5.0, size=v.shape).astype(np.float32) for v in variables]
             for _ in range(3)]  # global norm ~15: clipping at 1.0 would change everything
    optimizer = optimization.AdamWeightDecayOptimizer(
        0.1, weight_decay_rate=0.01, exclude_from_weight_decay=["LayerNorm", "bias"])
    for grads in steps:
        optimizer.apply_gradients(zip([tf.constant(g) for g in grads], variables))
    expected = _original(start, steps, 0.1, 0.01, excluded=[False, True])
    for got, want in zip(variables, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-6)


def test_the_original_defaults_no_decay_and_the_same_update_as_adam_weight_decay():
    optimizer = optimization.AdamWeightDecayOptimizer(0.05)
    assert (optimizer.weight_decay_rate, optimizer.beta_1, optimizer.beta_2, optimizer.epsilon,
            optimizer.exclude_patterns, optimizer.clip_norm) == (0.0, 0.9, 0.999, 1e-6, (), None)
    ours = _variables()
    same = _variables()
    twin = optimization.AdamWeightDecay(0.05, weight_decay_rate=0.0, clip_norm=None)
    grads = [tf.constant(np.full(v.shape, 3.0, np.float32)) for v in ours]
    optimizer.apply_gradients(zip(grads, ours))
    twin.apply_gradients(zip(grads, same))
    for a, b in zip(ours, same):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # one implementation
    config = optimizer.get_config()
    again = optimization.AdamWeightDecayOptimizer.from_config(config)
    assert again.clip_norm is None and again.weight_decay_rate == 0.0
