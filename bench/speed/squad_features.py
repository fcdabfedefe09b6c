"""Benchmark: examples/s of ``convert_examples_to_features`` on the SQuAD v1.1 file.

Runs eval-mode feature conversion (max_seq_length 384, doc_stride 128,
max_query_length 64, as run_squad's defaults) on
``../shared/data/squad/v1.1/dev-v1.1.part1-of-2.json`` with the faithful
``FullTokenizer`` and with ``FastFullTokenizer``, side by side in one run
(alternating repeats, best of N), checks that both give identical features,
and prints examples/s, features/s and the speed-up ratios. A third row runs
``FullTokenizer`` one example per call, so every question re-tokenizes its
paragraph as the original does (the baseline of the paragraph sharing).

    .venv/bin/python -m bench squad_features [--limit N] [--repeats R]
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402

from data.squad import features as squad  # noqa: E402
from data.tokenization.wordpiece import FastFullTokenizer, FullTokenizer  # noqa: E402

DEFAULT_FILE = os.path.join(os.path.dirname(ROOT), "shared", "data", "squad", "v1.1",
                            "dev-v1.1.part1-of-2.json")
DEFAULT_VOCAB = os.path.join(os.path.dirname(ROOT), "shared", "data", "vocab", "bert-base-uncased-vocab.txt")


def _convert(examples, tokenizer, args, per_question=False):
    """Seconds and features of one conversion.

    ``per_question``: one call per example, so no paragraph tokenization is
    shared between questions (the original's amount of tokenization work;
    unique ids then restart per call).
    """
    features = []
    batches = [[e] for e in examples] if per_question else [examples]
    t0 = time.perf_counter()
    for batch in batches:
        squad.convert_examples_to_features(batch, tokenizer, args.max_seq_length, args.doc_stride,
                                           args.max_query_length, is_training=False,
                                           output_fn=features.append)
    return time.perf_counter() - t0, features


def main() -> None:
    parser = harness.parser(
        __doc__, input_file=DEFAULT_FILE, vocab_file=DEFAULT_VOCAB, limit=0, repeats=2,
        max_seq_length=384, doc_stride=128, max_query_length=64,
        helps={"repeats": "timed runs per tokenizer (best kept)"})
    args = parser.parse_args()

    examples = squad.read_squad_examples(args.input_file, is_training=False)
    if args.limit:
        examples = examples[:args.limit]
    print("file: %s\nexamples: %d, max_seq_length %d, doc_stride %d, max_query_length %d"
          % (args.input_file, len(examples), args.max_seq_length, args.doc_stride,
             args.max_query_length))

    runs = (("FullTokenizer per question", FullTokenizer, True),
            ("FullTokenizer", FullTokenizer, False),
            ("FastFullTokenizer", FastFullTokenizer, False))
    best = {name: float("inf") for name, _, _ in runs}
    outputs = {}
    for r in range(args.repeats):
        # Fresh tokenizers each repeat: the fast one's word cache starts cold.
        for name, cls, per_question in runs:
            tokenizer = cls(args.vocab_file, do_lower_case=True)
            seconds, features = _convert(examples, tokenizer, args, per_question)
            best[name] = min(best[name], seconds)
            outputs[name] = features
            print("  repeat %d %-27s %.2fs" % (r + 1, name, seconds), file=sys.stderr)

    same = [f.__dict__ for f in outputs["FullTokenizer"]] == [f.__dict__ for f in outputs["FastFullTokenizer"]]
    num_features = len(outputs["FastFullTokenizer"])
    print("features: %d (identical for both tokenizers: %s)" % (num_features, same))
    print("%-27s %10s %12s %12s %10s" % ("tokenizer", "seconds", "examples/s", "features/s", "vs first"))
    base = best[runs[0][0]]
    for name, seconds in best.items():
        print("%-27s %10.2f %12.1f %12.1f %9.2fx" % (
            name, seconds, len(examples) / seconds, num_features / seconds, base / seconds))
    print("speed-up FastFullTokenizer / FullTokenizer (both sharing paragraph tokenization): %.2fx"
          % (best["FullTokenizer"] / best["FastFullTokenizer"]))
    if not same:
        sys.exit("features differ between the two tokenizers")


if __name__ == "__main__":
    main()
