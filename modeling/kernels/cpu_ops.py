"""CPU kernels of the training step (and of LayerNorm in prediction), compiled on first use:
dropout, the attention's softmax + dropout, LayerNorm, GELU (bfloat16), AdamWeightDecay.

On a CPU, the BERT-base pre-training step spends ~80% of its time in oneDNN matmuls that already
run near the machine's peak; most of the rest went to memory-bound ops that TensorFlow runs one
pass per elementwise op: dropout (a Philox draw, a compare, a multiply and a select, forward and
again backward), LayerNorm (~10 ops forward, ~15 backward) and the optimizer update (even
XLA-fused, about 1.5 times the memory traffic of one pass; docs/benchmarks.md has the
measured figures). ``modeling/kernels/bert_cpu_ops.cc`` does each in one multi-threaded pass:

* ``dropout(x, rate, seed)`` [any shape] float32 or bfloat16 -> y = x * (1 / (1 - rate)) where
  kept, else 0,
  as ``tf.nn.experimental.stateless_dropout``. The keep decisions come from Philox4x32-10 (the
  generator of TensorFlow's stateless ops) keyed by the 2-element int64 ``seed``; element e is
  dropped iff its 32-bit word < ceil(rate * 2^32), so P(drop) = rate up to 2^-32 (TensorFlow's
  float draw: 2^-23). The random stream is not TensorFlow's: same distribution, other masks.
  The mask is kept as uint8 for the backward pass (dx = dy * (1 / (1 - rate)) where kept).
* ``attention_probs(scores, bias, scale, rate, seed)`` scores [B, N, F, T], bias [B, 1, 1, T]:
  the attention's ``dropout(softmax(scores * scale + bias))`` in one pass per row (float32
  inside, the probabilities rounded once), and its gradient in one pass (the softmax gradient
  through the dropout mask, times the scale), instead of five ops forward and six backward. Its
  dropout is ``dropout`` above on these probabilities: same seed, same mask, same values.
* ``layer_norm(x, gamma, beta, epsilon)`` x [..., H] float32 or bfloat16, gamma/beta [H] float32:
  the original's formula ``x * inv + (beta - mean * inv)``, inv = rsqrt(var + eps) * gamma, with
  mean and variance over H (two passes: equal to ``modeling.layers.layer_norm`` up to float
  rounding, ~1e-6 in float32; a bfloat16 result can differ by one bfloat16 rounding).
  The backward pass is the analytic LayerNorm gradient, with dgamma/dbeta summed per block of
  rows in a fixed order (the result does not depend on the thread count).
* ``gelu(z)`` / ``gelu_grad(z, dy)`` [..., units] float32 or bfloat16: the tanh GELU and
  ``dy * gelu'(z)`` in the sigmoid form of ``modeling/kernels/gelu_dense.py``, one pass each
  (the sigmoid as Eigen's vectorised logistic); the gradient pass also sums dz over the leading
  axes in float32 (the bias gradient, per block of rows in a fixed order). ``gelu_dense`` uses
  them on bfloat16, where XLA's CPU kernels convert element by element; float32 keeps XLA's
  kernels (equal to these within float rounding, tested).
* ``adam_weight_decay_apply(var, m, v, grad, lr, grad_scale, ...)``: the update of
  ``optimizers.AdamWeightDecay`` on one variable and its slots in place, with the clipping
  factor of ``tf.clip_by_global_norm`` applied on the fly (g' = g * grad_scale). Compiled
  without fused multiply-add, every element is rounded as TensorFlow's op-by-op update rounds it:
  the result is bit-identical to the unfused path (tested). Like TensorFlow's ``ApplyAdam``, a
  variable whose buffer is still shared with a live read is copied before the update.

On bfloat16 activations (``--mixed_precision=bf16``) the activation kernels read bfloat16,
compute in float32 and round the result to bfloat16 once, as TensorFlow's LayerNorm path here does
(``modeling.layers.layer_norm``: statistics in float32); TensorFlow's bfloat16 dropout multiplies
by the scale rounded to bfloat16 (1/0.9 -> 1.109375), these kernels by the float32 scale.

They are used only under ``switch.Kernels(training=True)`` (the trainer's ``fused_kernels``,
``run_pretraining --xla_kernels``) for float32 and bfloat16 activations, by the optimizer's
``clip_and_apply(..., cpu_kernel=True)`` (float32 variables), and LayerNorm's forward under
``switch.Kernels(inference=True)`` (prediction and evaluation on a CPU); exports, ``--deterministic`` training and other dtypes keep TensorFlow's
ops.

Every sum over a row (LayerNorm's statistics and gradient, the softmax's normaliser and its
gradient's dot product) runs in one fixed order of 16 partial sums (``LaneSum`` in the source),
not in the order of the vector width the build picks: LayerNorm and the gradients give the same
bits on an AVX2 CPU as on an AVX-512 one, and the bfloat16 kernels the float32 kernels' sums (the
softmax's exp is Eigen's vectorised one, whose last bit can differ between the two ISAs).

Building: ``load()`` compiles the source with the C++ compiler (``$CXX``, else ``g++``) against
the installed TensorFlow's headers (``tf.sysconfig``), for this CPU (``-march=native``;
``$BERT_TF2_KERNEL_MARCH`` names another ``-march``, e.g. ``x86-64-v3`` for AVX2), into a
cache keyed by the source, TensorFlow's version, the flags and the CPU
(``$BERT_TF2_KERNEL_CACHE``, default ``~/.cache/bert_tf2/kernels``), writing to a temporary name
then renaming. Where that fails (no compiler, no headers), it logs why once and returns None:
training then uses TensorFlow's ops, only slower. ``BERT_TF2_CPU_KERNELS=0`` turns them off.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import threading
from typing import Optional, Tuple

import tensorflow as tf
from absl import logging

from bert_common.atomic import atomic_path

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bert_cpu_ops.cc")
_CXXFLAGS = ["-std=c++17", "-shared", "-fPIC", "-O3", "-ffp-contract=off",
             "-fno-math-errno", "-fopenmp-simd", "-Wno-deprecated-declarations",
             "-Wno-interference-size",
             # TensorFlow's Eigen does not compile with AVX512-FP16 on (Sapphire Rapids and
             # later: "expected initializer before '<'" in PacketMathFP16.h); the kernels use no
             # fp16, so Eigen is told the CPU has none.
             "-U__AVX512FP16__"]


def _cxxflags() -> list:
    """The compiler flags: ``_CXXFLAGS`` and the target CPU (``$BERT_TF2_KERNEL_MARCH``, default
    ``native``)."""
    return _CXXFLAGS + ["-march=" + os.environ.get("BERT_TF2_KERNEL_MARCH", "native")]

_lock = threading.Lock()
_state = {"tried": False, "module": None, "error": None}


def _cpu_signature() -> str:
    """What ``-march=native`` depends on: the CPU model and flags."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [l for l in f if l.startswith(("model name", "flags"))][:2]
        return "".join(lines)
    except OSError:
        return platform.processor() or platform.machine()


