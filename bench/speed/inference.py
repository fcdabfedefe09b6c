"""Inference benchmark: this port's BertModel vs keras-hub's BertBackbone vs HF transformers.

BERT-base shape (L=12, H=768, A=12, I=3072, random weights), batch 8, sequence 128 by default;
sequences/second of a forward pass (no dropout) for:

* ours: float32 graph (tf.function) and XLA (jit_compile=True); bfloat16 graph with the weights
  stored in bfloat16 (``BertModel(config, dtype="bfloat16")``: the inference deployment) and
  mixed_bfloat16 graph (float32 weights, bfloat16 compute: the training policy); the bfloat16
  matmuls run on AVX-512 BF16 / AMX through oneDNN, fused with their bias and GELU; the graphs
  are traced with the fused LayerNorm kernel, as the tools' prediction traces them on a CPU
  (``modeling/kernels/switch.py``);
* keras-hub ``BertBackbone`` float32, XLA and graph (separate venv ``bench/.venvs/kerashub``, which
  reuses the project's TensorFlow/Keras through a .pth file and adds ``keras-hub``);
* HF transformers ``BertModel`` on PyTorch CPU (``torch==2.13.0``), eager and ``torch.compile``
  (separate venv ``bench/.venvs/hf``);
* "GEMM peak": a 2048^3 float32 and bfloat16 ``tf.matmul`` measured in the same rounds: the MFU
  column is GFLOP/s over the peak of the engine's compute dtype.

Each engine lives in its own long-running worker process and the engines are measured in
interleaved rounds (one engine at a time), so a shared, noisy CPU affects all of them alike;
the table shows the median over rounds and the median of per-round ratios against keras-hub XLA.
The venvs are created on first use (``--setup_only`` to just create them). Results also go to
``bench/out/bench_inference.json``.

    .venv/bin/python -m bench inference                 # full run (minutes)
    .venv/bin/python -m bench inference --rounds 3 --skip_hf
"""

from __future__ import annotations

import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402

REFERENCE = "keras-hub fp32 XLA"
PEAK_FP32 = "GEMM peak fp32"
PEAK_BF16 = "GEMM peak bf16"


# ------------------------------------------------------------------------------ workers

def _tf_inputs(d, names):
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(0)
    ids = tf.constant(rng.randint(1000, d["vocab"], (d["batch"], d["seq"])).astype(np.int32))
    ones = tf.ones((d["batch"], d["seq"]), tf.int32)
    zeros = tf.zeros((d["batch"], d["seq"]), tf.int32)
    return {names[0]: ids, names[1]: ones, names[2]: zeros}


def ours_model(d, policy: str):
    """(BertModel under the dtype ``policy``, its inputs): random weights, the bench's shape."""
    sys.path.insert(0, ROOT)
    from modeling.config import BertConfig
    from modeling.encoder import BertModel

    config = BertConfig(vocab_size=d["vocab"], hidden_size=d["hidden"],
                        num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
                        intermediate_size=d["intermediate"], type_vocab_size=2)
    return (BertModel(config, dtype=policy),
            _tf_inputs(d, ("input_ids", "input_mask", "segment_ids")))


def ours_forward(model, inputs, jit: bool):
    """A call of one forward pass (``sequence_output`` as numpy). The graph is traced here with
    the fused LayerNorm where the tools' prediction would use it (one replica on a CPU:
    ``strategies.prediction_kernels_apply``); XLA compiles TensorFlow's ops."""
    import tensorflow as tf

    from modeling.kernels import switch
    from modeling.training import strategies

    fn = tf.function(lambda x: model(x, training=False)["sequence_output"], jit_compile=jit)
    fused = not jit and strategies.prediction_kernels_apply(tf.distribute.get_strategy())
    with switch.use_kernels(model, switch.Kernels(inference=fused)):
        fn.get_concrete_function(inputs)  # the trace that reads the layers' kernels
    return lambda: fn(inputs).numpy()


def _ours_engines(d):
    engines = {}
    # (variables' dtype policy, name, XLA variants): "bf16" stores the weights in bfloat16
    # (``BertModel(config, dtype="bfloat16")``, the inference deployment); "mixed-bf16" keeps
    # float32 weights and computes in bfloat16 (the training policy ``mixed_bfloat16``).
    for policy, tag, jits in (("float32", "fp32", (False, True)),
                              ("mixed_bfloat16", "mixed-bf16", (False,)),
                              ("bfloat16", "bf16", (False,))):
        model, inputs = ours_model(d, policy)
        for jit in jits:
            engines["ours %s %s" % (tag, "XLA" if jit else "graph")] = ours_forward(
                model, inputs, jit)
    return engines


