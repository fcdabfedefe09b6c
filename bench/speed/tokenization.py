"""Benchmark: lines/s and tokens/s of the three tokenization paths on one corpus.

Tokenizes every line of ``../shared/data/pretrain/derived_pretrain_corpus.txt``
(bytes split on newlines, decoded as the original does: UTF-8, errors ignored)
to WordPiece ids with

* ``FullTokenizer`` (the faithful plain-Python path: ``tokenize`` then
  ``convert_tokens_to_ids``),
* ``FastFullTokenizer.convert_lines_to_ids`` (the batch API: every line in
  one call), cold (a new instance, empty caches: a single pass over the
  corpus, the headline figure) and warm (the same instance, second pass),
* ``FastFullTokenizer.tokenize_to_ids`` line by line, cold and warm,
* ``BertGraphTokenizer.tokenize`` (in-graph, a ``tf.function`` over batches
  of ``--batch_size`` lines, output fetched as numpy values + row splits; the
  table build and the first traced call are reported separately),

checks that all of them give identical ids, prints which ``FastFullTokenizer``
engine ran (the compiled ``data.tokenization._fast_wordpiece`` or pure Python,
``--no_extension`` forces the latter), and prints the figures and the
speed-ups over the faithful path, all measured side by side in this run
(repeats alternate between the paths; the best repeat of each is kept), in
wall time and in CPU time of this process (steadier on a shared machine).
The cold figures include building the ``FastFullTokenizer``. The headline is
the cold batch figure: one pass over the corpus from a new instance, as a
user tokenizing a corpus once gets it.

    .venv/bin/python -m bench tokenization [--limit N] [--repeats R] [--cased]
        [--no_graph] [--no_extension]
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from data.tokenization import wordpiece as tokenization  # noqa: E402

SHARED = os.path.join(os.path.dirname(ROOT), "shared")
DEFAULT_CORPUS = os.path.join(SHARED, "data", "pretrain", "derived_pretrain_corpus.txt")
DEFAULT_VOCAB = os.path.join(SHARED, "golden", "inputs", "vocab.txt")


def _read_lines(path: str, limit: int):
    """The corpus lines as bytes (the graph's input) and as decoded str."""
    with open(path, "rb") as f:
        raw = f.read().split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    if limit:
        raw = raw[:limit]
    return raw, [tokenization.convert_to_unicode(line) for line in raw]


def _timed(fn):
    """(wall seconds, CPU seconds of this process, result) of ``fn()``."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def _ragged_to_lists(batches):
    """Python id lists from (flat values, row splits) numpy pairs (untimed check)."""
    rows = []
    for values, splits in batches:
        values, splits = values.tolist(), splits.tolist()
        rows.extend(values[splits[i]:splits[i + 1]] for i in range(len(splits) - 1))
    return rows


def _faithful(tok, lines):
    return [tok.convert_tokens_to_ids(tok.tokenize(line)) for line in lines]


def _fast(tok, lines):
    return [tok.tokenize_to_ids(line) for line in lines]


def _fast_batch(tok, lines):
    return tok.convert_lines_to_ids(lines)


def main() -> None:
    parser = harness.parser(
        __doc__, input_file=DEFAULT_CORPUS, vocab_file=DEFAULT_VOCAB, limit=0, repeats=2,
        batch_size=1024, helps={"repeats": "timed runs per path (best kept)",
                                "batch_size": "lines per graph call"})
    parser.add_argument("--cased", action="store_true", help="do_lower_case=False")
    parser.add_argument("--no_graph", action="store_true", help="skip the in-graph path")
    parser.add_argument("--no_extension", action="store_true",
                        help="FastFullTokenizer without its compiled engine (pure Python)")
    args = parser.parse_args()
    lower = not args.cased
    use_extension = not args.no_extension

    raw, lines = _read_lines(args.input_file, args.limit)
    print("corpus %s: %d lines, %.1f MB; do_lower_case=%s" % (
        args.input_file, len(lines), sum(map(len, raw)) / 1e6, lower), file=sys.stderr)

    full = tokenization.FullTokenizer(args.vocab_file, do_lower_case=lower)
    best = {}
    outputs = {}

    def record(name, wall, cpu, ids):
        old_wall, old_cpu = best.get(name, (wall, cpu))
        best[name] = (min(wall, old_wall), min(cpu, old_cpu))  # best wall and best CPU
        outputs[name] = ids
        print("  %-16s %.3f s wall, %.3f s CPU" % (name, wall, cpu), file=sys.stderr)

    graph_fn = None
    if not args.no_graph:
        import tensorflow as tf
        from data.tokenization import graph as graph_tokenization

        t_build, _, graph_tok = _timed(
            lambda: graph_tokenization.BertGraphTokenizer(args.vocab_file, do_lower_case=lower))
        graph_fn = tf.function(graph_tok.tokenize,
                               input_signature=[tf.TensorSpec([None], tf.string)])
        t_trace, _, _ = _timed(lambda: graph_fn(raw[:args.batch_size]))
        print("  graph tokenizer: tables built in %.2f s, traced + first batch in %.2f s"
              % (t_build, t_trace), file=sys.stderr)

        def run_graph():
            """Ragged ids of every batch, as numpy (values, row splits)."""
            out = []
            for start in range(0, len(raw), args.batch_size):
                ids = graph_fn(raw[start:start + args.batch_size])  # int64 [b, (P)]
                out.append((ids.flat_values.numpy(), ids.row_splits.numpy()))
            return out

    for repeat in range(args.repeats):
        print("repeat %d/%d" % (repeat + 1, args.repeats), file=sys.stderr)
        record("faithful", *_timed(lambda: _faithful(full, lines)))
        for name, run in (("batch", _fast_batch), ("per-line", _fast)):
            made = []  # the instance built inside the cold pass, reused for the warm one

            def cold(run=run, made=made):
                made.append(tokenization.FastFullTokenizer(
                    args.vocab_file, do_lower_case=lower, use_extension=use_extension))
                return run(made[0], lines)

            record(name + " (cold)", *_timed(cold))  # includes building the instance
            record(name + " (warm)", *_timed(lambda run=run, made=made: run(made[0], lines)))
        if graph_fn is not None:
            wall, cpu, batches = _timed(run_graph)
            record("graph (batched)", wall, cpu, _ragged_to_lists(batches))

    engine = made[0].engine  # the last instance built in the timed runs
    engine_name = tokenization.ENGINE if engine == "c" else "pure Python"
    reference = outputs["faithful"]
    for name, ids in outputs.items():
        if ids != reference:
            bad = next(i for i, (a, b) in enumerate(zip(ids, reference)) if a != b)
            print("MISMATCH: %s differs from the faithful path at line %d" % (name, bad + 1),
                  file=sys.stderr)
            sys.exit(1)
    tokens = sum(map(len, reference))
    print("FastFullTokenizer engine: %s" % engine_name)
    print("identical ids on all %d lines (%d tokens)" % (len(lines), tokens))
    print("%-16s %9s %9s %11s %12s %10s %10s" % (
        "path", "wall s", "CPU s", "lines/s", "tokens/s", "ratio", "CPU ratio"))
    base_wall, base_cpu = best["faithful"]
    for name, (wall, cpu) in best.items():
        print("%-16s %9.3f %9.3f %11.0f %12.0f %9.1fx %9.1fx" % (
            name, wall, cpu, len(lines) / wall, tokens / wall, base_wall / wall, base_cpu / cpu))
    wall, cpu = best["batch (cold)"]
    print("HEADLINE cold single pass (batch API, new instance): %.1fx the faithful path in wall "
          "time, %.1fx in CPU time (target 20x), do_lower_case=%s, engine: %s"
          % (base_wall / wall, base_cpu / cpu, lower, engine_name))
    print("(best of %d repeats each, measured side by side in this run; lines/s and tokens/s "
          "from wall time; the graph path uses all cores, so its CPU time can exceed its wall "
          "time); load average %.2f %.2f %.2f" % ((args.repeats,) + os.getloadavg()))


if __name__ == "__main__":
    main()
