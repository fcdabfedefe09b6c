"""End-to-end demo on the embedded default corpus (demo/corpus.txt).

Stages (each one prints what it did):
  1. build a small WordPiece vocab from the corpus and tokenize it.
"""

from __future__ import annotations

import os
import sys
import time

from absl import app, flags

from data import tokenization, vocab_builder

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "demo_output", "Where the demo writes everything.")

DEMO_DIR = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(DEMO_DIR, "corpus.txt")


def stage_tokenize(output_dir: str) -> str:
    with open(CORPUS, encoding="utf-8") as f:
        lines = f.read().split("\n")
    vocab_file = os.path.join(output_dir, "vocab.txt")
    vocab_builder.write_vocab(vocab_builder.build_vocab(lines), vocab_file)
    tok = tokenization.FastFullTokenizer(vocab_file, do_lower_case=True)
    start = time.time()
    n_tokens = sum(len(tok.tokenize(line)) for line in lines)
    print("[1/1] vocab: %s (%d tokens); tokenized %d lines into %d WordPiece tokens in %.3fs"
          % (vocab_file, len(tok.vocab), len(lines), n_tokens, time.time() - start))
    print("      e.g. %r -> %s" % (lines[0], tok.tokenize(lines[0])))
    return vocab_file


def main(argv):
    del argv
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    stage_tokenize(FLAGS.output_dir)
    print("demo finished: outputs in %s" % FLAGS.output_dir)


if __name__ == "__main__":
    app.run(main)
