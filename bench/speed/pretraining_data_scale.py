"""Benchmark: create_pretraining_data.py --num_shards at corpus scale (issue: bounded memory).

Builds corpora of about 30 MB, 300 MB and 1 GB from ``../shared/data/pretrain`` (in a temp
folder, removed at the end), then for each size runs the tool with 1 and 2 workers and prints
one row each: wall time, the peak RSS of its largest process (the tool and its pool workers,
``getrusage(RUSAGE_CHILDREN)`` of a fresh wrapper process), CPU seconds, MB of text per wall
second and per CPU second, and the 2-worker speed-up; plus the single-stream generator
(no ``--num_shards``) on the smallest corpus for comparison (its memory grows with the corpus).

A corpus is the derived corpus's documents, copied until the size is reached, each copy cut
into documents of another seeded length (8-64 sentences): documents are distinct across
copies, as in a real corpus (identical documents would all hash to one shard).
``--num_shards`` is the size over ``--mb_per_shard`` (rounded up), the README's rule.

    .venv/bin/python -m bench pretraining_data_scale [--sizes 30,300,1000]
        [--dupe_factor 1] [--mb_per_shard 32] [--workers 1,2] [--keep]

Nothing else may run on the machine meanwhile (timings and RSS are what it measures).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402

SHARED = harness.SHARED
CORPUS = os.path.join(SHARED, "data", "pretrain", "derived_pretrain_corpus.txt")
VOCAB = os.path.join(SHARED, "data", "vocab", "bert-base-uncased-vocab.txt")

# A fresh process runs the tool and reports the largest RSS of its process tree and its CPU.
_WRAPPER = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - t0
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps(dict(rc=r.returncode, wall=wall, cpu=u.ru_utime + u.ru_stime,
                      rss_mib=u.ru_maxrss / 1024, last=r.stderr.strip().splitlines()[-1:])))
"""


def _documents(path: str):
    docs, doc = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                doc.append(line)
            elif doc:
                docs.append(doc)
                doc = []
    if doc:
        docs.append(doc)
    return docs


def build_corpus(path: str, megabytes: float) -> int:
    """Writes about ``megabytes`` MB of distinct documents to ``path``; returns its size."""
    sources = _documents(CORPUS)
    target = int(megabytes * 1e6)
    written = 0
    copy = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            rng = random.Random(copy)
            parts = []
            for doc in sources:
                i = 0
                while i < len(doc):
                    n = rng.randint(8, 64)
                    parts.append("\n".join(doc[i:i + n]) + "\n\n")
                    i += n
            for text in parts:
                out.write(text)
                written += len(text.encode("utf-8"))
                if written >= target:
                    break
            copy += 1
    return os.path.getsize(path)


def run_tool(args) -> dict:
    cmd = [sys.executable, "-c", _WRAPPER, sys.executable,
           os.path.join(ROOT, "create_pretraining_data.py")] + args
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    if r.returncode != 0:
        raise SystemExit("wrapper failed:\n" + r.stderr[-3000:])
    out = json.loads(r.stdout)
    if out["rc"] != 0:
        raise SystemExit("create_pretraining_data failed: %s" % out["last"])
    return out


def main() -> None:
    parser = harness.parser(__doc__, dupe_factor=1, max_seq_length=128)
    parser.add_argument("--sizes", default="30,300,1000", help="corpus sizes in MB")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--mb_per_shard", type=float, default=32.0)
    parser.add_argument("--skip_single_stream", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    work = tempfile.mkdtemp(prefix="bench-data-scale-")
    rows = []
    print("load average at start: %.2f %.2f %.2f; %d CPUs" % (os.getloadavg()
                                                             + (os.cpu_count(),)))
    try:
        for size in sizes:
            corpus = os.path.join(work, "corpus-%g.txt" % size)
            nbytes = build_corpus(corpus, size)
            mb = nbytes / 1e6
            shards = max(1, int(math.ceil(mb / args.mb_per_shard)))
            common = ["--input_file=%s" % corpus, "--vocab_file=%s" % VOCAB,
                      "--dupe_factor=%d" % args.dupe_factor,
                      "--max_seq_length=%d" % args.max_seq_length, "--show_progress=false"]
            runs = [("sharded", w) for w in workers]
            if size == min(sizes) and not args.skip_single_stream:
                runs.append(("single stream", 1))
            walls = {}
            for kind, w in runs:
                out_dir = os.path.join(work, "out")
                os.makedirs(out_dir)
                if kind == "sharded":
                    flags = ["--output_file=%s" % os.path.join(out_dir, "records"),
                             "--num_shards=%d" % shards, "--num_workers=%d" % w]
                else:
                    flags = ["--output_file=%s" % os.path.join(out_dir, "records.tfrecord")]
                load = os.getloadavg()[0]
                out = run_tool(common + flags)
                records_mb = sum(os.path.getsize(os.path.join(out_dir, n))
                                 for n in os.listdir(out_dir)) / 1e6
                shutil.rmtree(out_dir)
                walls[(kind, w)] = out["wall"]
                row = dict(kind=kind, corpus_mb=round(mb, 1), num_shards=shards
                           if kind == "sharded" else None, workers=w,
                           dupe_factor=args.dupe_factor, wall_s=round(out["wall"], 1),
                           cpu_s=round(out["cpu"], 1), peak_rss_mib=round(out["rss_mib"]),
                           mb_per_s=round(mb / out["wall"], 2),
                           mb_per_cpu_s=round(mb / max(out["cpu"], 1e-9), 2),
                           records_mb=round(records_mb), load_before=round(load, 2))
                if kind == "sharded" and w != workers[0] and ("sharded", workers[0]) in walls:
                    row["speedup_vs_%d_worker" % workers[0]] = round(
                        walls[("sharded", workers[0])] / out["wall"], 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
            os.remove(corpus)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    sharded_rows = [r for r in rows if r["kind"] == "sharded"]
    for w in workers:
        rss = [r["peak_rss_mib"] for r in sharded_rows if r["workers"] == w]
        if rss:
            print("%d worker(s): peak RSS %s MiB across sizes, max/min %.2f"
                  % (w, rss, max(rss) / max(min(rss), 1)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
