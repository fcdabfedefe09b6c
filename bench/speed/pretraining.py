"""Pre-training step benchmark: this port vs keras-hub (``fit``, XLA) vs HF transformers (eager).

BERT-base (L=12, H=768, A=12, I=3072, V=30522, dropout 0.1, random weights), batch 8, sequence
128, 20 masked predictions, one full optimizer update per step (forward, backward, clipping,
update). Engines:

* ours: ``run_pretraining``'s train step (``backends.tensorflow.steps.Trainer`` with the original
  optimizer: clip by global norm + AdamWeightDecay; MLM + NSP) in float32 and mixed_bfloat16 as
  run_pretraining runs it by default (``--xla_kernels``: matmuls on TensorFlow's oneDNN kernels,
  the GELU as fused kernels (XLA's; a CPU kernel on bf16), dropout, LayerNorm and the
  clipping + update as the one-pass CPU kernels of ``modeling/kernels/cpu_ops.py``) and float32
  with the whole step under XLA (``--use_xla``); one host loop of ``--iters`` steps per measurement;
* keras-hub ``BertMaskedLM`` (MLM head on the 20 positions, tied embeddings), Keras ``AdamW``
  with ``global_clipnorm=1.0``, ``compile(jit_compile=True)`` then ``fit`` (separate venv
  ``bench/.venvs/kerashub``: the project's TensorFlow/Keras through a .pth file + keras-hub);
* HF transformers ``BertForPreTraining`` (MLM + NSP, logits on all 128 positions as HF does),
  ``torch.optim.AdamW`` + ``clip_grad_norm_(1.0)``, eager (separate venv ``bench/.venvs/hf``:
  ``torch==2.13.0`` CPU + transformers);
* "GEMM peak": a 2048^3 float32 ``tf.matmul`` (and bfloat16), measured in the same rounds: the
  MFU column is achieved GFLOP/s / the peak of the engine's compute dtype (bf16 engines: the
  bfloat16 peak);
* "attention core": the attention proper of every layer (``SelfAttention.attend``: scores,
  softmax, dropout, weighted sum; forward and backward, not the projections) timed alone at
  the step's shapes: its time over the ours fp32 default step time is the attention's share.

Each engine kind runs in its own long-lived worker process; after set-up (compilation), engines
are measured in interleaved rounds, one at a time, so that a shared noisy CPU affects all alike.
The table shows medians over rounds and the median of per-round ratios vs keras-hub. FLOPs per
sequence count the matmuls of forward + backward (3x forward) of the encoder and the MLM head
at the 20 positions (69.9 GFLOP for BERT-base at 128). Results also go to
``bench/out/bench_pretraining.json``.

    .venv/bin/python -m bench pretraining               # full run (several minutes)
    .venv/bin/python -m bench pretraining --rounds 3 --skip_hf --layers 4
    # the paper's phase 2 (90% of steps at 128, the last 10% at 512 with 80 predictions):
    .venv/bin/python -m bench pretraining --seq_length 512 --predictions 80 --batch_size 2
"""

from __future__ import annotations

import atexit
import os
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402

REFERENCE = "keras-hub fit fp32 XLA"
PEAK = "GEMM peak fp32"
PEAK_BF16 = "GEMM peak bf16"
ATTENTION = "attention core fp32"


# ---------------------------------------------------------------------------------- shapes


def gflop_per_sequence(d) -> float:
    """Forward + backward (3x) matmul GFLOP of the encoder and the MLM head, per sequence."""
    h, v, p = d["hidden"], d["vocab"], d["predictions"]
    mlm_head = 2 * p * (h * h + h * v) / 1e9
    return 3 * (harness.encoder_gflop(d) + mlm_head)


