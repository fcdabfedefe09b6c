"""Benchmark (not CI): GLUE fine-tuning quality of run_classifier vs HF transformers, same weights.

Both sides start from the real all-MiniLM-L6-v2 weights (``../shared/data/minilm``: encoder and
pooler; fresh classifier), see the same features (``run_classifier``'s converter, max_seq_length
128) of the train split and are scored on the dev split with the same metric code
(``data/glue/metrics.py``), with the paper's recipe: batch 32, ``--epochs`` 3, warmup 10%,
learning rate from {2e-5, 3e-5, 5e-5} (``--learning_rates``):

* ``ours``: ``run_classifier.py --do_train --do_eval`` as a subprocess (its own optimizer,
  input pipeline and eval_results.txt; training time from the trainer's last line, "Trained to
  step N in Xs": the first trace and the final checkpoint included);
* ``hf``: ``BertForSequenceClassification`` + torch AdamW in the PyTorch venv
  ``bench/.venvs/hf`` (``torch==2.13.0`` CPU wheel + transformers; git-ignored), via
  ``bench/quality/classifier_finetune_hf.py``;
* ``hf_bert_adam`` (optional side, ``--sides ours,hf,hf_bert_adam``): the same HF model with the
  original BERT update (no Adam bias correction), as this port's optimizer: a like-for-like
  check that separates optimizer effects from model/pipeline effects;
* ``ours_opbyop`` (optional side): ``run_classifier.py`` with ``--noxla_kernels
  --noxla_optimizer``, TensorFlow's ops instead of the fused CPU kernels and the fused update:
  the speed path must not change quality beyond seed noise.

Prints every run and then, per task and learning rate, the mean over seeds side by side with
the gap to HF (``hf_bert_adam`` when run, else ``hf``) and the training times (target: ours
within 1.0 point of HF). Tasks: mrpc, rte,
sts-b, cola. Runs are cached in ``--work_dir`` (a finished run is not repeated).

    .venv/bin/python -m bench classifier_finetune --tasks mrpc,rte --seeds 1,2,3

Set up the PyTorch venv once:

    python3 -m venv bench/.venvs/hf
    bench/.venvs/hf/bin/pip install torch==2.13.0 transformers safetensors numpy
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
MODEL_DIR = os.path.join(SHARED, "data", "minilm")
GLUE = os.path.join(SHARED, "data", "glue")
HF_PYTHON = harness.HF_PYTHON
DATA_DIRS = {"mrpc": "MRPC", "rte": "RTE", "sts-b": "STS-B", "cola": "CoLA"}
MAIN_METRIC = {"mrpc": ("accuracy", "f1"), "rte": ("accuracy",), "sts-b": ("pearson", "spearmanr"),
               "cola": ("mcc",)}
SEQ = 128
BATCH = 32
# torch's OpenMP pool spins badly when the CPU is oversubscribed (shared 2-core machine: 0.06
# step/s with 2 threads under load 8); set by --hf_threads.
HF_THREADS = 1

from data.glue import processors as classifier  # noqa: E402
from data.glue import features as classifier_features
from data.glue import metrics as glue_metrics
from data.tokenization import wordpiece as tokenization


def prepare(task: str, work_dir: str) -> dict:
    """train.npz / dev.npz of run_classifier's features for the HF side."""
    out = {"train": os.path.join(work_dir, "train.npz"), "dev": os.path.join(work_dir, "dev.npz")}
    processor = classifier.get_processor(task)
    labels = processor.get_labels()
    out["num_labels"] = 1 if processor.is_regression else len(labels)
    if all(os.path.exists(out[s]) for s in ("train", "dev")):
        return out
    tokenizer = tokenization.FastFullTokenizer(os.path.join(MODEL_DIR, "vocab.txt"), True)
    data_dir = os.path.join(GLUE, DATA_DIRS[task])
    for split in ("train", "dev"):
        examples = classifier.get_examples(processor, split, data_dir)
        features = classifier_features.convert_examples_to_features(examples, labels, SEQ,
                                                                    tokenizer)
        arrays = {k: np.array([getattr(f, k) for f in features], np.int32)
                  for k in ("input_ids", "input_mask", "segment_ids")}
        arrays["label_ids"] = np.array([f.label_id for f in features],
                                       np.float32 if processor.is_regression else np.int32)
        np.savez(out[split], **arrays)
    return out


def score(task: str, logits: np.ndarray, labels: np.ndarray) -> dict:
    preds = logits[:, 0] if task == "sts-b" else np.argmax(logits, axis=-1)
    return {k: 100.0 * v for k, v in glue_metrics.task_metrics(task, preds, labels).items()}