def _kerashub_engines(d):
    import keras_hub
    import tensorflow as tf

    model = keras_hub.models.BertBackbone(
        vocabulary_size=d["vocab"], num_layers=d["layers"], num_heads=d["heads"],
        hidden_dim=d["hidden"], intermediate_dim=d["intermediate"], max_sequence_length=512,
        num_segments=2, dropout=0.1)
    inputs = _tf_inputs(d, ("token_ids", "padding_mask", "segment_ids"))
    engines = {}
    for jit in (True, False):
        fn = tf.function(lambda x: model(x, training=False)["sequence_output"], jit_compile=jit)
        engines["keras-hub fp32 %s" % ("XLA" if jit else "graph")] = (
            lambda fn=fn: fn(inputs).numpy())
    return engines


def _hf_engines(d):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    config = transformers.BertConfig(
        vocab_size=d["vocab"], hidden_size=d["hidden"], num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"], intermediate_size=d["intermediate"], type_vocab_size=2)
    model = transformers.BertModel(config).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, d["vocab"], (d["batch"], d["seq"]), generator=gen)
    kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids),
                  token_type_ids=torch.zeros_like(ids))
    compiled = torch.compile(model)

    def run(m):
        with torch.inference_mode():
            m(**kwargs).last_hidden_state.sum().item()

    return {"HF torch eager": lambda: run(model), "HF torch.compile": lambda: run(compiled)}


def worker(kind: str, d) -> None:
    """Builds the engines (one forward pass a unit; ours also the GEMM peaks, one matmul a
    unit), warms them up (2 units) and serves them."""
    passes = {"ours": _ours_engines, "kerashub": _kerashub_engines, "hf": _hf_engines}[kind](d)
    engines = {name: harness.repeated(fn) for name, fn in passes.items()}
    if kind == "ours":
        engines[PEAK_FP32] = harness.gemm_peak_engine("float32")
        engines[PEAK_BF16] = harness.gemm_peak_engine("bfloat16")
    harness.serve({name: engines[name] for name in sorted(engines)}, warmup=(1, 1))


def gflop_per_sequence(d) -> float:
    """Matmul GFLOP of one sequence's forward pass (``harness.encoder_gflop``)."""
    return harness.encoder_gflop(d)


def main() -> None:
    parser = harness.parser(__doc__, peers=("kerashub", "hf"), model=True, rounds=5, iters=3,
                            helps={"iters": "forward passes per measurement"})
    args = parser.parse_args()
    d = harness.dims_of(args)
    if args.worker:
        worker(args.worker, d)
        return
    if not harness.set_up_peers(args):
        return

    workers, engines, _ = harness.start_workers(__file__, harness.peers(args),
                                                harness.flags_of(args, harness.MODEL_FLAGS))
    def rate(name: str, seconds: float) -> float:  # seq/s, or GFLOP/s for the GEMM peaks
        if name.startswith("GEMM"):
            return harness.gemm_rate(args.iters, seconds)
        return args.iters * d["batch"] / seconds

    rates = harness.run_rounds(workers, engines, args.rounds, args.iters, rate)
    peaks = {"fp32": statistics.median(rates[PEAK_FP32]),
             "bf16": statistics.median(rates[PEAK_BF16])}

    gflop = gflop_per_sequence(d)
    reference = rates.get(REFERENCE)
    print("\nBERT L=%d H=%d A=%d I=%d, batch %d x seq %d, %.1f GFLOP/sequence; %d rounds x %d "
          "passes; load average now %.2f" % (d["layers"], d["hidden"], d["heads"],
                                             d["intermediate"], d["batch"], d["seq"], gflop,
                                             args.rounds, args.iters, os.getloadavg()[0]))
    print("measured GEMM peak: fp32 %.0f GFLOP/s, bf16 %.0f GFLOP/s"
          % (peaks["fp32"], peaks["bf16"]))
    print("%-22s %10s %10s %10s %6s %14s" % ("engine", "seq/s", "best", "GFLOP/s", "MFU*",
                                             "x " + REFERENCE))
    results = {}
    for name, _ in engines:
        if name.startswith("GEMM"):
            continue
        median, best, ratio = harness.summarize(rates[name], reference)
        # bf16 engines against the bfloat16 peak; HF/keras-hub/ours fp32 against float32's
        mfu = median * gflop / peaks["bf16" if "bf16" in name else "fp32"]
        results[name] = {"seq_per_s_median": median, "seq_per_s_best": best,
                         "ratio_vs_reference": ratio, "mfu_vs_own_gemm_peak": mfu,
                         "rounds": rates[name]}
        print("%-22s %10.2f %10.2f %10.1f %5.0f%% %14.2f" % (name, median, best, median * gflop,
                                                            100 * mfu, ratio))
    print("* MFU: GFLOP/s over the measured GEMM peak of the engine's compute dtype")
    harness.write_json("bench_inference.json", {"dims": d, "gflop_per_sequence": gflop,
                                                "gemm_peak_gflop_s": peaks,
                                                "reference": REFERENCE, "results": results})


if __name__ == "__main__":
    main()