def _cache_dir() -> str:
    return os.environ.get("BERT_TF2_KERNEL_CACHE",
                          os.path.join(os.path.expanduser("~"), ".cache", "bert_tf2", "kernels"))


def _compile(cxx: str, target: str) -> None:
    command = ([cxx] + _cxxflags() + tf.sysconfig.get_compile_flags() + [SOURCE, "-o", target]
               + tf.sysconfig.get_link_flags())
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (" ".join(command[:1] + [SOURCE]),
                                                        result.returncode,
                                                        result.stderr.strip()[-2000:]))


def library_path() -> str:
    """Where the compiled library for this source, TensorFlow and CPU lives (built or not)."""
    cxx = os.environ.get("CXX", "g++")
    key = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        key.update(f.read())
    for part in [tf.__version__, cxx, " ".join(_cxxflags()),
                 " ".join(tf.sysconfig.get_compile_flags()),
                 " ".join(tf.sysconfig.get_link_flags()), _cpu_signature()]:
        key.update(part.encode())
    return os.path.join(_cache_dir(), "bert_cpu_ops-%s.so" % key.hexdigest()[:20])


def load():
    """The loaded op library, compiling it if needed; None (reason logged once) if unavailable."""
    with _lock:
        if _state["tried"]:
            return _state["module"]
        _state["tried"] = True
        if os.environ.get("BERT_TF2_CPU_KERNELS", "1") == "0":
            _state["error"] = "disabled by BERT_TF2_CPU_KERNELS=0"
            return None
        try:
            path = library_path()
            if not os.path.exists(path):
                cxx = os.environ.get("CXX", "g++")
                if shutil.which(cxx) is None:
                    raise RuntimeError("no C++ compiler %r on PATH" % cxx)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                print("Compiling the CPU kernels (once per TensorFlow version and CPU, "
                      "~20 s): %s" % path, file=sys.stderr, flush=True)
                # Concurrent first runs each compile into their own temporary; the last
                # rename wins, and no process ever loads a half-written library.
                with atomic_path(path) as tmp:
                    _compile(cxx, tmp)
            _state["module"] = tf.load_op_library(path)
        except Exception as e:  # pylint: disable=broad-except
            _state["error"] = str(e)
            logging.warning("CPU kernels unavailable, using TensorFlow's ops (slower): %s",
                            e)
        return _state["module"]


