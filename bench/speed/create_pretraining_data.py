"""Benchmark: create_pretraining_data.py on the 2.9 MB derived corpus with --dupe_factor=10.

Prints, from one run of this script: the fast CLI's time inside its generator (wall, and CPU
of its process and its helper process, from after the imports to the last byte written),
instances/s, peak RSS (the largest of its processes, by getrusage and ``/usr/bin/time -v``), the machine's load average, and the
ratios to the original's figures measured on this kind of machine
(``../shared/golden/pretraining_data/speed_anchor.json``: 22.87 s in main(), 775 MiB,
70405 instances, 58435382 bytes). ``--baseline`` also runs this project's faithful
pure-Python path (data/pretraining/instances.py with FullTokenizer: the original's algorithm and data
structures, record writing excepted) in the same conditions, for a side-by-side ratio;
``--verify`` then checks that both wrote the same records (parsed, in order).

    .venv/bin/python -m bench create_pretraining_data [--baseline] [--verify]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402

SHARED = harness.SHARED
CORPUS = os.path.join(SHARED, "data", "pretrain", "derived_pretrain_corpus.txt")
ANCHOR = os.path.join(SHARED, "golden", "pretraining_data", "speed_anchor.json")
GOLDEN_VOCAB = os.path.join(SHARED, "golden", "inputs", "vocab.txt")

# Runs in a child process: the CLI's run() timed from after the imports.
_FAST = r"""
import json, os, resource, sys, time
sys.path.insert(0, {root!r})
from absl import flags
from bert_cli import create_pretraining_data as cli
fv = flags.FlagValues(); cli.define_flags(fv); fv(["x"] + {args!r})
load0 = os.getloadavg()
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
t0, c0 = time.perf_counter(), cpu()
n = cli.run(fv)
t1, c1 = time.perf_counter(), cpu()
print(json.dumps(dict(instances=n, wall=t1 - t0, cpu=c1 - c0, load=[load0, os.getloadavg()],
                      rss_kib=max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss),
                      tf="tensorflow" in sys.modules)))
"""

# The faithful path: FullTokenizer, lists of ids, random.Random, one instance at a time.
_BASELINE = r"""
import json, os, random, resource, sys, time
sys.path.insert(0, {root!r})
from data.pretraining import instances as pretraining
from data.tokenization.wordpiece import FullTokenizer
load0 = os.getloadavg()
t0, c0 = time.perf_counter(), time.process_time()
tok = FullTokenizer({vocab!r}, True)
inst = pretraining.create_training_instances([{corpus!r}], tok, 128, {dupe}, 0.1, 0.15, 20,
                                             random.Random(12345))
n = pretraining.write_instance_to_example_files(inst, 128, 20, [{out!r}])
t1, c1 = time.perf_counter(), time.process_time()
print(json.dumps(dict(instances=n, wall=t1 - t0, cpu=c1 - c0, load=[load0, os.getloadavg()],
                      rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, tf=False)))
"""


def _child(code: str) -> dict:
    cmd = [sys.executable, "-c", code]
    time_v = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    if time_v:
        cmd = [time_v, "-v"] + cmd
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit("child failed:\n" + r.stderr[-3000:])
    result = json.loads(r.stdout.strip().split("\n")[-1])
    for line in r.stderr.split("\n"):
        if "Maximum resident set size" in line:
            result["time_v_rss_kib"] = int(line.split(":")[1])
    return result


def _records(path):
    from data.records import numpy_reader

    return [numpy_reader.decode_example(x) for x in numpy_reader.read_records(path)]


def main() -> None:
    parser = harness.parser(__doc__, dupe_factor=10, repeats=1,
                            helps={"repeats": "fast runs (the best is kept)"})
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--baseline", action="store_true",
                        help="also time the faithful pure-Python path (slow)")
    parser.add_argument("--verify", action="store_true",
                        help="with --baseline: compare the two outputs record by record")
    args = parser.parse_args()
    with open(ANCHOR) as f:
        anchor = json.load(f)
    runs = [r for k, r in anchor["runs"].items() if k.startswith("derived_pretrain_corpus")]
    orig_s = min(r["in_process"]["seconds_in_original_main"] for r in runs)
    orig_rss = min(int(r["usr_bin_time_v"]["max_rss_kib"]) for r in runs) / 1024
    orig_n, orig_bytes = runs[0]["instances_written"], runs[0]["output_bytes"]

    tmp = tempfile.mkdtemp(prefix="bench_cpd_")
    try:
        out = os.path.join(tmp, "fast.tfrecord")
        flags = ["--input_file=%s" % args.corpus, "--output_file=%s" % out,
                 "--vocab_file=%s" % GOLDEN_VOCAB, "--dupe_factor=%d" % args.dupe_factor,
                 "--show_progress=false"]
        fast = min((_child(_FAST.format(root=ROOT, args=flags)) for _ in range(args.repeats)),
                   key=lambda r: r["wall"])
        size = os.path.getsize(out)
        print("corpus: %s (%.1f MB), dupe_factor=%d, max_seq_length=128, seed 12345"
              % (os.path.basename(args.corpus), os.path.getsize(args.corpus) / 1e6,
                 args.dupe_factor))
        print("load average (1 min) before/after the fast run: %.1f / %.1f on %d CPUs"
              % (fast["load"][0][0], fast["load"][1][0], os.cpu_count()))
        rss = fast.get("time_v_rss_kib", fast["rss_kib"]) / 1024
        print("fast:     %6d instances  %7.2f s wall  %7.2f s CPU  %8.0f instances/s  "
              "peak RSS %6.1f MiB  %d bytes  TensorFlow imported: %s"
              % (fast["instances"], fast["wall"], fast["cpu"], fast["instances"] / fast["wall"],
                 rss, size, fast["tf"]))
        if args.corpus == CORPUS and args.dupe_factor == 10:
            print("original: %6d instances  %7.2f s in main()  peak RSS %6.1f MiB  %d bytes "
                  "(speed_anchor.json, load ~2)" % (orig_n, orig_s, orig_rss, orig_bytes))
            print("same instance count and byte size as the original: %s"
                  % (fast["instances"] == orig_n and size == orig_bytes))
            print("speed-up vs original: %.1fx by wall time, %.1fx by CPU time; "
                  "peak RSS %.2f of the original's (targets: >= 10x, <= 0.33)"
                  % (orig_s / fast["wall"], orig_s / fast["cpu"], rss / orig_rss))
        if args.baseline:
            base_out = os.path.join(tmp, "faithful.tfrecord")
            base = _child(_BASELINE.format(root=ROOT, vocab=GOLDEN_VOCAB,
                                           corpus=args.corpus, dupe=args.dupe_factor,
                                           out=base_out))
            base_rss = base.get("time_v_rss_kib", base["rss_kib"]) / 1024
            print("faithful: %6d instances  %7.2f s wall  %7.2f s CPU  %8.0f instances/s  "
                  "peak RSS %6.1f MiB  (load %.1f / %.1f)"
                  % (base["instances"], base["wall"], base["cpu"],
                     base["instances"] / base["wall"], base_rss, base["load"][0][0],
                     base["load"][1][0]))
            print("fast vs faithful path, same machine and load: %.1fx by wall time, "
                  "%.1fx by CPU time, %.2f of its peak RSS"
                  % (base["wall"] / fast["wall"], base["cpu"] / fast["cpu"], rss / base_rss))
            if args.verify:
                same = _records(out) == _records(base_out)
                print("records identical (parsed, in order): %s" % same)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
