"""Fine-tuning and prediction speed on real data: this port vs keras-hub vs HF transformers.

Workloads (``--workloads``), each with a train phase and a predict phase:

* ``squad-base``: SQuAD v1.1 (``../shared/data/squad/v1.1/dev-v1.1.part1-of-2.json``; training
  features from its questions with their first answer, as run_squad writes them), the original's
  ``--max_seq_length=384 --doc_stride=128 --max_query_length=64``, BERT-base shape (L=12,
  H=768, A=12, I=3072; random weights: the cost is the same);
* ``squad-minilm``: the same with all-MiniLM-L6-v2 (L=6, H=384, A=12, I=1536; our side loads
  the real weights, the peers random ones of the same shape);
* ``mrpc``, ``sst2``: GLUE MRPC and SST-2 at ``--max_seq_length=128``, MiniLM shape (train:
  ``MRPC/train.tsv``, the first rows of ``SST-2/train_part1_alps-train.tsv``; predict: ``dev.tsv``).

Phases and engines (each figure: one unit of work timed, interleaved rounds):

* train: ``--train_steps`` optimizer updates of batch ``train_batch`` (clip 1.0 + Adam with
  weight decay); figure = sequences/s.

  - ``ours``: the fine-tuning tools' step (``backends.tensorflow.steps.Trainer`` with their
    defaults ``--xla_kernels --xla_optimizer`` and ``--length_aware_batching``: each batch of
    the tool's own input pipeline over its TFRecords is cut to its longest sequence);
  - ``keras-hub fit XLA`` / ``keras-hub fit``: ``BertBackbone`` + the task's head
    (``BertTextClassifier``; for SQuAD a ``Dense(2)`` span head on the sequence output, loss
    (start + end cross-entropy) / 2), ``AdamW(global_clipnorm=1.0)``, ``compile(jit_compile=
    True/False)`` then ``fit`` on batches padded to ``max_seq_length`` (keras-hub's
    preprocessors pad to the sequence length);
  - ``HF eager`` / ``HF torch.compile``: ``BertForQuestionAnswering`` /
    ``BertForSequenceClassification`` (torch 2.13.0 CPU, one thread per core),
    ``torch.optim.AdamW`` +
    ``clip_grad_norm_``, batches padded to ``max_seq_length`` (HF's ``run_qa.py`` /
    ``run_glue.py`` default ``--pad_to_max_length``).

* predict: one pass over ``predict`` examples (SQuAD questions, GLUE pairs/sentences);
  figure = examples/s.

  - ``ours``: end to end as the tools run it: features from the raw examples (tokenizer,
    windows), their TFRecords, the model over batches sorted by length, and the answers
    (SQuAD: ``bert_tasks.squad.predict``: n-best post-processing, ``predictions.json`` and
    ``nbest_predictions.json`` written; GLUE: ``bert_tasks.classifier.predict_examples``, the
    probabilities in example order);
  - peers: the model alone over features computed beforehand (not timed), padded to
    ``max_seq_length``, in batches of the same size (keras-hub: ``tf.function`` with XLA on and
    off; HF: eager and ``torch.compile`` under ``torch.inference_mode``). Their feature
    conversion and post-processing are not counted: that flatters the peers.

The summary gives, per workload and phase, ``ours``, the best peer (highest median) and the
median of the per-round ratios ours / that peer (targets: train >= 1.3x, predict >= 2x). Our
side also checks its predictions against its padded path (``--nolength_aware_batching``):
GLUE labels, and SQuAD answers (which can differ only where the original's padded path let a
padding position take an n-best slot: the report counts those questions).
Results go to ``bench/out/bench_finetuning.json`` (``--quick``: ``bench_finetuning_quick.json``);
a run replaces the entries of the workloads it measured and keeps the others'.

``--memory`` measures peak RSS instead of speed: each training engine of each workload in a
fresh worker that builds that engine alone (``--only``), warms it up and runs ``--memory_units``
more units, then reports its peak resident set (``VmHWM``; and the peak once built) over the
harness's ``MEMORY`` message; results go to ``bench/out/bench_finetuning_memory.json``, keyed by
workload, sequence length, batch and ``--quick`` (``--max_seq_length`` / ``--train_batch_size``
override the workloads'); each engine's figure records when and over how many units it was
measured.

    .venv/bin/python -m bench finetuning            # all four workloads, 3 rounds
    .venv/bin/python -m bench finetuning --quick    # SQuAD and MRPC on MiniLM, 2 rounds
    .venv/bin/python -m bench finetuning --memory --workloads squad-minilm \
        --max_seq_length 256 --train_batch_size 32
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402

SHARED = os.path.join(os.path.dirname(ROOT), "shared")
MODEL_DIR = os.path.join(SHARED, "data", "minilm")
SQUAD_FILE = os.path.join(SHARED, "data", "squad", "v1.1", "dev-v1.1.part1-of-2.json")
GLUE = os.path.join(SHARED, "data", "glue")
VOCAB_SIZE = 30522

BASE = dict(layers=12, hidden=768, heads=12, intermediate=3072)
MINILM = dict(layers=6, hidden=384, heads=12, intermediate=1536)
# name: shape, task, max_seq_length, batch sizes, train steps per unit, predict examples.
WORKLOADS = {
    # train batch 4: keras-hub's two BERT-base models (XLA on and off) held 12.4 GB at batch 8
    # and did not fit in 24 GB beside the other workers.
    "squad-base": dict(shape=BASE, task="squad", seq=384, train_batch=4, predict_batch=8,
                       train_steps=2, predict=32),
    "squad-minilm": dict(shape=MINILM, task="squad", seq=384, train_batch=16, predict_batch=16,
                         train_steps=3, predict=200),
    "mrpc": dict(shape=MINILM, task="mrpc", seq=128, train_batch=32, predict_batch=32,
                 train_steps=4, predict=408),
    "sst2": dict(shape=MINILM, task="sst-2", seq=128, train_batch=32, predict_batch=32,
                 train_steps=8, predict=872),
}
QUICK = {"squad-minilm": dict(train_steps=1, predict=48), "mrpc": dict(train_steps=2, predict=128)}
GLUE_DIRS = {"mrpc": ("MRPC", "train.tsv"), "sst-2": ("SST-2", "train_part1_alps-train.tsv")}
GLUE_TRAIN_ROWS = 4000


# ---------------------------------------------------------------------------- preparation


def _arrays(features, names):
    import numpy as np

    return {n: np.asarray([getattr(f, n) for f in features], np.int32) for n in names}


def _squad_subset(root: dict, questions: int) -> dict:
    """The first ``questions`` questions of a SQuAD file, as a SQuAD file."""
    out, left = [], questions
    for article in root["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            if left <= 0:
                break
            qas = paragraph["qas"][:left]
            left -= len(qas)
            paragraphs.append(dict(paragraph, qas=qas))
        if paragraphs:
            out.append(dict(article, paragraphs=paragraphs))
    return {"version": root.get("version", "1.1"), "data": out}


def prepare(w: dict, work_dir: str) -> dict:
    """Writes ``work_dir``'s inputs (our TFRecords / JSON, the peers' padded .npz); returns
    their statistics."""
    import numpy as np

    from data.tokenization.wordpiece import FastFullTokenizer

    tokenizer = FastFullTokenizer(os.path.join(MODEL_DIR, "vocab.txt"), True)
    os.makedirs(work_dir, exist_ok=True)
    seq = w["seq"]
    if w["task"] == "squad":
        from bert_tasks import squad as task
        from data.squad import features as squad

        with open(SQUAD_FILE, encoding="utf-8") as f:
            root = json.load(f)
        train = json.loads(json.dumps(root))
        for article in train["data"]:  # training reads exactly one answer per question
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    qa["answers"] = qa["answers"][:1]
        for file_name, obj in (("train.json", train),
                               ("predict.json", _squad_subset(root, w["predict"]))):
            with open(os.path.join(work_dir, file_name), "w", encoding="utf-8") as f:
                json.dump(obj, f)
        o = task.SquadOptions(max_seq_length=seq)
        examples = squad.read_squad_examples(os.path.join(work_dir, "train.json"), True)
        task.write_train_records(examples, tokenizer, os.path.join(work_dir, "train.tf_record"),
                                 o, seed=12345)
        train_features = []  # the peers' copy (the same windows, in the records' order)
        squad.convert_examples_to_features(examples, tokenizer, seq, o.doc_stride,
                                           o.max_query_length, True, train_features.append)
        train_arrays = _arrays(train_features, ("input_ids", "input_mask", "segment_ids",
                                                "start_position", "end_position"))
        predict_examples = squad.read_squad_examples(os.path.join(work_dir, "predict.json"),
                                                     False)
        predict_features = []
        squad.convert_examples_to_features(predict_examples, tokenizer, seq, o.doc_stride,
                                           o.max_query_length, False, predict_features.append)
        num_predict = len(predict_examples)
    else:
        from data.glue import features as glue_features
        from data.glue import processors

        processor = processors.get_processor(w["task"])
        folder, train_name = GLUE_DIRS[w["task"]]
        train_examples = processor._create_examples(
            os.path.join(GLUE, folder, train_name), "train")[:GLUE_TRAIN_ROWS]
        labels = processor.get_labels()
        glue_features.file_based_convert_examples_to_features(
            train_examples, labels, seq, tokenizer, os.path.join(work_dir, "train.tf_record"))
        train_features = glue_features.convert_examples_to_features(train_examples, labels, seq,
                                                                   tokenizer)
        train_arrays = _arrays(train_features, ("input_ids", "input_mask", "segment_ids",
                                                "label_id"))
        dev = processor.get_dev_examples(os.path.join(GLUE, folder))[:w["predict"]]
        predict_features = glue_features.convert_examples_to_features(dev, labels, seq,
                                                                     tokenizer)
        num_predict = len(dev)
    np.savez(os.path.join(work_dir, "train.npz"), **train_arrays)
    np.savez(os.path.join(work_dir, "predict.npz"), **_arrays(
        predict_features, ("input_ids", "input_mask", "segment_ids")))
    train_lengths = train_arrays["input_mask"].sum(1)
    predict_lengths = np.asarray([sum(f.input_mask) for f in predict_features])
    return {"train_sequences": int(len(train_lengths)),
            "train_mean_length": float(train_lengths.mean()),
            "predict_examples": num_predict, "predict_sequences": int(len(predict_lengths)),
            "predict_mean_length": float(predict_lengths.mean())}


# ------------------------------------------------------------------------------- workers


def _ours_engines(w: dict, work_dir: str, only: Optional[str] = None):
    """(engines, check): our train step on the tool's pipeline and the tool's predict path
    (``only``: that engine alone, not warmed up, no check)."""
    import numpy as np
    import tensorflow as tf

    from bert_tasks import classifier as classifier_task
    from bert_tasks import squad as squad_task
    from data.glue import processors
    from data.squad import features as squad
    from data.squad import postprocess
    from data.tokenization.wordpiece import FastFullTokenizer
    from modeling import checkpoints
    from modeling.config import BertConfig
    from modeling.heads import classifier as classifier_head
    from modeling.heads import squad as squad_head
    from modeling.training import finetuning, optimizers
    from modeling.training.objectives import MeanLossObjective
    from modeling.training.job import TrainerConfig
    from modeling.training.backends.tensorflow.steps import Trainer

    if w["shape"] == MINILM:
        config = BertConfig.from_json_file(os.path.join(MODEL_DIR, "config.json"))
    else:
        s = w["shape"]
        config = BertConfig(vocab_size=VOCAB_SIZE, hidden_size=s["hidden"],
                            num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                            intermediate_size=s["intermediate"], type_vocab_size=2)
    tf.keras.utils.set_random_seed(0)
    squad_like = w["task"] == "squad"
    if squad_like:
        model = squad_head.build_squad_model(config)
        loss = squad_task.per_example_loss
        train_data = squad_task.dataset(os.path.join(work_dir, "train.tf_record"), w["seq"],
                                        w["train_batch"], True, seed=1, length_aware=True)
    else:
        model = classifier_head.build_classifier_model(config, 2)
        loss = classifier_task.per_example_loss(False)
        train_data = classifier_task.dataset(os.path.join(work_dir, "train.tf_record"),
                                             w["seq"], w["train_batch"], True, seed=1)
    if w["shape"] == MINILM:
        checkpoints.load_checkpoint(model, MODEL_DIR, log=False)
    trainer = Trainer(
        model, optimizers.create_optimizer(5e-5, 10 ** 6, 10 ** 4),
        MeanLossObjective(loss, finetuning.MODEL_INPUT_NAMES), None,
        TrainerConfig(tempfile.mkdtemp(prefix="ours_trainer_", dir=work_dir), 10 ** 9,
                      fuse_optimizer=True, fused_kernels=True,
                      write_summaries=False, step_log=False, progress=False))
    iterator = trainer.make_iterator(train_data)
    tokenizer = FastFullTokenizer(os.path.join(MODEL_DIR, "vocab.txt"), True)
    out_dir = tempfile.mkdtemp(prefix="ours_predict_", dir=work_dir)
    options = squad_task.SquadOptions(max_seq_length=w["seq"],
                                      predict_batch_size=w["predict_batch"])

    if squad_like:
        examples = squad.read_squad_examples(os.path.join(work_dir, "predict.json"), False)

        def predict(length_aware=True, folder=out_dir):
            squad_task.predict(model, examples, tokenizer, folder, dataclasses.replace(
                options, length_aware_batching=length_aware))
            with open(os.path.join(folder, "predictions.json"), encoding="utf-8") as f:
                return json.load(f)
    else:
        processor = processors.get_processor(w["task"])
        folder = GLUE_DIRS[w["task"]][0]
        dev = processor.get_dev_examples(os.path.join(GLUE, folder))[:w["predict"]]

        def predict(length_aware=True, folder=out_dir):
            return classifier_task.predict_examples(
                model, dev, processor.get_labels(), tokenizer,
                os.path.join(folder, "predict.tf_record"), max_seq_length=w["seq"],
                batch_size=w["predict_batch"], length_aware=length_aware)["probabilities"]

    engines = {"train ours": lambda n: trainer.run_steps(iterator, n * w["train_steps"]),
               "predict ours": harness.repeated(predict)}
    if only:
        return {only: engines[only]}, {}
    for engine in engines.values():  # warm-up: traces (and a head that has seen updates)
        engine(1)
    padded_dir = tempfile.mkdtemp(prefix="ours_padded_", dir=work_dir)
    fast, padded = predict(True), predict(False, padded_dir)
    if squad_like:
        differ = sorted(q for q in padded if padded[q] != fast[q])
        features = []
        squad.convert_examples_to_features(examples, tokenizer, w["seq"], options.doc_stride,
                                           options.max_query_length, False, features.append)
        raw = squad_task.predict_raw_results(model, os.path.join(padded_dir, "eval.tf_record"),
                                             w["seq"], w["predict_batch"])
        by_id = {f.unique_id: f for f in features}
        padding_slot = set()
        for r in raw:
            f = by_id[r.unique_id]
            n = len(f.tokens)
            top = [postprocess._get_best_indexes(lg, options.n_best_size)  # the n-best rule
                   for lg in (r.start_logits, r.end_logits)]
            if any(i >= n for t in top for i in t):
                padding_slot.add(examples[f.example_index].qas_id)
        check = {"answers": len(padded), "answers_differ": len(differ),
                 "differ_without_padding_in_nbest": len(set(differ) - padding_slot),
                 "questions_with_padding_in_nbest": len(padding_slot)}
    else:
        check = {"labels": int(len(fast)),
                 "labels_equal": int((fast.argmax(1) == padded.argmax(1)).sum()),
                 "max_abs_diff_probabilities": float(np.abs(fast - padded).max())}
    return engines, check


def _kerashub_engines(w: dict, work_dir: str, only: Optional[str] = None):
    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf

    s = w["shape"]
    train = np.load(os.path.join(work_dir, "train.npz"))
    x = {"token_ids": train["input_ids"], "padding_mask": train["input_mask"],
         "segment_ids": train["segment_ids"]}
    squad_like = w["task"] == "squad"
    y = (np.stack([train["start_position"], train["end_position"]], 1) if squad_like
         else train["label_id"])
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(
        w["train_batch"], drop_remainder=True).repeat()
    predict_data = np.load(os.path.join(work_dir, "predict.npz"))
    b = w["predict_batch"]
    batches = [{"token_ids": tf.constant(predict_data["input_ids"][i:i + b]),
                "padding_mask": tf.constant(predict_data["input_mask"][i:i + b]),
                "segment_ids": tf.constant(predict_data["segment_ids"][i:i + b])}
               for i in range(0, len(predict_data["input_ids"]), b)]
    engines = {}
    for jit in (True, False):
        tag = " XLA" if jit else ""
        if only and only not in ("train keras-hub fit" + tag, "predict keras-hub" + tag):
            continue  # one model per process: the other's memory would count
        keras.utils.set_random_seed(0)
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=VOCAB_SIZE, num_layers=s["layers"], num_heads=s["heads"],
            hidden_dim=s["hidden"], intermediate_dim=s["intermediate"], max_sequence_length=512,
            num_segments=2, dropout=0.1)
        if squad_like:  # no SQuAD task model in keras-hub: a span head on the sequence output
            inputs = backbone.input
            logits = keras.layers.Dense(2)(backbone(inputs)["sequence_output"])  # [B, S, 2]
            model = keras.Model(inputs, keras.layers.Permute((2, 1))(logits))  # [B, 2, S]
        else:
            model = keras_hub.models.BertTextClassifier(backbone=backbone, num_classes=2,
                                                        preprocessor=None)
        model.compile(optimizer=keras.optimizers.AdamW(learning_rate=5e-5, weight_decay=0.01,
                                                       epsilon=1e-6, global_clipnorm=1.0),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit)

        def train_engine(n, model=model):
            model.fit(dataset, steps_per_epoch=n * w["train_steps"], epochs=1, verbose=0)

        forward = tf.function(lambda batch, model=model: model(batch, training=False),
                              jit_compile=jit)

        def predict_engine(forward=forward):
            return [forward(batch).numpy() for batch in batches]

        engines["train keras-hub fit" + tag] = train_engine
        engines["predict keras-hub" + tag] = harness.repeated(predict_engine)
    return ({only: engines[only]} if only else engines), {}


def _hf_engines(w: dict, work_dir: str, only: Optional[str] = None):
    import numpy as np
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    s = w["shape"]
    config = transformers.BertConfig(
        vocab_size=VOCAB_SIZE, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"], intermediate_size=s["intermediate"], type_vocab_size=2,
        max_position_embeddings=512)
    squad_like = w["task"] == "squad"
    model = (transformers.BertForQuestionAnswering(config) if squad_like
             else transformers.BertForSequenceClassification(config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, eps=1e-6, weight_decay=0.01)
    train = np.load(os.path.join(work_dir, "train.npz"))
    b = w["train_batch"]

    def train_batch(i):
        i = i * b % (len(train["input_ids"]) - b)
        kwargs = dict(input_ids=torch.from_numpy(train["input_ids"][i:i + b]).long(),
                      attention_mask=torch.from_numpy(train["input_mask"][i:i + b]).long(),
                      token_type_ids=torch.from_numpy(train["segment_ids"][i:i + b]).long())
        if squad_like:
            kwargs["start_positions"] = torch.from_numpy(train["start_position"][i:i + b]).long()
            kwargs["end_positions"] = torch.from_numpy(train["end_position"][i:i + b]).long()
        else:
            kwargs["labels"] = torch.from_numpy(train["label_id"][i:i + b]).long()
        return kwargs

    predict_data = np.load(os.path.join(work_dir, "predict.npz"))
    pb = w["predict_batch"]
    predict_batches = [dict(input_ids=torch.from_numpy(predict_data["input_ids"][i:i + pb]).long(),
                            attention_mask=torch.from_numpy(
                                predict_data["input_mask"][i:i + pb]).long(),
                            token_type_ids=torch.from_numpy(
                                predict_data["segment_ids"][i:i + pb]).long())
                       for i in range(0, len(predict_data["input_ids"]), pb)]
    engines = {}
    counter = [0]
    for tag, fn in (("eager", model), ("torch.compile", torch.compile(model))):
        def train_engine(n, fn=fn):
            model.train()
            for _ in range(n * w["train_steps"]):
                loss = fn(**train_batch(counter[0])).loss
                counter[0] += 1
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        def predict_engine(fn=fn):
            model.eval()
            with torch.inference_mode():
                out = [fn(**batch) for batch in predict_batches]
            model.train()
            return out

        engines["train HF %s" % tag] = train_engine
        engines["predict HF %s" % tag] = harness.repeated(predict_engine)
    return ({only: engines[only]} if only else engines), {}


def worker(kind: str, workload: str, work_dir: str, quick: bool, only: Optional[str],
           overrides: dict) -> None:
    w = workload_config(workload, quick, overrides)
    builders = {"ours": _ours_engines, "kerashub": _kerashub_engines, "hf": _hf_engines}
    start = time.perf_counter()
    engines, check = builders[kind](w, work_dir, only)
    print("%s %s: built in %.0fs" % (workload, kind, time.perf_counter() - start),
          file=sys.stderr, flush=True)
    # ours warmed up while building (its check needs it), unless it built one engine
    harness.serve(engines, warmup=() if kind == "ours" and not only else (1,), log_warmup=True,
                  info={"check": check} if check else {})


# ---------------------------------------------------------------------------------- lead


def workload_config(name: str, quick: bool, overrides: Optional[dict] = None) -> dict:
    """``WORKLOADS[name]``, with ``QUICK``'s changes under ``--quick`` and then ``overrides``
    (``--max_seq_length``: seq; ``--train_batch_size``: train_batch)."""
    w = dict(WORKLOADS[name])
    if quick:
        w.update(QUICK.get(name, {}))
    w.update(overrides or {})
    return w


def phase_summary(rates: dict) -> dict:
    """Per phase: ours, the best peer (highest median) and the median per-round ratio."""
    out = {}
    for phase, unit in (("train", "sequences/s"), ("predict", "examples/s")):
        ours = rates["%s ours" % phase]
        peers = {k[len(phase) + 1:]: v for k, v in rates.items()
                 if k.startswith(phase + " ") and k != "%s ours" % phase}
        entry = {"unit": unit, "ours": statistics.median(ours), "ours_rounds": ours,
                 "peers": {k: {"median": statistics.median(v), "rounds": v}
                           for k, v in peers.items()}}
        if peers:
            best = max(peers, key=lambda k: statistics.median(peers[k]))
            _, _, ratio = harness.summarize(ours, peers[best])
            entry["best_peer"] = {"name": best, "value": statistics.median(peers[best])}
            entry["ratio"] = ratio
        out[phase] = entry
    return out


def main() -> None:
    parser = harness.parser(
        __doc__, peers=("kerashub", "hf"), work_dir=None, quick=True, rounds=None,
        max_seq_length=None, helps={
            "quick": "squad-minilm and mrpc, fewer steps and examples, 2 rounds",
            "rounds": "interleaved timing rounds (default 3; --quick: 2)",
            "max_seq_length": "override the workloads' sequence length"})
    parser.add_argument("--workload", help="worker side: the workload to build")
    parser.add_argument("--workloads", default=None,
                        help="comma-separated, of %s (default: all; --quick: %s)"
                             % (",".join(WORKLOADS), ",".join(QUICK)))
    parser.add_argument("--memory", action="store_true",
                        help="peak RSS of each side's training instead of speed: one process per "
                             "engine, warm-up + --memory_units units")
    parser.add_argument("--memory_units", type=int, default=2)
    parser.add_argument("--only", help="worker side: build this engine alone")
    parser.add_argument("--train_batch_size", type=int, default=None,
                        help="override the workloads' training batch")
    args = parser.parse_args()
    overrides = {k: v for k, v in (("seq", args.max_seq_length),
                                   ("train_batch", args.train_batch_size)) if v}
    if args.worker:
        worker(args.worker, args.workload, args.work_dir, args.quick, args.only, overrides)
        return
    if overrides and not args.memory:  # the speed table's entries are keyed by workload alone
        sys.exit("--max_seq_length/--train_batch_size: only with --memory")
    if args.only:
        sys.exit("--only: a worker's flag (--memory starts one worker per engine itself)")
    if not harness.set_up_peers(args):
        return
    names = (args.workloads.split(",") if args.workloads
             else [n for n in WORKLOADS if not args.quick or n in QUICK])
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        sys.exit("--workloads: unknown %s (%s)" % (",".join(unknown), ",".join(WORKLOADS)))
    rounds = args.rounds or (2 if args.quick else 3)
    os.makedirs(harness.OUT_DIR, exist_ok=True)
    base_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_finetuning_",
                                                 dir=harness.OUT_DIR)
    try:
        if args.memory:
            results = measure_memory(args, names, overrides, base_dir)
        else:
            results, load = measure(args, names, rounds, base_dir)
    finally:
        if not args.work_dir:  # records, .npz, the workers' model and prediction folders
            shutil.rmtree(base_dir, ignore_errors=True)
    if args.memory:
        report_memory(args, results)
    else:
        report(args, names, rounds, results, load)


def _worker_flags(args, name: str, work_dir: str) -> list:
    flags = ["--workload", name, "--work_dir", work_dir] + (["--quick"] if args.quick else [])
    for flag in ("max_seq_length", "train_batch_size"):
        if getattr(args, flag):
            flags += ["--" + flag, str(getattr(args, flag))]
    return flags


def measure(args, names, rounds: int, base_dir: str):
    """Prepares and measures each workload in ``names``; returns (results, load averages)."""
    results, load = {}, {"start": os.getloadavg()}
    for name in names:
        w = workload_config(name, args.quick)
        work_dir = os.path.join(base_dir, name)
        data = prepare(w, work_dir)
        print("%s: %s" % (name, json.dumps(data)), file=sys.stderr, flush=True)
        flags = _worker_flags(args, name, work_dir)
        workers, engines, info = harness.start_workers(__file__, harness.peers(args), flags)

        def rate(engine: str, seconds: float, w=w, data=data) -> float:
            if engine.startswith("train"):
                return w["train_steps"] * w["train_batch"] / seconds
            return data["predict_examples"] / seconds

        print("%s: load average before the rounds %.2f" % (name, os.getloadavg()[0]),
              file=sys.stderr)
        rates = harness.run_rounds(workers, engines, rounds, 1, rate, digits=2)
        results[name] = dict(phase_summary(rates), data=data, settings={
            k: v for k, v in w.items() if k != "shape"}, shape=w["shape"],
            check=info.get("check"), load_after=os.getloadavg()[0], rounds=rounds,
            quick=args.quick, measured_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    load["end"] = os.getloadavg()
    return results, load


# The training engines each worker kind builds (``_*_engines``' names), one process each.
TRAIN_ENGINES = {"ours": ["train ours"],
                 "kerashub": ["train keras-hub fit XLA", "train keras-hub fit"],
                 "hf": ["train HF eager", "train HF torch.compile"]}


def measure_memory(args, names, overrides: dict, base_dir: str) -> dict:
    """Peak RSS of each training engine of each workload, each in a fresh process that builds
    that engine alone, warms it up and runs ``--memory_units`` more units."""
    # torch.compile compiles in worker subprocesses by default, which a process's own peak RSS
    # would not count: compile in the HF worker itself.
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    results = {}
    for name in names:
        w = workload_config(name, args.quick, overrides)
        work_dir = os.path.join(base_dir, name)
        data = prepare(w, work_dir)
        engines = {}
        for python, kind in harness.peers(args):
            for engine in TRAIN_ENGINES[kind]:
                flags = _worker_flags(args, name, work_dir) + ["--only", engine]
                workers, pairs, _ = harness.start_workers(__file__, [(python, kind)], flags)
                try:
                    if [n for n, _ in pairs] != [engine]:
                        raise RuntimeError("worker %s built %s, not %s" % (kind, pairs, engine))
                    workers[0].time(engine, args.memory_units)
                    m = workers[0].memory()
                finally:
                    workers[0].close()
                engines[engine[len("train "):]] = {
                    "peak_rss_gb": m["peak_rss_bytes"] / 1e9,
                    "built_peak_rss_gb": m["built_peak_rss_bytes"] / 1e9,
                    "memory_units": args.memory_units,
                    "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
                print("%s %s: peak RSS %.2f GB (built %.2f GB)" % (
                    name, engine, m["peak_rss_bytes"] / 1e9, m["built_peak_rss_bytes"] / 1e9),
                    file=sys.stderr, flush=True)
        results[name] = {"engines": engines, "data": data, "quick": args.quick,
                         "settings": {k: v for k, v in w.items() if k != "shape"},
                         "shape": w["shape"]}
    return results


def report_memory(args, results: dict) -> None:
    """Merges ``results`` into ``bench/out/bench_finetuning_memory.json`` (keyed by workload,
    sequence length, batch and --quick; engines not measured this time, e.g. under
    ``--skip_hf``, keep their earlier figures with their own date and units), then prints the
    merged entries with ours / the lowest peer."""
    merged = harness.read_json("bench_finetuning_memory.json", {})
    print("\nPeak RSS of training (GB; one process per engine, warm-up + %d units)"
          % args.memory_units)
    for name, r in results.items():
        key = "%s seq%d batch%d%s" % (name, r["settings"]["seq"], r["settings"]["train_batch"],
                                      " quick" if r["quick"] else "")
        engines = dict(merged.get(key, {}).get("engines", {}), **r["engines"])
        r = dict(r, engines=engines)
        peers = {k: v for k, v in engines.items() if k != "ours"}
        if peers and "ours" in engines:
            low = min(peers, key=lambda k: peers[k]["peak_rss_gb"])
            r["lowest_peer"] = {"name": low, "peak_rss_gb": peers[low]["peak_rss_gb"]}
            r["ratio"] = engines["ours"]["peak_rss_gb"] / peers[low]["peak_rss_gb"]
        merged[key] = r
        print("%s: %s%s" % (key, ", ".join("%s %.2f (built %.2f)" % (
            e, v["peak_rss_gb"], v["built_peak_rss_gb"]) for e, v in engines.items()),
            "; ours / lowest peer (%s) %.2fx" % (r["lowest_peer"]["name"], r["ratio"])
            if "ratio" in r else ""))
    print("wrote %s" % harness.write_json("bench_finetuning_memory.json", merged))


def report(args, names, rounds: int, results: dict, load: dict) -> None:
    """Prints the summary and writes ``bench/out/bench_finetuning[_quick].json``."""
    print("\nFine-tuning and prediction, %d rounds%s; load average %.2f at start, %.2f at end"
          % (rounds, " (--quick)" if args.quick else "", load["start"][0], load["end"][0]))
    print("%-13s %-8s %10s %-26s %10s %7s" % ("workload", "phase", "ours", "best peer", "peer",
                                              "ratio"))
    for name, r in results.items():
        for phase in ("train", "predict"):
            e = r[phase]
            peer = e.get("best_peer", {"name": "-", "value": float("nan")})
            print("%-13s %-8s %10.2f %-26s %10.2f %6.2fx" % (
                name, phase, e["ours"], peer["name"], peer["value"], e.get("ratio", float("nan"))))
        if r.get("check"):
            print("%-13s ours vs its padded path: %s" % ("", json.dumps(r["check"])))
    # The workloads are measured one after another, each in its own rounds: a run replaces the
    # entries of the workloads it measured and keeps the others' (each says when and how it
    # was measured). --quick figures go to a file of their own.
    name = "bench_finetuning_quick.json" if args.quick else "bench_finetuning.json"
    kept = {k: v for k, v in harness.read_json(name, {}).get("workloads", {}).items()
            if k not in results}
    path = harness.write_json(name, {
        "last_run": {"quick": args.quick, "rounds": rounds, "load_average": load,
                     "workloads": names},
        "workloads": dict(kept, **results)})
    print("wrote %s" % path)


if __name__ == "__main__":
    main()
