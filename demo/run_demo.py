"""End to end on the embedded default: text -> vocab -> pre-training records -> pre-training
-> fine-tuning -> SavedModel -> a query in a fresh process. A few minutes on 2 CPU cores.

Everything is written under ``--output_dir`` (default ``demo_output/``):

  data/corpus.txt, data/reviews/{train,dev,test}.tsv   stage 1: generated text (demo/generate.py
                                                       + the handwritten demo/corpus.txt)
  data/review_text.txt, vocab.txt                      stage 2: build_vocab.py (corpus + reviews)
  bert_config.json                                     stage 3: the tiny model's config
  pretraining_data.tfrecord                            stage 3: create_pretraining_data.py
  pretrain/  (ckpt-N, eval_results.txt, export/)       stage 4: run_pretraining.py
  classifier/ (eval_results.txt, test_results.tsv)     stage 5: run_classifier.py --task_name=tsv
  serving/1/ (2/, ... on reruns)                       stage 5: the SavedModel (raw text in),
                                                       a version of TF Serving's model base
                                                       path serving/

Each stage after the first runs one of the project's command-line entry points in a child
process, prints the exact command (so it can be re-run by hand) and streams its progress. A
failing stage stops the demo with its exit code.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from typing import List

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "demo_output", "Where the demo writes everything.")
flags.DEFINE_integer("pretrain_steps", 1500, "Pre-training steps of the tiny model.")
flags.DEFINE_float("finetune_epochs", 6.0, "Fine-tuning epochs on the demo reviews.")
flags.DEFINE_integer("seed", 1, "Seed of the generated text (and of every stage).")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_STAGES = 6
MAX_SEQ_LENGTH = 64
MAX_PREDICTIONS = 10
# Lines of the demo's WordPiece vocab (build_vocab.py's builder, Google's layout: [PAD],
# [unused0..98], [UNK] [CLS] [SEP] [MASK], then pieces). The demo text has only ~340 distinct
# words: this keeps the frequent ones whole and splits the rare ones (about 970 lines would
# hold every word and every piece the trainer can learn from it).
VOCAB_SIZE = 800

# The tiny demo model: 2 layers, hidden 128 (the vocab size is filled in from the built vocab).
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 128,
    "initializer_range": 0.02,
    "intermediate_size": 512,
    "max_position_embeddings": 128,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "type_vocab_size": 2,
}


def _banner(stage: int, text: str) -> None:
    print("\n[%d/%d] %s" % (stage, NUM_STAGES, text), flush=True)


# Start-up and INFO log lines of the children (TensorFlow's C++ and absl's Python logging): the
# demo shows their progress lines, warnings and errors, and the full logs stay one flag away
# (run the printed command by hand).
_QUIET = re.compile(r"^(I\d{4} |WARNING: All log messages before absl::InitializeLog|INFO:tensorflow:)")


def _run(args: List[str]) -> List[str]:
    """Runs ``python <args>`` from the project root, streaming its output (INFO log lines
    dropped); exits with the child's code on failure. Returns every output line (INFO too)."""
    print("$ " + " ".join(shlex.quote(a) for a in ["python"] + args), flush=True)
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    start = time.time()
    proc = subprocess.Popen([sys.executable] + args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if not _QUIET.match(line):
            print("      " + lines[-1], flush=True)
    if proc.wait() != 0:
        print("demo: stage failed (exit code %d): python %s" % (proc.returncode, args[0]),
              file=sys.stderr)
        sys.exit(proc.returncode)
    print("      (%.1fs)" % (time.time() - start), flush=True)
    return lines


def stage_generate(out: str, seed: int) -> dict:
    from demo import generate

    paths = generate.write_all(os.path.join(out, "data"), seed=seed)
    with open(paths["corpus"], encoding="utf-8") as f:
        text = f.read()
    docs = [d for d in text.strip().split("\n\n") if d.strip()]
    _banner(1, "generated text: %s (%d documents, %d sentences), reviews %s/{train,dev,test}.tsv"
            % (paths["corpus"], len(docs), sum(len(d.split("\n")) for d in docs),
               os.path.dirname(paths["train"])))
    return paths


def stage_vocab(out: str, corpus: str) -> str:
    from data.tokenization import wordpiece as tokenization

    with open(corpus, encoding="utf-8") as f:
        lines = f.read().split("\n")
    # The reviews' text is learned from too (one per line), so the classifier's text has every
    # character (and its frequent words whole). The tiny model takes its vocab_size from the
    # file (stage 3).
    reviews_dir = os.path.join(os.path.dirname(corpus), "reviews")
    review_text = os.path.join(os.path.dirname(corpus), "review_text.txt")
    with open(review_text, "w", encoding="utf-8") as out_file:
        for name in ("train.tsv", "dev.tsv", "test.tsv"):
            with open(os.path.join(reviews_dir, name), encoding="utf-8") as f:
                out_file.writelines(line.split("\t")[0] + "\n"
                                    for line in f.read().split("\n")[1:] if line)
    vocab_file = os.path.join(out, "vocab.txt")
    _banner(2, "WordPiece vocab of the text (build_vocab.py)")
    _run(["build_vocab.py", "--input_file=%s,%s" % (corpus, review_text),
          "--output_file=" + vocab_file, "--vocab_size=%d" % VOCAB_SIZE, "--do_lower_case=True"])
    tok = tokenization.FastFullTokenizer(vocab_file, do_lower_case=True)
    start = time.time()
    n_tokens = sum(len(tok.tokenize(line)) for line in lines)
    print("      %s: %d WordPieces, Google's layout ([UNK]=%d [CLS]=%d [SEP]=%d [MASK]=%d); "
          "tokenized %d lines into %d tokens in %.3fs"
          % (vocab_file, len(tok.vocab), tok.vocab["[UNK]"], tok.vocab["[CLS]"],
             tok.vocab["[SEP]"], tok.vocab["[MASK]"], len(lines), n_tokens,
             time.time() - start))
    print("      e.g. %r -> %s" % (lines[0], tok.tokenize(lines[0])))
    return vocab_file


def stage_pretraining_data(out: str, corpus: str, vocab_file: str, seed: int) -> tuple:
    from data.tokenization.wordpiece import load_vocab

    config = dict(TINY_CONFIG, vocab_size=len(load_vocab(vocab_file)))
    config_file = os.path.join(out, "bert_config.json")
    with open(config_file, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    records = os.path.join(out, "pretraining_data.tfrecord")
    _banner(3, "pre-training records (create_pretraining_data.py), tiny config %s" % config_file)
    _run(["create_pretraining_data.py", "--input_file=" + corpus, "--output_file=" + records,
          "--vocab_file=" + vocab_file, "--do_lower_case=True",
          "--max_seq_length=%d" % MAX_SEQ_LENGTH,
          "--max_predictions_per_seq=%d" % MAX_PREDICTIONS, "--masked_lm_prob=0.15",
          "--random_seed=%d" % (12345 + seed), "--dupe_factor=5"])
    return config_file, records


def stage_pretrain(out: str, config_file: str, records: str, steps: int, seed: int) -> str:
    pretrain_dir = os.path.join(out, "pretrain")
    _banner(4, "pre-training the tiny model for %d steps (run_pretraining.py; TensorBoard: "
            "tensorboard --logdir %s)" % (steps, pretrain_dir))
    _run(["run_pretraining.py", "--bert_config_file=" + config_file, "--input_file=" + records,
          "--output_dir=" + pretrain_dir, "--do_train", "--do_eval",
          "--train_batch_size=32", "--eval_batch_size=32",
          "--max_seq_length=%d" % MAX_SEQ_LENGTH,
          "--max_predictions_per_seq=%d" % MAX_PREDICTIONS,
          "--num_train_steps=%d" % steps, "--num_warmup_steps=%d" % max(1, steps // 10),
          "--learning_rate=1e-3", "--save_checkpoints_steps=%d" % max(1, steps // 3),
          "--iterations_per_loop=%d" % min(100, steps), "--max_eval_steps=20",
          "--random_seed=%d" % seed])
    print("      eval: " + _read_results(os.path.join(pretrain_dir, "eval_results.txt")))
    return os.path.join(pretrain_dir, "export", "bert_model.ckpt")


# run_classifier.py's log line naming the version folder it exported.
_EXPORTED = re.compile(r"exported SavedModel version (\d+) to ")


def stage_finetune(out: str, config_file: str, vocab_file: str, checkpoint: str,
                   reviews_dir: str, epochs: float, seed: int) -> str:
    """Returns the exported version folder (``serving/<N>``: ``serving/`` is TF Serving's
    model base path, each run of the demo adds a version)."""
    classifier_dir = os.path.join(out, "classifier")
    serving_base = os.path.join(out, "serving")
    _banner(5, "fine-tuning on the demo reviews and exporting a SavedModel (run_classifier.py)")
    lines = _run(["run_classifier.py", "--task_name=tsv", "--data_dir=" + reviews_dir,
          "--vocab_file=" + vocab_file, "--bert_config_file=" + config_file,
          "--init_checkpoint=" + checkpoint, "--output_dir=" + classifier_dir,
          "--do_train", "--do_eval", "--do_predict", "--max_seq_length=%d" % MAX_SEQ_LENGTH,
          "--train_batch_size=32", "--learning_rate=2e-4",
          "--num_train_epochs=%g" % epochs, "--export_dir=" + serving_base,
          "--random_seed=%d" % seed])
    print("      eval: " + _read_results(os.path.join(classifier_dir, "eval_results.txt")))
    versions = [m.group(1) for m in map(_EXPORTED.search, lines) if m]
    if len(versions) != 1:
        print("demo: run_classifier.py did not report its exported version", file=sys.stderr)
        sys.exit(1)
    serving_dir = os.path.join(serving_base, versions[0])
    print("      exported: %s (version %s of the model base path %s)"
          % (serving_dir, versions[0], serving_base))
    return serving_dir


QUERY = r"""
import sys
import tensorflow_text  # noqa: F401  (registers the ops of the in-graph tokenizer)
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
texts = sys.argv[2:]
out = model.signatures["text"](text_a=tf.constant(texts))
for text, label, probs in zip(texts, out["label"].numpy(), out["probabilities"].numpy()):
    print("%-55r -> %-8s p=%s" % (text, label.decode(), [round(float(p), 3) for p in probs]))
"""


def stage_query(serving_dir: str) -> None:
    _banner(6, "querying the SavedModel %s in a fresh process (raw text in; see README)"
            % serving_dir)
    _run(["-c", QUERY, serving_dir, "The soup was wonderful and we enjoyed every minute.",
          "Honestly, the train ride was dreadful; we left early.",
          "In Dunmore, the concert was brilliant."])


def _read_results(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return ", ".join(line.strip() for line in f if line.strip())


def main(argv) -> None:
    del argv
    out = os.path.abspath(FLAGS.output_dir)
    os.makedirs(out, exist_ok=True)
    start = time.time()
    paths = stage_generate(out, FLAGS.seed)
    vocab_file = stage_vocab(out, paths["corpus"])
    config_file, records = stage_pretraining_data(out, paths["corpus"], vocab_file, FLAGS.seed)
    checkpoint = stage_pretrain(out, config_file, records, FLAGS.pretrain_steps, FLAGS.seed)
    serving_dir = stage_finetune(out, config_file, vocab_file, checkpoint,
                                 os.path.dirname(paths["train"]), FLAGS.finetune_epochs,
                                 FLAGS.seed)
    stage_query(serving_dir)
    print("\ndemo finished in %.0fs: outputs in %s" % (time.time() - start, out))


if __name__ == "__main__":
    app.run(main)