def synthetic_batch(d, seed=0):
    """Random ids, full masks, two segments, ``predictions`` sorted distinct positions."""
    import numpy as np

    rng = np.random.RandomState(seed)
    b, s, p = d["batch"], d["seq"], d["predictions"]
    ids = rng.randint(1000, d["vocab"], (b, s)).astype(np.int32)
    segments = np.zeros((b, s), np.int32)
    segments[:, s // 2:] = 1
    positions = np.stack([np.sort(rng.choice(np.arange(1, s - 1), p, replace=False))
                          for _ in range(b)]).astype(np.int32)
    return {"input_ids": ids, "input_mask": np.ones((b, s), np.int32), "segment_ids": segments,
            "masked_lm_positions": positions,
            "masked_lm_ids": rng.randint(1000, d["vocab"], (b, p)).astype(np.int32),
            "masked_lm_weights": np.ones((b, p), np.float32),
            "next_sentence_labels": rng.randint(0, 2, (b, 1)).astype(np.int32)}


# --------------------------------------------------------------------------------- engines


def ours_trainer(d, policy: str = "float32", jit: bool = False):
    """(trainer, iterator): ``run_pretraining``'s step on a synthetic batch repeated, with the
    model under ``policy`` ("float32" / "mixed_bfloat16"); ``jit``: the whole step under XLA
    (``--use_xla``), else the default (oneDNN matmuls + the fused training kernels)."""
    import keras
    import tensorflow as tf

    sys.path.insert(0, ROOT)
    from modeling.config import BertConfig
    from modeling.heads.pretraining import BertPretrainingModel
    from modeling.training import objectives as pretraining_objective
    from modeling.training import optimizers
    from modeling.training.job import TrainerConfig
    from modeling.training.backends.tensorflow.steps import Trainer

    config = BertConfig(vocab_size=d["vocab"], hidden_size=d["hidden"],
                        num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
                        intermediate_size=d["intermediate"], type_vocab_size=2,
                        max_position_embeddings=max(512, d["seq"]))
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = BertPretrainingModel(config, seq_length=d["seq"],
                                     max_predictions_per_seq=d["predictions"])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    optimizer = optimizers.create_optimizer(5e-5, 1_000_000, 10_000)
    model_dir = tempfile.mkdtemp(prefix="bench_pretraining_")  # nothing is saved; removed at exit
    atexit.register(shutil.rmtree, model_dir, True)
    trainer = Trainer(
        model, optimizer, pretraining_objective.PretrainingObjective(), None,
        TrainerConfig(model_dir, 10 ** 9, use_xla=jit, fuse_optimizer=not jit,
                      fused_kernels=not jit, write_summaries=False, step_log=False,
                      progress=False))
    dataset = tf.data.Dataset.from_tensors(synthetic_batch(d)).repeat()
    return trainer, trainer.make_iterator(dataset)


def _ours_engines(d):
    engines = {}
    # "default" = run_pretraining's default step: oneDNN matmuls, fused training kernels (GELU:
    # XLA, CPU on bf16; CPU dropout / LayerNorm / update: --xla_kernels); "XLA" = the whole
    # step compiled (--use_xla).
    for policy, tag, jit in (("float32", "fp32", True), ("float32", "fp32", False),
                             ("mixed_bfloat16", "bf16", False)):
        trainer, iterator = ours_trainer(d, policy, jit)
        name = "ours %s %s" % (tag, "XLA" if jit else "default")
        engines[name] = (lambda n, t=trainer, it=iterator: t.run_steps(it, n))

    engines[PEAK] = harness.gemm_peak_engine("float32")
    engines[PEAK_BF16] = harness.gemm_peak_engine("bfloat16")
    engines[ATTENTION] = _attention_core(d)
    return engines


def _attention_core(d):
    """An engine timing, per unit, one step's worth of the attention proper in float32:
    ``layers`` calls of ``SelfAttention.attend`` (scores, softmax, dropout, weighted sum; not
    the projections) chained as in the model (each layer's context is the next one's query;
    keys and values of its own, so no two layers compute the same thing), forward, then
    backward to every query, key and value, with the fused training kernels on as in the
    default step. Its time over the step time is the attention's share."""
    import tensorflow as tf

    from modeling.kernels import switch
    from modeling.layers.attention import SelfAttention, attention_bias_from_mask

    layer = SelfAttention(d["heads"], d["hidden"] // d["heads"], dropout_rate=0.1)
    shape = (d["batch"], d["seq"], d["hidden"])
    query = tf.Variable(tf.random.normal(shape))
    keys = [tf.Variable(tf.random.normal(shape)) for _ in range(d["layers"])]
    values = [tf.Variable(tf.random.normal(shape)) for _ in range(d["layers"])]
    upstream = tf.random.normal(shape)  # the gradient arriving from above the last layer
    bias = attention_bias_from_mask(tf.ones((d["batch"], d["seq"]), tf.int32), tf.float32)

    def step():
        with tf.GradientTape() as tape:
            context = query
            for key, value in zip(keys, values):
                context = layer.attend(context, key, value, bias, training=True)  # [B, S, H]
        grads = tape.gradient(context, [query] + keys + values, output_gradients=upstream)
        return tf.add_n([tf.reduce_sum(g) for g in grads])  # every gradient is computed

    with switch.use_kernels(layer, switch.Kernels(training=True)):
        fn = tf.function(step)
        fn()  # traced with the fused kernels

    def run(n):
        for _ in range(n):
            fn().numpy()
    return run


def _kerashub_engines(d):
    import keras
    import keras_hub
    import tensorflow as tf

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=d["vocab"], num_layers=d["layers"], num_heads=d["heads"],
        hidden_dim=d["hidden"], intermediate_dim=d["intermediate"],
        max_sequence_length=max(512, d["seq"]), num_segments=2, dropout=0.1)
    model = keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=5e-5, weight_decay=0.01,
                                                   epsilon=1e-6, global_clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[], jit_compile=True)
    batch = synthetic_batch(d)
    x = {"token_ids": batch["input_ids"], "padding_mask": batch["input_mask"],
         "segment_ids": batch["segment_ids"], "mask_positions": batch["masked_lm_positions"]}
    dataset = tf.data.Dataset.from_tensors(
        (x, batch["masked_lm_ids"], batch["masked_lm_weights"])).repeat()

    def run(n):
        model.fit(dataset, steps_per_epoch=n, epochs=1, verbose=0)

    return {REFERENCE: run}


