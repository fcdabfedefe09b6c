"""Benchmark (not CI): SQuAD fine-tuning quality of this port vs HF transformers, same weights.

Splits ``../shared/data/squad/v1.1/dev-v1.1.part1-of-2.json`` by article:
``--train_articles`` (default 0:7, about 2000 questions; first answer of each
question, as training requires) for training and the remaining articles for
evaluation (all gold answers). Both sides start from the all-MiniLM-L6-v2
weights (``../shared/data/minilm``; fresh span head), see the same
features from ``data.squad.features`` and the same step count, batch size, learning
rate and warmup, and their eval logits go through the same
``write_predictions`` and official scorer:

* ``ours``: ``modeling.heads.squad.build_squad_model`` + ``modeling.training.optimizers``
  (AdamWeightDecay as the original) trained by ``bert_tasks.squad (finetune)`` on
  the TFRecords, in this process;
* ``hf``: ``BertForQuestionAnswering`` + torch AdamW (or, with
  ``--hf_optimizer=bert_adam``, the original's update), in the PyTorch venv
  ``bench/.venvs/hf`` (git-ignored), via ``bench/quality/squad_finetune_hf.py``.

Both sides use the original's schedule (linear warmup, then decay over all the
steps; the update after t updates uses schedule(t + 1)), weight decay 0.01
except LayerNorm/bias, and global-norm clipping 1.0. ``--hf_optimizer`` picks
the HF side's update: torch AdamW (bias-corrected, HF's usual) or
``bert_adam``, the original's update without bias correction (like for like).

Default recipe: the paper's fine-tuning recipe, sane for both updates (the original's has no
Adam bias correction, so its early updates are several times AdamW's; a high rate hurts it
most): batch 32, lr 5e-5, 2 epochs, warmup 0.1, max_seq_length 128, doc_stride 64,
max_query_length 48.

Seeded and reproducible: for each seed of ``--seeds`` (comma-separated), ours calls
``keras.utils.set_random_seed(seed)`` before building the model (span-head init, dropout) and
shuffles the TFRecords with that seed; the HF side calls ``torch.manual_seed(seed)`` before
building its model and draws its batch order from a generator seeded with it. Logits go to
``<side>_s<seed>_logits.npz``; the report scores every seed of every side trained with the
current recipe and prints per-seed rows, the mean (and std over seeds) and the gap of means.

Prints EM/F1 side by side and the F1 gap (target: within 1.0 F1). Stages can
be run one at a time (``--stages prep,hf,ours,report``); intermediate files
live in ``--work_dir`` (default ``bench/out/squad_finetune``). ``--hf_optimizer`` takes a
comma-separated list (``adamw,bert_adam`` runs both HF sides).

``--stages matched`` (after prep) removes init and data-order luck from the comparison: for each
seed, both sides train on the same batches (a per-epoch permutation of train.npz rows, drawn
from the seed), from the same span-head init (ours, copied to HF), with dropout on; only the
dropout masks differ. Logits go to ``ours_matched_s<seed>`` and ``hf[_bert_adam]_matched_s<seed>``
and the report prints the per-seed paired F1 differences.

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

import glob
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402
SHARED = os.path.join(os.path.dirname(ROOT), "shared")

from data import squad  # noqa: E402
from data.squad import evaluate as squad_eval
from data.tokenization.wordpiece import FastFullTokenizer  # noqa: E402

MODEL_DIR = os.path.join(SHARED, "data", "minilm")
SOURCE = os.path.join(SHARED, "data", "squad", "v1.1", "dev-v1.1.part1-of-2.json")
HF_PYTHON = harness.HF_PYTHON


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
        "max_seq_length": args.max_seq_length, "doc_stride": args.doc_stride,
        "max_query_length": args.max_query_length, "train_batch_size": args.train_batch_size,
        "num_train_epochs": args.num_train_epochs, "warmup_proportion": args.warmup_proportion,
    }
    tmp = os.path.join(args.work_dir, "plan.json.tmp")
    _write_json(tmp, plan)
    os.replace(tmp, os.path.join(args.work_dir, "plan.json"))
    print("prep: %s" % json.dumps(plan), file=sys.stderr)
    return plan


def load_plan(args) -> dict:
    """plan.json of an earlier prep; exits if its feature/step recipe differs from the flags."""
    path = os.path.join(args.work_dir, "plan.json")
    if not os.path.exists(path):
        sys.exit("no %s: run --stages prep first" % path)
    with open(path, encoding="utf-8") as f:
        plan = json.load(f)
    for flag in ("train_articles", "max_seq_length", "doc_stride", "max_query_length",
                 "train_batch_size", "num_train_epochs", "warmup_proportion"):
        if flag in plan and plan[flag] != getattr(args, flag):
            sys.exit("--%s=%s differs from the prep in %s (%s): rerun prep or pass the same flag"
                     % (flag, getattr(args, flag), path, plan[flag]))
    return plan


def hf_name(optimizer: str) -> str:
    return "hf" if optimizer == "adamw" else "hf_" + optimizer


def logits_path(args, name: str, seed: int) -> str:
    return os.path.join(args.work_dir, "%s_s%d_logits.npz" % (name, seed))


def run_hf(args, plan, optimizer: str, seed: int) -> None:
    if not os.path.exists(HF_PYTHON):
        sys.exit("no PyTorch venv at %s (see this script's docstring)" % HF_PYTHON)
    cmd = [HF_PYTHON, os.path.join(ROOT, "bench", "quality", "squad_finetune_hf.py"),
           "--model_dir", MODEL_DIR, "--train", os.path.join(args.work_dir, "train.npz"),
           "--eval", os.path.join(args.work_dir, "eval.npz"),
           "--output", logits_path(args, hf_name(optimizer), seed),
           "--optimizer", optimizer, "--seed", str(seed),
           "--num_train_steps", str(plan["num_train_steps"]),
           "--num_warmup_steps", str(plan["num_warmup_steps"]),
           "--batch_size", str(args.train_batch_size), "--learning_rate", str(args.learning_rate),
           "--threads", str(args.threads)]
    subprocess.run(cmd, check=True)


def run_parity(args, plan, optimizer: str) -> None:
    """Per-step losses of both sides on the same in-order batches, dropout off, same head init."""
    import tempfile

    import keras
    import tensorflow as tf

    from modeling import checkpoints
    from modeling.checkpoints import hf as hf_import
    from modeling.heads import squad as squad_head
    from modeling.training import finetuning, optimizers

    steps, batch = args.parity_steps, args.train_batch_size
    train = np.load(os.path.join(args.work_dir, "train.npz"))
    if steps * batch > len(train["input_ids"]):
        sys.exit("--parity_steps=%d needs %d features, train.npz has %d"
                 % (steps, steps * batch, len(train["input_ids"])))
    keras.utils.set_random_seed(args.seed)
    config = hf_import.read_hf_config(MODEL_DIR).replace(hidden_dropout_prob=0.0,
                                                         attention_probs_dropout_prob=0.0)
    model = squad_head.build_squad_model(config, seq_length=args.max_seq_length)
    report = checkpoints.load_checkpoint(model, MODEL_DIR, log=False)
    if sorted(report.missing) != ["cls/squad/output_bias", "cls/squad/output_weights"]:
        sys.exit("unexpected load report: %s" % report.summary())
    head = model.get_layer("squad")
    head_file = os.path.join(args.work_dir, "parity_head.npz")
    np.savez(head_file, w=head.output_weights.numpy(), b=head.output_bias.numpy())  # [2, H], [2]
    dataset = tf.data.Dataset.from_tensor_slices(
        {k: train[k][:steps * batch] for k in train.files}).batch(batch, drop_remainder=True)
    optimizer = optimizers.create_optimizer(args.learning_rate, plan["num_train_steps"],
                                              plan["num_warmup_steps"])
    schedule = optimizer._learning_rate  # BertSchedule: iterations -> rate of the next update
    ours_rates = [float(schedule(i)) for i in range(steps)]
    with tempfile.TemporaryDirectory() as model_dir:  # fresh: nothing to resume from
        ours = finetuning.finetune(model, optimizer, dataset, squad_head.per_example_squad_loss,
                                   model_dir=model_dir, num_train_steps=steps,
                                   steps_per_loop=max(1, steps // 4)).step_losses
    out_file = os.path.join(args.work_dir, "parity_%s.json" % hf_name(optimizer))
    cmd = [HF_PYTHON, os.path.join(ROOT, "bench", "quality", "squad_finetune_hf.py"),
           "--model_dir", MODEL_DIR, "--train", os.path.join(args.work_dir, "train.npz"),
           "--eval", os.path.join(args.work_dir, "eval.npz"), "--output", out_file,
           "--optimizer", optimizer, "--parity_steps", str(steps), "--head_init", head_file,
           "--num_train_steps", str(plan["num_train_steps"]),
           "--num_warmup_steps", str(plan["num_warmup_steps"]),
           "--batch_size", str(batch), "--learning_rate", str(args.learning_rate),
           "--threads", str(args.threads)]
    subprocess.run(cmd, check=True)
    with open(out_file, encoding="utf-8") as f:
        hf = json.load(f)
    print("parity: %d steps x batch %d in file order, dropout 0, same head init; HF update: %s"
          % (steps, batch, optimizer))
    print("%5s %12s %12s %12s %12s %10s" % ("step", "lr ours", "lr hf", "loss ours", "loss hf",
                                             "diff"))
    for i in range(steps):
        print("%5d %12.4g %12.4g %12.6f %12.6f %+10.6f" % (
            i + 1, ours_rates[i], hf["learning_rates"][i], ours[i], hf["losses"][i],
            ours[i] - hf["losses"][i]))
    print("max |loss diff| %.6f, max |lr diff| %.3g" % (
        max(abs(a - b) for a, b in zip(ours, hf["losses"])),
        max(abs(a - b) for a, b in zip(ours_rates, hf["learning_rates"]))))


def run_ours(args, plan, seed: int) -> None:
    """Fine-tunes with run_squad's training and prediction (``bert_tasks.squad``), in process.

    ``keras.utils.set_random_seed(seed)`` (python, numpy, TF and Keras' global seed generator)
    before the model is built fixes the span-head init and the dropout masks; ``seed`` also
    fixes the TFRecord shuffle order.
    """
    import tempfile

    import keras

    from bert_tasks import squad as squad_task
    from modeling import checkpoints
    from modeling.checkpoints import hf as hf_import
    from modeling.heads import squad as squad_head
    from modeling.training import finetuning, optimizers

    keras.utils.set_random_seed(seed)
    config = hf_import.read_hf_config(MODEL_DIR)  # HF "gelu" = exact erf GELU, as HF runs it
    model = squad_head.build_squad_model(config, seq_length=args.max_seq_length)
    report = checkpoints.load_checkpoint(model, MODEL_DIR, log=False)
    print(report.summary(), file=sys.stderr)
    optimizer = optimizers.create_optimizer(args.learning_rate, plan["num_train_steps"],
                                              plan["num_warmup_steps"])
    print("optimizer: %s.%s" % (type(optimizer).__module__, type(optimizer).__name__), file=sys.stderr)
    t0 = time.time()
    dataset = squad_task.dataset(os.path.join(args.work_dir, "train.tf_record"),
                                 args.max_seq_length, args.train_batch_size, True, seed=seed)
    with tempfile.TemporaryDirectory() as model_dir:  # fresh: nothing to resume from
        finetuning.finetune(model, optimizer, dataset, squad_task.per_example_loss,
                            model_dir=model_dir, num_train_steps=plan["num_train_steps"])
    save_eval_logits(model, args, plan, "ours", seed, time.time() - t0)


def save_eval_logits(model, args, plan, name: str, seed: int, train_seconds: float) -> None:
    """Predicts eval.tf_record with run_squad's prediction function; writes <name>_s<seed>."""
    from bert_tasks import squad as squad_task

    results = squad_task.predict_raw_results(model, os.path.join(args.work_dir, "eval.tf_record"),
                                            args.max_seq_length, 64)
    path = logits_path(args, name, seed)
    tmp = path[:-len(".npz")] + ".tmp.npz"
    np.savez(tmp, unique_ids=np.asarray([r.unique_id for r in results], np.int64),
             start_logits=np.asarray([r.start_logits for r in results], np.float32),
             end_logits=np.asarray([r.end_logits for r in results], np.float32),
             train_seconds=np.float64(train_seconds),
             learning_rate=np.float64(args.learning_rate),
             num_train_steps=np.int64(plan["num_train_steps"]))
    os.replace(tmp, path)


def matched_order(n: int, steps: int, batch: int, seed: int) -> np.ndarray:
    """Row indices of ``steps`` batches: a fresh permutation of the n features per epoch."""
    epochs = -(-steps * batch // n)
    order = np.concatenate([np.random.RandomState(seed * 1000 + e).permutation(n)
                            for e in range(epochs)])
    return order[:steps * batch]


def run_matched(args, plan, seed: int, optimizers) -> None:
    """Both sides on the same batches (train.npz rows in ``matched_order``), the same span-head
    init (ours, copied to HF) and dropout on: only dropout masks differ, so the per-seed gap
    measures the implementations, not init or data-order luck."""
    import tempfile

    import keras
    import tensorflow as tf

    from modeling import checkpoints
    from modeling.checkpoints import hf as hf_import
    from modeling.heads import squad as squad_head
    from modeling.training import finetuning, optimizers

    steps, batch = plan["num_train_steps"], args.train_batch_size
    train = np.load(os.path.join(args.work_dir, "train.npz"))
    order = matched_order(len(train["input_ids"]), steps, batch, seed)
    rows = {k: train[k][order] for k in train.files}
    train_file = os.path.join(args.work_dir, "matched_s%d_train.npz" % seed)
    np.savez(train_file, **rows)
    keras.utils.set_random_seed(seed)
    config = hf_import.read_hf_config(MODEL_DIR)
    model = squad_head.build_squad_model(config, seq_length=args.max_seq_length)
    report = checkpoints.load_checkpoint(model, MODEL_DIR, log=False)
    if sorted(report.missing) != ["cls/squad/output_bias", "cls/squad/output_weights"]:
        sys.exit("unexpected load report: %s" % report.summary())
    head = model.get_layer("squad")
    head_file = os.path.join(args.work_dir, "matched_s%d_head.npz" % seed)
    np.savez(head_file, w=head.output_weights.numpy(), b=head.output_bias.numpy())  # [2, H], [2]
    for optimizer_name in optimizers:
        name = hf_name(optimizer_name) + "_matched"
        cmd = [HF_PYTHON, os.path.join(ROOT, "bench", "quality", "squad_finetune_hf.py"),
               "--model_dir", MODEL_DIR, "--train", train_file,
               "--eval", os.path.join(args.work_dir, "eval.npz"),
               "--output", logits_path(args, name, seed), "--optimizer", optimizer_name,
               "--in_order", "--head_init", head_file, "--seed", str(seed),
               "--num_train_steps", str(steps), "--num_warmup_steps", str(plan["num_warmup_steps"]),
               "--batch_size", str(batch), "--learning_rate", str(args.learning_rate),
               "--threads", str(args.threads)]
        subprocess.run(cmd, check=True)
    dataset = tf.data.Dataset.from_tensor_slices(rows).batch(batch, drop_remainder=True)
    optimizer = optimizers.create_optimizer(args.learning_rate, steps,
                                              plan["num_warmup_steps"])
    t0 = time.time()
    with tempfile.TemporaryDirectory() as model_dir:  # fresh: nothing to resume from
        finetuning.finetune(model, optimizer, dataset, squad_head.per_example_squad_loss,
                            model_dir=model_dir, num_train_steps=steps, steps_per_loop=50)
    save_eval_logits(model, args, plan, "ours_matched", seed, time.time() - t0)


# (name, label, the port's run it is compared with)
SIDES = (("ours", "bert-tf2 (this port)", None),
         ("hf", "HF, torch AdamW", "ours"),
         ("hf_bert_adam", "HF, BERT Adam update", "ours"),
         ("ours_matched", "bert-tf2, matched", None),
         ("hf_matched", "HF AdamW, matched", "ours_matched"),
         ("hf_bert_adam_matched", "HF BERT Adam, matched", "ours_matched"))


def runs_of(args, plan, name: str) -> dict:
    """{seed: logits path} of one side, trained with the current lr and step count."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(args.work_dir, "%s_s*_logits.npz" % name))):
        seed = os.path.basename(path)[len(name) + 2:-len("_logits.npz")]
        if not seed.isdigit():
            continue
        with np.load(path) as logits:
            if ("learning_rate" not in logits or float(logits["learning_rate"]) != args.learning_rate
                    or len(logits["unique_ids"]) != plan["eval_features"]
                    or int(logits.get("num_train_steps", -1)) != plan["num_train_steps"]):
                print("report: skipping %s (another recipe)" % path, file=sys.stderr)
                continue
        runs[int(seed)] = path
    return runs


def score(args, examples, features, name: str, path: str) -> dict:
    """EM/F1 of one run's logits through write_predictions and the official scorer."""
    eval_json = os.path.join(args.work_dir, "eval.json")
    logits = np.load(path)
    results = [squad.RawResult(int(u), s, e) for u, s, e in
               zip(logits["unique_ids"], logits["start_logits"], logits["end_logits"])]
    pred_file = os.path.join(args.work_dir, "%s_predictions.json" % name)
    squad.write_predictions(examples, features, results, 20, 30, True, pred_file,
                            os.path.join(args.work_dir, "%s_nbest.json" % name), None)
    result = squad_eval.evaluate_files(eval_json, pred_file)
    result["train_seconds"] = float(logits["train_seconds"])
    return result


def report(args, plan) -> None:
    """Per-seed and mean EM/F1 of every side, and the gap of mean F1 (port - HF side)."""
    eval_json = os.path.join(args.work_dir, "eval.json")
    tokenizer = FastFullTokenizer(os.path.join(MODEL_DIR, "vocab.txt"), do_lower_case=True)
    examples = squad.read_squad_examples(eval_json, is_training=False)
    features = []
    squad.convert_examples_to_features(examples, tokenizer, args.max_seq_length, args.doc_stride,
                                       args.max_query_length, False, features.append)
    scores = {}  # name -> {seed: result}
    for name, _, _ in SIDES:
        runs = runs_of(args, plan, name)
        if runs:
            scores[name] = {seed: score(args, examples, features, name, path)
                            for seed, path in runs.items()}
    if "ours" not in scores and "ours_matched" not in scores:
        sys.exit("report: no ours[_matched]_s<seed>_logits.npz for this recipe in %s"
                 % args.work_dir)
    print("SQuAD v1.1 fine-tuning from all-MiniLM-L6-v2: train articles %s (%d questions, %d "
          "features), eval %d articles (%d questions, %d features), %d steps (warmup %d) x batch "
          "%d, lr %g, max_seq_length %d, doc_stride %d, max_query_length %d"
          % (plan["train_articles"], plan["train_questions"], plan["train_features"],
             plan["eval_articles"], plan["eval_questions"], plan["eval_features"],
             plan["num_train_steps"], plan["num_warmup_steps"], args.train_batch_size,
             args.learning_rate, args.max_seq_length, args.doc_stride, args.max_query_length))
    print("%-24s %6s %8s %8s %10s" % ("per seed", "seed", "EM", "F1", "train s"))
    for name, label, _ in SIDES:
        for seed, r in sorted(scores.get(name, {}).items()):
            print("%-24s %6d %8.2f %8.2f %10.0f" % (label, seed, r["exact_match"], r["f1"],
                                                    r["train_seconds"]))
    print("%-24s %6s %8s %14s %10s" % ("mean over seeds", "seeds", "EM", "F1 (std)", "train s"))
    means = {}
    for name, label, _ in SIDES:
        if name not in scores:
            continue
        rs = list(scores[name].values())
        f1 = np.array([r["f1"] for r in rs])
        means[name] = float(f1.mean())
        print("%-24s %6d %8.2f %8.2f (%4.2f) %10.0f" % (
            label, len(rs), np.mean([r["exact_match"] for r in rs]), f1.mean(),
            f1.std(ddof=1) if len(rs) > 1 else 0.0, np.mean([r["train_seconds"] for r in rs])))
    for name, label, ref in SIDES:
        if ref is None or name not in means or ref not in means:
            continue
        gap = means[ref] - means[name]
        paired = sorted(set(scores[name]) & set(scores[ref]))
        diffs = " ".join("s%d %+.2f" % (seed, scores[ref][seed]["f1"] - scores[name][seed]["f1"])
                         for seed in paired) if ref == "ours_matched" else ""
        print("F1 gap of means (%s - %s): %+.2f %s (target |gap| <= 1.0: %s)"
              % (dict((n, l) for n, l, _ in SIDES)[ref], label, gap,
                 "(per seed: %s)" % diffs if diffs else "", "met" if abs(gap) <= 1.0 else "NOT met"))


def main() -> None:
    parser = harness.parser(
        __doc__, work_dir=os.path.join(harness.OUT_DIR, "squad_finetune"), max_seq_length=128,
        doc_stride=64, max_query_length=48, learning_rate=5e-5, seeds="12345", seed=12345,
        helps={"seeds": "comma-separated seeds; hf and ours train once per seed",
               "seed": "seed of the parity stage"})
    parser.add_argument("--stages", default="prep,hf,ours,report")
    parser.add_argument("--train_articles", default="0:7")
    parser.add_argument("--train_batch_size", type=int, default=32)
    parser.add_argument("--num_train_epochs", type=float, default=2.0)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of the HF side (1: torch's OpenMP pool crawls on an "
                        "oversubscribed CPU)")
    parser.add_argument("--parity_steps", type=int, default=20,
                        help="steps of the parity stage (in-order batches, dropout off)")
    parser.add_argument("--hf_optimizer", default="adamw",
                        help="HF side(s), comma-separated: adamw (torch AdamW, bias-corrected) "
                        "and/or bert_adam (the original BERT update)")
    args = parser.parse_args()
    optimizers = args.hf_optimizer.split(",")
    for optimizer in optimizers:
        if optimizer not in ("adamw", "bert_adam"):
            sys.exit("--hf_optimizer: %r is neither adamw nor bert_adam" % optimizer)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        sys.exit("--seeds: expected comma-separated integers, got %r" % args.seeds)
    os.makedirs(args.work_dir, exist_ok=True)
    stages = args.stages.split(",")

    plan = prep(args) if "prep" in stages else load_plan(args)
    if "parity" in stages:
        for optimizer in optimizers:
            run_parity(args, plan, optimizer)
    for seed in seeds:
        if "matched" in stages:
            run_matched(args, plan, seed, optimizers)
        if "hf" in stages:
            for optimizer in optimizers:
                run_hf(args, plan, optimizer, seed)
        if "ours" in stages:
            run_ours(args, plan, seed)
    if "report" in stages:
        report(args, plan)


if __name__ == "__main__":
    main()
