"""Numeric bounds of the suite, measured: each check's difference is recorded when asked.

A numeric test compares a result with its reference (a golden output of the original code, or
the faithful twin of a fast path) within a bound. The bound is the float noise measured under
every instruction set users' CPUs have (oneDNN, Eigen and XLA pick other kernels on AVX2 than on
AVX-512/AMX, with other sums and roundings), times a stated margin. ``within`` asserts a bound
and, with ``$BERT_NOISE_LOG`` set to a file, appends the difference it saw there, one JSON line
per check: ``python -m tests.support.measure_noise`` runs the numeric tests under each
instruction-set cap and thread count that way and prints the worst difference per check beside
its bound (docs/testing.md has the table and the margins).

Example:
    >>> from tests.support import noise
    >>> noise.within("example/sum", abs(0.1 + 0.2 - 0.3), 1e-15)
"""

from __future__ import annotations

import json
import os


def config_name() -> str:
    """The instruction-set cap and thread count this process runs under, as a short name
    (``default``, ``AVX2``, ``default/1 thread``...)."""
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA") or "default"
    threads = os.environ.get("TF_NUM_INTRAOP_THREADS")
    return isa + ("/%s thread" % threads if threads else "")


def record(check: str, diff: float, bound: float) -> None:
    """Appends ``{"check", "diff", "bound", "config"}`` to ``$BERT_NOISE_LOG`` (if set).

    Args:
        check: the check's name, ``<what>/<quantity>``.
        diff: the difference measured.
        bound: the bound it is held to.
    """
    path = os.environ.get("BERT_NOISE_LOG")
    if not path:
        return
    line = json.dumps({"check": check, "diff": float(diff), "bound": float(bound),
                       "config": config_name()})
    with open(path, "a") as f:  # one short write per line: workers may append together
        f.write(line + "\n")


def within(check: str, diff: float, bound: float) -> None:
    """Records ``diff`` (see ``record``), then asserts ``diff <= bound``.

    Args:
        check: the check's name, ``<what>/<quantity>``.
        diff: the difference measured (a max |a - b|, or a relative one).
        bound: the bound: measured noise times the margin.
    """
    record(check, diff, bound)
    assert float(diff) <= bound, "%s: %.4g above its bound %.4g" % (check, float(diff), bound)


def allclose(check: str, actual, desired, rtol: float, atol: float) -> None:
    """``numpy.testing.assert_allclose(actual, desired, rtol, atol)``, recorded as the worst
    ``|actual - desired| / (atol + rtol |desired|)`` against the bound 1 (see ``record``).

    Args:
        check: the check's name.
        actual: the result.
        desired: its reference.
        rtol: the relative tolerance.
        atol: the absolute tolerance.
    """
    import numpy as np

    a = np.asarray(actual, np.float64)
    d = np.asarray(desired, np.float64)
    record(check, float(np.max(np.abs(a - d) / (atol + rtol * np.abs(d)), initial=0.0)), 1.0)
    np.testing.assert_allclose(a, d, rtol=rtol, atol=atol, err_msg=check)


# The bounds shared by several tests (the measurements behind them: docs/testing.md).
# MiniLM's golden (6 layers, hidden 384, |sequence_output| up to 6) through TensorFlow: worst
# measured 1.74e-5 (the original's own noise floor, oneDNN on against off: 1.69e-5); 2.9x that.
MINILM_GOLDEN_BOUND = 5e-5
# ... through JAX (XLA's CPU kernels: its own tanh and exp approximations): 3.7e-5 on an AVX-512
# CPU under every cap, 5.75e-5 on an AVX2-only AMD EPYC (Zen 3); twice the worst.
JAX_MINILM_GOLDEN_BOUND = 2 * 5.75e-5
# bfloat16 encoders (tiny_wide_init, activations up to ~10) against the float32 one: worst
# measured 0.071 (the XLA-compiled model), 0.062 op by op on AVX2 (Eigen's bfloat16 matmuls),
# 0.036 with oneDNN's; 3.5x the worst.
BF16_ENCODER_BOUND = 0.25
