"""Benchmark: records/s of run_pretraining's input pipeline alone, 1 thread vs all cores.

Records/s read, shuffled, batched and parsed (``data.pretraining.dataset.pretraining_dataset``,
shuffled training mode, as the trainer builds it), on sharded records of the derived corpus,
with tf.data limited to 1 thread and then to all the machine's cores; next to what an
accelerator consumes (keras-hub on JAX trains BERT-base at seq 128 at about 3,900 sequences/s on
one H200).

``--devices``: instead, a JAX process's part of the input (``device_rows_dataset``) at two
sizes of its share, each in a fresh process: records/s of the global batch it stands for, and
the process's peak memory (RSS) over the same process that only imported TensorFlow: the one
pipeline of one device; 4 devices in one process (4 pipelines, shuffled); 2 of 4 devices (a
process of 2); and the same with ``--deterministic`` (every process reads the stream, parses
its rows).

    .venv/bin/python -m bench pretraining_input [--batch_size 256] [--seconds 20] [--devices]
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench import harness  # noqa: E402
H200_SEQ_PER_S = 3900  # keras-hub BERT-base, seq 128, JAX, one H200 (the reference)


def main() -> None:
    parser = harness.parser(__doc__, batch_size=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--devices", action="store_true",
                        help="a JAX process's share of the input at two sizes (see above)")
    parser.add_argument("--one", help="internal: one --devices case, PLACES/DEVICES/MODE/FILES")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.one:
        return _one_share(args)
    work = tempfile.mkdtemp(prefix="bench-input-")
    try:
        prefix = harness.sharded_records(work, 16, 5)
        if args.devices:
            return _shares(args, prefix)
        import tensorflow as tf

        from data.pretraining import dataset as pd
        from data.pretraining import corpus_shards

        files = corpus_shards.input_files(prefix + "-*")
        cores = os.cpu_count() or 1
        print("load average at start: %.2f %.2f %.2f; %d cores" % (os.getloadavg() + (cores,)))
        for threads in sorted({1, cores}):
            dataset = pd.pretraining_dataset(files, 128, 20, args.batch_size, is_training=True,
                                             seed=3)
            options = tf.data.Options()
            options.threading.private_threadpool_size = threads
            options.threading.max_intra_op_parallelism = 1
            iterator = iter(dataset.with_options(options))
            for _ in range(3):  # warm-up: files opened, buffers filled
                next(iterator)
            start = time.perf_counter()
            cpu0 = time.process_time()
            batches = 0
            while time.perf_counter() - start < args.seconds:
                next(iterator)
                batches += 1
            wall = time.perf_counter() - start
            cpu = time.process_time() - cpu0
            rate = batches * args.batch_size / wall
            print(json.dumps({
                "tf_data_threads": threads, "records_per_s": round(rate),
                "records_per_cpu_s": round(batches * args.batch_size / max(cpu, 1e-9)),
                "cores_for_one_h200": round(H200_SEQ_PER_S / (rate / threads), 2)}),
                flush=True)
        print("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _shares(args, prefix: str) -> None:
    """Each --devices case in a process of its own (its peak RSS is its own)."""
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    for mode in ("shuffled", "deterministic"):
        for places, devices in (("0", 1), ("0,1,2,3", 4), ("0,1", 4)):
            one = "%s/%d/%s/%s-*" % (places, devices, mode, prefix)
            proc = subprocess.run([sys.executable, "-m", "bench.speed.pretraining_input",
                                   "--one", one, "--batch_size", str(args.batch_size),
                                   "--seconds", str(args.seconds)], cwd=ROOT,
                                  capture_output=True, text=True)
            print(proc.stdout.strip() or proc.stderr[-2000:], flush=True)
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


def _one_share(args) -> None:
    places, devices, mode, pattern = args.one.split("/", 3)
    import tensorflow as tf

    from data.pretraining import dataset as pd
    from data.pretraining import corpus_shards

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    places = [int(p) for p in places.split(",")]
    dataset = pd.device_rows_dataset(corpus_shards.input_files(pattern), 128, 20,
                                     args.batch_size, places, int(devices),
                                     deterministic=mode == "deterministic", seed=3)
    iterator = iter(dataset)
    for _ in range(3):  # warm-up: files opened, buffers filled
        next(iterator)
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < args.seconds:
        next(iterator)
        steps += 1
    wall = time.perf_counter() - start
    del tf
    print(json.dumps({"mode": mode, "devices_of_process": len(places), "devices": int(devices),
                      "global_records_per_s": round(steps * args.batch_size / wall),
                      "peak_rss_mb_over_import": round(
                          (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)}))


if __name__ == "__main__":
    main()