def _hf_engines(d):
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    config = transformers.BertConfig(
        vocab_size=d["vocab"], hidden_size=d["hidden"], num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"], intermediate_size=d["intermediate"], type_vocab_size=2,
        max_position_embeddings=max(512, d["seq"]))
    model = transformers.BertForPreTraining(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, eps=1e-6, weight_decay=0.01)
    batch = synthetic_batch(d)
    ids = torch.from_numpy(batch["input_ids"]).long()
    labels = torch.full_like(ids, -100)
    positions = torch.from_numpy(batch["masked_lm_positions"]).long()
    labels.scatter_(1, positions, torch.from_numpy(batch["masked_lm_ids"]).long())
    kwargs = dict(input_ids=ids, attention_mask=torch.from_numpy(batch["input_mask"]).long(),
                  token_type_ids=torch.from_numpy(batch["segment_ids"]).long(), labels=labels,
                  next_sentence_label=torch.from_numpy(batch["next_sentence_labels"][:, 0]).long())

    def run(n):
        for _ in range(n):
            loss = model(**kwargs).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return {"HF torch eager fp32": run}


def worker(kind: str, d, iters: int) -> None:
    """Builds the engines (one train step a unit), warms them up (1 then ``iters`` steps, times
    logged to stderr) and serves them."""
    engines = {"ours": _ours_engines, "kerashub": _kerashub_engines,
               "hf": _hf_engines}[kind](d)
    harness.serve(engines, warmup=(1, iters), log_warmup=True)


def main() -> None:
    parser = harness.parser(__doc__, peers=("kerashub", "hf"), model=True, rounds=5, iters=3,
                            helps={"iters": "train steps per measurement"})
    args = parser.parse_args()
    d = harness.dims_of(args)
    if args.worker:
        worker(args.worker, d, args.iters)
        return
    if not harness.set_up_peers(args):
        return

    workers, engines, _ = harness.start_workers(
        __file__, harness.peers(args),
        harness.flags_of(args, harness.MODEL_FLAGS + ("iters",)))
    gflop = gflop_per_sequence(d)

    def rate(name: str, seconds: float) -> float:  # seq/s, or GFLOP/s for the GEMM peaks
        if name.startswith("GEMM"):
            return harness.gemm_rate(args.iters, seconds)
        return args.iters * d["batch"] / seconds  # the attention core too: step-sequences/s

    rates = harness.run_rounds(workers, engines, args.rounds, args.iters, rate, digits=2)
    peaks = {"fp32": statistics.median(rates[PEAK]), "bf16": statistics.median(rates[PEAK_BF16])}
    reference = rates.get(REFERENCE)
    print("\nBERT pre-training step: L=%d H=%d A=%d I=%d V=%d, batch %d x seq %d, %d "
          "predictions; %.1f GFLOP/sequence (fwd+bwd); %d rounds x %d steps; load average "
          "now %.2f" % (d["layers"], d["hidden"], d["heads"], d["intermediate"], d["vocab"],
                        d["batch"], d["seq"], d["predictions"], gflop, args.rounds, args.iters,
                        os.getloadavg()[0]))
    print("measured GEMM peak: fp32 %.0f GFLOP/s, bf16 %.0f GFLOP/s"
          % (peaks["fp32"], peaks["bf16"]))
    print("%-24s %8s %8s %9s %8s %12s" % ("engine", "seq/s", "best", "GFLOP/s", "MFU*",
                                          "x keras-hub"))
    results = {}
    for name, _ in engines:
        if name.startswith("GEMM") or name == ATTENTION:
            continue
        median, best, ratio = harness.summarize(rates[name], reference)
        dtype = "bf16" if "bf16" in name else "fp32"
        mfu = median * gflop / peaks[dtype]
        results[name] = {"seq_per_s_median": median, "seq_per_s_best": best,
                         "gflop_per_s": median * gflop, "mfu_vs_own_gemm_peak": mfu,
                         "own_gemm_peak": dtype, "ratio_vs_keras_hub": ratio,
                         "rounds": rates[name]}
        print("%-24s %8.2f %8.2f %9.1f %7.0f%% %12.2f" % (name, median, best, median * gflop,
                                                         100 * mfu, ratio))
    print("* MFU: GFLOP/s over the measured GEMM peak of the engine's compute dtype")
    # Time share = inverse ratio of the rates (both count the step's sequences per second).
    share = statistics.median(s / a for s, a in zip(rates["ours fp32 default"],
                                                     rates[ATTENTION]))
    print("attention proper (scores, softmax, dropout, weighted sum; fwd + bwd, all layers) "
          "measured alone: %.0f%% of the ours fp32 default step time" % (100 * share))
    harness.write_json("bench_pretraining.json", {
        "attention_share_of_ours_fp32_default": share,
        "attention_core_rounds": rates[ATTENTION],
        "dims": d, "gflop_per_sequence": gflop,
        "gemm_peak_gflop_s": peaks,  # medians of the rounds, as speed/inference
        "gemm_peak_rounds": {k: rates[k] for k in rates if k.startswith("GEMM")},
        "reference": REFERENCE, "results": results})


if __name__ == "__main__":
    main()
