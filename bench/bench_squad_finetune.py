"""Benchmark (not CI): SQuAD fine-tuning quality of this port vs HF transformers, same weights.

Splits ``../shared/data/squad/v1.1/dev-v1.1.part1-of-2.json`` by article:
``--train_articles`` (default 0:7, about 2000 questions; first answer of each
question, as training requires) for training and the remaining articles for
evaluation (all gold answers). Both sides start from the all-MiniLM-L6-v2
weights (``../shared/data/minilm``; fresh span head), see the same
features from ``data.squad`` and the same step count, batch size, learning
rate and warmup, and their eval logits go through the same
``write_predictions`` and official scorer:

* ``ours``: ``modeling.squad_head.build_squad_model`` + ``modeling.optimization``
  (AdamWeightDecay as the original) trained by ``run_squad.train_squad`` on
  the TFRecords, in this process;
* ``hf``: ``BertForQuestionAnswering`` + torch AdamW (or, with
  ``--hf_optimizer=bert_adam``, the original's update), in the PyTorch venv
  ``bench/.venvs/hf`` (git-ignored), via ``bench/bench_squad_finetune_hf.py``.

Both sides use the original's schedule (linear warmup, then decay over all the
steps; the update after t updates uses schedule(t + 1)), weight decay 0.01
except LayerNorm/bias, and global-norm clipping 1.0. ``--hf_optimizer`` picks
the HF side's update: torch AdamW (bias-corrected, HF's usual) or
``bert_adam``, the original's update without bias correction (like for like).

Prints EM/F1 side by side and the F1 gap (target: within 1.0 F1). Stages can
be run one at a time (``--stages prep,hf,ours,report``); intermediate files
live in ``--work_dir`` (default ``bench/out/squad_finetune``).

``--stages parity`` (after prep) checks that the two training paths compute the
same thing: both sides train ``--parity_steps`` steps on the same batches (the
first features of train.npz, in order) with dropout off and the same span-head
init (ours, copied to HF), and the per-step losses are printed side by side.
With ``--hf_optimizer=bert_adam`` they must agree to float noise.

Set up the PyTorch venv once:

    python3 -m venv bench/.venvs/hf
    bench/.venvs/hf/bin/pip install /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl transformers safetensors numpy
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SHARED = os.path.join(os.path.dirname(ROOT), "shared")

from data import squad, squad_eval  # noqa: E402
from data.tokenization import FastFullTokenizer  # noqa: E402

MODEL_DIR = os.path.join(SHARED, "data", "minilm")
SOURCE = os.path.join(SHARED, "data", "squad", "v1.1", "dev-v1.1.part1-of-2.json")
HF_PYTHON = os.path.join(ROOT, "bench", ".venvs", "hf", "bin", "python")


def _slice(spec: str) -> slice:
    start, end = spec.split(":")
    return slice(int(start), int(end))


def _write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f)


def prep(args) -> dict:
    """Writes the split JSONs, train.tf_record/train.npz and eval.npz; returns the plan."""
    with open(SOURCE, encoding="utf-8") as f:
        root = json.load(f)
    articles = root["data"]
    train_idx = set(range(len(articles))[_slice(args.train_articles)])
    train_articles = json.loads(json.dumps([a for i, a in enumerate(articles) if i in train_idx]))
    eval_articles = [a for i, a in enumerate(articles) if i not in train_idx]
    for article in train_articles:  # training needs exactly one answer per question
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"] = qa["answers"][:1]
    train_json = os.path.join(args.work_dir, "train.json")
    eval_json = os.path.join(args.work_dir, "eval.json")
    _write_json(train_json, {"version": "1.1", "data": train_articles})
    _write_json(eval_json, {"version": "1.1", "data": eval_articles})

    tokenizer = FastFullTokenizer(os.path.join(MODEL_DIR, "vocab.txt"), do_lower_case=True)
    train_examples = squad.read_squad_examples(train_json, is_training=True)
    random.Random(12345).shuffle(train_examples)  # as run_squad
    train_features = []
    with squad.FeatureWriter(os.path.join(args.work_dir, "train.tf_record"), is_training=True) as writer:
        def keep(feature):
            train_features.append(feature)
            writer.process_feature(feature)
        squad.convert_examples_to_features(train_examples, tokenizer, args.max_seq_length,
                                           args.doc_stride, args.max_query_length, True, keep)
    eval_examples = squad.read_squad_examples(eval_json, is_training=False)
    eval_features = []
    with squad.FeatureWriter(os.path.join(args.work_dir, "eval.tf_record"), is_training=False) as writer:
        def keep_eval(feature):
            eval_features.append(feature)
            writer.process_feature(feature)
        squad.convert_examples_to_features(eval_examples, tokenizer, args.max_seq_length,
                                           args.doc_stride, args.max_query_length, False, keep_eval)

    def arr(features, name, dtype=np.int32):
        return np.asarray([getattr(f, name) for f in features], dtype=dtype)

    np.savez(os.path.join(args.work_dir, "train.npz"),
             input_ids=arr(train_features, "input_ids"), input_mask=arr(train_features, "input_mask"),
             segment_ids=arr(train_features, "segment_ids"),
             start_positions=arr(train_features, "start_position"),
             end_positions=arr(train_features, "end_position"))
    np.savez(os.path.join(args.work_dir, "eval.npz"),
             unique_ids=arr(eval_features, "unique_id", np.int64),
             input_ids=arr(eval_features, "input_ids"), input_mask=arr(eval_features, "input_mask"),
             segment_ids=arr(eval_features, "segment_ids"))
    num_train_steps = int(len(train_examples) / args.train_batch_size * args.num_train_epochs)
    plan = {
        "train_articles": args.train_articles,
        "train_questions": len(train_examples), "train_features": len(train_features),
        "eval_articles": len(eval_articles), "eval_questions": len(eval_examples),
        "eval_features": len(eval_features),
        "num_train_steps": num_train_steps,
        "num_warmup_steps": int(num_train_steps * args.warmup_proportion),
    }
    _write_json(os.path.join(args.work_dir, "plan.json"), plan)
    print("prep: %s" % json.dumps(plan), file=sys.stderr)
    return plan


def hf_name(args) -> str:
    return "hf" if args.hf_optimizer == "adamw" else "hf_" + args.hf_optimizer


def run_hf(args, plan) -> None:
    if not os.path.exists(HF_PYTHON):
        sys.exit("no PyTorch venv at %s (see this script's docstring)" % HF_PYTHON)
    cmd = [HF_PYTHON, os.path.join(ROOT, "bench", "bench_squad_finetune_hf.py"),
           "--model_dir", MODEL_DIR, "--train", os.path.join(args.work_dir, "train.npz"),
           "--eval", os.path.join(args.work_dir, "eval.npz"),
           "--output", os.path.join(args.work_dir, "%s_logits.npz" % hf_name(args)),
           "--optimizer", args.hf_optimizer,
           "--num_train_steps", str(plan["num_train_steps"]),
           "--num_warmup_steps", str(plan["num_warmup_steps"]),
           "--batch_size", str(args.train_batch_size), "--learning_rate", str(args.learning_rate),
           "--threads", str(args.threads)]
    subprocess.run(cmd, check=True)


def run_parity(args, plan) -> None:
    """Per-step losses of both sides on the same in-order batches, dropout off, same head init."""
    import tensorflow as tf

    import run_squad
    from modeling import checkpoints, finetuning, hf_import, squad_head

    steps, batch = args.parity_steps, args.train_batch_size
    train = np.load(os.path.join(args.work_dir, "train.npz"))
    if steps * batch > len(train["input_ids"]):
        sys.exit("--parity_steps=%d needs %d features, train.npz has %d"
                 % (steps, steps * batch, len(train["input_ids"])))
    tf.random.set_seed(args.seed)
    config = hf_import.read_hf_config(MODEL_DIR).replace(hidden_dropout_prob=0.0,
                                                         attention_probs_dropout_prob=0.0)
    model = run_squad.build_model(config, args.max_seq_length)
    report = checkpoints.load_checkpoint(model, MODEL_DIR, log=False)
    if sorted(report.missing) != ["cls/squad/output_bias", "cls/squad/output_weights"]:
        sys.exit("unexpected load report: %s" % report.summary())
    head = model.get_layer("squad")
    head_file = os.path.join(args.work_dir, "parity_head.npz")
    np.savez(head_file, w=head.output_weights.numpy(), b=head.output_bias.numpy())  # [2, H], [2]
    dataset = tf.data.Dataset.from_tensor_slices(
        {k: train[k][:steps * batch] for k in train.files}).batch(batch)
    optimizer = run_squad.make_optimizer(args.learning_rate, plan["num_train_steps"],
                                         plan["num_warmup_steps"])
    schedule = optimizer._learning_rate  # BertSchedule: iterations -> rate of the next update
    ours_rates = [float(schedule(i)) for i in range(steps)]
    ours = finetuning.train(model, optimizer, dataset, steps, squad_head.per_example_squad_loss,
                            log_every=max(1, steps // 4))
    out_file = os.path.join(args.work_dir, "parity_%s.json" % hf_name(args))
    cmd = [HF_PYTHON, os.path.join(ROOT, "bench", "bench_squad_finetune_hf.py"),
           "--model_dir", MODEL_DIR, "--train", os.path.join(args.work_dir, "train.npz"),
           "--eval", os.path.join(args.work_dir, "eval.npz"), "--output", out_file,
           "--optimizer", args.hf_optimizer, "--parity_steps", str(steps), "--head_init", head_file,
           "--num_train_steps", str(plan["num_train_steps"]),
           "--num_warmup_steps", str(plan["num_warmup_steps"]),
           "--batch_size", str(batch), "--learning_rate", str(args.learning_rate),
           "--threads", str(args.threads)]
    subprocess.run(cmd, check=True)
    with open(out_file, encoding="utf-8") as f:
        hf = json.load(f)
    print("parity: %d steps x batch %d in file order, dropout 0, same head init; HF update: %s"
          % (steps, batch, args.hf_optimizer))
    print("%5s %12s %12s %12s %12s %10s" % ("step", "lr ours", "lr hf", "loss ours", "loss hf",
                                             "diff"))
    for i in range(steps):
        print("%5d %12.4g %12.4g %12.6f %12.6f %+10.6f" % (
            i + 1, ours_rates[i], hf["learning_rates"][i], ours[i], hf["losses"][i],
            ours[i] - hf["losses"][i]))
    print("max |loss diff| %.6f, max |lr diff| %.3g" % (
        max(abs(a - b) for a, b in zip(ours, hf["losses"])),
        max(abs(a - b) for a, b in zip(ours_rates, hf["learning_rates"]))))


def run_ours(args, plan) -> None:
    """Fine-tunes with run_squad's own training and prediction functions, in this process."""
    import tensorflow as tf

    import run_squad
    from modeling import checkpoints, hf_import

    tf.random.set_seed(args.seed)
    config = hf_import.read_hf_config(MODEL_DIR)  # HF "gelu" = exact erf GELU, as HF runs it
    model = run_squad.build_model(config, args.max_seq_length)
    report = checkpoints.load_checkpoint(model, MODEL_DIR, log=False)
    print(report.summary(), file=sys.stderr)
    optimizer = run_squad.make_optimizer(args.learning_rate, plan["num_train_steps"],
                                         plan["num_warmup_steps"])
    print("optimizer: %s.%s" % (type(optimizer).__module__, type(optimizer).__name__), file=sys.stderr)
    t0 = time.time()
    run_squad.train_squad(model, optimizer, os.path.join(args.work_dir, "train.tf_record"),
                          args.max_seq_length, args.train_batch_size, plan["num_train_steps"],
                          seed=args.seed)
    train_seconds = time.time() - t0
    results = run_squad.predict_raw_results(model, os.path.join(args.work_dir, "eval.tf_record"),
                                            args.max_seq_length, 64)
    tmp = os.path.join(args.work_dir, "ours_logits.tmp.npz")
    np.savez(tmp, unique_ids=np.asarray([r.unique_id for r in results], np.int64),
             start_logits=np.asarray([r.start_logits for r in results], np.float32),
             end_logits=np.asarray([r.end_logits for r in results], np.float32),
             train_seconds=np.float64(train_seconds))
    os.replace(tmp, os.path.join(args.work_dir, "ours_logits.npz"))


