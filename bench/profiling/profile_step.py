"""Where the time goes: an op-by-op profile of our pre-training step or inference pass (not CI).

Builds ours as the benchmarks do (``speed/pretraining.ours_trainer``: ``run_pretraining``'s
default step, oneDNN matmuls + the fused training kernels; ``speed/inference.ours_model``: the
encoder in graph mode with the fused LayerNorm), warms it up, then records ``--steps`` calls
with TensorFlow's profiler and sums each kernel's self time from the trace (``op_stats``).
TensorFlow runs with one inter-op thread here, so kernels do not overlap and their times add up
to the step (each kernel still uses every core). Prints the time per category (GEMMs,
attention, softmax, dropout, LayerNorm, GELU, casts, the optimizer update, the loss, data
movement, other), the GEMMs' rate against a 2048^3 matmul of the same dtype measured in the
same process, and the largest kernels.

    .venv/bin/python -m bench profile_step --what train --dtype bf16
    .venv/bin/python -m bench profile_step --what inference --dtype bf16 --batch_size 8
"""

from __future__ import annotations

import collections
import glob
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402

# (category, rule on (op type, op name)): the first that matches names a kernel's category.
CATEGORIES = [
    ("optimizer update", lambda t, n: "AdamWeightDecay" in n or "AdamWeightDecay" in t
     or "global_norm" in n or "clip_by_global_norm" in n),
    # the fused scale + bias + softmax + dropout of the attention probabilities, both ways
    ("attention softmax+dropout", lambda t, n: t.startswith("BertAttentionProbs")),
    ("dropout", lambda t, n: "dropout" in n.lower() or t.startswith("BertDropout")),
    ("LayerNorm", lambda t, n: "LayerNorm" in n or t.startswith("BertLayerNorm")),
    ("attention matmuls", lambda t, n: "BatchMatMul" in t),
    ("GEMMs", lambda t, n: "MatMul" in t),  # with a fused bias / GELU epilogue (inference)
    ("GELU", lambda t, n: "gelu" in n.lower()),
    ("softmax", lambda t, n: "Softmax" in t and "predictions" not in n
     and "seq_relationship" not in n),
    ("loss (MLM/NSP heads)", lambda t, n: "predictions" in n or "seq_relationship" in n
     or "loss" in n.lower()),
    ("casts", lambda t, n: t == "Cast"),
    ("transposes/copies", lambda t, n: "Transpose" in t or t in ("Reshape", "Identity",
                                                                 "_MklToTf", "Tile")),
]


def category(op_type: str, op_name: str) -> str:
    for name, rule in CATEGORIES:
        if rule(op_type, op_name):
            return name
    return "other"


def op_stats(logdir: str) -> list:
    """[(op type, op name, self time in us)], one entry per kernel run, from the profile in
    ``logdir``: the host plane's ``tf_Compute`` threads, whose op events are named
    ``name:Type``; an op's self time leaves out the ops nested in it (a function call's body).
    XLA's compiled kernels inside a step appear under no op: their time shows only as the
    wall time that no kernel accounts for (``main`` prints it)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise RuntimeError("no profile written under %s" % logdir)
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
        space.ParseFromString(f.read())
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    out = []
    for line in plane.lines:
        if not line.name.startswith("tf_Compute"):
            continue
        events = []  # (start, end, name, type) of the ops (XLA kernels count in their launch)
        for ev in line.events:
            name = plane.event_metadata[ev.metadata_id].name
            if "::" in name or ":" not in name:
                continue  # executor and thread-pool events, allocations
            op_name, op_type = name.rsplit(":", 1)
            events.append((ev.offset_ps, ev.offset_ps + ev.duration_ps, op_name, op_type))
        events.sort(key=lambda e: (e[0], -e[1]))
        stack = []  # [start, end, name, type, nested time]
        for start, end, op_name, op_type in events + [(float("inf"), float("inf"), "", "")]:
            while stack and stack[-1][1] <= start:
                done = stack.pop()
                self_ps = done[1] - done[0] - done[4]
                if self_ps < 0:  # children overlapping their parent: not a nested trace
                    raise RuntimeError("%s: nested ops outlast it in the trace" % done[2])
                out.append((done[3], done[2], self_ps / 1e6))
                if stack:
                    stack[-1][4] += done[1] - done[0]
            stack.append([start, end, op_name, op_type, 0])
    return out


def median_seconds(run, calls: int) -> float:
    """Median wall time of ``calls`` calls of ``run()`` (the benches report medians too)."""
    walls = []
    for _ in range(calls):
        start = time.perf_counter()
        run()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def gemm_peak(dtype: str, calls: int = 5) -> float:
    """GFLOP/s of the benches' GEMM-peak matmul in ``dtype`` (median of ``calls``)."""
    run = harness.gemm_peak_engine(dtype)
    run(1)
    return harness.gemm_rate(1, median_seconds(lambda: run(1), calls))


