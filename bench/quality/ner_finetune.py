"""Benchmark (not CI): CoNLL-2003 NER with all-MiniLM-L6-v2, run_ner.py vs HF transformers.

Both sides start from the real all-MiniLM-L6-v2 weights (``../shared/data/minilm``; fresh token
classifier), train on ``conll2003/train.txt`` and are scored on ``valid.txt`` with the same
``conlleval`` code (``data/ner/conlleval.py``) over the same windows (``data/ner/features.py``:
first sub-token of each word, ``--max_seq_length`` 128, ``--document_context`` or one sentence
per sequence), batch 32, warmup 10%, the same learning rate and step count:

* ``ours``: ``run_ner.py --do_train --do_eval`` as a subprocess (its eval_results.txt; training
  time from its progress lines);
* ``hf``: ``BertForTokenClassification`` in the PyTorch venv ``bench/.venvs/hf`` on the same
  windows (``train.npz``/``dev.npz`` written here), via ``bench/quality/ner_finetune_hf.py``,
  with the original BERT update (``--hf_optimizer=bert_adam``, as this port's optimizer: a
  like-for-like recipe) or torch AdamW;
* ``feature:<mode>``: ``run_ner.py --feature_mode=<mode>`` (Table 7's feature-based rows:
  frozen MiniLM, two-layer BiLSTM, classifier).

Prints every run, then per side the mean entity F1 over seeds and the training time per epoch.
Runs are cached in ``--work_dir``.

    .venv/bin/python -m bench ner_finetune --seeds 1,2 --epochs 1 \\
        --sides ours,hf,feature:last_hidden,feature:concat_last_four_hidden

Set up the PyTorch venv once (see classifier_finetune.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
MODEL_DIR = os.path.join(SHARED, "data", "minilm")
CONLL = os.path.join(SHARED, "data", "conll2003")
HF_PYTHON = harness.HF_PYTHON
SEQ = 128
BATCH = 32

from bert_tasks import ner as task  # noqa: E402
from data.ner import conll  # noqa: E402
from data.ner import features as ner_features  # noqa: E402
from data.tokenization import wordpiece as tokenization  # noqa: E402


def _windows(split, labels, context):
    tokenizer = tokenization.FastFullTokenizer(os.path.join(MODEL_DIR, "vocab.txt"), True)
    sentences = conll.read_conll(os.path.join(CONLL, split))
    return sentences, ner_features.convert_sentences(sentences, labels, SEQ, tokenizer, context)


def prepare(work_dir: str, context: bool) -> dict:
    """train.npz / dev.npz of run_ner's windows for the HF side."""
    labels = conll.label_list(conll.read_conll(os.path.join(CONLL, "train.txt")))
    out = {"train": os.path.join(work_dir, "train.npz"), "dev": os.path.join(work_dir, "dev.npz"),
           "labels": labels}
    for split, name in (("train", "train.txt"), ("dev", "valid.txt")):
        if os.path.exists(out[split]):
            continue
        _, windows = _windows(name, labels, context)
        arrays = {k: np.array([getattr(w, k) for w in windows],
                              np.float32 if k == "label_weights" else np.int32)
                  for k in ("input_ids", "input_mask", "segment_ids", "label_ids",
                            "label_weights")}
        np.savez(out[split], **arrays)
    return out


def _result(run_dir: str):
    path = os.path.join(run_dir, "result.json")
    return json.load(open(path)) if os.path.exists(path) else None


def run_ours(seed, lr, epochs, context, run_dir, feature_mode=None, threads=0) -> dict:
    cached = _result(run_dir)
    if cached:
        return cached
    os.makedirs(run_dir, exist_ok=True)
    cmd = [sys.executable, os.path.join(ROOT, "run_ner.py"), "--data_dir=%s" % CONLL,
           "--vocab_file=%s" % os.path.join(MODEL_DIR, "vocab.txt"),
           "--bert_config_file=%s" % os.path.join(MODEL_DIR, "config.json"),
           "--init_checkpoint=%s" % MODEL_DIR, "--output_dir=%s" % run_dir, "--do_train",
           "--do_eval", "--max_seq_length=%d" % SEQ, "--train_batch_size=%d" % BATCH,
           "--eval_batch_size=64", "--learning_rate=%g" % lr, "--num_train_epochs=%g" % epochs,
           "--save_checkpoints_steps=1000000", "--random_seed=%d" % seed,
           "--iterations_per_loop=20", "--%sdocument_context" % ("" if context else "no")]
    if feature_mode:
        cmd.append("--feature_mode=%s" % feature_mode)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.time()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    last = ""
    for line in proc.stderr:
        if line.startswith("train step"):
            last = line.strip()
            print("  %s seed %d: %s" % (feature_mode or "ours", seed, last), file=sys.stderr,
                  flush=True)
        elif "error" in line:
            print(line, end="", file=sys.stderr)
    if proc.wait() != 0:
        raise RuntimeError("run_ner failed (%s)" % run_dir)
    match = re.match(r"train step (\d+)/\d+ .*?([\d.]+) examples/s", last)
    train_seconds = (int(match.group(1)) * BATCH / float(match.group(2))) if match \
        else float("nan")
    results = dict(line.split(" = ") for line in
                   open(os.path.join(run_dir, "eval_results.txt")).read().splitlines())
    out = {"f1": float(results["f1"]), "precision": float(results["precision"]),
           "recall": float(results["recall"]), "train_seconds": train_seconds,
           "wall_seconds": time.time() - start}
    json.dump(out, open(os.path.join(run_dir, "result.json"), "w"))
    for name in os.listdir(run_dir):  # keep results only: records and checkpoints are large
        if name.endswith((".tf_record", ".index", ".data-00000-of-00001")):
            os.remove(os.path.join(run_dir, name))
    return out


