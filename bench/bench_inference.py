"""Inference benchmark: this port's BertModel vs keras-hub's BertBackbone vs HF transformers.

BERT-base shape (L=12, H=768, A=12, I=3072, random weights), batch 8, sequence 128 by default;
sequences/second of a forward pass (no dropout) for:

* ours: float32 graph (tf.function), float32 XLA (jit_compile=True), mixed_bfloat16 graph and
  mixed_bfloat16 XLA (weights float32, matmuls in bf16: AVX-512 BF16 / AMX through oneDNN);
* keras-hub ``BertBackbone`` float32, XLA and graph (separate venv ``bench/.venvs/kerashub``, which
  reuses the project's TensorFlow/Keras through a .pth file and adds ``keras-hub``);
* HF transformers ``BertModel`` on PyTorch CPU (``torch==2.13.0``), eager and ``torch.compile``
  (separate venv ``bench/.venvs/hf``).

Each engine lives in its own long-running worker process and the engines are measured in
interleaved rounds (one engine at a time), so a shared, noisy CPU affects all of them alike;
the table shows the median over rounds and the median of per-round ratios against keras-hub XLA.
The venvs are created on first use (``--setup_only`` to just create them). Results also go to
``bench/out/bench_inference.json``.

    .venv/bin/python bench/bench_inference.py                 # full run (minutes)
    .venv/bin/python bench/bench_inference.py --rounds 3 --skip_hf
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENVS = os.path.join(ROOT, "bench", ".venvs")
HF_PYTHON = os.path.join(VENVS, "hf", "bin", "python")
KH_PYTHON = os.path.join(VENVS, "kerashub", "bin", "python")
REFERENCE = "keras-hub fp32 XLA"


# ------------------------------------------------------------------------------ venvs

def _site_packages(python: str) -> str:
    return subprocess.check_output(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True).strip()


def ensure_venvs(need_kerashub: bool, need_hf: bool) -> None:
    """Creates the benchmark venvs if missing (pip, from the configured package sources)."""
    if need_kerashub and not os.path.exists(KH_PYTHON):
        folder = os.path.dirname(os.path.dirname(KH_PYTHON))
        print("creating %s (keras-hub on top of the project's TensorFlow)" % folder,
              file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", folder], check=True)
        with open(os.path.join(_site_packages(KH_PYTHON), "_project_venv.pth"), "w") as f:
            f.write(_site_packages(sys.executable) + "\n")
        subprocess.run([KH_PYTHON, "-m", "pip", "install", "-q", "keras-hub"], check=True)
    if need_hf and not os.path.exists(HF_PYTHON):
        folder = os.path.dirname(os.path.dirname(HF_PYTHON))
        print("creating %s (torch 2.13.0 CPU + transformers)" % folder, file=sys.stderr)
        subprocess.run(["python3", "-m", "venv", folder], check=True)
        subprocess.run([HF_PYTHON, "-m", "pip", "install", "-q", "torch==2.13.0", "transformers",
                        "safetensors", "numpy"], check=True)


# ------------------------------------------------------------------------------ workers

def _dims(args):
    return dict(vocab=30522, layers=args.layers, hidden=args.hidden, heads=args.heads,
                intermediate=args.intermediate, batch=args.batch_size, seq=args.seq_length)


def _tf_inputs(d, names):
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(0)
    ids = tf.constant(rng.randint(1000, d["vocab"], (d["batch"], d["seq"])).astype(np.int32))
    ones = tf.ones((d["batch"], d["seq"]), tf.int32)
    zeros = tf.zeros((d["batch"], d["seq"]), tf.int32)
    return {names[0]: ids, names[1]: ones, names[2]: zeros}


def _ours_engines(d):
    import keras
    import tensorflow as tf

    sys.path.insert(0, ROOT)
    from modeling.bert_model import BertModel
    from modeling.config import BertConfig

    config = BertConfig(vocab_size=d["vocab"], hidden_size=d["hidden"],
                        num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
                        intermediate_size=d["intermediate"], type_vocab_size=2)
    inputs = _tf_inputs(d, ("input_ids", "input_mask", "segment_ids"))
    engines = {}
    for policy, tag in (("float32", "fp32"), ("mixed_bfloat16", "bf16")):
        keras.mixed_precision.set_global_policy(policy)
        model = BertModel(config)
        keras.mixed_precision.set_global_policy("float32")
        for jit in (False, True):
            fn = tf.function(lambda x, m=model: m(x, training=False)["sequence_output"],
                             jit_compile=jit)
            engines["ours %s %s" % (tag, "XLA" if jit else "graph")] = (
                lambda fn=fn: fn(inputs).numpy())
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
    """Builds the engines, warms them up, then answers 'RUN name iters' with seconds."""
    engines = {"ours": _ours_engines, "kerashub": _kerashub_engines, "hf": _hf_engines}[kind](d)
    for fn in engines.values():
        fn()
        fn()
    print("READY " + json.dumps(sorted(engines)), flush=True)
    for line in sys.stdin:
        parts = line.strip().split(" ", 2)
        if parts[0] != "RUN":
            break
        iters, name = int(parts[1]), parts[2]
        start = time.perf_counter()
        for _ in range(iters):
            engines[name]()
        print("TIME %.6f" % (time.perf_counter() - start), flush=True)


class Worker:
    def __init__(self, python: str, kind: str, args):
        cmd = [python, os.path.abspath(__file__), "--worker", kind]
        for key in ("layers", "hidden", "heads", "intermediate", "batch_size", "seq_length"):
            cmd += ["--" + key, str(getattr(args, key))]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=ROOT)
        self.kind = kind

    def ready(self):
        for line in self.proc.stdout:
            if line.startswith("READY "):
                return json.loads(line[6:])
        raise RuntimeError("worker %s died during set-up (exit %s)"
                           % (self.kind, self.proc.wait()))

    def time(self, name: str, iters: int) -> float:
        self.proc.stdin.write("RUN %d %s\n" % (iters, name))
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("TIME "):
                return float(line[5:])
        raise RuntimeError("worker %s died" % self.kind)

    def close(self):
        try:
            self.proc.stdin.write("STOP\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=60)


def gflop_per_sequence(d) -> float:
    """Matmul FLOPs of one sequence through the encoder (2 per multiply-add)."""
    s, h, i = d["seq"], d["hidden"], d["intermediate"]
    per_layer = 2 * s * (4 * h * h + 2 * h * i + 2 * s * h)
    return d["layers"] * per_layer / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["ours", "kerashub", "hf"])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=3, help="forward passes per measurement")
    parser.add_argument("--skip_kerashub", action="store_true")
    parser.add_argument("--skip_hf", action="store_true")
    parser.add_argument("--setup_only", action="store_true")
    args = parser.parse_args()
    d = _dims(args)
    if args.worker:
        worker(args.worker, d)
        return
    ensure_venvs(not args.skip_kerashub, not args.skip_hf)
    if args.setup_only:
        return

    workers = [Worker(sys.executable, "ours", args)]
    if not args.skip_kerashub:
        workers.append(Worker(KH_PYTHON, "kerashub", args))
    if not args.skip_hf:
        workers.append(Worker(HF_PYTHON, "hf", args))
    engines = []  # (name, worker), in measuring order
    for w in workers:  # one at a time: set-up (compilation) would disturb the others
        engines += [(name, w) for name in w.ready()]
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
    rates = {name: [] for name, _ in engines}
    try:
        for r in range(args.rounds):
            for name, w in engines:
                seconds = w.time(name, args.iters)
                rates[name].append(args.iters * d["batch"] / seconds)
            print("round %d/%d: %s" % (r + 1, args.rounds, ", ".join(
                "%s %.1f" % (n, rates[n][-1]) for n, _ in engines)), file=sys.stderr)
    finally:
        for w in workers:
            w.close()

    gflop = gflop_per_sequence(d)
    reference = rates.get(REFERENCE)
    print("\nBERT L=%d H=%d A=%d I=%d, batch %d x seq %d, %.1f GFLOP/sequence; %d rounds x %d "
          "passes; load average now %.2f" % (d["layers"], d["hidden"], d["heads"],
                                             d["intermediate"], d["batch"], d["seq"], gflop,
                                             args.rounds, args.iters, os.getloadavg()[0]))
    print("%-22s %10s %10s %10s %14s" % ("engine", "seq/s", "best", "GFLOP/s", "x " + REFERENCE))
    results = {}
    for name, _ in engines:
        median = statistics.median(rates[name])
        ratio = (statistics.median(a / b for a, b in zip(rates[name], reference))
                 if reference else float("nan"))
        results[name] = {"seq_per_s_median": median, "seq_per_s_best": max(rates[name]),
                         "ratio_vs_reference": ratio, "rounds": rates[name]}
        print("%-22s %10.2f %10.2f %10.1f %14.2f" % (name, median, max(rates[name]),
                                                    median * gflop, ratio))
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "bench_inference.json"), "w") as f:
        json.dump({"dims": d, "gflop_per_sequence": gflop, "reference": REFERENCE,
                   "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
