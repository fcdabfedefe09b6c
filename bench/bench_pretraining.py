"""Pre-training step benchmark: this port vs keras-hub (``fit``, XLA) vs HF transformers (eager).

BERT-base (L=12, H=768, A=12, I=3072, V=30522, dropout 0.1, random weights), batch 8, sequence
128, 20 masked predictions, one full optimizer update per step (forward, backward, clipping,
update). Engines:

* ours: ``run_pretraining``'s train step (``modeling.training_loop.Trainer`` with the original
  optimizer: clip by global norm + AdamWeightDecay; MLM + NSP) in float32 and mixed_bfloat16 as
  run_pretraining runs it by default (forward/backward on TensorFlow's oneDNN kernels, clipping +
  update XLA-fused) and float32 with the whole step under XLA (``--use_xla``); one host loop of
  ``--iters`` steps per measurement;
* keras-hub ``BertMaskedLM`` (MLM head on the 20 positions, tied embeddings), Keras ``AdamW``
  with ``global_clipnorm=1.0``, ``compile(jit_compile=True)`` then ``fit`` (separate venv
  ``bench/.venvs/kerashub``: the project's TensorFlow/Keras through a .pth file + keras-hub);
* HF transformers ``BertForPreTraining`` (MLM + NSP, logits on all 128 positions as HF does),
  ``torch.optim.AdamW`` + ``clip_grad_norm_(1.0)``, eager (separate venv ``bench/.venvs/hf``:
  ``torch==2.13.0`` CPU + transformers);
* "GEMM peak": a 2048^3 float32 ``tf.matmul`` (and bfloat16), measured in the same rounds: the
  MFU column is achieved GFLOP/s / this float32 peak.

Each engine kind runs in its own long-lived worker process; after set-up (compilation), engines
are measured in interleaved rounds, one at a time, so that a shared noisy CPU affects all alike.
The table shows medians over rounds and the median of per-round ratios vs keras-hub. FLOPs per
sequence count the matmuls of forward + backward (3x forward) of the encoder and the MLM head
at the 20 positions (69.9 GFLOP for BERT-base at 128). Results also go to
``bench/out/bench_pretraining.json``.

    .venv/bin/python bench/bench_pretraining.py               # full run (several minutes)
    .venv/bin/python bench/bench_pretraining.py --rounds 3 --skip_hf --layers 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENVS = os.path.join(ROOT, "bench", ".venvs")
KH_PYTHON = os.path.join(VENVS, "kerashub", "bin", "python")
HF_PYTHON = os.path.join(VENVS, "hf", "bin", "python")
REFERENCE = "keras-hub fit fp32 XLA"
PEAK = "GEMM peak fp32"


# ------------------------------------------------------------------------------------ venvs


def _purelib(python: str) -> str:
    return subprocess.check_output(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True).strip()


def ensure_venvs(kerashub: bool, hf: bool) -> None:
    """Creates the peers' venvs on first use (pip from the configured package sources)."""
    if kerashub and not os.path.exists(KH_PYTHON):
        folder = os.path.dirname(os.path.dirname(KH_PYTHON))
        print("creating %s (keras-hub over the project's TensorFlow)" % folder, file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", folder], check=True)
        with open(os.path.join(_purelib(KH_PYTHON), "_project_venv.pth"), "w") as f:
            f.write(_purelib(sys.executable) + "\n")
        subprocess.run([KH_PYTHON, "-m", "pip", "install", "-q", "keras-hub"], check=True)
    if hf and not os.path.exists(HF_PYTHON):
        folder = os.path.dirname(os.path.dirname(HF_PYTHON))
        print("creating %s (torch 2.13.0 CPU + transformers)" % folder, file=sys.stderr)
        subprocess.run(["python3", "-m", "venv", folder], check=True)
        subprocess.run([HF_PYTHON, "-m", "pip", "install", "-q", "torch==2.13.0",
                        "transformers", "numpy"], check=True)


# ---------------------------------------------------------------------------------- shapes


def dims_of(args) -> dict:
    return dict(vocab=30522, layers=args.layers, hidden=args.hidden, heads=args.heads,
                intermediate=args.intermediate, batch=args.batch_size, seq=args.seq_length,
                predictions=args.predictions)


def gflop_per_sequence(d) -> float:
    """Forward + backward (3x) matmul FLOPs of the encoder and the MLM head, per sequence."""
    s, h, i, v, p = d["seq"], d["hidden"], d["intermediate"], d["vocab"], d["predictions"]
    encoder = d["layers"] * 2 * s * (4 * h * h + 2 * h * i + 2 * s * h)
    mlm_head = 2 * p * (h * h + h * v)
    return 3 * (encoder + mlm_head) / 1e9


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


def _ours_engines(d, iters_hint):
    import keras
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, ROOT)
    from modeling import optimization, pretraining_objective, training_loop
    from modeling.config import BertConfig
    from modeling.pretraining_model import BertPretrainingModel

    config = BertConfig(vocab_size=d["vocab"], hidden_size=d["hidden"],
                        num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
                        intermediate_size=d["intermediate"], type_vocab_size=2,
                        max_position_embeddings=max(512, d["seq"]))
    batch = synthetic_batch(d)
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    engines = {}
    # "default" = run_pretraining's default step: TF kernels (oneDNN) for forward/backward,
    # clipping + update XLA-fused (--xla_optimizer); "XLA" = the whole step compiled (--use_xla).
    for policy, tag, jit in (("float32", "fp32", True), ("float32", "fp32", False),
                             ("mixed_bfloat16", "bf16", False)):
        keras.mixed_precision.set_global_policy(policy)
        model = BertPretrainingModel(config, seq_length=d["seq"],
                                     max_predictions_per_seq=d["predictions"])
        keras.mixed_precision.set_global_policy("float32")
        optimizer = optimization.create_optimizer(5e-5, 1_000_000, 10_000)
        trainer = training_loop.Trainer(
            model, optimizer, pretraining_objective.PretrainingObjective(), None,
            training_loop.TrainerConfig(tempfile.mkdtemp(prefix="bench_pretraining_"),
                                        10 ** 9, use_xla=jit, fuse_optimizer=not jit,
                                        write_summaries=False, step_log=False,
                                        progress=False))
        iterator = trainer.make_iterator(dataset)
        name = "ours %s %s" % (tag, "XLA" if jit else "default")
        engines[name] = (lambda n, t=trainer, it=iterator: t.run_steps(it, n))

    def gemm(dtype):
        a = tf.random.normal((2048, 2048), dtype=tf.float32)
        a = tf.cast(a, dtype)
        fn = tf.function(lambda x: tf.reduce_sum(tf.cast(tf.matmul(x, x), tf.float32)))

        def run(n):
            for _ in range(n):
                fn(a).numpy()
        return run

    engines[PEAK] = gemm(tf.float32)
    engines["GEMM peak bf16"] = gemm(tf.bfloat16)
    del np
    return engines