def run_hf(seed, lr, epochs, data, context, run_dir, optimizer, threads) -> dict:
    cached = _result(run_dir)
    if cached:
        return cached
    os.makedirs(run_dir, exist_ok=True)
    output = os.path.join(run_dir, "dev_logits.npz")
    cmd = [HF_PYTHON, os.path.join(ROOT, "bench", "quality", "ner_finetune_hf.py"),
           "--model_dir=%s" % MODEL_DIR, "--train=%s" % data["train"], "--dev=%s" % data["dev"],
           "--output=%s" % output, "--num_labels=%d" % len(data["labels"]),
           "--epochs=%g" % epochs, "--learning_rate=%g" % lr, "--seed=%d" % seed,
           "--batch_size=%d" % BATCH, "--optimizer=%s" % optimizer, "--threads=%d" % threads]
    start = time.time()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    for line in proc.stderr:
        if line.startswith("hf train step"):
            print("  hf seed %d: %s" % (seed, line.strip()), file=sys.stderr, flush=True)
    if proc.wait() != 0:
        raise RuntimeError("HF run failed (%s)" % run_dir)
    got = np.load(output)
    sentences, windows = _windows("valid.txt", data["labels"], context)
    tags, _ = task.window_predictions(sentences, windows, got["logits"], data["labels"])
    scored = task.score(sentences, tags)
    out = {"f1": scored.f1, "precision": scored.precision, "recall": scored.recall,
           "train_seconds": float(got["train_seconds"]), "wall_seconds": time.time() - start}
    json.dump(out, open(os.path.join(run_dir, "result.json"), "w"))
    os.remove(output)
    return out


def main() -> None:
    parser = harness.parser(
        __doc__, seeds="1,2", learning_rate=5e-5, epochs=1.0, sides="ours,hf",
        hf_optimizer="bert_adam", hf_threads=2,
        work_dir=os.path.join(harness.OUT_DIR, "ner_finetune"))
    parser.add_argument("--document_context", type=int, default=0,
                        help="1: the paper's document context (sequences fill 128 tokens: "
                             "about 5x the compute of one sentence per sequence)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    sides = args.sides.split(",")
    context = bool(args.document_context)
    if "hf" in sides and not os.path.exists(HF_PYTHON):
        sys.exit("missing %s: create the PyTorch venv (see the module docstring)" % HF_PYTHON)
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
    work = os.path.join(args.work_dir, "ctx%d" % context)
    os.makedirs(work, exist_ok=True)
    data = prepare(work, context) if "hf" in sides else None
    runs = {}
    for seed in seeds:
        for side in sides:
            tag = "%s_lr%g_ep%g_seed%d" % (side.replace(":", "-"), args.learning_rate,
                                           args.epochs, seed)
            if side == "hf":
                tag += "_" + args.hf_optimizer
            run_dir = os.path.join(work, tag)
            if side == "hf":
                r = run_hf(seed, args.learning_rate, args.epochs, data, context, run_dir,
                           args.hf_optimizer, args.hf_threads)
            else:
                mode = side.split(":", 1)[1] if side.startswith("feature:") else None
                r = run_ours(seed, args.learning_rate, args.epochs, context, run_dir, mode)
            runs[(side, seed)] = r
            print("%s seed %d: F1 %.2f (P %.2f R %.2f), train %.0f s" % (
                side, seed, r["f1"], r["precision"], r["recall"], r["train_seconds"]),
                flush=True)
    print("\nall-MiniLM-L6-v2, CoNLL-2003 valid, batch %d, %g epoch(s), lr %g, seq %d, "
          "document context %s; mean over seeds %s; load average now %.2f"
          % (BATCH, args.epochs, args.learning_rate, SEQ, "on" if context else "off",
             ",".join(map(str, seeds)), os.getloadavg()[0]))
    summary = []
    for side in sides:
        got = [runs[(side, s)] for s in seeds]
        row = {"side": side, "f1": float(np.mean([g["f1"] for g in got])),
               "f1_per_seed": [g["f1"] for g in got],
               "train_s_per_epoch": float(np.mean([g["train_seconds"] for g in got]))
               / args.epochs}
        summary.append(row)
        print("%-36s F1 %6.2f  (%s)  train %5.0f s/epoch" % (
            side, row["f1"], ", ".join("%.2f" % f for f in row["f1_per_seed"]),
            row["train_s_per_epoch"]))
    by_side = {row["side"]: row["f1"] for row in summary}
    if "ours" in by_side and "hf" in by_side:
        print("ours - hf: %+.2f F1" % (by_side["ours"] - by_side["hf"]))
    with open(os.path.join(work, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