def main() -> None:
    parser = harness.parser(__doc__, model=True)
    parser.add_argument("--what", choices=["train", "inference"], default="train")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                        help="train: float32 or mixed_bfloat16; inference: float32 or bfloat16 "
                             "weights")
    parser.add_argument("--steps", type=int, default=3, help="calls profiled (after 2 warm-up)")
    parser.add_argument("--top", type=int, default=25, help="largest kernels listed")
    args = parser.parse_args()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)
    from bench.speed import inference as bench_inference, pretraining as bench_pretraining

    d = harness.dims_of(args)
    if args.what == "train":
        trainer, iterator = bench_pretraining.ours_trainer(
            d, "mixed_bfloat16" if args.dtype == "bf16" else "float32")
        run = lambda: trainer.run_steps(iterator, 1)  # noqa: E731
        flop = bench_pretraining.gflop_per_sequence(d) * d["batch"]
    else:
        model, inputs = bench_inference.ours_model(
            d, "bfloat16" if args.dtype == "bf16" else "float32")
        run = bench_inference.ours_forward(model, inputs, jit=False)  # as the bench
        flop = bench_inference.gflop_per_sequence(d) * d["batch"]
    for _ in range(2):
        run()
    peak = gemm_peak("bfloat16" if args.dtype == "bf16" else "float32")
    # unprofiled: the profiler's own cost stays out of the MFU. One inter-op thread and the
    # median of --steps calls: close to, not the same as, the benches' median of rounds.
    wall = median_seconds(run, args.steps)
    logdir = tempfile.mkdtemp(prefix="profile_step_")
    tf.profiler.experimental.start(logdir)
    for _ in range(args.steps):
        run()
    tf.profiler.experimental.stop()
    try:
        stats = op_stats(logdir)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)

    by_category = collections.Counter()
    by_kernel = collections.Counter()
    gemm_us = 0.0
    for op_type, name, us in stats:
        c = category(op_type, name)
        by_category[c] += us / args.steps
        if c in ("GEMMs", "attention matmuls"):
            gemm_us += us / args.steps
        short = re.sub(r"(_\d+)+(?=/|$)", "", name)  # layer_3_1 -> layer: one line per kind
        by_kernel[(c, op_type, short)] += us / args.steps
    total = sum(by_category.values())
    print("%s %s, batch %d x %d, %d layers, H=%d: step %.1f ms unprofiled (median of %d) = "
          "%.0f GFLOP/s = %.0f%% of the %s GEMM peak %.0f GFLOP/s measured here; load %.2f"
          % (args.what, args.dtype, d["batch"], d["seq"], d["layers"], d["hidden"], wall * 1e3,
             args.steps, flop / wall, 100 * flop / wall / peak, args.dtype, peak,
             os.getloadavg()[0]))
    print("kernel self time per step, profiled: %.1f ms" % (total / 1e3))
    for c, us in by_category.most_common():
        print("  %-26s %8.1f ms  %5.1f%%" % (c, us / 1e3, 100 * us / total))
    if gemm_us:
        print("matmuls (GEMMs + attention): %.0f GFLOP/s while they run"
              % (flop / (gemm_us / 1e6)))
        # The ceiling: with every other kernel and all scheduling gaps at zero, the step would
        # be its matmuls alone. The unprofiled wall minus the profiled kernel time is what no
        # kernel accounts for (scheduling gaps; it reads low where profiling slows kernels).
        print("matmuls alone would be %.0f%% of the peak; other kernels %.1f ms, unprofiled "
              "wall minus kernel time %.1f ms a step" % (100 * flop / (gemm_us / 1e6) / peak,
                                          (total - gemm_us) / 1e3, wall * 1e3 - total / 1e3))
    print("largest kernels (ms per step):")
    for (c, op_type, name), us in by_kernel.most_common(args.top):
        print("  %8.2f  %-26s %-24s %s" % (us / 1e3, c, op_type, name[-90:]))
    other = [(k, us) for k, us in by_kernel.most_common() if k[0] == "other"][:args.top // 2]
    if other:
        print("largest kernels in \"other\":")
        for (_, op_type, name), us in other:
            print("  %8.2f  %-24s %s" % (us / 1e3, op_type, name[-90:]))


if __name__ == "__main__":
    main()