def _run(cmd: list, env: Optional[dict], progress: str, label: str) -> list:
    """Runs ``cmd``, echoing its stderr lines that start with ``progress`` (prefixed by
    ``label``); returns its stderr lines; a failure raises with the last 20 of them."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    lines = []
    for line in proc.stderr:
        lines.append(line.rstrip())
        if line.startswith(progress):
            print("  %s: %s" % (label, line.strip()), file=sys.stderr, flush=True)
    if proc.wait() != 0:
        raise RuntimeError("%s failed:\n%s" % (label, "\n".join(lines[-20:])))
    return lines


def run_ours(task: str, seed: int, lr: float, epochs: float, run_dir: str,
             fused: bool = True) -> dict:
    result_file = os.path.join(run_dir, "result.json")
    if os.path.exists(result_file):
        return json.load(open(result_file))
    os.makedirs(run_dir, exist_ok=True)
    cmd = [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=%s" % task,
           "--data_dir=%s" % os.path.join(GLUE, DATA_DIRS[task]),
           "--vocab_file=%s" % os.path.join(MODEL_DIR, "vocab.txt"),
           "--bert_config_file=%s" % os.path.join(MODEL_DIR, "config.json"),
           "--init_checkpoint=%s" % MODEL_DIR, "--output_dir=%s" % run_dir, "--do_train",
           "--do_eval", "--max_seq_length=%d" % SEQ, "--train_batch_size=%d" % BATCH,
           "--eval_batch_size=%d" % BATCH, "--learning_rate=%g" % lr, "--num_train_epochs=%g" % epochs,
           "--save_checkpoints_steps=1000000", "--random_seed=%d" % seed,
           "--iterations_per_loop=20"]
    if not fused:
        cmd += ["--noxla_kernels", "--noxla_optimizer"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.time()
    lines = _run(cmd, env, "train step", "ours %s seed %d lr %g" % (task, seed, lr))
    # The trainer's last line: the whole training, first trace and final checkpoint included.
    done = [m for m in (re.search(r"Trained to step \d+ in ([\d.]+)s", l) for l in lines) if m]
    if not done:
        print("  ours %s seed %d: no 'Trained to step' line, training time unknown"
              % (task, seed), file=sys.stderr)
    train_seconds = float(done[-1].group(1)) if done else float("nan")
    wall = time.time() - start
    results = dict(line.split(" = ") for line in
                   open(os.path.join(run_dir, "eval_results.txt")).read().splitlines())
    metrics = {k[len("eval_"):]: 100.0 * float(v) for k, v in results.items()
               if k.startswith("eval_") and k != "eval_loss"}
    out = {"metrics": metrics, "train_seconds": train_seconds, "wall_seconds": wall}
    json.dump(out, open(result_file, "w"))
    for name in os.listdir(run_dir):  # keep results only: records and checkpoints are large
        if name.endswith((".tf_record", ".index", ".data-00000-of-00001")):
            os.remove(os.path.join(run_dir, name))
    return out


def run_hf(task: str, seed: int, lr: float, epochs: float, data: dict, run_dir: str,
           optimizer: str = "adamw") -> dict:
    result_file = os.path.join(run_dir, "result.json")
    if os.path.exists(result_file):
        return json.load(open(result_file))
    os.makedirs(run_dir, exist_ok=True)
    output = os.path.join(run_dir, "dev_logits.npz")
    cmd = [HF_PYTHON, os.path.join(ROOT, "bench", "quality", "classifier_finetune_hf.py"),
           "--model_dir=%s" % MODEL_DIR, "--train=%s" % data["train"], "--dev=%s" % data["dev"],
           "--output=%s" % output, "--num_labels=%d" % data["num_labels"],
           "--epochs=%g" % epochs, "--learning_rate=%g" % lr, "--seed=%d" % seed,
           "--optimizer=%s" % optimizer, "--threads=%d" % HF_THREADS,
           "--batch_size=%d" % BATCH, "--eval_batch_size=%d" % BATCH]
    start = time.time()
    _run(cmd, None, "hf train step", "hf(%s) %s seed %d lr %g" % (optimizer, task, seed, lr))
    got = np.load(output)
    labels = np.load(data["dev"])["label_ids"]
    out = {"metrics": score(task, got["logits"], labels),
           "train_seconds": float(got["train_seconds"]), "wall_seconds": time.time() - start}
    json.dump(out, open(result_file, "w"))
    return out


def main() -> None:
    parser = harness.parser(
        __doc__, seeds="1", epochs=3.0, sides="ours,hf",
        work_dir=os.path.join(harness.OUT_DIR, "classifier_finetune"), hf_threads=1,
        helps={"hf_threads": "torch threads of the HF side (1 on a shared, oversubscribed CPU)"})
    parser.add_argument("--tasks", default="mrpc,rte")
    parser.add_argument("--learning_rates", default="5e-5")
    args = parser.parse_args()
    global HF_THREADS
    HF_THREADS = args.hf_threads
    tasks = [classifier.canonical_task_name(t) for t in args.tasks.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    rates = [float(r) for r in args.learning_rates.split(",")]
    sides = args.sides.split(",")
    unknown = sorted(set(sides) - {"ours", "ours_opbyop", "hf", "hf_bert_adam"})
    if unknown:
        sys.exit("--sides: unknown %s (ours, ours_opbyop, hf, hf_bert_adam)" % ",".join(unknown))
    if "ours" not in sides or not {"hf", "hf_bert_adam"} & set(sides):
        sys.exit("--sides: ours and hf or hf_bert_adam (the gap is measured between them)")
    if any(side.startswith("hf") for side in sides) and not os.path.exists(HF_PYTHON):
        sys.exit("missing %s: create the PyTorch venv (see the module docstring)" % HF_PYTHON)
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
    runs = {}
    for task in tasks:
        task_dir = os.path.join(args.work_dir, task)
        os.makedirs(task_dir, exist_ok=True)
        data = prepare(task, task_dir)
        for lr in rates:
            for seed in seeds:
                tag = "lr%g_seed%d_ep%g" % (lr, seed, args.epochs)
                for side in sides:
                    run_dir = os.path.join(task_dir, "%s_%s" % (side, tag))
                    if side.startswith("ours"):
                        r = run_ours(task, seed, lr, args.epochs, run_dir, side == "ours")
                    else:
                        r = run_hf(task, seed, lr, args.epochs, data, run_dir,
                                   "adamw" if side == "hf" else "bert_adam")
                    runs[(task, lr, seed, side)] = r
                    print("%s %s %s: %s, train %.0fs" % (
                        task, tag, side, ", ".join("%s %.2f" % kv for kv in
                                                   sorted(r["metrics"].items())),
                        r["train_seconds"]), flush=True)

    print("\nall-MiniLM-L6-v2, batch %d, %g epochs, seq %d, warmup 10%%; dev scores x100, mean "
          "over %d seed(s); load average now %.2f" % (BATCH, args.epochs, SEQ, len(seeds),
                                                    os.getloadavg()[0]))
    hf = "hf_bert_adam" if "hf_bert_adam" in sides else "hf"
    header = "%-6s %-8s %-10s" % ("task", "lr", "metric")
    header += "".join(" %12s" % side for side in sides) + " %16s" % ("ours-" + hf)
    header += "".join(" %12s" % (side + " s") for side in sides)
    print(header)
    summary = []
    for task in tasks:
        for lr in rates:
            for metric in MAIN_METRIC[task]:
                row = {"task": task, "lr": lr, "metric": metric, "seeds": seeds}
                for side in sides:
                    got = [runs[(task, lr, s, side)] for s in seeds if (task, lr, s, side) in runs]
                    row[side] = float(np.mean([g["metrics"][metric] for g in got])) if got \
                        else float("nan")
                    row[side + "_seeds"] = len(got)
                    row[side + "_train_s"] = float(np.mean([g["train_seconds"] for g in got])) \
                        if got else float("nan")
                summary.append(row)
                line = "%-6s %-8g %-10s" % (task, lr, metric)
                line += "".join(" %12.2f" % row[side] for side in sides)
                row["ours_minus_" + hf] = row["ours"] - row[hf]
                line += " %+16.2f" % row["ours_minus_" + hf]
                line += "".join(" %12.0f" % row[side + "_train_s"] for side in sides)
                print(line)
                if "ours_opbyop" in sides:
                    per_seed = [runs[(task, lr, s, side)]["metrics"][metric]
                                for side in ("ours", "ours_opbyop") for s in seeds]
                    print("%-26s ours seeds %s, ours_opbyop seeds %s" % (
                        "", " ".join("%.2f" % v for v in per_seed[:len(seeds)]),
                        " ".join("%.2f" % v for v in per_seed[len(seeds):])))
    with open(os.path.join(args.work_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