def unavailable_reason() -> Optional[str]:
    """Why ``load()`` returned None (after it was called), else None."""
    return _state["error"]


def usable(dtype) -> bool:
    """Whether the kernels can take activations of ``dtype`` here (float32 or bfloat16, with the
    library built; the update takes float32 only).

    Args:
        dtype: the activations' dtype (anything ``tf.as_dtype`` takes).

    Returns:
        A bool.
    """
    return tf.as_dtype(dtype) in (tf.float32, tf.bfloat16) and load() is not None


def dropout(x: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """x [...] float32/bfloat16, ``seed`` [2] int -> x / (1 - rate) where kept, else 0 (see
    module).

    Args:
        x: the activations [...], float32 or bfloat16.
        rate: the drop probability.
        seed: the stateless seed [2], int.

    Returns:
        The dropped-out activations, x's shape and dtype.
    """
    ops = load()
    rate = float(rate)
    seed = tf.cast(seed, tf.int64)

    @tf.custom_gradient
    def forward(x):
        y, mask = ops.bert_dropout(x, seed, rate=rate)  # [...] x.dtype, [...] uint8

        def backward(dy):
            return ops.bert_dropout_grad(dy, mask, rate=rate)

        return y, backward

    return forward(x)


def attention_probs(scores: tf.Tensor, bias: tf.Tensor, scale: float, rate: float,
                    seed: tf.Tensor) -> tf.Tensor:
    """scores [B, N, F, T] float32/bfloat16, bias [B, 1, 1, T] (same dtype), ``seed`` [2] int ->
    dropout(softmax(scores * scale + bias), rate) [B, N, F, T] (see module); differentiable in
    ``scores`` (the bias, a function of the input mask, gets no gradient).

    Args:
        scores: the attention scores [B, N, F, T], float32 or bfloat16.
        bias: the additive mask bias [B, 1, 1, T], scores' dtype.
        scale: the factor on the scores (1 / sqrt(head size)).
        rate: the attention dropout probability.
        seed: the stateless seed [2], int.

    Returns:
        The attention probabilities [B, N, F, T], scores' dtype.
    """
    ops = load()
    scale, rate = float(scale), float(rate)
    seed = tf.cast(seed, tf.int64)

    @tf.custom_gradient
    def forward(scores):
        y, probs, mask = ops.bert_attention_probs(scores, bias, seed, scale=scale, rate=rate)

        def backward(dy):
            return ops.bert_attention_probs_grad(dy, probs, mask, scale=scale, rate=rate)

        return y, backward

    return forward(scores)


def layer_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """x [..., H] float32/bfloat16, gamma [H], beta [H] float32 -> LayerNorm over H [..., H] in
    x's dtype (see module).

    Args:
        x: the activations [..., H], float32 or bfloat16.
        gamma: the scale [H], float32.
        beta: the offset [H], float32.
        epsilon: the variance epsilon.

    Returns:
        The normalised activations [..., H], x's dtype.
    """
    ops = load()
    epsilon = float(epsilon)

    @tf.custom_gradient
    def forward(x, gamma, beta):
        y, mean, rstd = ops.bert_layer_norm(x, gamma, beta, epsilon=epsilon)  # [..., H], [N], [N]

        def backward(dy):
            return ops.bert_layer_norm_grad(dy, x, mean, rstd, gamma)  # dx, dgamma, dbeta

        return y, backward

    return forward(x, gamma, beta)


def gelu(z: tf.Tensor) -> tf.Tensor:
    """z [...] float32/bfloat16 -> the tanh GELU of z, same shape and dtype (see module). No
    gradient is registered: ``gelu_dense``'s custom gradient calls ``gelu_grad``.

    Args:
        z: the pre-activations [...], float32 or bfloat16.

    Returns:
        gelu(z), z's shape and dtype.
    """
    return load().bert_gelu(z)


def gelu_grad(z: tf.Tensor, dy: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """z, dy [..., units] float32/bfloat16 (same shape and dtype) -> (dz = dy * gelu'(z) in
    their dtype [..., units], dbias = dz summed over the leading axes in float32 [units]): the
    gradients of ``gelu(z)``, z = x @ kernel + bias, at z and at the bias (see module); not
    differentiable itself (no second derivative).

    Args:
        z: the pre-activations [..., units].
        dy: the upstream gradient [..., units], z's dtype.

    Returns:
        ``(dz, dbias)``: [..., units] in z's dtype and [units] float32.
    """
    dz, dbias = load().bert_gelu_grad(z, dy)  # [..., units] z.dtype, [units] float32
    return dz, dbias


def adam_weight_decay_apply(var: tf.Variable, m: tf.Variable, v: tf.Variable, grad: tf.Tensor,
                            lr: tf.Tensor, grad_scale: tf.Tensor, beta_1: float, beta_2: float,
                            epsilon: float, weight_decay_rate: float, decay: bool):
    """In place: g' = grad * grad_scale; m, v, var <- the AdamWeightDecay step (see module).

    Args:
        var: the variable to update (float32).
        m: its first-moment slot.
        v: its second-moment slot.
        grad: the gradient, var's shape.
        lr: the learning rate (scalar).
        grad_scale: the factor on ``grad`` (clipping, loss-scale undo), scalar.
        beta_1: the first-moment decay.
        beta_2: the second-moment decay.
        epsilon: the denominator epsilon.
        weight_decay_rate: the decoupled weight decay.
        decay: whether ``var`` is decayed (not a LayerNorm or bias variable).

    Returns:
        The kernel op (run for its effect on ``var``, ``m`` and ``v``).
    """
    return load().bert_adam_weight_decay_apply(
        var.handle, m.handle, v.handle, tf.convert_to_tensor(grad, tf.float32),
        tf.cast(lr, tf.float32), tf.cast(grad_scale, tf.float32),
        beta_1=float(beta_1), one_minus_beta_1=1.0 - beta_1, beta_2=float(beta_2),
        one_minus_beta_2=1.0 - beta_2, epsilon=float(epsilon),
        weight_decay_rate=float(weight_decay_rate), decay=bool(decay))