def _kerashub_engines(d, iters_hint):
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


def _hf_engines(d, iters_hint):
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
    """Builds and warms up the engines (2 calls each), then answers 'RUN iters name'."""
    engines = {"ours": _ours_engines, "kerashub": _kerashub_engines,
               "hf": _hf_engines}[kind](d, iters)
    for name, fn in engines.items():
        start = time.perf_counter()
        fn(1)
        fn(iters)
        print("warm-up %s: %.1fs" % (name, time.perf_counter() - start), file=sys.stderr,
              flush=True)
    print("READY " + json.dumps(list(engines)), flush=True)
    for line in sys.stdin:
        parts = line.strip().split(" ", 2)
        if parts[0] != "RUN":
            break
        n, name = int(parts[1]), parts[2]
        start = time.perf_counter()
        engines[name](n)
        print("TIME %.6f" % (time.perf_counter() - start), flush=True)


class Worker:
    """A worker process (one engine kind) driven over stdin/stdout."""

    def __init__(self, python: str, kind: str, args):
        cmd = [python, os.path.abspath(__file__), "--worker", kind, "--iters", str(args.iters)]
        for key in ("layers", "hidden", "heads", "intermediate", "batch_size", "seq_length",
                    "predictions"):
            cmd += ["--" + key, str(getattr(args, key))]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
        self.kind = kind
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=ROOT)

    def ready(self):
        for line in self.proc.stdout:
            if line.startswith("READY "):
                return json.loads(line[6:])
        raise RuntimeError("worker %s died during set-up (exit %s)" % (self.kind,
                                                                      self.proc.wait()))

    def time(self, name: str, n: int) -> float:
        self.proc.stdin.write("RUN %d %s\n" % (n, name))
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("TIME "):
                return float(line[5:])
        raise RuntimeError("worker %s died" % self.kind)

    def close(self) -> None:
        try:
            self.proc.stdin.write("STOP\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["ours", "kerashub", "hf"])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=3, help="train steps per measurement")
    parser.add_argument("--skip_kerashub", action="store_true")
    parser.add_argument("--skip_hf", action="store_true")
    parser.add_argument("--setup_only", action="store_true")
    args = parser.parse_args()
    d = dims_of(args)
    if args.worker:
        worker(args.worker, d, args.iters)
        return
    ensure_venvs(not args.skip_kerashub, not args.skip_hf)
    if args.setup_only:
        return

    kinds = [(sys.executable, "ours")]
    if not args.skip_kerashub:
        kinds.append((KH_PYTHON, "kerashub"))
    if not args.skip_hf:
        kinds.append((HF_PYTHON, "hf"))
    workers, engines = [], []
    for python, kind in kinds:  # set up one at a time: compiling would disturb the others
        w = Worker(python, kind, args)
        workers.append(w)
        engines += [(name, w) for name in w.ready()]
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
    gflop = gflop_per_sequence(d)
    rates = {name: [] for name, _ in engines}  # seq/s, or GFLOP/s for the GEMM peaks
    try:
        for r in range(args.rounds):
            for name, w in engines:
                seconds = w.time(name, args.iters)
                if name.startswith("GEMM"):
                    rates[name].append(args.iters * 2 * 2048 ** 3 / seconds / 1e9)
                else:
                    rates[name].append(args.iters * d["batch"] / seconds)
            print("round %d/%d: %s" % (r + 1, args.rounds, ", ".join(
                "%s %.2f" % (n, rates[n][-1]) for n, _ in engines)), file=sys.stderr)
    finally:
        for w in workers:
            w.close()

    peak = statistics.median(rates[PEAK])
    reference = rates.get(REFERENCE)
    print("\nBERT pre-training step: L=%d H=%d A=%d I=%d V=%d, batch %d x seq %d, %d "
          "predictions; %.1f GFLOP/sequence (fwd+bwd); %d rounds x %d steps; load average "
          "now %.2f" % (d["layers"], d["hidden"], d["heads"], d["intermediate"], d["vocab"],
                        d["batch"], d["seq"], d["predictions"], gflop, args.rounds, args.iters,
                        os.getloadavg()[0]))
    print("measured GEMM peak: fp32 %.0f GFLOP/s, bf16 %.0f GFLOP/s"
          % (peak, statistics.median(rates["GEMM peak bf16"])))
    print("%-24s %8s %8s %9s %8s %12s" % ("engine", "seq/s", "best", "GFLOP/s", "MFU",
                                          "x keras-hub"))
    results = {}
    for name, _ in engines:
        if name.startswith("GEMM"):
            continue
        median = statistics.median(rates[name])
        ratio = (statistics.median(a / b for a, b in zip(rates[name], reference))
                 if reference else float("nan"))
        mfu = median * gflop / peak
        results[name] = {"seq_per_s_median": median, "seq_per_s_best": max(rates[name]),
                         "gflop_per_s": median * gflop, "mfu_vs_fp32_gemm_peak": mfu,
                         "ratio_vs_keras_hub": ratio, "rounds": rates[name]}
        print("%-24s %8.2f %8.2f %9.1f %7.0f%% %12.2f" % (name, median, max(rates[name]),
                                                         median * gflop, 100 * mfu, ratio))
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    sys.path.insert(0, ROOT)
    from data.io_utils import atomic_open

    with atomic_open(os.path.join(out_dir, "bench_pretraining.json")) as f:
        json.dump({"dims": d, "gflop_per_sequence": gflop, "gemm_peak_gflop_s": {
            k: rates[k] for k in rates if k.startswith("GEMM")}, "reference": REFERENCE,
            "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