def score(args, name: str) -> dict:
    """EM/F1 of one side's logits through write_predictions and the official scorer."""
    eval_json = os.path.join(args.work_dir, "eval.json")
    tokenizer = FastFullTokenizer(os.path.join(MODEL_DIR, "vocab.txt"), do_lower_case=True)
    examples = squad.read_squad_examples(eval_json, is_training=False)
    features = []
    squad.convert_examples_to_features(examples, tokenizer, args.max_seq_length, args.doc_stride,
                                       args.max_query_length, False, features.append)
    logits = np.load(os.path.join(args.work_dir, "%s_logits.npz" % name))
    results = [squad.RawResult(int(u), s, e) for u, s, e in
               zip(logits["unique_ids"], logits["start_logits"], logits["end_logits"])]
    pred_file = os.path.join(args.work_dir, "%s_predictions.json" % name)
    squad.write_predictions(examples, features, results, 20, 30, True, pred_file,
                            os.path.join(args.work_dir, "%s_nbest.json" % name), None)
    result = squad_eval.evaluate_files(eval_json, pred_file)
    result["train_seconds"] = float(logits["train_seconds"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default=os.path.join(ROOT, "bench", "out", "squad_finetune"))
    parser.add_argument("--stages", default="prep,hf,ours,report")
    parser.add_argument("--train_articles", default="0:7")
    parser.add_argument("--max_seq_length", type=int, default=192)
    parser.add_argument("--doc_stride", type=int, default=64)
    parser.add_argument("--max_query_length", type=int, default=48)
    parser.add_argument("--train_batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--num_train_epochs", type=float, default=2.0)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--parity_steps", type=int, default=20,
                        help="steps of the parity stage (in-order batches, dropout off)")
    parser.add_argument("--hf_optimizer", choices=["adamw", "bert_adam"], default="adamw",
                        help="HF side: torch AdamW (bias-corrected) or the original BERT update")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    stages = args.stages.split(",")

    plan = prep(args) if "prep" in stages else json.load(open(os.path.join(args.work_dir, "plan.json")))
    if "parity" in stages:
        run_parity(args, plan)
    if "hf" in stages:
        run_hf(args, plan)
    if "ours" in stages:
        run_ours(args, plan)
    if "report" in stages:
        ours = score(args, "ours")
        rows = [("bert-tf2 (this port)", ours)]
        for name, label in (("hf", "HF, torch AdamW"), ("hf_bert_adam", "HF, BERT Adam update")):
            if os.path.exists(os.path.join(args.work_dir, "%s_logits.npz" % name)):
                rows.append((label, score(args, name)))
        print("SQuAD v1.1 fine-tuning from all-MiniLM-L6-v2: train articles %s (%d questions, %d "
              "features), eval %d articles (%d questions), %d steps x batch %d, lr %g, "
              "max_seq_length %d" % (plan["train_articles"], plan["train_questions"],
                                     plan["train_features"], plan["eval_articles"],
                                     plan["eval_questions"], plan["num_train_steps"],
                                     args.train_batch_size, args.learning_rate, args.max_seq_length))
        print("%-24s %10s %10s %12s" % ("", "EM", "F1", "train s"))
        for name, r in rows:
            print("%-24s %10.2f %10.2f %12.0f" % (name, r["exact_match"], r["f1"], r["train_seconds"]))
        for name, r in rows[1:]:
            gap = ours["f1"] - r["f1"]
            print("F1 gap (port - %s): %+.2f  (target |gap| <= 1.0: %s)"
                  % (name, gap, "met" if abs(gap) <= 1.0 else "NOT met"))


if __name__ == "__main__":
    main()
